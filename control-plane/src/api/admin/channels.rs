//! Channels on the admin API: upstream providers, their models, weights,
//! kind settings and keys (never shown back), and their enabled state.
//! Every write leaves the channel as `channel_kind::prepare` wants it.

use super::*;
use crate::domain::channel_kind;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn create_channel(&self, request: Request<pb::Channel>) -> Answer<pb::Channel> {
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
        // The kind's settings, its default base URL and the key's shape.
        channel_kind::prepare(&mut channel)?;
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

    pub(super) async fn list_channels(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListChannelsResponse> {
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

    pub(super) async fn get_channel(&self, request: Request<pb::GetRequest>) -> Answer<pb::Channel> {
        Ok(Response::new(convert::channel_redacted(self.fetch::<Channel>(&request.into_inner().id).await?)))
    }

    pub(super) async fn update_channel(&self, request: Request<pb::UpdateChannelRequest>) -> Answer<pb::Channel> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        let name = r.name.map(|name| required("name", name)).transpose()?;
        if let Some(kind) = &r.r#type {
            check_channel_type(kind)?;
        }
        // An empty base URL asks for the kind's default.
        if let Some(url) = r.base_url.as_ref().filter(|url| !url.is_empty()) {
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
        let timeouts = [r.connect_timeout_ms, r.first_byte_timeout_ms, r.idle_timeout_ms, r.total_timeout_ms];
        let settings: BTreeMap<String, String> = r.settings.into_iter().collect();
        let channel = self
            .edit(&r.id, move |channel: &mut Channel| {
                // A base URL that was the kind's default follows the kind
                // and settings (a new region, a new project).
                let defaulted = channel_kind::default_base_url(&channel.kind, &channel.settings)
                    .is_ok_and(|url| url == channel.base_url);
                if kind.as_ref().is_some_and(|kind| *kind != channel.kind) {
                    channel.settings.clear();
                }
                channel.settings = channel_kind::merge(std::mem::take(&mut channel.settings), settings.clone());
                set(&mut channel.name, &name);
                set(&mut channel.kind, &kind);
                if defaulted && base_url.is_none() {
                    channel.base_url.clear();
                }
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
                let [connect, first_byte, idle, total] = timeouts;
                set(&mut channel.connect_timeout_ms, &connect);
                set(&mut channel.first_byte_timeout_ms, &first_byte);
                set(&mut channel.idle_timeout_ms, &idle);
                set(&mut channel.total_timeout_ms, &total);
                channel_kind::prepare(channel).map_err(|invalid| StoreError::Rejected { reason: invalid.0 })
            })
            .await?;
        Ok(Response::new(convert::channel_redacted(channel)))
    }

    pub(super) async fn delete_channel(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        self.store.delete(Kind::Channel, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }
}
