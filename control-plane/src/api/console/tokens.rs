//! Token management: the list, creating a token (its key shown once), and
//! one token's page with rename, enable, disable, delete, and the advanced
//! mode that edits its amount, models, addresses, expiry and limits. Every
//! write is the admin service's token RPC as the signed-in user, so an
//! account owner reaches only its account's tokens.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::{Markup, html};
use serde::Deserialize;

use super::form::{dollars, dollars_value, done, path_of, split_list, whole};
use super::page::{self, csrf, money, notice, scroll, time};
use super::{Console, ConsoleError};
use crate::domain::access::Role;
use crate::services::console::Signed;

#[derive(Debug, Default, Deserialize)]
pub struct Notice {
    #[serde(default)]
    pub done: String,
}

/// A token form: create takes every field, the advanced edit all but name
/// and group.
#[derive(Debug, Default, Deserialize)]
pub struct TokenForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    account: String,
    #[serde(default)]
    unlimited: Option<String>,
    #[serde(default)]
    quota: String,
    #[serde(default)]
    models: String,
    #[serde(default)]
    allow_ips: String,
    #[serde(default)]
    expires: String,
    #[serde(default)]
    rate_window: String,
    #[serde(default)]
    rate_max: String,
}

/// The token list and the create form.
pub async fn list(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let request = pb::ListRequest::default();
    let tokens = console
        .call(&signed, "ListTokens", request, |api, r| async move { Admin::list_tokens(&*api, r).await })
        .await?;
    let groups =
        console
            .call(&signed, "ListGroups", pb::ListRequest::default(), |api, r| async move {
                Admin::list_groups(&*api, r).await
            })
            .await?;
    let last_used = last_used(&console, &signed).await?;
    // Playground tokens end with their session; once expired they are noise.
    let now = crate::domain::now_unix();
    let shown: Vec<&pb::Token> = tokens
        .items
        .iter()
        .filter(|t| !(t.name == super::playground::TOKEN_NAME && t.expires_at > 0 && t.expires_at <= now))
        .collect();
    let writes = signed.user.role != Role::OperatorReadonly;
    let body = html! {
        h1 { "Tokens" }
        (notice(Some(&notice_text.done)))
        p { "A token is the key a client sends as " code { "Authorization: Bearer sk-…" } ". Create one per client." }
        (scroll(html! {
            table id="tokens" {
                thead { tr {
                    th scope="col" { "Name" } th scope="col" { "Key" } th scope="col" { "Group" }
                    th scope="col" { "Status" } th scope="col" { "Used" } th scope="col" { "Left" }
                    th scope="col" { "Window" } th scope="col" { "Expires" } th scope="col" { "Last used" }
                } }
                tbody {
                    @for token in &shown {
                        tr {
                            td { a href=(console.link(&format!("/tokens/{}", token.id))) { (label(token)) } }
                            td { code { (token.key_prefix) } }
                            td { (token.group) }
                            td { (token.status) }
                            td { (money(token.used_micros)) }
                            td { (left(token)) }
                            td { (window(token.window.as_ref())) }
                            td { (time(token.expires_at)) }
                            td { (last_used.get(&token.id).map_or("—".to_owned(), |day| page::date(*day))) }
                        }
                    }
                }
            }
        }))
        @if shown.is_empty() { p { "No tokens yet." } }
        @if writes {
            h2 { "Create a token" }
            form method="post" action=(console.link("/tokens")) id="create-token" {
                (csrf(&signed))
                label for="name" { "Name" }
                input id="name" name="name" required placeholder="e.g. laptop, ci, claude-code";
                @if signed.user.role != Role::Account {
                    label for="account" { "Account id" }
                    input id="account" name="account" required;
                }
                label for="group" { "Group" }
                select id="group" name="group" {
                    @for group in &groups.items {
                        option value=(group.name) selected[group.name == "default"] { (group.name) " (price × " (group.ratio) ")" }
                    }
                }
                (advanced(None))
                button type="submit" { "Create token" }
            }
        }
    };
    Ok(page::page(&console, &signed, "Tokens", body))
}

/// The advanced-mode fields, filled from `token` when editing one.
fn advanced(token: Option<&pb::Token>) -> Markup {
    let unlimited = token.is_none_or(|t| t.unlimited);
    let quota = token.filter(|t| !t.unlimited).map(|t| dollars_value(t.quota_micros));
    let join = |list: &[String]| list.join(", ");
    let rate = token.and_then(|t| t.rate_limit.as_ref());
    html! {
        details id="advanced" {
            summary { "Advanced mode: amount, models, addresses, expiry and limits" }
            fieldset {
                legend { "Amount" }
                label.check {
                    input type="checkbox" name="unlimited" value="on" checked[unlimited];
                    " Unlimited (spending is bounded by the account's balance)"
                }
                label for="quota" { "Amount in dollars (when not unlimited)" }
                input id="quota" name="quota" inputmode="decimal" value=(quota.unwrap_or_default());
            }
            label for="models" { "Models allowed (comma-separated; empty: every model of the group)" }
            input id="models" name="models" value=(token.map(|t| join(&t.models)).unwrap_or_default());
            label for="allow_ips" { "Client addresses allowed (comma-separated IPs or CIDRs; empty: any)" }
            input id="allow_ips" name="allow_ips" value=(token.map(|t| join(&t.allow_ips)).unwrap_or_default());
            label for="expires" { "Expires on (UTC; empty: never)" }
            input id="expires" name="expires" type="date"
                value=(token.filter(|t| t.expires_at > 0).map(|t| page::date(t.expires_at)).unwrap_or_default());
            label for="rate_max" { "Requests allowed per window (empty: no limit)" }
            input id="rate_max" name="rate_max" inputmode="numeric"
                value=(rate.filter(|r| r.window_minutes > 0).map(|r| r.max_requests.to_string()).unwrap_or_default());
            label for="rate_window" { "Window in minutes" }
            input id="rate_window" name="rate_window" inputmode="numeric"
                value=(rate.filter(|r| r.window_minutes > 0).map(|r| r.window_minutes.to_string()).unwrap_or_default());
        }
    }
}

/// Creates a token and shows its key, once.
pub async fn create(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<TokenForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let limits = Limits::read(&form)?;
    let request = pb::CreateTokenRequest {
        account_id: form.account.trim().to_owned(),
        group: form.group.trim().to_owned(),
        name: form.name.trim().to_owned(),
        unlimited: limits.unlimited,
        quota_micros: limits.quota_micros,
        models: limits.models,
        allow_ips: limits.allow_ips,
        expires_at: limits.expires_at,
        rate_limit: limits.rate_limit,
        ..Default::default()
    };
    let created = console
        .call(&signed, "CreateToken", request, |api, r| async move { Admin::create_token(&*api, r).await })
        .await?;
    let token = created.token.unwrap_or_default();
    let gateway =
        if console.gateway_url.is_empty() { "<gateway address>".to_owned() } else { console.gateway_url.clone() };
    let body = html! {
        h1 { "Token created" }
        p.notice role="status" { "Copy the key now: it is shown only this once." }
        div.key {
            label for="new-key" { "Key of " (label(&token)) }
            input id="new-key" readonly value=(created.key) data-copyable;
            button type="button" data-copy="new-key" { "Copy" }
        }
        h2 { "Use it" }
        pre { code { "export OPENAI_BASE_URL=" (gateway) "/v1\nexport OPENAI_API_KEY=" (created.key) } }
        p { a href=(console.link("/tokens")) { "Back to the tokens" } }
    };
    Ok(page::page(&console, &signed, "Token created", body))
}

/// One token's page.
pub async fn show(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let request = pb::GetRequest { id };
    let token =
        console.call(&signed, "GetToken", request, |api, r| async move { Admin::get_token(&*api, r).await }).await?;
    let writes = signed.user.role != Role::OperatorReadonly;
    let action = console.link(&format!("/tokens/{}", token.id));
    let body = html! {
        h1 { "Token " (label(&token)) }
        (notice(Some(&notice_text.done)))
        dl {
            dt { "Key" } dd { code { (token.key_prefix) } }
            dt { "Group" } dd { (token.group) }
            dt { "Status" } dd id="token-status" { (token.status) }
            dt { "Used" } dd { (money(token.used_micros)) }
            dt { "Left" } dd id="token-left" { (left(&token)) }
            dt { "Models" } dd { @if token.models.is_empty() { "every model of the group" } @else { (token.models.join(", ")) } }
            dt { "Addresses" } dd { @if token.allow_ips.is_empty() { "any" } @else { (token.allow_ips.join(", ")) } }
            dt { "Expires" } dd { (time(token.expires_at)) }
            dt { "Created" } dd { (time(token.created_at)) }
        }
        @if writes {
            h2 { "Rename" }
            form method="post" action=(action) {
                (csrf(&signed))
                input type="hidden" name="action" value="rename";
                label for="name" { "New name" }
                input id="name" name="name" required value=(token.name);
                button type="submit" { "Rename" }
            }
            h2 { "Status" }
            (page::status_toggle(&signed, &action, "toggle-token", &token.status, "token"))
            form.inline method="post" action=(action) data-confirm="Delete this token? Clients using it stop working." {
                (csrf(&signed))
                input type="hidden" name="action" value="delete";
                button.danger type="submit" { "Delete" }
            }
            h2 { "Limits" }
            form method="post" action=(action) id="edit-token" {
                (csrf(&signed))
                input type="hidden" name="action" value="edit";
                (advanced(Some(&token)))
                button type="submit" { "Save limits" }
            }
        }
        p { a href=(console.link("/tokens")) { "Back to the tokens" } }
    };
    Ok(page::page(&console, &signed, "Token", body))
}

/// Renames, enables, disables, deletes or edits a token.
pub async fn change(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<TokenForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let mut update = pb::UpdateTokenRequest { id: id.clone(), ..Default::default() };
    let text = match form.action.as_str() {
        "delete" => {
            let request = pb::GetRequest { id };
            console
                .call(&signed, "DeleteToken", request, |api, r| async move { Admin::delete_token(&*api, r).await })
                .await?;
            return Ok(done(&console, "/tokens", "Token deleted"));
        }
        "rename" => {
            update.name = Some(form.name.trim().to_owned());
            "Token renamed"
        }
        "enable" | "disable" => {
            update.status = Some(format!("{}d", form.action));
            if form.action == "enable" { "Token enabled" } else { "Token disabled" }
        }
        "edit" => {
            let limits = Limits::read(&form)?;
            update.unlimited = Some(limits.unlimited);
            update.quota_micros = (!limits.unlimited).then_some(limits.quota_micros);
            update.set_models = true;
            update.models = limits.models;
            update.set_allow_ips = true;
            update.allow_ips = limits.allow_ips;
            update.expires_at = Some(limits.expires_at);
            update.rate_limit = Some(limits.rate_limit.unwrap_or_default());
            "Limits saved"
        }
        other => return Err(ConsoleError::Invalid(format!("unknown action {other:?}"))),
    };
    console.call(&signed, "UpdateToken", update, |api, r| async move { Admin::update_token(&*api, r).await }).await?;
    Ok(done(&console, &path_of("/tokens", &id), text))
}

/// The advanced-mode fields of a form, checked.
struct Limits {
    unlimited: bool,
    quota_micros: i64,
    models: Vec<String>,
    allow_ips: Vec<String>,
    expires_at: i64,
    rate_limit: Option<pb::RateLimit>,
}

// === impl Limits ===

impl Limits {
    fn read(form: &TokenForm) -> Result<Limits, ConsoleError> {
        let unlimited = form.unlimited.is_some();
        let quota_micros = if unlimited { 0 } else { dollars("the amount", &form.quota)? };
        let expires_at = match form.expires.trim() {
            "" => 0,
            text => page::parse_date(text)
                .ok_or_else(|| ConsoleError::Invalid(format!("the expiry {text:?} is not a date")))?,
        };
        let (window, max): (u32, u32) =
            (whole("the window", &form.rate_window)?, whole("the request limit", &form.rate_max)?);
        let rate_limit = match (window, max) {
            (0, 0) => None,
            (0, _) | (_, 0) => {
                return Err(ConsoleError::Invalid("a request limit needs both a number and a window".into()));
            }
            (window_minutes, max_requests) => Some(pb::RateLimit { window_minutes, max_requests }),
        };
        Ok(Limits {
            unlimited,
            quota_micros,
            models: split_list(&form.models),
            allow_ips: split_list(&form.allow_ips),
            expires_at,
            rate_limit,
        })
    }
}

fn label(token: &pb::Token) -> String {
    if token.name.is_empty() { token.id.clone() } else { token.name.clone() }
}

fn left(token: &pb::Token) -> String {
    if token.unlimited { "unlimited".into() } else { money((token.quota_micros - token.used_micros).max(0)) }
}

fn window(window: Option<&pb::WindowBudget>) -> String {
    match window {
        Some(w) if !w.period.is_empty() && w.period != "none" => {
            format!("{} of {} this {}", money(w.used_micros), money(w.quota_micros), w.period)
        }
        _ => "—".into(),
    }
}

/// The last day each token was used, from the daily rollups of 31 days.
async fn last_used(console: &Console, signed: &Signed) -> Result<HashMap<String, i64>, ConsoleError> {
    let now = crate::domain::now_unix();
    let request = pb::SummarizeUsageRequest {
        group_by: vec![pb::UsageDimension::Day as i32, pb::UsageDimension::Token as i32],
        from: now - 31 * 24 * 60 * 60,
        ..Default::default()
    };
    let summary = console
        .call(signed, "SummarizeUsage", request, |api, r| async move { Admin::summarize_usage(&*api, r).await })
        .await?;
    let mut days = HashMap::new();
    for row in summary.rows {
        let day = days.entry(row.token_id).or_insert(0);
        *day = row.bucket_start.max(*day);
    }
    Ok(days)
}
