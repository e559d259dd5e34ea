//! The key-pool RPCs of `AdminService`: add, list, enable/disable and remove
//! the upstream keys of one channel. Each change is one atomic
//! `Store::modify` of the channel, so concurrent edits and the data planes'
//! refusal reports never undo one another; answers carry key ids and
//! prefixes, never a key.

use gw_proto::pb;
use rand::{RngExt as _, distr::Alphanumeric};
use tonic::{Request, Response, Status};

use super::{AdminApi, Answer};
use crate::{
    api::convert,
    domain::validate::status_value,
    domain::{Channel, ChannelKey, DISABLED, ENABLED, now_unix},
    store::StoreError,
};

/// Most keys one channel may hold.
pub const MAX_KEYS: usize = 256;

/// Adds the key of `request` to its channel's pool, enabled.
pub(super) async fn add(api: &AdminApi, request: Request<pb::AddChannelKeyRequest>) -> Answer<pb::ChannelKey> {
    let caller = crate::api::guard::caller_of(&request)?;
    let r = request.into_inner();
    caller.target(&r.channel_id);
    // A service account's pretty-printed JSON key goes on one line.
    let key = crate::domain::channel_kind::compact_json(r.key.trim());
    if key.is_empty() {
        return Err(Status::invalid_argument("the upstream key is empty"));
    }
    if key.chars().any(char::is_control) {
        return Err(Status::invalid_argument("the upstream key holds control characters"));
    }
    let id = new_key_id();
    let added = id.clone();
    let channel = api
        .edit(&r.channel_id, move |channel: &mut Channel| {
            let now = now_unix();
            channel.fold_legacy_key(now);
            if channel.keys.iter().any(|k| k.key == key) {
                return Err(StoreError::Rejected { reason: "the channel already holds this key".into() });
            }
            crate::domain::channel_kind::check_key(channel, &key)
                .map_err(|invalid| StoreError::Rejected { reason: invalid.0 })?;
            if channel.keys.len() >= MAX_KEYS {
                return Err(StoreError::Rejected { reason: format!("a channel holds at most {MAX_KEYS} keys") });
            }
            channel.keys.retain(|k| k.id != id);
            channel.keys.push(ChannelKey::new(id.clone(), key.clone(), now));
            Ok(())
        })
        .await?;
    answer(channel, &added)
}

/// The pool of channel `request.id`, in pool order.
pub(super) async fn list(api: &AdminApi, request: Request<pb::GetRequest>) -> Answer<pb::ListChannelKeysResponse> {
    let channel: Channel = api.fetch(&request.into_inner().id).await?;
    let items = channel.pool().into_iter().map(convert::key_redacted).collect();
    Ok(Response::new(pb::ListChannelKeysResponse { items }))
}

/// Enables or disables one key. Enabling clears why it was disabled.
pub(super) async fn update(api: &AdminApi, request: Request<pb::UpdateChannelKeyRequest>) -> Answer<pb::ChannelKey> {
    let caller = crate::api::guard::caller_of(&request)?;
    let r = request.into_inner();
    caller.target(&r.channel_id);
    let status = status_value(&r.status, &[ENABLED, DISABLED])?;
    let key_id = r.key_id.clone();
    let channel = api
        .edit(&r.channel_id, move |channel: &mut Channel| {
            let now = now_unix();
            channel.fold_legacy_key(now);
            let key = find(channel, &key_id)?;
            if key.status == status {
                return Ok(());
            }
            key.status.clone_from(&status);
            if status == ENABLED {
                key.disabled_reason.clear();
                key.disabled_at = 0;
            } else {
                key.disabled_reason = "disabled by an operator".into();
                key.disabled_at = now;
            }
            Ok(())
        })
        .await?;
    answer(channel, &r.key_id)
}

/// Removes one key from its channel's pool.
pub(super) async fn remove(api: &AdminApi, request: Request<pb::ChannelKeyRef>) -> Answer<pb::Empty> {
    let caller = crate::api::guard::caller_of(&request)?;
    let r = request.into_inner();
    caller.target(&r.channel_id);
    api.edit(&r.channel_id, move |channel: &mut Channel| {
        channel.fold_legacy_key(now_unix());
        find(channel, &r.key_id)?;
        channel.keys.retain(|k| k.id != r.key_id);
        Ok(())
    })
    .await?;
    Ok(Response::new(pb::Empty {}))
}

/// Key `id` of `channel`; NotFound (as a store error) when absent.
fn find<'a>(channel: &'a mut Channel, id: &str) -> Result<&'a mut ChannelKey, StoreError> {
    let channel_id = channel.id.clone();
    channel
        .keys
        .iter_mut()
        .find(|k| k.id == id)
        .ok_or_else(|| StoreError::NoKey { channel: channel_id, key: id.to_owned() })
}

/// Key `id` of the written `channel`, redacted.
fn answer(channel: Channel, id: &str) -> Answer<pb::ChannelKey> {
    let key = channel
        .keys
        .into_iter()
        .find(|k| k.id == id)
        .ok_or_else(|| Status::internal("the key vanished from its channel"))?;
    Ok(Response::new(convert::key_redacted(key)))
}

/// A new key id: "k_" and six lowercase letters or digits.
fn new_key_id() -> String {
    let body: String =
        rand::rng().sample_iter(&Alphanumeric).map(|b| char::from(b).to_ascii_lowercase()).take(6).collect();
    format!("k_{body}")
}
