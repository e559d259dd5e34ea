//! One worker's share of the client connections (`accept` deals them), with
//! the limits a public listener needs: request headers within
//! `header_read_timeout`, keep-alive connections closed after
//! `keepalive_timeout` without a request (both kept by `watchdog`), and
//! request bodies at a minimum rate (`MinRate`). With TLS, the handshake
//! too must end within the header read timeout. Stopping lets in-flight
//! requests, streams included, finish.

use std::{
    convert::Infallible,
    future::Future as _,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::{Router, body::Body, extract::ConnectInfo};
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{
        conn::auto,
        graceful::{GracefulShutdown, Watcher},
    },
};
use tokio::{
    net::TcpStream,
    sync::{Semaphore, mpsc},
    time::Instant,
};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::{
    accept::{Accepted, Held},
    watchdog::{Activity, Tracked, Watched},
};

/// Limits on client connections; the defaults suit a public listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time to send a request's headers, from accept or from the first
    /// byte after an idle spell.
    pub header_read_timeout: Duration,
    /// The longest a keep-alive connection may sit idle between requests.
    pub keepalive_timeout: Duration,
    /// A request body must arrive at this many bytes per second or more,
    /// on average, once `body_grace` has passed.
    pub body_min_bytes_per_sec: u64,
    /// How long a body may take before the minimum rate applies.
    pub body_grace: Duration,
}

/// A request body that fails once it falls behind its minimum rate.
/// Generic over the body it holds, so hyper's own is not boxed twice.
pub struct MinRate<B = Body> {
    inner: B,
    started: Instant,
    received: u64,
    limits: Limits,
    /// Wakes the body when its deadline passes without data; made only
    /// once the body first waits, so bodiless requests allocate none.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

// === impl Limits ===

/// The connection slots of `limits`, for `accept`.
pub fn slots(limits: &Limits) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(limits.max_connections))
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 10_000,
            header_read_timeout: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(60),
            body_min_bytes_per_sec: 1024,
            body_grace: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// Checks that every limit admits some traffic.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.max_connections > 0, "max connections must be at least 1");
        anyhow::ensure!(!self.header_read_timeout.is_zero(), "the header read timeout must be positive");
        anyhow::ensure!(!self.keepalive_timeout.is_zero(), "the keep-alive timeout must be positive");
        anyhow::ensure!(self.body_min_bytes_per_sec > 0, "the minimum body rate must be positive");
        Ok(())
    }
}

/// Serves `router` on the connections dealt to this worker (`connections`)
/// within `limits`, until `shutdown` resolves or the queue ends, then waits
/// for open connections to finish their requests. With `tls`, every
/// connection is a TLS one; its handshake must end within the header read
/// timeout, so a client that connects and stays silent is dropped. Runs on
/// the worker's own runtime, whose reactor each connection joins.
pub async fn serve(
    mut connections: mpsc::UnboundedReceiver<Accepted>,
    router: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The watchdog keeps the header and keep-alive deadlines: hyper's header
    // timer would count idling and header reading as one.
    builder.http1().timer(TokioTimer::new()).header_read_timeout(None);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = connections.recv() => accepted,
        };
        let Some(Accepted { stream, peer, held }) = accepted else { break };
        let stream = match TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, %peer, "taking over a connection failed");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection { router: router.clone(), limits, peer, builder: builder.clone(), held };
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => connection.run(stream, watcher).await,
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => connection.run(stream, watcher).await,
                        Ok(Err(error)) => tracing::debug!(%error, %peer, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake not finished within the header timeout"),
                    }
                }
            }
        });
    }
    graceful.shutdown().await;
}

/// One accepted client connection, plain or TLS, before it is served.
struct Connection {
    router: Router,
    limits: Limits,
    peer: SocketAddr,
    builder: auto::Builder<TokioExecutor>,
    /// Its connection slot, held by its byte stream (see `Watched`).
    held: Held,
}

// === impl Connection ===

impl Connection {
    /// Serves requests on `stream` until the client closes it, the watchdog
    /// expires it, or a graceful shutdown ends it. A WebSocket upgrade ends
    /// it too: hyper hands the stream, and with it the connection slot, to
    /// the socket, which the watchdog no longer watches (the socket keeps
    /// its own idle timeout and lifetime).
    async fn run<IO>(self, stream: IO, watcher: Watcher)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection { router, limits, peer, builder, held } = self;
        let activity = Activity::new();
        let service = hyper::service::service_fn({
            let activity = activity.clone();
            move |request: hyper::Request<hyper::body::Incoming>| {
                let busy = activity.busy();
                let mut request = request.map(|body| Body::new(MinRate::new(body, limits)));
                request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                let response = router.clone().oneshot(request);
                async move { Ok::<_, Infallible>(response.await?.map(|body| Body::new(Tracked::new(body, busy)))) }
            }
        });
        let io = TokioIo::new(Watched::new(stream, activity.clone(), held));
        let connection = watcher.watch(builder.serve_connection_with_upgrades(io, service).into_owned());
        tokio::select! {
            _ = connection => {}
            () = activity.expired(limits) => {}
        }
    }
}

// === impl MinRate ===

impl<B> MinRate<B> {
    /// `inner` held to `limits`' minimum rate.
    pub fn new(inner: B, limits: Limits) -> MinRate<B> {
        MinRate { inner, started: Instant::now(), received: 0, limits, timer: None }
    }

    /// When the body must have sent its next byte.
    fn deadline(&self) -> Instant {
        let allowed = Duration::from_secs_f64(self.received as f64 / self.limits.body_min_bytes_per_sec as f64);
        self.started + self.limits.body_grace + allowed
    }
}

impl<B> hyper::body::Body for MinRate<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(axum::Error::new(error)))),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    let deadline = this.deadline();
                    if let Some(timer) = this.timer.as_mut() {
                        timer.as_mut().reset(deadline);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                let deadline = this.deadline();
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        tracing::info!(received = this.received, "request body below the minimum rate; closing");
                        Poll::Ready(Some(Err(axum::Error::new("request body arrived too slowly"))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
            Poll::Ready(None) => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use futures_util::StreamExt as _;
    use hyper::body::Body as _;
    use tokio::{
        io::{AsyncReadExt as _, AsyncWriteExt as _},
        net::{TcpListener, TcpStream},
    };

    use super::*;

    fn limits() -> Limits {
        Limits { body_min_bytes_per_sec: 100, body_grace: Duration::from_secs(2), ..Limits::default() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_trickles_below_the_minimum_rate_fails() {
        // One byte every second: 1 B/s against a minimum of 100 B/s.
        let trickle = futures_util::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), n + 1))
        });
        let started = Instant::now();
        let mut body = MinRate::new(Body::from_stream(trickle), limits());
        let mut received = 0;
        let error = loop {
            match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                Some(Ok(_)) => received += 1,
                Some(Err(error)) => break error,
                None => panic!("the trickle never ends"),
            }
        };
        assert!(error.to_string().contains("too slowly"), "{error}");
        assert!(received <= 3, "{received} bytes");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_at_the_minimum_rate_is_read_whole() {
        // 200 B every second for 10 s: twice the minimum rate.
        let steady = futures_util::stream::iter(0..10).then(|_| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 200]))
        });
        let body = MinRate::new(Body::from_stream(steady), limits());
        let collected = axum::body::to_bytes(Body::new(body), usize::MAX).await.unwrap();
        assert_eq!(collected.len(), 2000);
    }

    /// Serves `router` within `limits` (with `tls`, if any) on a free port,
    /// as one worker, until the test ends.
    async fn serving(router: Router, limits: Limits, tls: Option<TlsAcceptor>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (dealer, mut queues) = crate::http::Dealer::new(1);
        tokio::spawn(crate::http::accept(listener, dealer, slots(&limits), std::future::pending()));
        tokio::spawn(serve(queues.remove(0), router, limits, tls, std::future::pending()));
        addr
    }

    /// Sends `GET path` and reads one whole response (it carries a
    /// content-length, or ends its chunks with `0\r\n\r\n`).
    async fn request(stream: &mut TcpStream, path: &str) -> String {
        stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed mid-response: {:?}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&answer);
            if text.ends_with("done") || text.ends_with("0\r\n\r\n") {
                return text.into_owned();
            }
        }
    }

    /// Reads until the server closes the connection; how long that took.
    async fn closed_after(stream: &mut TcpStream) -> Duration {
        let started = Instant::now();
        let mut buf = [0u8; 256];
        tokio::time::timeout(Duration::from_secs(10), async { while let Ok(1..) = stream.read(&mut buf).await {} })
            .await
            .expect("the idle connection is still open");
        started.elapsed()
    }

    fn slow_router() -> Router {
        Router::new()
            .route(
                "/slow",
                axum::routing::get(|| async {
                    tokio::time::sleep(Duration::from_millis(600)).await;
                    "done"
                }),
            )
            .route(
                "/stream",
                axum::routing::get(|| async {
                    let parts = futures_util::stream::iter(["first ", "done"]).then(|part| async move {
                        tokio::time::sleep(Duration::from_millis(400)).await;
                        Ok::<_, std::io::Error>(Bytes::from_static(part.as_bytes()))
                    });
                    Body::from_stream(parts)
                }),
            )
    }

    #[tokio::test]
    async fn requests_longer_than_the_keepalive_timeout_finish_and_the_idle_connection_then_closes() {
        let keepalive = Duration::from_millis(200);
        let addr = serving(slow_router(), Limits { keepalive_timeout: keepalive, ..Limits::default() }, None).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        assert!(request(&mut stream, "/slow").await.starts_with("HTTP/1.1 200 OK"));
        let streamed = request(&mut stream, "/stream").await;
        assert!(streamed.contains("first ") && streamed.ends_with("0\r\n\r\n"), "{streamed}");
        let idle = closed_after(&mut stream).await;
        // The idle spell began as the last chunk left, a little before it
        // was read here.
        assert!(idle >= keepalive / 2 && idle < Duration::from_secs(5), "{idle:?}");
    }

    #[tokio::test]
    async fn an_idle_keepalive_connection_outlives_the_header_read_timeout() {
        let limits = Limits {
            header_read_timeout: Duration::from_millis(100),
            keepalive_timeout: Duration::from_secs(30),
            ..Limits::default()
        };
        let addr = serving(slow_router(), limits, None).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        assert!(request(&mut stream, "/slow").await.starts_with("HTTP/1.1 200 OK"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(request(&mut stream, "/slow").await.starts_with("HTTP/1.1 200 OK"));
        // Half a request head after the idle spell: the header timeout applies.
        stream.write_all(b"GET /slow HTTP/1.1\r\n").await.unwrap();
        let waited = closed_after(&mut stream).await;
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }

    /// A TLS acceptor presenting a fresh self-signed certificate for localhost.
    fn acceptor(dir: &std::path::Path) -> TlsAcceptor {
        gw_tls::install_provider();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
        let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let cert = gw_tls::ReloadingCert::load(&cert_file, &key_file).unwrap();
        TlsAcceptor::from(Arc::new(gw_tls::server_config(cert, None).unwrap()))
    }

    #[tokio::test]
    async fn a_silent_tls_client_is_closed_after_the_header_read_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits { header_read_timeout: Duration::from_millis(200), ..Limits::default() };
        let addr = serving(slow_router(), limits, Some(acceptor(dir.path()))).await;
        // Connects and never starts the handshake.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let waited = closed_after(&mut silent).await;
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        // Plain HTTP gets no answer but a closed connection.
        let mut plain = TcpStream::connect(addr).await.unwrap();
        plain.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer)).await.unwrap();
        assert!(!String::from_utf8_lossy(&answer).contains("HTTP/1.1"), "{answer:?}");
    }
}
