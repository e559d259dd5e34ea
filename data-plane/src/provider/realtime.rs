//! Opening a realtime session on a channel: a WebSocket to the provider's
//! realtime endpoint (`openai`: `<base>/realtime?model=<model>` with the
//! key as a bearer token; `azure`: the deployment's
//! `/openai/realtime?api-version=…&deployment=…`, or `/openai/v1/realtime`,
//! with `api-key`). TCP and TLS are dialled here (rustls, the platform's
//! roots, as the HTTP client trusts), tungstenite does the handshake. A
//! refused handshake is the upstream's status, so failover treats it as it
//! treats an HTTP answer.

use std::sync::{Arc, OnceLock};

use axum::http::{HeaderName, HeaderValue, StatusCode, Uri, header};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{self, client::IntoClientRequest as _, protocol::WebSocketConfig},
};

use super::{Upstreams, azure, mask_channel};
use crate::{
    error::ProxyError,
    policy::domain::{Channel, ChannelKind},
};

/// The byte stream under an upstream session: TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An open upstream realtime session.
pub type Session = WebSocketStream<Box<dyn Io>>;

/// Largest message relayed either way (audio arrives in base64 chunks).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Whether `channel`'s kind offers realtime sessions.
pub fn offers(channel: &Channel) -> bool {
    matches!(channel.kind, ChannelKind::OpenAi | ChannelKind::Azure)
}

/// Opens a realtime session for `model` (the upstream name) on `channel`,
/// sending `beta` as `OpenAI-Beta` when the client sent one. Fails with
/// `UpstreamConnect` (or `UpstreamTimeout`) when the channel cannot be
/// reached within its connect and first-byte timeouts, and with the
/// upstream's status when it refuses the handshake; a channel of a kind
/// without realtime is a 404 that is not failed over.
pub async fn connect(
    upstreams: &Upstreams,
    channel: &Channel,
    model: &str,
    beta: Option<&HeaderValue>,
) -> Result<Session, ProxyError> {
    let uri = session_uri(channel, model)?;
    let mut request = uri.clone().into_client_request().map_err(|_| ProxyError::UpstreamConnect)?;
    let (name, value) = match channel.kind {
        ChannelKind::Azure => azure::credential(channel)?,
        _ => (header::AUTHORIZATION, super::secret(channel, &format!("Bearer {}", channel.api_key))?),
    };
    request.headers_mut().insert(name, value);
    if let Some(beta) = beta {
        request.headers_mut().insert(HeaderName::from_static("openai-beta"), beta.clone());
    }
    let config = upstreams.config();
    let connect = channel.timeouts.connect.unwrap_or(config.connect_timeout);
    let first_byte = channel.timeouts.first_byte.unwrap_or(config.first_byte_timeout);
    let stream =
        tokio::time::timeout(connect, dial(&uri)).await.map_err(|_| ProxyError::UpstreamConnect)?.map_err(|error| {
            tracing::warn!(%error, channel = %channel.id, "realtime upstream unreachable");
            ProxyError::UpstreamConnect
        })?;
    let ws_config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE_BYTES));
    let handshake = tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config));
    match tokio::time::timeout(first_byte, handshake).await {
        Err(_) => Err(ProxyError::UpstreamTimeout),
        Ok(Ok((session, _))) => Ok(session),
        Ok(Err(tungstenite::Error::Http(response))) => {
            let status = response.status();
            let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            let message = mask_channel(&body, channel);
            tracing::warn!(channel = %channel.id, %status, message, "realtime upstream refused the session");
            Err(ProxyError::UpstreamStatus { status, message: refusal_message(status, &message) })
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, channel = %channel.id, "realtime handshake failed");
            Err(ProxyError::UpstreamConnect)
        }
    }
}

/// The `ws://` or `wss://` address of a session for `model` on `channel`.
fn session_uri(channel: &Channel, model: &str) -> Result<Uri, ProxyError> {
    let base = channel.base_url.trim_end_matches('/');
    let (scheme, rest) = if let Some(rest) = base.strip_prefix("https://") {
        ("wss", rest)
    } else if let Some(rest) = base.strip_prefix("http://") {
        ("ws", rest)
    } else {
        return Err(ProxyError::UpstreamConnect);
    };
    let model = query_value(model);
    let path = match channel.kind {
        ChannelKind::OpenAi => format!("/realtime?model={model}"),
        ChannelKind::Azure => match channel.settings.get("api_version").map(String::as_str) {
            Some(version) if !version.is_empty() && version != "v1" => {
                let deployment =
                    channel.settings.get("deployment").filter(|d| !d.is_empty()).map_or(model, |d| query_value(d));
                format!("/openai/realtime?api-version={}&deployment={deployment}", query_value(version))
            }
            _ => format!("/openai/v1/realtime?model={model}"),
        },
        _ => return Err(ProxyError::UpstreamStatus { status: StatusCode::NOT_FOUND, message: "no realtime".into() }),
    };
    format!("{scheme}://{rest}{path}").parse().map_err(|_| ProxyError::UpstreamConnect)
}

/// `value` percent-encoded for a query string (model names are almost
/// always plain; a `/` or `:` in one stays readable).
fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/:".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// What the client hears of a refused handshake.
fn refusal_message(status: StatusCode, body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.pointer("/error/message").and_then(|m| m.as_str()).map(str::to_owned));
    message.unwrap_or_else(|| format!("realtime session refused ({status})"))
}

/// TCP to `uri`'s host, with TLS over it for `wss`.
async fn dial(uri: &Uri) -> std::io::Result<Box<dyn Io>> {
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let tls = uri.scheme_str() == Some("wss");
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host, port)).await?;
    tcp.set_nodelay(true)?;
    if !tls {
        return Ok(Box::new(tcp));
    }
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error))?;
    let connector = tokio_rustls::TlsConnector::from(tls_config()?);
    Ok(Box::new(connector.connect(name, tcp).await?))
}

/// The TLS settings of every session: the platform's roots, HTTP/1.1 (a
/// WebSocket handshake is an HTTP/1.1 upgrade).
fn tls_config() -> std::io::Result<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        use rustls_platform_verifier::BuilderVerifierExt as _;
        let mut config = rustls::ClientConfig::builder()
            .with_platform_verifier()
            .map_err(|error| error.to_string())?
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    });
    config.clone().map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::snapshot::tests::channel;

    #[test]
    fn sessions_go_to_each_kinds_realtime_address() {
        let mut openai = channel("c", 0, 1, &["g"], &["m"]);
        openai.base_url = "https://api.openai.com/v1".into();
        assert_eq!(
            session_uri(&openai, "gpt-realtime").unwrap(),
            "wss://api.openai.com/v1/realtime?model=gpt-realtime"
        );
        openai.base_url = "http://127.0.0.1:9/v1/".into();
        assert_eq!(session_uri(&openai, "a b").unwrap(), "ws://127.0.0.1:9/v1/realtime?model=a%20b");
        let mut azure = channel("z", 0, 1, &["g"], &["m"]);
        azure.kind = ChannelKind::Azure;
        azure.base_url = "https://res.openai.azure.com".into();
        assert_eq!(session_uri(&azure, "rt").unwrap(), "wss://res.openai.azure.com/openai/v1/realtime?model=rt");
        azure.settings = Arc::new(
            [("api_version".to_owned(), "2025-04-01-preview".to_owned()), ("deployment".to_owned(), "dep".to_owned())]
                .into_iter()
                .collect(),
        );
        assert_eq!(
            session_uri(&azure, "rt").unwrap(),
            "wss://res.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=dep"
        );
        let mut other = channel("a", 0, 1, &["g"], &["m"]);
        other.kind = ChannelKind::Anthropic;
        assert!(!offers(&other) && offers(&openai) && offers(&azure));
    }
}
