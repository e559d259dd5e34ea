//! Routing a parsed request: the model must be in the token's allowlist (if
//! any) and the catalogue, its catalogue category must fit the endpoint, and
//! some enabled channel must serve it to the caller's group. Nothing reaches
//! an upstream before all of that holds.

use std::sync::Arc;

use super::Admitted;
use crate::{
    error::ProxyError,
    policy::domain::{Channel, Model},
};

/// The model's catalogue entry and the channels to try, highest priority
/// first, for a request to `endpoint` (its client-facing path).
pub fn route<'a>(
    admitted: &'a Admitted,
    model: &str,
    endpoint: &'static str,
) -> Result<(&'a Arc<Model>, &'a [Arc<Channel>]), ProxyError> {
    admitted.trail.update(|t| t.model = Some(model.to_owned()));
    let caller = &admitted.caller;
    let allowlist = &caller.token.restrictions().models;
    if !allowlist.is_empty() && !allowlist.iter().any(|m| m == model) {
        return Err(ProxyError::ModelForbidden { model: model.to_owned() });
    }
    let snapshot = &admitted.snapshot;
    let entry = snapshot.model(model).ok_or_else(|| ProxyError::ModelNotFound { model: model.to_owned() })?;
    if !serves(&entry.category, endpoint) {
        return Err(ProxyError::WrongEndpoint {
            model: model.to_owned(),
            category: category_name(&entry.category).to_owned(),
            wanted: wanted(endpoint),
            endpoint,
        });
    }
    let candidates = snapshot.channels(&caller.group.name, model);
    if candidates.is_empty() {
        return Err(ProxyError::NoChannel { group: caller.group.name.clone(), model: model.to_owned() });
    }
    Ok((entry, candidates))
}

/// The catalogue models `admitted`'s token may use (its group's, within
/// its allowlist), by id.
pub fn models(admitted: &Admitted) -> Vec<&Arc<Model>> {
    let caller = &admitted.caller;
    let allowlist = &caller.token.restrictions().models;
    let mut models = admitted.snapshot.group_models(&caller.group.name);
    models.retain(|m| allowlist.is_empty() || allowlist.contains(&m.id));
    models
}

/// Model `id` when `admitted`'s token may use it: 403 outside its
/// allowlist, 404 when its group is not served it.
pub fn model<'a>(admitted: &'a Admitted, id: &str) -> Result<&'a Arc<Model>, ProxyError> {
    admitted.trail.update(|t| t.model = Some(id.to_owned()));
    let caller = &admitted.caller;
    let allowlist = &caller.token.restrictions().models;
    if !allowlist.is_empty() && !allowlist.iter().any(|m| m == id) {
        return Err(ProxyError::ModelForbidden { model: id.to_owned() });
    }
    let models = admitted.snapshot.group_models(&caller.group.name);
    models.into_iter().find(|m| m.id == id).ok_or_else(|| ProxyError::ModelNotFound { model: id.to_owned() })
}

/// The category an entry without one has (the control plane's default).
fn category_name(category: &str) -> &str {
    if category.is_empty() { "chat" } else { category }
}

/// The category a model needs for `endpoint`, as error messages name it.
fn wanted(endpoint: &str) -> &'static str {
    let endpoint = endpoint.strip_prefix("/v1").unwrap_or(endpoint);
    match endpoint {
        "/embeddings" => "embedding",
        "/moderations" => "moderation",
        "/audio/transcriptions" | "/audio/translations" => "audio",
        "/audio/speech" => "speech",
        "/videos" | "/video/generations" => "video",
        "/rerank" => "rerank",
        "/realtime" => "realtime",
        e if e.starts_with("/images/") => "image",
        _ => "chat",
    }
}

/// Whether a model of catalogue `category` may be called on `endpoint`.
/// Chat and responses models serve both chat dialects, token counting,
/// the responses API and legacy completions; every other category serves
/// only its own endpoints.
pub fn serves(category: &str, endpoint: &str) -> bool {
    let endpoint = endpoint.strip_prefix("/v1").unwrap_or(endpoint);
    match category_name(category) {
        "chat" | "responses" => matches!(
            endpoint,
            "/chat/completions"
                | "/messages"
                | "/messages/count_tokens"
                | "/responses"
                | "/responses/compact"
                | "/completions"
                // Gemini's methods (`/v1beta/models:…` less the `/v1`).
                | "beta/models:generateContent"
                | "beta/models:streamGenerateContent"
                | "beta/models:countTokens"
        ),
        "completion" => endpoint == "/completions",
        "embedding" => endpoint == "/embeddings",
        "moderation" => endpoint == "/moderations",
        "image" => endpoint.starts_with("/images/"),
        "audio" => matches!(endpoint, "/audio/transcriptions" | "/audio/translations"),
        "speech" => endpoint == "/audio/speech",
        "video" => matches!(endpoint, "/videos" | "/video/generations"),
        "rerank" => endpoint == "/rerank",
        "realtime" => endpoint == "/realtime",
        // A category this data plane does not know yet (a newer control
        // plane): let the upstream decide.
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::serves;

    #[test]
    fn categories_fit_their_endpoints_only() {
        assert!(serves("", "/v1/chat/completions"));
        assert!(serves("chat", "/v1/messages/count_tokens"));
        assert!(serves("chat", "/v1/responses"));
        assert!(!serves("chat", "/v1/embeddings"));
        assert!(!serves("embedding", "/v1/chat/completions"));
        assert!(serves("embedding", "/v1/embeddings"));
        assert!(serves("image", "/v1/images/edits"));
        assert!(!serves("speech", "/v1/audio/transcriptions"));
        assert!(serves("video", "/v1/video/generations"));
        assert!(serves("something-new", "/v1/embeddings"));
        assert!(serves("rerank", "/v1/rerank"));
        assert!(!serves("rerank", "/v1/chat/completions") && !serves("rerank", "/v1/embeddings"));
        assert!(!serves("chat", "/v1/rerank") && !serves("embedding", "/v1/rerank"));
        assert!(serves("realtime", "/v1/realtime") && !serves("realtime", "/v1/chat/completions"));
        assert!(!serves("chat", "/v1/realtime"));
    }
}
