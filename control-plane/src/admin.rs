//! `AdminService`: the operator API behind gwctl. Validates input, turns it
//! into domain resources and writes them through the store; every write
//! reaches the data planes through the change feed.

use std::{net::IpAddr, sync::Arc};

use gw_proto::pb;
use rand::{RngExt as _, distr::Alphanumeric};
use sha2::{Digest as _, Sha256};
use tonic::{Request, Response, Status};

use crate::{
    convert,
    domain::{
        AUTO_DISABLED, Account, Channel, DISABLED, ENABLED, Group, Kind, Model, RateLimit, Resource, Token,
        UsageFilter, now_unix,
    },
    fleet::Fleet,
    store::Store,
    video::{self, Videos},
};

/// Model categories the catalogue accepts.
pub const CATEGORIES: [&str; 9] =
    ["chat", "completion", "embedding", "image", "audio", "speech", "moderation", "video", "responses"];
/// Channel provider types the data planes can speak.
pub const CHANNEL_TYPES: [&str; 2] = ["openai", "anthropic"];

/// The admin service of one replica.
pub struct AdminApi {
    store: Arc<dyn Store>,
    fleet: Fleet,
    videos: Option<Arc<Videos>>,
}

type Answer<T> = Result<Response<T>, Status>;

// === impl AdminApi ===

impl AdminApi {
    pub fn new(store: Arc<dyn Store>, fleet: Fleet) -> AdminApi {
        AdminApi { store, fleet, videos: None }
    }

    /// Serves the video task RPCs with `videos` (without it they answer
    /// Unavailable).
    pub fn with_videos(mut self, videos: Arc<Videos>) -> AdminApi {
        self.videos = Some(videos);
        self
    }

    fn videos(&self) -> Result<&Videos, Status> {
        self.videos.as_deref().ok_or_else(|| Status::unavailable("video tasks are not served here"))
    }

    async fn fetch(&self, kind: Kind, id: &str) -> Result<Resource, Status> {
        self.store.get(kind, id).await?.ok_or_else(|| Status::not_found(format!("{kind} {id:?} not found")))
    }

    async fn account(&self, id: &str) -> Result<Account, Status> {
        match self.fetch(Kind::Account, id).await? {
            Resource::Account(a) => Ok(a),
            _ => Err(Status::internal("store returned another kind")),
        }
    }

    async fn group(&self, name: &str) -> Result<Group, Status> {
        match self.fetch(Kind::Group, name).await? {
            Resource::Group(g) => Ok(g),
            _ => Err(Status::internal("store returned another kind")),
        }
    }

    async fn token(&self, id: &str) -> Result<Token, Status> {
        match self.fetch(Kind::Token, id).await? {
            Resource::Token(t) => Ok(t),
            _ => Err(Status::internal("store returned another kind")),
        }
    }

    async fn channel(&self, id: &str) -> Result<Channel, Status> {
        match self.fetch(Kind::Channel, id).await? {
            Resource::Channel(c) => Ok(c),
            _ => Err(Status::internal("store returned another kind")),
        }
    }

    async fn model(&self, id: &str) -> Result<Model, Status> {
        match self.fetch(Kind::Model, id).await? {
            Resource::Model(m) => Ok(m),
            _ => Err(Status::internal("store returned another kind")),
        }
    }

    async fn require_groups(&self, groups: &[String]) -> Result<(), Status> {
        for name in groups {
            if self.store.get(Kind::Group, name).await?.is_none() {
                return Err(Status::failed_precondition(format!("group {name:?} not found")));
            }
        }
        Ok(())
    }

    async fn tokens_where(&self, keep: impl Fn(&Token) -> bool) -> Result<usize, Status> {
        let tokens = self.store.list(Kind::Token).await?;
        Ok(tokens.iter().filter(|r| matches!(r, Resource::Token(t) if keep(t))).count())
    }
}

#[tonic::async_trait]
impl pb::admin_service_server::AdminService for AdminApi {
    async fn create_account(&self, request: Request<pb::CreateAccountRequest>) -> Answer<pb::Account> {
        let r = request.into_inner();
        let name = required("name", r.name)?;
        let groups = clean_list(r.groups);
        self.require_groups(&groups).await?;
        let account = Account {
            id: new_id("acc"),
            name,
            balance_micros: r.balance_micros,
            unlimited: r.unlimited,
            groups,
            status: ENABLED.into(),
            used_micros: 0,
            created_at: now_unix(),
        };
        self.store.create(Resource::Account(account.clone())).await?;
        Ok(Response::new(account.into()))
    }

    async fn list_accounts(&self, _: Request<pb::ListRequest>) -> Answer<pb::ListAccountsResponse> {
        let items = self.store.list(Kind::Account).await?;
        let items = items.into_iter().filter_map(|r| match r {
            Resource::Account(a) => Some(a.into()),
            _ => None,
        });
        Ok(Response::new(pb::ListAccountsResponse { items: items.collect() }))
    }

    async fn get_account(&self, request: Request<pb::GetRequest>) -> Answer<pb::Account> {
        Ok(Response::new(self.account(&request.into_inner().id).await?.into()))
    }

    async fn update_account(&self, request: Request<pb::UpdateAccountRequest>) -> Answer<pb::Account> {
        let r = request.into_inner();
        let mut account = self.account(&r.id).await?;
        if let Some(name) = r.name {
            account.name = required("name", name)?;
        }
        if let Some(unlimited) = r.unlimited {
            account.unlimited = unlimited;
        }
        if r.set_groups {
            let groups = clean_list(r.groups);
            self.require_groups(&groups).await?;
            account.groups = groups;
        }
        if let Some(status) = r.status {
            account.status = status_value(&status, &[ENABLED, DISABLED])?;
        }
        self.store.update(Resource::Account(account)).await?;
        Ok(Response::new(self.account(&r.id).await?.into()))
    }

    async fn top_up_account(&self, request: Request<pb::TopUpRequest>) -> Answer<pb::Account> {
        let r = request.into_inner();
        if r.amount_micros == 0 {
            return Err(Status::invalid_argument("amount must not be zero"));
        }
        match self.store.adjust_balance(&r.id, r.amount_micros).await? {
            Resource::Account(a) => Ok(Response::new(a.into())),
            _ => Err(Status::internal("store returned another kind")),
        }
    }

    async fn delete_account(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let id = request.into_inner().id;
        let tokens = self.tokens_where(|t| t.account_id == id).await?;
        if tokens > 0 {
            return Err(Status::failed_precondition(format!(
                "account {id:?} still has {tokens} token(s); delete them first"
            )));
        }
        self.store.delete(Kind::Account, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn create_group(&self, request: Request<pb::Group>) -> Answer<pb::Group> {
        let mut group: Group = request.into_inner().into();
        group.name = required("name", group.name)?;
        check_ratio(group.ratio)?;
        check_rate_limit(&group.rate_limit)?;
        self.store.create(Resource::Group(group.clone())).await?;
        Ok(Response::new(group.into()))
    }

    async fn list_groups(&self, _: Request<pb::ListRequest>) -> Answer<pb::ListGroupsResponse> {
        let items = self.store.list(Kind::Group).await?;
        let items = items.into_iter().filter_map(|r| match r {
            Resource::Group(g) => Some(g.into()),
            _ => None,
        });
        Ok(Response::new(pb::ListGroupsResponse { items: items.collect() }))
    }

    async fn get_group(&self, request: Request<pb::GetRequest>) -> Answer<pb::Group> {
        Ok(Response::new(self.group(&request.into_inner().id).await?.into()))
    }

    async fn update_group(&self, request: Request<pb::UpdateGroupRequest>) -> Answer<pb::Group> {
        let r = request.into_inner();
        let mut group = self.group(&r.name).await?;
        if let Some(ratio) = r.ratio {
            check_ratio(ratio)?;
            group.ratio = ratio;
        }
        if let Some(deprecated) = r.deprecated {
            group.deprecated = deprecated;
        }
        if let Some(description) = r.description {
            group.description = description;
        }
        if let Some(limit) = r.rate_limit {
            group.rate_limit = limit.into();
            check_rate_limit(&group.rate_limit)?;
        }
        self.store.update(Resource::Group(group.clone())).await?;
        Ok(Response::new(group.into()))
    }

    async fn delete_group(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let name = request.into_inner().id;
        let tokens = self.tokens_where(|t| t.group == name).await?;
        if tokens > 0 {
            return Err(Status::failed_precondition(format!("group {name:?} is used by {tokens} token(s)")));
        }
        self.store.delete(Kind::Group, &name).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn create_token(&self, request: Request<pb::CreateTokenRequest>) -> Answer<pb::CreatedToken> {
        let r = request.into_inner();
        let account = self.account(&r.account_id).await?;
        let group = if r.group.is_empty() { "default".to_owned() } else { r.group };
        self.group(&group).await.map_err(|_| Status::failed_precondition(format!("group {group:?} not found")))?;
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
        };
        self.store.create(Resource::Token(token.clone())).await?;
        Ok(Response::new(pb::CreatedToken { token: Some(token.into()), key }))
    }

    async fn list_tokens(&self, _: Request<pb::ListRequest>) -> Answer<pb::ListTokensResponse> {
        let items = self.store.list(Kind::Token).await?;
        let items = items.into_iter().filter_map(|r| match r {
            Resource::Token(t) => Some(t.into()),
            _ => None,
        });
        Ok(Response::new(pb::ListTokensResponse { items: items.collect() }))
    }

    async fn get_token(&self, request: Request<pb::GetRequest>) -> Answer<pb::Token> {
        Ok(Response::new(self.token(&request.into_inner().id).await?.into()))
    }

    async fn update_token(&self, request: Request<pb::UpdateTokenRequest>) -> Answer<pb::Token> {
        let r = request.into_inner();
        let mut token = self.token(&r.id).await?;
        if let Some(name) = r.name {
            token.name = name;
        }
        if let Some(group) = r.group {
            let account = self.account(&token.account_id).await?;
            self.group(&group).await.map_err(|_| Status::failed_precondition(format!("group {group:?} not found")))?;
            if !account.groups.is_empty() && !account.groups.contains(&group) {
                return Err(Status::failed_precondition(format!(
                    "account {:?} may not use group {group:?}",
                    account.id
                )));
            }
            token.group = group;
        }
        if let Some(status) = r.status {
            token.status = status_value(&status, &[ENABLED, DISABLED])?;
        }
        if let Some(unlimited) = r.unlimited {
            token.unlimited = unlimited;
        }
        if let Some(quota) = r.quota_micros {
            if quota < 0 {
                return Err(Status::invalid_argument("quota must not be negative"));
            }
            token.quota_micros = quota;
            token.unlimited = r.unlimited.unwrap_or(false);
        }
        if r.set_models {
            token.models = clean_list(r.models);
        }
        if r.set_allow_ips {
            let ips = clean_list(r.allow_ips);
            check_ip_list(&ips)?;
            token.allow_ips = ips;
        }
        if let Some(expires_at) = r.expires_at {
            token.expires_at = expires_at;
        }
        if let Some(limit) = r.rate_limit {
            token.rate_limit = limit.into();
            check_rate_limit(&token.rate_limit)?;
        }
        self.store.update(Resource::Token(token)).await?;
        Ok(Response::new(self.token(&r.id).await?.into()))
    }

    async fn delete_token(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        self.store.delete(Kind::Token, &request.into_inner().id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn create_channel(&self, request: Request<pb::Channel>) -> Answer<pb::Channel> {
        let mut channel: Channel = request.into_inner().into();
        channel.id = new_id("ch");
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

    async fn list_channels(&self, _: Request<pb::ListRequest>) -> Answer<pb::ListChannelsResponse> {
        let items = self.store.list(Kind::Channel).await?;
        let items = items.into_iter().filter_map(|r| match r {
            Resource::Channel(c) => Some(convert::channel_redacted(c)),
            _ => None,
        });
        Ok(Response::new(pb::ListChannelsResponse { items: items.collect() }))
    }

    async fn get_channel(&self, request: Request<pb::GetRequest>) -> Answer<pb::Channel> {
        Ok(Response::new(convert::channel_redacted(self.channel(&request.into_inner().id).await?)))
    }

    async fn update_channel(&self, request: Request<pb::UpdateChannelRequest>) -> Answer<pb::Channel> {
        let r = request.into_inner();
        let mut channel = self.channel(&r.id).await?;
        if let Some(name) = r.name {
            channel.name = required("name", name)?;
        }
        if let Some(kind) = r.r#type {
            check_channel_type(&kind)?;
            channel.kind = kind;
        }
        if let Some(url) = r.base_url {
            check_base_url(&url)?;
            channel.base_url = url;
        }
        if let Some(key) = r.api_key {
            channel.api_key = key;
        }
        if r.set_models {
            channel.models = clean_list(r.models);
            if channel.models.is_empty() {
                return Err(Status::invalid_argument("a channel needs at least one model"));
            }
        }
        if r.set_groups {
            channel.groups = clean_list(r.groups);
            self.require_groups(&channel.groups).await?;
        }
        if r.set_model_map {
            channel.model_map = r.model_map.into_iter().collect();
        }
        if let Some(priority) = r.priority {
            channel.priority = priority;
        }
        if let Some(weight) = r.weight {
            channel.weight = weight.max(1);
        }
        if let Some(status) = r.status {
            channel.status = status_value(&status, &[ENABLED, DISABLED, AUTO_DISABLED])?;
        }
        self.store.update(Resource::Channel(channel.clone())).await?;
        Ok(Response::new(convert::channel_redacted(channel)))
    }

    async fn delete_channel(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        self.store.delete(Kind::Channel, &request.into_inner().id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn create_model(&self, request: Request<pb::Model>) -> Answer<pb::Model> {
        let mut model: Model = request.into_inner().into();
        model.id = required("id", model.id)?;
        if model.category.is_empty() {
            model.category = "chat".into();
        }
        check_model(&model)?;
        self.store.create(Resource::Model(model.clone())).await?;
        Ok(Response::new(model.into()))
    }

    async fn list_models(&self, _: Request<pb::ListRequest>) -> Answer<pb::ListModelsResponse> {
        let items = self.store.list(Kind::Model).await?;
        let items = items.into_iter().filter_map(|r| match r {
            Resource::Model(m) => Some(m.into()),
            _ => None,
        });
        Ok(Response::new(pb::ListModelsResponse { items: items.collect() }))
    }

    async fn get_model(&self, request: Request<pb::GetRequest>) -> Answer<pb::Model> {
        Ok(Response::new(self.model(&request.into_inner().id).await?.into()))
    }

    async fn update_model(&self, request: Request<pb::UpdateModelRequest>) -> Answer<pb::Model> {
        let r = request.into_inner();
        let mut model = self.model(&r.id).await?;
        let prices = [
            (r.input_price_micros, &mut model.input_price_micros),
            (r.output_price_micros, &mut model.output_price_micros),
            (r.cached_price_micros, &mut model.cached_price_micros),
            (r.request_price_micros, &mut model.request_price_micros),
            (r.second_price_micros, &mut model.second_price_micros),
            (r.image_price_micros, &mut model.image_price_micros),
        ];
        for (new, field) in prices {
            if let Some(value) = new {
                *field = value;
            }
        }
        if let Some(category) = r.category {
            model.category = category;
        }
        if let Some(owner) = r.owned_by {
            model.owned_by = owner;
        }
        check_model(&model)?;
        self.store.update(Resource::Model(model.clone())).await?;
        Ok(Response::new(model.into()))
    }

    async fn delete_model(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        self.store.delete(Kind::Model, &request.into_inner().id).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn list_usage(&self, request: Request<pb::ListUsageRequest>) -> Answer<pb::ListUsageResponse> {
        let r = request.into_inner();
        let filter = UsageFilter {
            token_id: r.token_id,
            account_id: r.account_id,
            model: r.model,
            limit: if r.limit == 0 { 100 } else { r.limit.min(10_000) as usize },
        };
        let items = self.store.list_usage(&filter).await?;
        Ok(Response::new(pb::ListUsageResponse { items: items.into_iter().map(Into::into).collect() }))
    }

    async fn list_video_tasks(
        &self,
        request: Request<pb::ListVideoTasksRequest>,
    ) -> Answer<pb::ListVideoTasksResponse> {
        video::rpc::admin_list(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn get_video_task(&self, request: Request<pb::GetRequest>) -> Answer<pb::VideoTask> {
        video::rpc::admin_get(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn list_data_planes(&self, _: Request<pb::ListRequest>) -> Answer<pb::ListDataPlanesResponse> {
        let revision = self.store.revision().await?;
        let items = self
            .fleet
            .list()
            .into_iter()
            .map(|n| pb::DataPlane {
                node_id: n.node_id,
                address: n.address,
                version: n.version,
                acked_revision: n.acked_revision,
                sent_revision: n.sent_revision,
                connected_at: n.connected_at,
                last_seen: n.last_seen,
                connected: n.connected,
                last_error: n.last_error,
            })
            .collect();
        Ok(Response::new(pb::ListDataPlanesResponse { items, revision }))
    }
}

/// A new client key: `sk-` and 48 random alphanumeric characters.
pub fn new_key() -> String {
    crate::keys::generate("sk-")
}

/// Lowercase hex SHA-256 of a key, as stored and matched by data planes.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// `sk-abcd…wxyz`: enough to recognise a key, too little to use it.
pub fn display_prefix(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() < 12 {
        return "sk-…".into();
    }
    let head: String = chars[..7].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

fn new_id(prefix: &str) -> String {
    let body: String =
        rand::rng().sample_iter(&Alphanumeric).map(|b| char::from(b).to_ascii_lowercase()).take(12).collect();
    format!("{prefix}_{body}")
}

fn required(field: &str, value: String) -> Result<String, Status> {
    let value = value.trim().to_owned();
    if value.is_empty() { Err(Status::invalid_argument(format!("{field} is required"))) } else { Ok(value) }
}

/// Trims, drops empty entries and duplicates, keeps order.
fn clean_list(items: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let item = item.trim().to_owned();
        if !item.is_empty() && !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

fn status_value(status: &str, allowed: &[&str]) -> Result<String, Status> {
    if allowed.contains(&status) {
        Ok(status.to_owned())
    } else {
        Err(Status::invalid_argument(format!("status must be one of {}", allowed.join(", "))))
    }
}

fn check_ratio(ratio: f64) -> Result<(), Status> {
    if (0.0..=1000.0).contains(&ratio) {
        Ok(())
    } else {
        Err(Status::invalid_argument("ratio must be between 0 and 1000"))
    }
}

fn check_rate_limit(limit: &RateLimit) -> Result<(), Status> {
    if limit.window_minutes > 0 && limit.max_requests == 0 {
        return Err(Status::invalid_argument("a rate limit needs at least one request per window"));
    }
    Ok(())
}

fn check_channel_type(kind: &str) -> Result<(), Status> {
    if CHANNEL_TYPES.contains(&kind) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!("channel type must be one of {}", CHANNEL_TYPES.join(", "))))
    }
}

fn check_base_url(url: &str) -> Result<(), Status> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(()),
        _ => Err(Status::invalid_argument("base URL must start with http:// or https:// and name a host")),
    }
}

fn check_model(model: &Model) -> Result<(), Status> {
    if !CATEGORIES.contains(&model.category.as_str()) {
        return Err(Status::invalid_argument(format!("category must be one of {}", CATEGORIES.join(", "))));
    }
    let prices = [
        model.input_price_micros,
        model.output_price_micros,
        model.cached_price_micros,
        model.request_price_micros,
        model.second_price_micros,
        model.image_price_micros,
    ];
    if prices.iter().any(|p| *p < 0) {
        return Err(Status::invalid_argument("prices must not be negative"));
    }
    Ok(())
}

/// Each entry is an IPv4/IPv6 address or CIDR.
fn check_ip_list(entries: &[String]) -> Result<(), Status> {
    for entry in entries {
        let (addr, bits) = match entry.split_once('/') {
            Some((addr, bits)) => (addr, Some(bits)),
            None => (entry.as_str(), None),
        };
        let valid = match (addr.parse::<IpAddr>(), bits.map(str::parse::<u8>)) {
            (Ok(_), None) => true,
            (Ok(IpAddr::V4(_)), Some(Ok(b))) => b <= 32,
            (Ok(IpAddr::V6(_)), Some(Ok(b))) => b <= 128,
            _ => false,
        };
        if !valid {
            return Err(Status::invalid_argument(format!("{entry:?} is not an IP address or CIDR")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_and_shown_only_as_a_prefix() {
        let key = new_key();
        assert!(key.starts_with("sk-") && key.len() >= 43, "{key}");
        let shown = display_prefix(&key);
        assert!(shown.starts_with(&key[..7]) && shown.ends_with(&key[key.len() - 4..]));
        assert!(shown.chars().count() < 16);
        assert_eq!(hash_key("sk-a").len(), 64);
    }

    #[test]
    fn ip_lists_accept_addresses_and_cidrs_only() {
        let ok = ["10.0.0.0/8", "::1", "2001:db8::/32", "127.0.0.1"].map(String::from);
        assert!(check_ip_list(&ok).is_ok());
        for bad in ["10.0.0.0/33", "::/129", "localhost", "1.2.3"] {
            assert!(check_ip_list(&[bad.to_owned()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists_are_trimmed_and_deduplicated() {
        let list = clean_list(vec![" a".into(), "b".into(), "".into(), "a".into()]);
        assert_eq!(list, ["a", "b"]);
    }
}
