//! `AdminService`: the operator API behind gwctl. Validates input, turns it
//! into domain resources and writes them through the store; every write
//! reaches the data planes through the change feed. Updates change only the
//! fields they name, in one atomic `Store::modify`, so concurrent updates
//! through any replica never undo one another.
//!
//! Lists page in id order: a page token is the last id of the previous
//! page, so a page never repeats or skips an item that stayed in place.
//!
//! One module per resource family holds its handlers; the service impl
//! here only routes each RPC to its handler.
//!
//! The guard (`api::guard`) has authenticated and authorised every call by the
//! time a handler runs; handlers that an account credential may call narrow
//! what they read and write with the request's `Caller`, and writes note the
//! resource they are about for the audit log.

mod accounts;
mod channels;
mod fleet;
mod groups;
mod import;
mod keys;
mod models;
mod tokens;
mod topup;
mod usage;
mod users;
mod window;

use std::{collections::BTreeMap, sync::Arc};

use gw_proto::pb;
use tonic::{Request, Response, Status};

use crate::{
    api::convert,
    api::credentials,
    domain::keys::{display_prefix, hash_key, new_id, new_key},
    domain::validate::{
        check_base_url, check_channel_type, check_ip_list, check_model, check_rate_limit, check_ratio, clean_list,
        required, status_value,
    },
    domain::{
        AUTO_DISABLED, Account, Channel, DISABLED, ENABLED, Group, Kind, Model, RateLimit, Resource, Token,
        UsageFilter, now_unix,
    },
    services::access::{Caller, Credentials},
    services::batch::Batches,
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
    batches: Option<Arc<Batches>>,
    credentials: Option<Credentials>,
    secrets: Option<crate::store::Sealing>,
    /// Now for window budget answers.
    clock: crate::domain::clock::Clock,
    /// The zone of window budgets written without one.
    time_zone: String,
    /// The console's users, and where its pages are (for one-time links).
    console: Option<ConsoleLinks>,
    topup: Option<Arc<crate::services::console::TopupCodes>>,
}

/// What the user RPCs need of the console: its users and its public
/// address, to which one-time links point.
#[derive(Clone)]
pub struct ConsoleLinks {
    pub users: Arc<crate::services::console::Users>,
    /// The console's public base URL without a trailing slash; empty when
    /// the console is off (links are then given as a path).
    pub base_url: String,
}

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
            batches: None,
            credentials: None,
            secrets: None,
            clock: crate::domain::clock::Clock::system(),
            time_zone: crate::domain::calendar::DEFAULT_TIME_ZONE.to_owned(),
            console: None,
            topup: None,
        }
    }

    /// Serves the user RPCs with the console's users (without it they
    /// answer Unavailable).
    pub fn with_console(mut self, console: ConsoleLinks) -> AdminApi {
        self.console = Some(console);
        self
    }

    fn console(&self) -> Result<&ConsoleLinks, Status> {
        self.console.as_ref().ok_or_else(|| Status::unavailable("console users are not served here"))
    }

    /// Serves the top-up code RPCs with `codes` (without it they answer
    /// Unavailable).
    pub fn with_topup(mut self, codes: Arc<crate::services::console::TopupCodes>) -> AdminApi {
        self.topup = Some(codes);
        self
    }

    fn topup(&self) -> Result<&crate::services::console::TopupCodes, Status> {
        self.topup.as_deref().ok_or_else(|| Status::unavailable("top-up codes are not served here"))
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

    /// Whether `caller` may touch token `id`: NotFound when it is absent or
    /// belongs to another account (the same answer). Callers that see every
    /// account pass without a read.
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

    /// Serves `RotateSecrets` with `sealing`, the ring the store seals
    /// upstream keys with.
    pub fn with_secrets(mut self, sealing: crate::store::Sealing) -> AdminApi {
        self.secrets = Some(sealing);
        self
    }

    fn videos(&self) -> Result<&Videos, Status> {
        self.videos.as_deref().ok_or_else(|| Status::unavailable("video tasks are not served here"))
    }

    /// Serves the batch RPCs with `batches` (without it they answer
    /// Unavailable).
    pub fn with_batches(mut self, batches: Arc<Batches>) -> AdminApi {
        self.batches = Some(batches);
        self
    }

    fn batches(&self) -> Result<&Batches, Status> {
        self.batches.as_deref().ok_or_else(|| Status::unavailable("batches are not served here"))
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
        AdminApi::create_account(self, request).await
    }

    async fn list_accounts(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListAccountsResponse> {
        AdminApi::list_accounts(self, request).await
    }

    async fn get_account(&self, request: Request<pb::GetRequest>) -> Answer<pb::Account> {
        AdminApi::get_account(self, request).await
    }

    async fn update_account(&self, request: Request<pb::UpdateAccountRequest>) -> Answer<pb::Account> {
        AdminApi::update_account(self, request).await
    }

    async fn top_up_account(&self, request: Request<pb::TopUpRequest>) -> Answer<pb::Account> {
        AdminApi::top_up_account(self, request).await
    }

    async fn delete_account(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        AdminApi::delete_account(self, request).await
    }

    async fn create_group(&self, request: Request<pb::Group>) -> Answer<pb::Group> {
        AdminApi::create_group(self, request).await
    }

    async fn list_groups(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListGroupsResponse> {
        AdminApi::list_groups(self, request).await
    }

    async fn get_group(&self, request: Request<pb::GetRequest>) -> Answer<pb::Group> {
        AdminApi::get_group(self, request).await
    }

    async fn update_group(&self, request: Request<pb::UpdateGroupRequest>) -> Answer<pb::Group> {
        AdminApi::update_group(self, request).await
    }

    async fn delete_group(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        AdminApi::delete_group(self, request).await
    }

    async fn create_token(&self, request: Request<pb::CreateTokenRequest>) -> Answer<pb::CreatedToken> {
        AdminApi::create_token(self, request).await
    }

    async fn list_tokens(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListTokensResponse> {
        AdminApi::list_tokens(self, request).await
    }

    async fn get_token(&self, request: Request<pb::GetRequest>) -> Answer<pb::Token> {
        AdminApi::get_token(self, request).await
    }

    async fn update_token(&self, request: Request<pb::UpdateTokenRequest>) -> Answer<pb::Token> {
        AdminApi::update_token(self, request).await
    }

    async fn delete_token(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        AdminApi::delete_token(self, request).await
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
        AdminApi::create_channel(self, request).await
    }

    async fn list_channels(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListChannelsResponse> {
        AdminApi::list_channels(self, request).await
    }

    async fn get_channel(&self, request: Request<pb::GetRequest>) -> Answer<pb::Channel> {
        AdminApi::get_channel(self, request).await
    }

    async fn update_channel(&self, request: Request<pb::UpdateChannelRequest>) -> Answer<pb::Channel> {
        AdminApi::update_channel(self, request).await
    }

    async fn delete_channel(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        AdminApi::delete_channel(self, request).await
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
        AdminApi::create_model(self, request).await
    }

    async fn list_models(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListModelsResponse> {
        AdminApi::list_models(self, request).await
    }

    async fn get_model(&self, request: Request<pb::GetRequest>) -> Answer<pb::Model> {
        AdminApi::get_model(self, request).await
    }

    async fn update_model(&self, request: Request<pb::UpdateModelRequest>) -> Answer<pb::Model> {
        AdminApi::update_model(self, request).await
    }

    async fn delete_model(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        AdminApi::delete_model(self, request).await
    }

    async fn list_usage(&self, request: Request<pb::ListUsageRequest>) -> Answer<pb::ListUsageResponse> {
        AdminApi::list_usage(self, request).await
    }

    async fn summarize_usage(&self, request: Request<pb::SummarizeUsageRequest>) -> Answer<pb::SummarizeUsageResponse> {
        AdminApi::summarize_usage(self, request).await
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

    async fn list_batches(&self, request: Request<pb::ListBatchItemsRequest>) -> Answer<pb::ListBatchesResponse> {
        crate::api::batch::admin_list(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn get_batch(&self, request: Request<pb::GetRequest>) -> Answer<pb::Batch> {
        crate::api::batch::admin_get(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn rotate_secrets(&self, request: Request<pb::RotateSecretsRequest>) -> Answer<pb::RotateSecretsResponse> {
        AdminApi::rotate_secrets(self, request).await
    }

    async fn list_data_planes(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListDataPlanesResponse> {
        AdminApi::list_data_planes(self, request).await
    }

    async fn remove_data_plane(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        AdminApi::remove_data_plane(self, request).await
    }

    async fn get_store_status(&self, request: Request<pb::Empty>) -> Answer<pb::StoreStatus> {
        AdminApi::get_store_status(self, request).await
    }

    async fn confirm_store(&self, request: Request<pb::Empty>) -> Answer<pb::StoreStatus> {
        AdminApi::confirm_store(self, request).await
    }

    async fn create_credential(&self, request: Request<pb::CreateCredentialRequest>) -> Answer<pb::CreatedCredential> {
        let caller = crate::api::guard::caller_of(&request)?;
        let created = credentials::create(self.credentials()?, request.into_inner()).await?;
        caller.target(created.credential.as_ref().map_or("", |c| c.id.as_str()));
        Ok(Response::new(created))
    }

    async fn list_credentials(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListCredentialsResponse> {
        Ok(Response::new(credentials::list(self.credentials()?, request.into_inner()).await?))
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
        Ok(Response::new(credentials::rotate(self.credentials()?, &id).await?))
    }

    async fn who_am_i(&self, request: Request<pb::Empty>) -> Answer<pb::WhoAmIResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        Ok(Response::new(pb::WhoAmIResponse {
            credential_id: caller.id.clone(),
            role: caller.role.as_str().to_owned(),
            account_id: caller.account().unwrap_or_default().to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }))
    }

    async fn list_audit(&self, request: Request<pb::ListAuditRequest>) -> Answer<pb::ListAuditResponse> {
        Ok(Response::new(credentials::audit(self.credentials()?, request.into_inner()).await?))
    }

    async fn create_user(&self, request: Request<pb::CreateUserRequest>) -> Answer<pb::UserLink> {
        AdminApi::create_user(self, request).await
    }

    async fn list_users(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListUsersResponse> {
        AdminApi::list_users(self, request).await
    }

    async fn update_user(&self, request: Request<pb::UpdateUserRequest>) -> Answer<pb::User> {
        AdminApi::update_user(self, request).await
    }

    async fn reset_user_password(&self, request: Request<pb::UserRef>) -> Answer<pb::UserLink> {
        AdminApi::reset_user_password(self, request).await
    }

    async fn create_topup_codes(
        &self,
        request: Request<pb::CreateTopupCodesRequest>,
    ) -> Answer<pb::CreateTopupCodesResponse> {
        AdminApi::create_topup_codes(self, request).await
    }

    async fn list_topup_codes(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListTopupCodesResponse> {
        AdminApi::list_topup_codes(self, request).await
    }

    async fn revoke_topup_code(&self, request: Request<pb::GetRequest>) -> Answer<pb::TopupCode> {
        AdminApi::revoke_topup_code(self, request).await
    }

    async fn redeem_topup_code(&self, request: Request<pb::RedeemTopupCodeRequest>) -> Answer<pb::RedeemedTopupCode> {
        AdminApi::redeem_topup_code(self, request).await
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
