//! `/v1/realtime`: a WebSocket session relayed to a channel that offers
//! realtime (see `provider::realtime`). The upgrade runs the pipeline's
//! steps once for the whole session: admit (the key in a header, or offered
//! as a subprotocol the way browsers send it), route (a `realtime` model
//! named in the query), reserve (one response's bound), then attempts over
//! the channels to open the upstream session. Every refusal up to there is
//! an HTTP answer; the client's socket is upgraded only once the upstream
//! accepted. After that frames pass both ways unchanged; each response the
//! upstream starts holds a reservation of its own and is billed by its
//! `response.done`, and a session that runs out of budget or loses its
//! client has its open responses cancelled and billed (`session`).

use std::sync::Arc;

use axum::{
    Router,
    extract::{
        Query, Request, State,
        ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection},
    },
    http::{HeaderName, Method, Uri, header},
    response::Response,
    routing::get,
};

mod session;

use self::session::Session;
use super::subprotocol;
use crate::{
    error::ProxyError,
    pipeline::{self, App, Bound},
    policy::auth::Access,
    provider::realtime,
};

/// The path sessions open on.
pub const PATH: &str = "/v1/realtime";
/// The subprotocol OpenAI's browser clients offer (answered when offered).
const PROTOCOL: &str = "realtime";

/// The realtime route.
pub fn routes() -> Router<Arc<App>> {
    Router::new().route(PATH, get(upgrade))
}

/// Handles `GET /v1/realtime?model=…`: admits, routes and reserves as any
/// spending request, opens the upstream session (failing over across the
/// channels that offer realtime), then upgrades the client's socket and
/// relays. Without a WebSocket handshake it is the unknown URL.
pub async fn upgrade(
    State(app): State<Arc<App>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    mut request: Request,
) -> Result<Response, ProxyError> {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(_) if !request.headers().contains_key(header::UPGRADE) => {
            return Err(ProxyError::InvalidUrl { method: Method::GET.to_string(), path: PATH.to_owned() });
        }
        Err(rejection) => {
            return Err(ProxyError::InvalidField { field: "websocket handshake", reason: rejection.body_text() });
        }
    };
    subprotocol::lift_key(request.headers_mut());
    let (admitted, _) = pipeline::admit(&app, request, Access::Spend).await?;
    let model = model_param(&admitted.parts.uri).ok_or(ProxyError::MissingField("model"))?;
    let (entry, candidates) = pipeline::route(&admitted, &model, PATH)?;
    let entry = entry.clone();
    let candidates: Vec<_> = candidates.iter().filter(|c| realtime::offers(c)).cloned().collect();
    if candidates.is_empty() {
        return Err(ProxyError::NoChannel { group: admitted.caller.group.name.clone(), model });
    }
    // The first response's bound: each later one reserves its own.
    let charge = pipeline::reserve(&app, &admitted, entry, PATH, Bound::tokens(0, None)).await?;
    let beta = admitted.parts.headers.get(HeaderName::from_static("openai-beta")).cloned();
    let (upstreams, model_name, beta) = (&app.upstreams, model.as_str(), beta.as_ref());
    let (upstream, channel) = pipeline::attempts(upstreams, admitted.scope(), &candidates, |channel| async move {
        let name = channel.upstream_model(model_name).to_owned();
        let session = realtime::connect(upstreams, &channel, &name, beta).await?;
        Ok((session, channel))
    })
    .await?;
    let upgrade =
        if subprotocol::offers(&admitted.parts.headers, PROTOCOL) { upgrade.protocols([PROTOCOL]) } else { upgrade };
    let charge = charge.on_channel(&channel);
    let session = Session::new(app.clone(), admitted, charge);
    Ok(upgrade.max_message_size(realtime::MAX_MESSAGE_BYTES).on_upgrade(move |socket| session.run(socket, upstream)))
}

/// The `model` parameter of `uri`'s query, percent-decoded.
fn model_param(uri: &Uri) -> Option<String> {
    let Query(params) = Query::<Vec<(String, String)>>::try_from_uri(uri).ok()?;
    params.into_iter().find(|(k, v)| k == "model" && !v.is_empty()).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::model_param;

    #[test]
    fn the_model_comes_from_the_query() {
        let param = |uri: &'static str| model_param(&axum::http::Uri::from_static(uri));
        assert_eq!(param("/v1/realtime?model=gpt-realtime").as_deref(), Some("gpt-realtime"));
        assert_eq!(param("/v1/realtime?x=1&model=a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(param("/v1/realtime?model="), None);
        assert_eq!(param("/v1/realtime"), None);
    }
}
