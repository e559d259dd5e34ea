//! What a Vertex AI (`vertex`) channel expects. The base URL names the
//! project and location
//! (`https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}`,
//! `https://aiplatform.googleapis.com/v1/…/locations/global` for the global
//! endpoint); a bare `…/v1` base URL gets them from the `project` and
//! `location` settings. Anthropic models (`claude-…`) are called through
//! `rawPredict`/`streamRawPredict` with messages bodies that name no model
//! and carry `anthropic_version` = `vertex-2023-10-16`; the others are
//! Gemini models under `publishers/google`. Every call carries an OAuth2
//! access token of the channel's service account (see `token`).

mod token;

pub use self::token::AccessTokens;

use axum::http::{HeaderName, HeaderValue, header};

use super::{ChatCall, Framing, Upstreams, gemini};
use crate::{error::ProxyError, json_body::BodyEdit, policy::domain::Channel, translate::Dialect};

/// `anthropic_version` of messages bodies sent to `rawPredict`.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// `Authorization: Bearer <token>` for `channel`'s service account, from
/// the data plane's token cache (an exchange only when the cached token is
/// due; see `AccessTokens::bearer`).
pub async fn credential(upstreams: &Upstreams, channel: &Channel) -> Result<(HeaderName, HeaderValue), ProxyError> {
    Ok((header::AUTHORIZATION, upstreams.vertex_tokens.bearer(upstreams, channel).await?))
}

/// Whether `upstream_model` is one of Anthropic's, served by `rawPredict`.
pub fn is_anthropic(upstream_model: &str) -> bool {
    upstream_model.starts_with("claude")
}

/// The call for `upstream_model`: Anthropic models through `rawPredict`
/// (`streamRawPredict` when streamed) in the messages dialect, the rest as
/// Gemini models through `generateContent` (`streamGenerateContent` with
/// `alt=sse`).
pub fn chat_call(channel: &Channel, upstream_model: &str, stream: bool) -> ChatCall {
    if is_anthropic(upstream_model) {
        let method = if stream { "streamRawPredict" } else { "rawPredict" };
        let path = format!("{}/publishers/anthropic/models/{upstream_model}:{method}", scope(channel));
        return ChatCall { dialect: Dialect::Messages, path, framing: Framing::Sse };
    }
    let method = gemini::generate_method(stream);
    let path = format!("{}/publishers/google{}", scope(channel), gemini::path(upstream_model, method, stream));
    ChatCall { dialect: Dialect::Gemini, path, framing: Framing::Sse }
}

/// Where token counts of `upstream_model` are asked for: Anthropic's
/// `count-tokens:rawPredict` (a messages count body with `model` and
/// `anthropic_version`, see `count_tokens_edit`) or Gemini's `countTokens`.
pub fn count_tokens_path(channel: &Channel, upstream_model: &str) -> String {
    if is_anthropic(upstream_model) {
        format!("{}/publishers/anthropic/models/count-tokens:rawPredict", scope(channel))
    } else {
        format!("{}/publishers/google{}", scope(channel), gemini::path(upstream_model, "countTokens", false))
    }
}

/// What a messages count-tokens body needs for Anthropic's
/// `count-tokens:rawPredict`: unlike `rawPredict`, the model stays in the
/// body (as `upstream_model`), beside `anthropic_version`.
pub fn count_tokens_edit(upstream_model: &str) -> BodyEdit {
    let mut edit = BodyEdit::default();
    edit.set_str("model", upstream_model);
    edit.set_str("anthropic_version", ANTHROPIC_VERSION);
    edit
}

/// `/projects/{project}/locations/{location}` when the base URL does not
/// name them already and the settings do; else nothing.
fn scope(channel: &Channel) -> String {
    if channel.base_url.contains("/projects/") {
        return String::new();
    }
    let setting = |name: &str| channel.settings.get(name).map(String::as_str).filter(|v| !v.is_empty());
    match (setting("project"), setting("location")) {
        (Some(project), location) => {
            format!("/projects/{project}/locations/{}", location.unwrap_or("global"))
        }
        _ => String::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::{collections::BTreeMap, sync::Arc};

    use super::*;

    fn channel(base_url: &str, settings: &[(&str, &str)]) -> Channel {
        let mut channel = crate::policy::snapshot::tests::channel("v", 0, 1, &["g"], &["m"]);
        channel.base_url = base_url.into();
        let settings: BTreeMap<String, String> =
            settings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        channel.settings = Arc::new(settings);
        channel
    }

    #[test]
    fn claude_models_go_to_raw_predict_and_the_rest_to_generate_content() {
        let c = channel("https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5", &[]);
        let call = chat_call(&c, "claude-sonnet-4-5@20250929", false);
        assert_eq!(call.dialect, Dialect::Messages);
        assert_eq!(call.path, "/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict");
        let call = chat_call(&c, "claude-sonnet-4-5@20250929", true);
        assert_eq!(call.path, "/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict");
        let call = chat_call(&c, "gemini-2.5-pro", true);
        assert_eq!(call.dialect, Dialect::Gemini);
        assert_eq!(call.path, "/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse");
        assert_eq!(
            chat_call(&c, "gemini-2.5-pro", false).path,
            "/publishers/google/models/gemini-2.5-pro:generateContent"
        );
        assert_eq!(call.framing, Framing::Sse);
    }

    #[test]
    fn a_bare_base_url_takes_project_and_location_from_the_settings() {
        let c = channel("https://aiplatform.googleapis.com/v1", &[("project", "p1"), ("location", "global")]);
        assert_eq!(
            chat_call(&c, "gemini-2.5-flash", false).path,
            "/projects/p1/locations/global/publishers/google/models/gemini-2.5-flash:generateContent"
        );
        let c = channel("https://x/v1/projects/p/locations/l", &[("project", "other"), ("location", "l2")]);
        assert_eq!(chat_call(&c, "claude-x", false).path, "/publishers/anthropic/models/claude-x:rawPredict");
    }

    #[test]
    fn token_counts_go_to_each_publishers_endpoint() {
        let c = channel("https://l-aiplatform.googleapis.com/v1/projects/p/locations/l", &[]);
        assert_eq!(
            count_tokens_path(&c, "claude-opus-4-1@20250805"),
            "/publishers/anthropic/models/count-tokens:rawPredict"
        );
        assert_eq!(count_tokens_path(&c, "gemini-2.5-pro"), "/publishers/google/models/gemini-2.5-pro:countTokens");
        let mut body = serde_json::json!({ "model": "claude-opus-4-1", "messages": [] });
        count_tokens_edit("claude-opus-4-1@20250805").apply(&mut body);
        assert_eq!(body["model"], "claude-opus-4-1@20250805");
        assert_eq!(body["anthropic_version"], ANTHROPIC_VERSION);
    }
}
