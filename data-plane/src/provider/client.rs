//! The HTTP client upstreams are called with: a hyper-util connection pool
//! (HTTP/1.1, and HTTP/2 where TLS negotiates it) over rustls with the
//! platform's roots, request bodies (bytes or a stream), and responses whose
//! body carries the exchange's total deadline. It knows nothing of channels
//! or keys: `transport` builds each request, and follows redirects with
//! `redirect` below.

use std::{
    future::Future as _,
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::http::{HeaderMap, Method, Request, StatusCode, Uri, header};
use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use http_body_util::{BodyExt as _, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Body as _, Frame, Incoming};
use hyper_util::{
    client::legacy::{self, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use tokio::time::{Instant, Sleep};

/// A request body: whole bytes, or a stream of chunks (an upload relayed as
/// it arrives).
pub struct Payload {
    body: UnsyncBoxBody<Bytes, io::Error>,
    /// The bytes again, when the body is whole: a 307/308 redirect resends them.
    whole: Option<Bytes>,
}

/// Where a request goes: its URI, and the `Host` header it is sent with,
/// worked out once (`transport` keeps one per channel and path).
#[derive(Debug, Clone)]
pub struct Target {
    pub uri: Uri,
    host: Option<header::HeaderValue>,
}

/// Pooled connections to upstreams, for one connect timeout.
#[derive(Clone)]
pub struct Client {
    inner: legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, UnsyncBoxBody<Bytes, io::Error>>,
}

/// An upstream's response: status and headers, and a body to be read before
/// the exchange's deadline.
#[derive(Debug)]
pub struct Response {
    inner: axum::http::Response<Incoming>,
    deadline: Instant,
}

/// A response body as a stream of chunks, failing at the exchange's deadline.
pub struct BodyStream {
    body: Incoming,
    deadline: Pin<Box<Sleep>>,
}

/// Why an upstream request or its body failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connect error")]
    Connect(#[source] legacy::Error),
    #[error("request error")]
    Request(#[source] legacy::Error),
    #[error("body error")]
    Body(#[source] hyper::Error),
    #[error("timed out")]
    Deadline,
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
}

/// Redirects followed per request before the last answer is taken as is.
const MAX_REDIRECTS: usize = 10;

// === impl Target ===

impl Target {
    /// `uri`, with the `Host` header a request to it carries.
    pub fn new(uri: Uri) -> Target {
        let host = host_header(&uri);
        Target { uri, host }
    }
}

// === impl Payload ===

impl Payload {
    /// A body of `stream`'s chunks; it fails when the stream yields an error.
    pub fn stream(stream: impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static) -> Payload {
        let body = StreamBody::new(stream.map(|chunk| chunk.map(Frame::data)));
        Payload { body: UnsyncBoxBody::new(body), whole: None }
    }

    /// An empty body.
    pub fn empty() -> Payload {
        Payload::from(Bytes::new())
    }

    /// The body when it was given whole.
    pub fn whole(&self) -> Option<&Bytes> {
        self.whole.as_ref()
    }

    /// The body as hyper sends it.
    pub fn into_body(self) -> UnsyncBoxBody<Bytes, io::Error> {
        self.body
    }
}

impl From<Bytes> for Payload {
    fn from(bytes: Bytes) -> Payload {
        let body = Full::new(bytes.clone()).map_err(|never| match never {});
        Payload { body: UnsyncBoxBody::new(body), whole: Some(bytes) }
    }
}

// === impl Client ===

impl Client {
    /// A pool whose connections open within `connect` (TCP and TLS), with
    /// TCP_NODELAY, idle connections kept 90 s.
    pub fn new(connect: Duration) -> Result<Client, rustls::Error> {
        use rustls_platform_verifier::BuilderVerifierExt as _;
        let tls = rustls::ClientConfig::builder().with_platform_verifier()?.with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let inner = legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(https);
        Ok(Client { inner })
    }

    /// Sends `method` to `target` with `headers` and `body`, following
    /// redirects (see `redirect`; `credential` is removed once one leaves the
    /// first URI's host). The body of the response must be read by `deadline`.
    pub async fn send(
        &self,
        mut method: Method,
        mut target: Target,
        mut headers: HeaderMap,
        body: Payload,
        credential: &header::HeaderName,
        deadline: Instant,
    ) -> Result<Response, ClientError> {
        let Payload { body, mut whole } = body;
        let mut body = Some(body);
        let origin = target.uri.authority().cloned();
        for _ in 0..=MAX_REDIRECTS {
            let sent = match body.take() {
                Some(body) => body,
                None => Payload::from(whole.clone().unwrap_or_default()).into_body(),
            };
            let mut request = Request::new(sent);
            *request.method_mut() = method.clone();
            *request.uri_mut() = target.uri.clone();
            *request.headers_mut() = headers.clone();
            if let Some(host) = &target.host {
                request.headers_mut().insert(header::HOST, host.clone());
            }
            let response = self.inner.request(request).await.map_err(|error| {
                if error.is_connect() { ClientError::Connect(error) } else { ClientError::Request(error) }
            })?;
            let Some(next) = redirect(&method, &target.uri, &response, whole.is_some()) else {
                return Ok(Response { inner: response, deadline });
            };
            if next.drop_body {
                method = Method::GET;
                whole = Some(Bytes::new());
                headers.remove(header::CONTENT_TYPE);
                headers.remove(header::CONTENT_LENGTH);
            }
            if next.uri.authority() != origin.as_ref() {
                headers.remove(credential);
            }
            target = Target::new(next.uri);
        }
        Err(ClientError::TooManyRedirects)
    }
}

/// The `Host` header of a request to `uri`, as the pooled client would add
/// it (the port only when it is not the scheme's own), but without its
/// `format!` on every request.
fn host_header(uri: &Uri) -> Option<header::HeaderValue> {
    let host = uri.host()?;
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let value = match uri.port() {
        Some(port) if port.as_u16() != default_port => {
            header::HeaderValue::try_from([host, ":", port.as_str()].concat()).ok()?
        }
        _ => header::HeaderValue::from_str(host).ok()?,
    };
    Some(value)
}

/// Where a redirect answer sends the request next.
struct Next {
    uri: Uri,
    /// The request becomes a GET without body (301/302 after a POST, 303).
    drop_body: bool,
}

/// The next request after `response` to `method` on `uri`, when it is a
/// redirect that can be followed: a `Location` that resolves, and for 307/308
/// a body that can be sent again (`replayable`).
fn redirect(method: &Method, uri: &Uri, response: &axum::http::Response<Incoming>, replayable: bool) -> Option<Next> {
    let drop_body = match response.status() {
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND => *method == Method::POST,
        StatusCode::SEE_OTHER => *method != Method::HEAD,
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT if replayable => false,
        _ => return None,
    };
    let location = response.headers().get(header::LOCATION)?.to_str().ok()?;
    Some(Next { uri: resolve(uri, location)?, drop_body })
}

/// `location` resolved against `base`: absolute, host-relative (`//h/p`),
/// path-absolute (`/p`) or path-relative (`p`).
fn resolve(base: &Uri, location: &str) -> Option<Uri> {
    if let Ok(uri) = location.parse::<Uri>()
        && uri.scheme().is_some()
    {
        return Some(uri);
    }
    let scheme = base.scheme_str()?;
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}").parse().ok();
    }
    let authority = base.authority()?;
    let path = if location.starts_with('/') {
        location.to_owned()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(dir, _)| dir);
        format!("{dir}/{location}")
    };
    format!("{scheme}://{authority}{path}").parse().ok()
}

// === impl Response ===

impl Response {
    /// The upstream's status.
    pub fn status(&self) -> StatusCode {
        self.inner.status()
    }

    /// The upstream's headers.
    pub fn headers(&self) -> &HeaderMap {
        self.inner.headers()
    }

    /// The body's length, when the upstream declared it.
    pub fn content_length(&self) -> Option<u64> {
        self.headers().get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
    }

    /// The body, chunk by chunk; it fails once the exchange's deadline passes.
    pub fn bytes_stream(self) -> BodyStream {
        BodyStream { body: self.inner.into_body(), deadline: Box::pin(tokio::time::sleep_until(self.deadline)) }
    }
}

// === impl BodyStream ===

impl Stream for BodyStream {
    type Item = Result<Bytes, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
                match frame {
                    None => return Poll::Ready(None),
                    Some(Err(error)) => return Poll::Ready(Some(Err(ClientError::Body(error)))),
                    // Trailers carry nothing the gateway reads.
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => return Poll::Ready(Some(Ok(data))),
                        Err(_) => continue,
                    },
                }
            }
            return match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(ClientError::Deadline))),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

// === impl ClientError ===

impl ClientError {
    /// Whether a deadline ended the exchange.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Deadline)
    }

    /// Whether no connection could be opened.
    pub fn is_connect(&self) -> bool {
        matches!(self, ClientError::Connect(_))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_request() {
        let base: Uri = "http://up:8080/v1/videos/1/content?variant=x".parse().unwrap();
        let cases = [
            ("https://cdn.example/f.mp4", "https://cdn.example/f.mp4"),
            ("//cdn.example/f.mp4", "http://cdn.example/f.mp4"),
            ("/files/f.mp4?sig=1", "http://up:8080/files/f.mp4?sig=1"),
            ("f.mp4", "http://up:8080/v1/videos/1/f.mp4"),
        ];
        for (location, want) in cases {
            assert_eq!(resolve(&base, location).unwrap().to_string(), want, "{location}");
        }
    }

    #[test]
    fn host_names_the_port_only_when_it_is_not_the_schemes() {
        let cases = [
            ("http://up:8080/v1", "up:8080"),
            ("http://up:80/v1", "up"),
            ("https://api.example:443/v1", "api.example"),
            ("https://api.example:80/v1", "api.example:80"),
            ("http://user:pw@[::1]:9000/v1", "[::1]:9000"),
            ("https://api.example/v1", "api.example"),
        ];
        for (uri, want) in cases {
            let host = host_header(&uri.parse().unwrap()).unwrap();
            assert_eq!(host.to_str().unwrap(), want, "{uri}");
        }
    }
}
