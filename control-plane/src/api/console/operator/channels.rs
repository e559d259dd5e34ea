//! Channels: the list, creating one, and one channel's page with its key
//! pool (add, enable, disable, remove a key), its settings and its status.
//! Upstream keys go in through password fields and never come back: the
//! admin service answers only their ids, prefixes and statuses. The fields
//! of the Azure, Bedrock and Vertex kinds are in `kinds`.

mod kinds;

use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::html;
use serde::Deserialize;

use super::{done, path_of, split_list, whole, writes};
use crate::api::console::page::{self, csrf, notice, scroll, time};
use crate::api::console::tokens::Notice;
use crate::api::console::{Console, ConsoleError};
use crate::domain::validate::CHANNEL_TYPES;
use kinds::KindFields;

/// Every channel form; the channel page's forms say what they do in
/// `action`.
#[derive(Debug, Default, Deserialize)]
pub struct ChannelForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    name: String,
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    base_url: String,
    /// The base URL the edit form showed, to tell an edited one apart.
    #[serde(default)]
    base_url_was: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    key_id: String,
    #[serde(default)]
    models: String,
    #[serde(default)]
    groups: String,
    #[serde(default)]
    priority: String,
    #[serde(default)]
    weight: String,
    #[serde(flatten)]
    provider: KindFields,
}

/// The channel list and the create form.
pub async fn list(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let channels = console
        .call(&signed, "ListChannels", pb::ListRequest::default(), |api, r| async move {
            Admin::list_channels(&*api, r).await
        })
        .await?;
    let body = html! {
        h1 { "Channels" }
        (notice(Some(&notice_text.done)))
        p { "A channel is an upstream provider the data planes send requests to, with a pool of keys." }
        (scroll(html! {
            table id="channels" {
                thead { tr {
                    th scope="col" { "Id" } th scope="col" { "Name" } th scope="col" { "Type" }
                    th scope="col" { "Base URL" } th scope="col" { "Models" } th scope="col" { "Groups" }
                    th scope="col" { "Priority" } th scope="col" { "Weight" } th scope="col" { "Keys" }
                    th scope="col" { "Status" }
                } }
                tbody {
                    @for channel in &channels.items {
                        tr {
                            td { a href=(console.link(&path_of("/channels", &channel.id))) { code { (channel.id) } } }
                            td { (channel.name) }
                            td { (channel.r#type) }
                            td { (channel.base_url) }
                            td { (channel.models.join(", ")) }
                            td { (channel.groups.join(", ")) }
                            td { (channel.priority) }
                            td { (channel.weight) }
                            td { (channel.keys.len()) }
                            td { (channel.status) }
                        }
                    }
                }
            }
        }))
        @if channels.items.is_empty() { p { "No channels yet." } }
        @if writes(&signed) {
            h2 { "Create a channel" }
            form.narrow method="post" action=(console.link("/channels")) id="create-channel" {
                (csrf(&signed))
                label for="name" { "Name" }
                input id="name" name="name" required autocomplete="off";
                label for="type" { "Type" }
                select id="type" name="type" {
                    @for kind in CHANNEL_TYPES { option value=(kind) { (kind) } }
                }
                label for="base_url" { "Base URL (including /v1, as in the SDKs; empty: the type's public endpoint)" }
                input id="base_url" name="base_url" type="url" placeholder="https://api.openai.com/v1";
                label for="key" { "Upstream key (empty: add keys later; Vertex: the service account's JSON key)" }
                input id="key" name="key" type="password" autocomplete="off";
                label for="models" { "Models (comma-separated)" }
                input id="models" name="models" required;
                label for="groups" { "Groups (comma-separated)" }
                input id="groups" name="groups" value="default";
                label for="priority" { "Priority (higher is tried first)" }
                input id="priority" name="priority" inputmode="numeric" value="0";
                label for="weight" { "Weight among channels of the same priority" }
                input id="weight" name="weight" inputmode="numeric" value="1";
                (kinds::create_fields())
                button type="submit" { "Create channel" }
            }
        }
    };
    Ok(page::page(&console, &signed, "Channels", body))
}

/// Creates a channel and opens its page.
pub async fn create(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<ChannelForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let request = create_request(&form)?;
    let channel = console
        .call(&signed, "CreateChannel", request, |api, r| async move { Admin::create_channel(&*api, r).await })
        .await?;
    Ok(done(&console, &path_of("/channels", &channel.id), "Channel created"))
}

/// The create form as a channel; no key field means no key. Only the
/// chosen type's provider fields are sent.
fn create_request(form: &ChannelForm) -> Result<pb::Channel, ConsoleError> {
    let kind = form.kind.trim();
    let key = form.provider.key(kind, &form.key)?;
    let mut settings = form.provider.settings(kind, false);
    if kind == "bedrock" && form.provider.has_access_key() {
        settings.insert("auth".into(), "sigv4".into());
    }
    Ok(pb::Channel {
        name: form.name.trim().to_owned(),
        r#type: kind.to_owned(),
        base_url: form.base_url.trim().to_owned(),
        settings,
        has_key: !key.is_empty(),
        api_key: key,
        models: split_list(&form.models),
        groups: split_list(&form.groups),
        priority: whole("the priority", &form.priority)?,
        weight: whole("the weight", &form.weight)?,
        ..Default::default()
    })
}

/// One channel's page.
pub async fn show(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let channel = console
        .call(&signed, "GetChannel", pb::GetRequest { id: id.clone() }, |api, r| async move {
            Admin::get_channel(&*api, r).await
        })
        .await?;
    let keys = console
        .call(&signed, "ListChannelKeys", pb::GetRequest { id }, |api, r| async move {
            Admin::list_channel_keys(&*api, r).await
        })
        .await?;
    let writes = writes(&signed);
    let action = console.link(&path_of("/channels", &channel.id));
    let body = html! {
        h1 { "Channel " (channel.name) }
        (notice(Some(&notice_text.done)))
        dl {
            dt { "Id" } dd { code { (channel.id) } }
            dt { "Type" } dd { (channel.r#type) }
            dt { "Base URL" } dd { (channel.base_url) }
            dt { "Settings" } dd id="channel-settings" { (kinds::shown(&channel)) }
            dt { "Models" } dd { (channel.models.join(", ")) }
            @if !channel.model_map.is_empty() {
                dt { "Model names upstream" }
                dd { (channel.model_map.iter().map(|(from, to)| format!("{from} → {to}")).collect::<Vec<_>>().join(", ")) }
            }
            dt { "Groups" } dd { (channel.groups.join(", ")) }
            dt { "Priority" } dd { (channel.priority) }
            dt { "Weight" } dd { (channel.weight) }
            dt { "Status" } dd id="channel-status" { (channel.status) }
        }
        h2 { "Keys" }
        p.hint { "Requests rotate over the enabled keys; a key the upstream refuses is taken out by itself." }
        (scroll(html! {
            table id="channel-keys" {
                thead { tr {
                    th scope="col" { "Key id" } th scope="col" { "Starts with" } th scope="col" { "Status" }
                    th scope="col" { "Why disabled" } th scope="col" { "Disabled" } th scope="col" { "Added" }
                    @if writes { th scope="col" { "Actions" } }
                } }
                tbody {
                    @for key in &keys.items {
                        tr {
                            td { code { (key.id) } }
                            td { code { (key.prefix) } }
                            td { (key.status) }
                            td { (key.disabled_reason) }
                            td { (time(key.disabled_at)) }
                            td { (time(key.created_at)) }
                            @if writes {
                                td {
                                    form.inline method="post" action=(action) {
                                        (csrf(&signed))
                                        input type="hidden" name="key_id" value=(key.id);
                                        @if key.status == "enabled" {
                                            input type="hidden" name="action" value="disable-key";
                                            button type="submit" aria-label={ "Disable key " (key.id) } { "Disable" }
                                        } @else {
                                            input type="hidden" name="action" value="enable-key";
                                            button type="submit" aria-label={ "Enable key " (key.id) } { "Enable" }
                                        }
                                    }
                                    form.inline method="post" action=(action) data-confirm="Remove this key from the pool?" {
                                        (csrf(&signed))
                                        input type="hidden" name="key_id" value=(key.id);
                                        input type="hidden" name="action" value="remove-key";
                                        button.danger type="submit" aria-label={ "Remove key " (key.id) } { "Remove" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }))
        @if keys.items.is_empty() { p { "This channel has no key." } }
        @if writes {
            form.narrow method="post" action=(action) id="add-key" {
                (csrf(&signed))
                input type="hidden" name="action" value="add-key";
                label for="key" { (kinds::key_hint(&channel.r#type)) }
                input id="key" name="key" type="password" required autocomplete="off";
                button type="submit" { "Add key" }
            }
            h2 { "Settings" }
            form.narrow method="post" action=(action) id="edit-channel" {
                (csrf(&signed))
                input type="hidden" name="action" value="edit";
                label for="base_url" { "Base URL (empty: the type's public endpoint)" }
                input id="base_url" name="base_url" type="url" value=(channel.base_url);
                input type="hidden" name="base_url_was" value=(channel.base_url);
                input type="hidden" name="type" value=(channel.r#type);
                (kinds::edit_fields(&channel))
                label for="models" { "Models (comma-separated)" }
                input id="models" name="models" required value=(channel.models.join(", "));
                label for="groups" { "Groups (comma-separated)" }
                input id="groups" name="groups" required value=(channel.groups.join(", "));
                label for="priority" { "Priority" }
                input id="priority" name="priority" inputmode="numeric" value=(channel.priority);
                label for="weight" { "Weight" }
                input id="weight" name="weight" inputmode="numeric" value=(channel.weight);
                button type="submit" { "Save settings" }
            }
            h2 { "Status" }
            (page::status_toggle(&signed, &action, "toggle-channel", &channel.status, "channel"))
        }
        p { a href=(console.link("/channels")) { "Back to the channels" } }
    };
    Ok(page::page(&console, &signed, "Channel", body))
}

/// Adds, enables, disables or removes a key, edits the settings, or
/// enables or disables the channel.
pub async fn change(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ChannelForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let here = path_of("/channels", &id);
    let key_id = form.key_id.trim().to_owned();
    let mut update = pb::UpdateChannelRequest { id: id.clone(), ..Default::default() };
    let text = match form.action.as_str() {
        "add-key" => {
            let request = pb::AddChannelKeyRequest { channel_id: id, key: form.key.trim().to_owned() };
            let key = console
                .call(&signed, "AddChannelKey", request, |api, r| async move { Admin::add_channel_key(&*api, r).await })
                .await?;
            return Ok(done(&console, &here, &format!("Key {} added", key.id)));
        }
        "remove-key" => {
            let request = pb::ChannelKeyRef { channel_id: id, key_id: key_id.clone() };
            console
                .call(&signed, "RemoveChannelKey", request, |api, r| async move {
                    Admin::remove_channel_key(&*api, r).await
                })
                .await?;
            return Ok(done(&console, &here, &format!("Key {key_id} removed")));
        }
        "enable-key" | "disable-key" => {
            let status = if form.action == "enable-key" { "enabled" } else { "disabled" };
            let request = pb::UpdateChannelKeyRequest { channel_id: id, key_id: key_id.clone(), status: status.into() };
            console
                .call(&signed, "UpdateChannelKey", request, |api, r| async move {
                    Admin::update_channel_key(&*api, r).await
                })
                .await?;
            return Ok(done(&console, &here, &format!("Key {key_id} {status}")));
        }
        "edit" => {
            // An unchanged base URL is left out, so one that was the type's
            // default follows a new region or project.
            let base_url = form.base_url.trim();
            update.base_url = (base_url != form.base_url_was.trim()).then(|| base_url.to_owned());
            update.settings = form.provider.settings(form.kind.trim(), true);
            update.set_models = true;
            update.models = split_list(&form.models);
            update.set_groups = true;
            update.groups = split_list(&form.groups);
            update.priority = Some(whole("the priority", &form.priority)?);
            update.weight = Some(whole("the weight", &form.weight)?);
            "Settings saved"
        }
        action @ ("enable" | "disable") => {
            update.status = Some(format!("{action}d"));
            if action == "enable" { "Channel enabled" } else { "Channel disabled" }
        }
        other => return Err(ConsoleError::Invalid(format!("unknown action {other:?}"))),
    };
    console
        .call(&signed, "UpdateChannel", update, |api, r| async move { Admin::update_channel(&*api, r).await })
        .await?;
    Ok(done(&console, &here, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_create_form_carries_a_key_only_when_one_was_typed() {
        let form = ChannelForm {
            name: "main".into(),
            kind: "anthropic".into(),
            base_url: " https://api.anthropic.com/v1 ".into(),
            key: " sk-ant-secret ".into(),
            models: "claude-a, claude-b".into(),
            priority: "-1".into(),
            weight: "".into(),
            ..Default::default()
        };
        let channel = create_request(&form).expect("valid");
        assert!(channel.has_key);
        assert_eq!(channel.api_key, "sk-ant-secret");
        assert_eq!(channel.r#type, "anthropic");
        assert_eq!(channel.base_url, "https://api.anthropic.com/v1");
        assert_eq!(channel.models, ["claude-a", "claude-b"]);
        assert_eq!((channel.priority, channel.weight), (-1, 0));
        let keyless = create_request(&ChannelForm { key: "  ".into(), ..Default::default() }).expect("valid");
        assert!(!keyless.has_key && keyless.api_key.is_empty());
        assert!(create_request(&ChannelForm { weight: "-1".into(), ..Default::default() }).is_err());
    }

    #[tokio::test]
    async fn a_posted_bedrock_form_becomes_settings_and_one_joined_key() {
        use axum::extract::FromRequest as _;
        let body = "name=aws&type=bedrock&base_url=&key=&models=m&priority=0&weight=1&resource=ignored\
            &region=us-east-1&bedrock_auth=api-key&access_key_id=AKIAIOSFODNN7EXAMPLE&secret_access_key=s3cr3t";
        let request = axum::http::Request::post("/channels")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(body))
            .expect("request");
        let Form(form) = Form::<ChannelForm>::from_request(request, &()).await.expect("form");
        let channel = create_request(&form).expect("valid");
        assert_eq!(channel.api_key, "AKIAIOSFODNN7EXAMPLE:s3cr3t");
        let settings: Vec<(&str, &str)> = {
            let mut pairs: Vec<_> = channel.settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            pairs.sort();
            pairs
        };
        assert_eq!(settings, [("auth", "sigv4"), ("region", "us-east-1")], "typed credentials mean sigv4");
    }
}
