//! `AdminService`: the operator API behind gwctl. Validates input, turns it
//! into domain resources and writes them through the store; every write
//! reaches the data planes through the change feed. Updates change only the
//! fields they name, in one atomic `Store::modify`, so concurrent updates
//! through any replica never undo one another.
//!
//! Lists page in id order: a page token is the last id of the previous
//! page, so a page never repeats or skips an item that stayed in place.
//!
//! The guard in `access` has authenticated and authorised every call by the
//! time a handler runs; handlers that an account credential may call narrow
//! what they read and write with the request's `Caller`, and writes note the
//! resource they are about for the audit log.

mod import;
mod keys;

use std::{collections::BTreeMap, sync::Arc};

use gw_proto::pb;
use tonic::{Request, Response, Status};

use crate::{
    api::convert,
    api::credentials::Credentials,
    domain::keys::{display_prefix, hash_key, new_id, new_key},
    domain::validate::{
        check_base_url, check_channel_type, check_ip_list, check_model, check_rate_limit, check_ratio, clean_list,
        required, status_value,
    },
    domain::{
        AUTO_DISABLED, Account, Channel, DISABLED, ENABLED, Group, Kind, Model, RateLimit, Resource, Token,
        UsageFilter, now_unix,
    },
    services::access::Caller,
    services::continuity::Continuity,
    services::fleet::Fleet,
    services::usage_summary,
    services::video::Videos,
    store::{Patch, Store, StoreError},
};

/// The admin service of one replica.
pub struct AdminApi {
    store: Arc<dyn Store>,
    fleet: Fleet,
    continuity: Continuity,
    videos: Option<Arc<Videos>>,
    credentials: Option<Credentials>,
    secrets: Option<Arc<crate::store::SealedStore>>,
    /// Now for window budget answers.
    clock: crate::domain::clock::Clock,
    /// The zone of window budgets written without one.
    time_zone: String,
}

mod window;

type Answer<T> = Result<Response<T>, Status>;
/// The answers of `ImportTokens`, one per request.
type ImportStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<pb::ImportTokensResponse, Status>> + Send>>;

/// A resource type the admin API reads and edits by id.
trait Stored: Sized + Send + 'static {
    const KIND: Kind;
    /// The value inside `resource`, when it is of this type.
    fn inside(resource: &mut Resource) -> Option<&mut Self>;
    fn from_resource(resource: Resource) -> Option<Self>;
}

/// `Stored` for domain types named like their `Resource` variant and `Kind`.
macro_rules! stored {
    ($($ty:ident),*) => {$(
        impl Stored for $ty {
            const KIND: Kind = Kind::$ty;

            fn inside(resource: &mut Resource) -> Option<&mut Self> {
                match resource {
                    Resource::$ty(value) => Some(value),
                    _ => None,
                }
            }

            fn from_resource(resource: Resource) -> Option<Self> {
                match resource {
                    Resource::$ty(value) => Some(value),
                    _ => None,
                }
            }
        }
    )*};
}

stored!(Account, Group, Token, Channel, Model);

// === impl AdminApi ===

impl AdminApi {
    pub fn new(store: Arc<dyn Store>, fleet: Fleet, continuity: Continuity) -> AdminApi {
        AdminApi {
            store,
            fleet,
            continuity,
            videos: None,
            credentials: None,
            secrets: None,
            clock: crate::domain::clock::Clock::system(),
            time_zone: crate::domain::calendar::DEFAULT_TIME_ZONE.to_owned(),
        }
    }

    /// Serves the credential and audit RPCs with `credentials` (without it
    /// they answer Unavailable).
    pub fn with_credentials(mut self, credentials: Credentials) -> AdminApi {
        self.credentials = Some(credentials);
        self
    }

    fn credentials(&self) -> Result<&Credentials, Status> {
        self.credentials.as_ref().ok_or_else(|| Status::unavailable("credentials are not served here"))
    }

    /// Whether `caller` may touch token `id`: NotFound when it is absent,
    /// PermissionDenied when it belongs to another account. Callers that see
    /// every account pass without a read.
    async fn check_token_owner(&self, caller: &Caller, id: &str) -> Result<(), Status> {
        if caller.account().is_some() {
            let token = self.fetch::<Token>(id).await?;
            caller.check_owner("token", id, &token.account_id)?;
        }
        Ok(())
    }

    /// Serves the video task RPCs with `videos` (without it they answer
    /// Unavailable).
    pub fn with_videos(mut self, videos: Arc<Videos>) -> AdminApi {
        self.videos = Some(videos);
        self
    }

    /// Serves `RotateSecrets` on `store`, the sealing view of the store.
    pub fn with_secrets(mut self, store: Arc<crate::store::SealedStore>) -> AdminApi {
        self.secrets = Some(store);
        self
    }

    fn videos(&self) -> Result<&Videos, Status> {
        self.videos.as_deref().ok_or_else(|| Status::unavailable("video tasks are not served here"))
    }

    /// Resource `id` of type `T`; NotFound when absent.
    async fn fetch<T: Stored>(&self, id: &str) -> Result<T, Status> {
        let kind = T::KIND;
        let resource =
            self.store.get(kind, id).await?.ok_or_else(|| Status::not_found(format!("{kind} {id:?} not found")))?;
        T::from_resource(resource).ok_or_else(|| Status::internal("store returned another kind"))
    }

    /// Changes resource `id` of type `T` with `edit` in one atomic
    /// `Store::modify`, and returns it as written. `edit` may run more than
    /// once, each time on the current value; it sets only the fields the
    /// request names, and may refuse with `StoreError::Rejected`
    /// (InvalidArgument).
    async fn edit<T: Stored>(
        &self,
        id: &str,
        mut edit: impl FnMut(&mut T) -> Result<(), StoreError> + Send + 'static,
    ) -> Result<T, Status> {
        let patch: Patch = Box::new(move |resource| match T::inside(resource) {
            Some(value) => edit(value),
            None => Err(StoreError::Rejected { reason: "store returned another kind".into() }),
        });
        let modified = self.store.modify(T::KIND, id, patch).await?;
        T::from_resource(modified.resource).ok_or_else(|| Status::internal("store returned another kind"))
    }

    async fn require_groups(&self, groups: &[String]) -> Result<(), Status> {
        for name in groups {
            if self.store.get(Kind::Group, name).await?.is_none() {
                return Err(Status::failed_precondition(format!("group {name:?} not found")));
            }
        }
        Ok(())
    }

    /// Every stored resource of type `T`, ordered by id.
    async fn list<T: Stored>(&self) -> Result<Vec<T>, Status> {
        Ok(self.store.list(T::KIND).await?.into_iter().filter_map(T::from_resource).collect())
    }

    async fn tokens_where(&self, keep: impl Fn(&Token) -> bool) -> Result<usize, Status> {
        let tokens = self.store.list(Kind::Token).await?;
        Ok(tokens.iter().filter(|r| matches!(r, Resource::Token(t) if keep(t))).count())
    }
}

#[tonic::async_trait]
impl pb::admin_service_server::AdminService for AdminApi {
    async fn create_account(&self, request: Request<pb::CreateAccountRequest>) -> Answer<pb::Account> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let name = required("name", r.name)?;
        let groups = clean_list(r.groups);
        self.require_groups(&groups).await?;
        let window = self.requested_window(r.window)?.flatten();
        let account = Account {
            id: new_id("acc"),
            name,
            balance_micros: r.balance_micros,
            unlimited: r.unlimited,
            groups,
            status: ENABLED.into(),
            used_micros: 0,
            created_at: now_unix(),
            window,
        };
        caller.target(&account.id);
        self.store.create(Resource::Account(account.clone())).await?;
        Ok(Response::new(self.account_answer(account).await?))
    }

    async fn list_accounts(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListAccountsResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let accounts = self.list::<Account>().await?;
        let keep = |a: &Account| {
            caller.sees_account(&a.id)
                && is(&r.status, &a.status)
                && is(&r.name, &a.name)
                && (r.group.is_empty() || a.groups.contains(&r.group))
        };
        let (items, next_page_token) = page(accounts, |a| &a.id, keep, &r);
        let mut answers = Vec::with_capacity(items.len());
        for account in items {
            answers.push(self.account_answer(account).await?);
        }
        Ok(Response::new(pb::ListAccountsResponse { items: answers, next_page_token }))
    }

    async fn get_account(&self, request: Request<pb::GetRequest>) -> Answer<pb::Account> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut id = request.into_inner().id;
        // An account credential reads its own account, also when it names none.
        caller.narrow(&mut id)?;
        let id = required("id", id)?;
        Ok(Response::new(self.account_answer(self.fetch::<Account>(&id).await?).await?))
    }

    async fn update_account(&self, request: Request<pb::UpdateAccountRequest>) -> Answer<pb::Account> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        let name = r.name.map(|name| required("name", name)).transpose()?;
        let groups = if r.set_groups {
            let groups = clean_list(r.groups);
            self.require_groups(&groups).await?;
            Some(groups)
        } else {
            None
        };
        let status = r.status.map(|status| status_value(&status, &[ENABLED, DISABLED])).transpose()?;
        let unlimited = r.unlimited;
        let window = self.requested_window(r.window)?;
        let account = self
            .edit(&r.id, move |account: &mut Account| {
                set(&mut account.name, &name);
                set(&mut account.unlimited, &unlimited);
                set(&mut account.groups, &groups);
                set(&mut account.status, &status);
                set(&mut account.window, &window);
                Ok(())
            })
            .await?;
        Ok(Response::new(self.account_answer(account).await?))
    }

    async fn top_up_account(&self, request: Request<pb::TopUpRequest>) -> Answer<pb::Account> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        if r.amount_micros == 0 {
            return Err(Status::invalid_argument("amount must not be zero"));
        }
        match self.store.adjust_balance(&r.id, r.amount_micros).await? {
            Resource::Account(a) => Ok(Response::new(self.account_answer(a).await?)),
            _ => Err(Status::internal("store returned another kind")),
        }
    }

    async fn delete_account(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        let tokens = self.tokens_where(|t| t.account_id == id).await?;
        if tokens > 0 {
            return Err(Status::failed_precondition(format!(
                "account {id:?} still has {tokens} token(s); delete them first"
            )));
        }
        let credentials = self.store.list_credentials().await?.into_iter().filter(|c| c.account_id == id).count();
        if credentials > 0 {
            return Err(Status::failed_precondition(format!(
                "account {id:?} still has {credentials} credential(s); revoke them first"
            )));
        }
        self.store.delete(Kind::Account, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn create_group(&self, request: Request<pb::Group>) -> Answer<pb::Group> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut group: Group = request.into_inner().into();
        group.name = required("name", group.name)?;
        caller.target(&group.name);
        check_ratio(group.ratio)?;
        check_rate_limit(&group.rate_limit)?;
        self.store.create(Resource::Group(group.clone())).await?;
        Ok(Response::new(group.into()))
    }

    async fn list_groups(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListGroupsResponse> {
        let r = request.into_inner();
        let groups = self.list::<Group>().await?;
        let (items, next_page_token) = page(groups, |g| &g.name, |g| is(&r.name, &g.name), &r);
        Ok(Response::new(pb::ListGroupsResponse {
            items: items.into_iter().map(Into::into).collect(),
            next_page_token,
        }))
    }

    async fn get_group(&self, request: Request<pb::GetRequest>) -> Answer<pb::Group> {
        Ok(Response::new(self.fetch::<Group>(&request.into_inner().id).await?.into()))
    }

    async fn update_group(&self, request: Request<pb::UpdateGroupRequest>) -> Answer<pb::Group> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.name);
        if let Some(ratio) = r.ratio {
            check_ratio(ratio)?;
        }
        let rate_limit: Option<RateLimit> = r.rate_limit.map(Into::into);
        if let Some(limit) = &rate_limit {
            check_rate_limit(limit)?;
        }
        let (ratio, deprecated, description) = (r.ratio, r.deprecated, r.description);
        let (tokens_per_minute, max_in_flight) = (r.tokens_per_minute, r.max_in_flight);
        let group = self
            .edit(&r.name, move |group: &mut Group| {
                set(&mut group.ratio, &ratio);
                set(&mut group.deprecated, &deprecated);
                set(&mut group.description, &description);
                set(&mut group.rate_limit, &rate_limit);
                set(&mut group.tokens_per_minute, &tokens_per_minute);
                set(&mut group.max_in_flight, &max_in_flight);
                Ok(())
            })
            .await?;
        Ok(Response::new(group.into()))
    }

    async fn delete_group(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let name = request.into_inner().id;
        caller.target(&name);
        let tokens = self.tokens_where(|t| t.group == name).await?;
        if tokens > 0 {
            return Err(Status::failed_precondition(format!("group {name:?} is used by {tokens} token(s)")));
        }
        self.store.delete(Kind::Group, &name).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn create_token(&self, request: Request<pb::CreateTokenRequest>) -> Answer<pb::CreatedToken> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        caller.narrow(&mut r.account_id)?;
        r.account_id = required("account", r.account_id)?;
        let account = self.fetch::<Account>(&r.account_id).await?;
        let group = if r.group.is_empty() { "default".to_owned() } else { r.group };
        self.fetch::<Group>(&group)
            .await
            .map_err(|_| Status::failed_precondition(format!("group {group:?} not found")))?;
        if !account.groups.is_empty() && !account.groups.contains(&group) {
            return Err(Status::failed_precondition(format!("account {:?} may not use group {group:?}", account.id)));
        }
        if !r.unlimited && r.quota_micros < 0 {
            return Err(Status::invalid_argument("quota must not be negative"));
        }
        let allow_ips = clean_list(r.allow_ips);
        check_ip_list(&allow_ips)?;
        let rate_limit: RateLimit = r.rate_limit.map(Into::into).unwrap_or_default();
        check_rate_limit(&rate_limit)?;
        let window = self.requested_window(r.window)?.flatten();
        let key = new_key();
        let token = Token {
            id: new_id("tok"),
            account_id: account.id,
            group,
            name: r.name,
            key_hash: hash_key(&key),
            key_prefix: display_prefix(&key),
            status: ENABLED.into(),
            expires_at: r.expires_at,
            unlimited: r.unlimited,
            quota_micros: if r.unlimited { 0 } else { r.quota_micros },
            used_micros: 0,
            models: clean_list(r.models),
            allow_ips,
            rate_limit,
            created_at: now_unix(),
            tokens_per_minute: r.tokens_per_minute,
            max_in_flight: r.max_in_flight,
            window,
        };
        caller.target(&token.id);
        self.store.create(Resource::Token(token.clone())).await?;
        Ok(Response::new(pb::CreatedToken { token: Some(self.token_answer(token).await?), key }))
    }

    async fn list_tokens(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListTokensResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        caller.narrow(&mut r.account_id)?;
        let tokens = self.list::<Token>().await?;
        let keep = |t: &Token| {
            is(&r.status, &t.status)
                && is(&r.name, &t.name)
                && is(&r.group, &t.group)
                && is(&r.account_id, &t.account_id)
                && (r.model.is_empty() || t.models.is_empty() || t.models.contains(&r.model))
        };
        let (items, next_page_token) = page(tokens, |t| &t.id, keep, &r);
        let mut answers = Vec::with_capacity(items.len());
        for token in items {
            answers.push(self.token_answer(token).await?);
        }
        Ok(Response::new(pb::ListTokensResponse { items: answers, next_page_token }))
    }

    async fn get_token(&self, request: Request<pb::GetRequest>) -> Answer<pb::Token> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        let token = self.fetch::<Token>(&id).await?;
        caller.check_owner("token", &id, &token.account_id)?;
        Ok(Response::new(self.token_answer(token).await?))
    }

    async fn update_token(&self, request: Request<pb::UpdateTokenRequest>) -> Answer<pb::Token> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        self.check_token_owner(&caller, &r.id).await?;
        if let Some(group) = &r.group {
            // A token's account never changes, so this check need not be
            // part of the edit.
            let token = self.fetch::<Token>(&r.id).await?;
            let account = self.fetch::<Account>(&token.account_id).await?;
            self.fetch::<Group>(group)
                .await
                .map_err(|_| Status::failed_precondition(format!("group {group:?} not found")))?;
            if !account.groups.is_empty() && !account.groups.contains(group) {
                return Err(Status::failed_precondition(format!(
                    "account {:?} may not use group {group:?}",
                    account.id
                )));
            }
        }
        let status = r.status.map(|status| status_value(&status, &[ENABLED, DISABLED])).transpose()?;
        if r.quota_micros.is_some_and(|quota| quota < 0) {
            return Err(Status::invalid_argument("quota must not be negative"));
        }
        let models = r.set_models.then(|| clean_list(r.models));
        let allow_ips = if r.set_allow_ips {
            let ips = clean_list(r.allow_ips);
            check_ip_list(&ips)?;
            Some(ips)
        } else {
            None
        };
        let rate_limit: Option<RateLimit> = r.rate_limit.map(Into::into);
        if let Some(limit) = &rate_limit {
            check_rate_limit(limit)?;
        }
        let (name, group, unlimited, quota, expires_at) = (r.name, r.group, r.unlimited, r.quota_micros, r.expires_at);
        let (tokens_per_minute, max_in_flight) = (r.tokens_per_minute, r.max_in_flight);
        let window = self.requested_window(r.window)?;
        let token = self
            .edit(&r.id, move |token: &mut Token| {
                set(&mut token.name, &name);
                set(&mut token.group, &group);
                set(&mut token.status, &status);
                set(&mut token.unlimited, &unlimited);
                if let Some(quota) = quota {
                    // A quota caps the token unless the same call says otherwise.
                    token.quota_micros = quota;
                    token.unlimited = unlimited.unwrap_or(false);
                }
                set(&mut token.models, &models);
                set(&mut token.allow_ips, &allow_ips);
                set(&mut token.expires_at, &expires_at);
                set(&mut token.rate_limit, &rate_limit);
                set(&mut token.tokens_per_minute, &tokens_per_minute);
                set(&mut token.max_in_flight, &max_in_flight);
                set(&mut token.window, &window);
                Ok(())
            })
            .await?;
        Ok(Response::new(self.token_answer(token).await?))
    }

    async fn delete_token(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        self.check_token_owner(&caller, &id).await?;
        self.store.delete(Kind::Token, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    type ImportTokensStream = ImportStream;

    async fn import_tokens(
        &self,
        request: Request<tonic::Streaming<pb::ImportTokensRequest>>,
    ) -> Answer<Self::ImportTokensStream> {
        let caller = crate::api::guard::caller_of(&request)?;
        caller.target("import");
        // A batch or two ahead of the client's reader, no more.
        let (answers, rx) = tokio::sync::mpsc::channel(2);
        let import = crate::services::import::Import::new(self.store.clone());
        tokio::spawn(import::serve(import, caller, self.time_zone.clone(), request.into_inner(), answers));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn create_channel(&self, request: Request<pb::Channel>) -> Answer<pb::Channel> {
        let caller = crate::api::guard::caller_of(&request)?;
        let request = request.into_inner();
        // `has_key` says a key was meant: an empty one is an unset variable.
        if request.has_key && request.api_key.trim().is_empty() {
            return Err(Status::invalid_argument(
                "the upstream key is empty; create the channel without a key instead",
            ));
        }
        let mut channel: Channel = request.into();
        channel.id = new_id("ch");
        caller.target(&channel.id);
        channel.name = required("name", channel.name)?;
        if channel.kind.is_empty() {
            channel.kind = "openai".into();
        }
        check_channel_type(&channel.kind)?;
        check_base_url(&channel.base_url)?;
        channel.models = clean_list(channel.models);
        if channel.models.is_empty() {
            return Err(Status::invalid_argument("a channel needs at least one model"));
        }
        channel.groups = clean_list(channel.groups);
        if channel.groups.is_empty() {
            channel.groups = vec!["default".into()];
        }
        self.require_groups(&channel.groups).await?;
        channel.fold_legacy_key(now_unix());
        if channel.weight == 0 {
            channel.weight = 1;
        }
        channel.status = if channel.status.is_empty() {
            ENABLED.into()
        } else {
            status_value(&channel.status, &[ENABLED, DISABLED])?
        };
        self.store.create(Resource::Channel(channel.clone())).await?;
        Ok(Response::new(convert::channel_redacted(channel)))
    }

    async fn list_channels(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListChannelsResponse> {
        let r = request.into_inner();
        let channels = self.list::<Channel>().await?;
        let keep = |c: &Channel| {
            is(&r.status, &c.status)
                && is(&r.name, &c.name)
                && (r.group.is_empty() || c.groups.contains(&r.group))
                && (r.model.is_empty() || c.models.contains(&r.model))
        };
        let (items, next_page_token) = page(channels, |c| &c.id, keep, &r);
        let items = items.into_iter().map(convert::channel_redacted).collect();
        Ok(Response::new(pb::ListChannelsResponse { items, next_page_token }))
    }

    async fn get_channel(&self, request: Request<pb::GetRequest>) -> Answer<pb::Channel> {
        Ok(Response::new(convert::channel_redacted(self.fetch::<Channel>(&request.into_inner().id).await?)))
    }

    async fn update_channel(&self, request: Request<pb::UpdateChannelRequest>) -> Answer<pb::Channel> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        let name = r.name.map(|name| required("name", name)).transpose()?;
        if let Some(kind) = &r.r#type {
            check_channel_type(kind)?;
        }
        if let Some(url) = &r.base_url {
            check_base_url(url)?;
        }
        let models = r.set_models.then(|| clean_list(r.models));
        if models.as_ref().is_some_and(Vec::is_empty) {
            return Err(Status::invalid_argument("a channel needs at least one model"));
        }
        let groups = if r.set_groups {
            let groups = clean_list(r.groups);
            self.require_groups(&groups).await?;
            Some(groups)
        } else {
            None
        };
        let model_map: Option<BTreeMap<String, String>> = r.set_model_map.then(|| r.model_map.into_iter().collect());
        let weight = r.weight.map(|weight| weight.max(1));
        let status = r.status.map(|status| status_value(&status, &[ENABLED, DISABLED, AUTO_DISABLED])).transpose()?;
        let (kind, base_url, api_key, priority) = (r.r#type, r.base_url, r.api_key, r.priority);
        let channel = self
            .edit(&r.id, move |channel: &mut Channel| {
                set(&mut channel.name, &name);
                set(&mut channel.kind, &kind);
                set(&mut channel.base_url, &base_url);
                // A key given here replaces the pool: the channel then has
                // exactly that key (none for an empty one).
                if let Some(key) = &api_key {
                    channel.api_key.clone_from(key);
                    channel.keys.clear();
                    channel.fold_legacy_key(now_unix());
                }
                set(&mut channel.models, &models);
                set(&mut channel.groups, &groups);
                set(&mut channel.model_map, &model_map);
                set(&mut channel.priority, &priority);
                set(&mut channel.weight, &weight);
                set(&mut channel.status, &status);
                Ok(())
            })
            .await?;
        Ok(Response::new(convert::channel_redacted(channel)))
    }

    async fn delete_channel(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        self.store.delete(Kind::Channel, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn add_channel_key(&self, request: Request<pb::AddChannelKeyRequest>) -> Answer<pb::ChannelKey> {
        keys::add(self, request).await
    }

    async fn list_channel_keys(&self, request: Request<pb::GetRequest>) -> Answer<pb::ListChannelKeysResponse> {
        keys::list(self, request).await
    }

    async fn update_channel_key(&self, request: Request<pb::UpdateChannelKeyRequest>) -> Answer<pb::ChannelKey> {
        keys::update(self, request).await
    }

    async fn remove_channel_key(&self, request: Request<pb::ChannelKeyRef>) -> Answer<pb::Empty> {
        keys::remove(self, request).await
    }

    async fn create_model(&self, request: Request<pb::Model>) -> Answer<pb::Model> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut model: Model = request.into_inner().into();
        model.id = required("id", model.id)?;
        caller.target(&model.id);
        if model.category.is_empty() {
            model.category = "chat".into();
        }
        check_model(&model)?;
        self.store.create(Resource::Model(model.clone())).await?;
        Ok(Response::new(model.into()))
    }

    async fn list_models(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListModelsResponse> {
        let r = request.into_inner();
        let models = self.list::<Model>().await?;
        let keep = |m: &Model| is(&r.category, &m.category) && is(&r.model, &m.id) && is(&r.name, &m.id);
        let (items, next_page_token) = page(models, |m| &m.id, keep, &r);
        Ok(Response::new(pb::ListModelsResponse {
            items: items.into_iter().map(Into::into).collect(),
            next_page_token,
        }))
    }

    async fn get_model(&self, request: Request<pb::GetRequest>) -> Answer<pb::Model> {
        Ok(Response::new(self.fetch::<Model>(&request.into_inner().id).await?.into()))
    }

    async fn update_model(&self, request: Request<pb::UpdateModelRequest>) -> Answer<pb::Model> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        let (category, owned_by) = (r.category, r.owned_by);
        let model = self
            .edit(&r.id, move |model: &mut Model| {
                set(&mut model.input_price_micros, &r.input_price_micros);
                set(&mut model.output_price_micros, &r.output_price_micros);
                set(&mut model.cached_price_micros, &r.cached_price_micros);
                set(&mut model.request_price_micros, &r.request_price_micros);
                set(&mut model.second_price_micros, &r.second_price_micros);
                set(&mut model.image_price_micros, &r.image_price_micros);
                set(&mut model.tier_threshold_tokens, &r.tier_threshold_tokens);
                set(&mut model.tier_input_price_micros, &r.tier_input_price_micros);
                set(&mut model.tier_output_price_micros, &r.tier_output_price_micros);
                set(&mut model.tier_cached_price_micros, &r.tier_cached_price_micros);
                set(&mut model.cache_write_5m_price_micros, &r.cache_write_5m_price_micros);
                set(&mut model.cache_write_1h_price_micros, &r.cache_write_1h_price_micros);
                set(&mut model.reasoning_price_micros, &r.reasoning_price_micros);
                set(&mut model.category, &category);
                set(&mut model.owned_by, &owned_by);
                // Checked on the result, which includes the stored fields.
                check_model(model).map_err(|invalid| StoreError::Rejected { reason: invalid.0 })
            })
            .await?;
        Ok(Response::new(model.into()))
    }

    async fn delete_model(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        self.store.delete(Kind::Model, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn list_usage(&self, request: Request<pb::ListUsageRequest>) -> Answer<pb::ListUsageResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        caller.narrow(&mut r.account_id)?;
        if r.from > 0 && r.to > 0 && r.from >= r.to {
            return Err(Status::invalid_argument("from must be before to"));
        }
        let filter = UsageFilter {
            token_id: r.token_id,
            account_id: r.account_id,
            model: r.model,
            group: r.group,
            channel_id: r.channel_id,
            from: r.from,
            to: r.to,
            // A page is at most 10,000 records; the next page token says
            // whether more match.
            limit: if r.limit == 0 { 100 } else { r.limit.min(10_000) as usize },
            cursor: r.page_token,
        };
        let page = self.store.list_usage_page(&filter).await?;
        let items = page.items.into_iter().map(Into::into).collect();
        Ok(Response::new(pb::ListUsageResponse { items, next_page_token: page.next }))
    }

    async fn summarize_usage(&self, request: Request<pb::SummarizeUsageRequest>) -> Answer<pb::SummarizeUsageResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        caller.narrow(&mut r.account_id)?;
        let query = usage_summary::Query::try_from(r).map_err(Status::invalid_argument)?;
        let summary = usage_summary::summarize(self.store.as_ref(), &query).await?;
        Ok(Response::new(summary.into()))
    }

    async fn list_video_tasks(
        &self,
        request: Request<pb::ListVideoTasksRequest>,
    ) -> Answer<pb::ListVideoTasksResponse> {
        crate::api::video::admin_list(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn get_video_task(&self, request: Request<pb::GetRequest>) -> Answer<pb::VideoTask> {
        crate::api::video::admin_get(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn rotate_secrets(&self, request: Request<pb::RotateSecretsRequest>) -> Answer<pb::RotateSecretsResponse> {
        let store = self.secrets.as_ref().ok_or_else(|| Status::unavailable("secrets are not managed here"))?;
        let new = request.into_inner().new_master_key;
        let keys = match new.trim() {
            "" => (*store.keys()).clone(),
            new => {
                let key = crate::domain::secrets::MasterKey::parse(new)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                store.keys().rotated(key)
            }
        };
        let resealed = store.reseal_all(keys).await?;
        let key_id = store.keys().current_id().unwrap_or_default().to_owned();
        tracing::info!(key_id, resealed, "upstream keys sealed under the current master key");
        Ok(Response::new(pb::RotateSecretsResponse { resealed: u32::try_from(resealed).unwrap_or(u32::MAX), key_id }))
    }

    async fn list_data_planes(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListDataPlanesResponse> {
        let r = request.into_inner();
        let revision = self.store.revision().await?;
        let nodes = self.fleet.registry().await?;
        let (nodes, next_page_token) = page(nodes, |(n, _)| &n.node_id, |_| true, &r);
        let items = nodes.into_iter().map(|(n, liveness)| convert::data_plane(n, liveness)).collect();
        Ok(Response::new(pb::ListDataPlanesResponse { items, revision, next_page_token }))
    }

    async fn remove_data_plane(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let node_id = request.into_inner().id;
        if !self.fleet.remove(&node_id).await? {
            return Err(Status::not_found(format!("data plane {node_id:?} not found")));
        }
        tracing::info!(node = %node_id, "data plane removed from the fleet registry");
        Ok(Response::new(pb::Empty {}))
    }

    async fn get_store_status(&self, _: Request<pb::Empty>) -> Answer<pb::StoreStatus> {
        Ok(Response::new(convert::store_status(self.continuity.status().await?)))
    }

    async fn confirm_store(&self, _: Request<pb::Empty>) -> Answer<pb::StoreStatus> {
        Ok(Response::new(convert::store_status(self.continuity.confirm().await?)))
    }

    async fn create_credential(&self, request: Request<pb::CreateCredentialRequest>) -> Answer<pb::CreatedCredential> {
        let caller = crate::api::guard::caller_of(&request)?;
        let created = self.credentials()?.create(request.into_inner()).await?;
        caller.target(created.credential.as_ref().map_or("", |c| c.id.as_str()));
        Ok(Response::new(created))
    }

    async fn list_credentials(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListCredentialsResponse> {
        Ok(Response::new(self.credentials()?.list(request.into_inner()).await?))
    }

    async fn revoke_credential(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        self.credentials()?.revoke(&id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn rotate_credential(&self, request: Request<pb::GetRequest>) -> Answer<pb::CreatedCredential> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        Ok(Response::new(self.credentials()?.rotate(&id).await?))
    }

    async fn list_audit(&self, request: Request<pb::ListAuditRequest>) -> Answer<pb::ListAuditResponse> {
        Ok(Response::new(self.credentials()?.audit(request.into_inner()).await?))
    }
}

/// Whether `have` passes the filter `want`; an empty filter passes anything.
pub(crate) fn is(want: &str, have: &str) -> bool {
    want.is_empty() || want == have
}

/// The page of `items` (in `id` order) that `request` asks for: those that
/// `keep`, after its page token, at most `page_size` of them (all for 0);
/// and the token of the next page, empty when this is the last.
pub(crate) fn page<T>(
    items: Vec<T>,
    id: impl Fn(&T) -> &String,
    keep: impl Fn(&T) -> bool,
    request: &pb::ListRequest,
) -> (Vec<T>, String) {
    let after = request.page_token.as_str();
    let size = match request.page_size {
        0 => usize::MAX,
        size => size as usize,
    };
    let mut matching = items.into_iter().filter(|item| id(item).as_str() > after && keep(item));
    let page: Vec<T> = matching.by_ref().take(size).collect();
    let next = match (page.last(), matching.next()) {
        (Some(last), Some(_)) => id(last).clone(),
        _ => String::new(),
    };
    (page, next)
}

/// Sets `field` to `value` when the request named one.
fn set<T: Clone>(field: &mut T, value: &Option<T>) {
    if let Some(value) = value {
        field.clone_from(value);
    }
}
