//! The playground: chat with a model the account may use, streamed, in
//! either dialect (chat completions or messages), sent through a data plane
//! like any client request and billed to the account. It signs in with the
//! web identity: on first use the session gets a token of its own, named
//! `playground` and expiring with the session, whose key never leaves the
//! server; its usage shows under that name.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::html;
use serde::Deserialize;
use serde_json::json;

use super::page::{self, csrf};
use super::{Console, ConsoleError};
use crate::domain::access::Role;
use crate::services::console::Signed;

/// The name of playground tokens.
pub const TOKEN_NAME: &str = "playground";
/// How many times (200 ms apart) a first message waits for a token minted
/// for it to reach the data plane.
const MINT_WAITS: u32 = 10;

#[derive(Debug, Deserialize)]
pub struct Send {
    model: String,
    /// `openai` (chat completions) or `anthropic` (messages).
    dialect: String,
    messages: Vec<Message>,
}

#[derive(Debug, Deserialize, serde::Serialize)]
pub struct Message {
    role: String,
    content: String,
}

/// The chat page.
pub async fn page(State(console): State<Arc<Console>>, headers: HeaderMap) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    if signed.user.role != Role::Account {
        let body = html! { h1 { "Playground" } p { "The playground is for account users: it bills the account it runs for." } };
        return Ok(page::page(&console, &signed, "Playground", body));
    }
    let models =
        console
            .call(&signed, "ListModels", pb::ListRequest::default(), |api, r| async move {
                Admin::list_models(&*api, r).await
            })
            .await?;
    let body = html! {
        h1 { "Playground" }
        @if console.gateway_url.is_empty() {
            p.error role="alert" { "The playground is off: the operator has not told the console where a data plane is (console_gateway_url)." }
        } @else {
            p { "Requests here are billed to your account like any other and show as token " code { (TOKEN_NAME) } " in the usage." }
            form id="playground" data-send=(console.link("/playground/send")) {
                (csrf(&signed))
                label for="model" { "Model" }
                select id="model" name="model" {
                    @for model in models.items.iter().filter(|m| m.category == "chat" || m.category.is_empty()) {
                        option value=(model.id) { (model.id) }
                    }
                }
                label for="dialect" { "Dialect" }
                select id="dialect" name="dialect" {
                    option value="openai" { "OpenAI chat completions (/v1/chat/completions)" }
                    option value="anthropic" { "Anthropic messages (/v1/messages)" }
                }
                div id="transcript" aria-live="polite" {}
                label for="prompt" { "Message" }
                textarea id="prompt" name="prompt" rows="4" required {}
                button type="submit" { "Send" }
                p.error id="playground-error" role="alert" hidden {}
            }
            noscript { p.error { "The playground needs JavaScript to stream answers." } }
        }
    };
    Ok(page::page(&console, &signed, "Playground", body))
}

/// Sends one chat to the data plane with the session's playground token and
/// streams the answer back as the data plane sends it.
pub async fn send(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Json(send): Json<Send>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, None).await?;
    if signed.user.role != Role::Account {
        return Err(ConsoleError::Invalid("the playground is for account users".into()));
    }
    if console.gateway_url.is_empty() {
        return Err(ConsoleError::Invalid("the playground is off (console_gateway_url is not set)".into()));
    }
    let (key, minted) = playground_key(&console, &signed).await?;
    let (path, body) = match send.dialect.as_str() {
        "anthropic" => (
            "/v1/messages",
            json!({"model": send.model, "max_tokens": 1024, "stream": true, "messages": send.messages}),
        ),
        _ => (
            "/v1/chat/completions",
            json!({"model": send.model, "stream": true, "stream_options": {"include_usage": true}, "messages": send.messages}),
        ),
    };
    let mut attempt = 0;
    let upstream = loop {
        let upstream = console
            .http
            .post(format!("{}{path}", console.gateway_url))
            .bearer_auth(&key)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .map_err(|error| {
                tracing::warn!(%error, "the playground could not reach the data plane");
                ConsoleError::Refused(tonic::Status::unavailable(
                    "the playground could not reach the gateway; try again",
                ))
            })?;
        // A token minted a moment ago may not have reached the data plane.
        if upstream.status() == reqwest::StatusCode::UNAUTHORIZED && minted && attempt < MINT_WAITS {
            attempt += 1;
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        }
        break upstream;
    };
    let status = StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = upstream
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    Ok((
        status,
        [(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-store".to_owned())],
        Body::from_stream(upstream.bytes_stream()),
    )
        .into_response())
}

/// The session's playground key, minting its token on first use (then
/// also `true`).
async fn playground_key(console: &Console, signed: &Signed) -> Result<(String, bool), ConsoleError> {
    if !signed.session.playground_key.is_empty() {
        return Ok((signed.session.playground_key.clone(), false));
    }
    let account =
        console
            .call(signed, "GetAccount", pb::GetRequest::default(), |api, r| async move {
                Admin::get_account(&*api, r).await
            })
            .await?;
    let group = account.groups.first().cloned().unwrap_or_else(|| "default".into());
    let request = pb::CreateTokenRequest {
        group,
        name: TOKEN_NAME.into(),
        unlimited: true,
        expires_at: signed.session.expires_at,
        ..Default::default()
    };
    let created = console
        .call(signed, "CreateToken", request, |api, r| async move { Admin::create_token(&*api, r).await })
        .await?;
    console.sessions.set_playground_key(signed, &created.key).await?;
    Ok((created.key, true))
}
