//! What an Azure OpenAI (`azure`) channel expects. The base URL is the
//! resource's endpoint (`https://<resource>.openai.azure.com`). With an
//! `api_version` setting other than `v1`, calls go to the deployment's URL
//! (`/openai/deployments/<deployment>/<path>?api-version=<v>`; the
//! deployment is the `deployment` setting, else the upstream model name);
//! with `v1` or none, to the v1 API (`/openai/v1/<path>`, model in the
//! body). The key goes as `api-key`, or, with `auth` = `entra`, as an Entra
//! ID bearer token.

use axum::http::{HeaderName, HeaderValue, header};

use crate::{error::ProxyError, policy::domain::Channel};

/// `path` (e.g. `/chat/completions`) on `channel` for `upstream_model`.
pub fn path(channel: &Channel, upstream_model: &str, path: &str) -> String {
    match channel.settings.get("api_version").map(String::as_str) {
        Some(version) if !version.is_empty() && version != "v1" => {
            let deployment =
                channel.settings.get("deployment").filter(|d| !d.is_empty()).map_or(upstream_model, String::as_str);
            format!("/openai/deployments/{deployment}{path}?api-version={version}")
        }
        _ => format!("/openai/v1{path}"),
    }
}

/// The channel's key as `api-key`, or `Authorization: Bearer` for Entra.
pub fn credential(channel: &Channel) -> Result<(HeaderName, HeaderValue), ProxyError> {
    if channel.settings.get("auth").is_some_and(|auth| auth == "entra") {
        return Ok((header::AUTHORIZATION, super::secret(channel, &format!("Bearer {}", channel.api_key))?));
    }
    Ok((HeaderName::from_static("api-key"), super::secret(channel, &channel.api_key)?))
}
