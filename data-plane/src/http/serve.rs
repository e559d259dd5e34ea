//! The listener's accept loop, with the limits a public listener needs:
//! at most `max_connections` connections at once (further ones wait in the
//! kernel's backlog until one closes), request headers within
//! `header_read_timeout` (which also closes a keep-alive connection idle
//! that long), and request bodies at a minimum rate (`MinRate`). Stopping
//! lets in-flight requests, streams included, finish.

use std::{
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
    server::{conn::auto, graceful::GracefulShutdown},
};
use tokio::{net::TcpListener, sync::Semaphore, time::Instant};
use tower::ServiceExt as _;

/// Limits on client connections; the defaults suit a public listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time to send a request's headers, and the longest a keep-alive
    /// connection may sit idle between requests.
    pub header_read_timeout: Duration,
    /// A request body must arrive at this many bytes per second or more,
    /// on average, once `body_grace` has passed.
    pub body_min_bytes_per_sec: u64,
    /// How long a body may take before the minimum rate applies.
    pub body_grace: Duration,
}

/// A request body that fails once it falls behind its minimum rate.
pub struct MinRate {
    inner: Body,
    started: Instant,
    received: u64,
    limits: Limits,
    /// Wakes the body when its deadline passes without data; made only
    /// once the body first waits, so bodiless requests allocate none.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

// === impl Limits ===

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 10_000,
            header_read_timeout: Duration::from_secs(30),
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
        anyhow::ensure!(self.body_min_bytes_per_sec > 0, "the minimum body rate must be positive");
        Ok(())
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves,
/// then waits for open connections to finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait and go on,
                    // never stop the listener.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let mut request = request.map(|body| Body::new(MinRate::new(Body::new(body), limits)));
            request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            router.clone().oneshot(request)
        });
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

// === impl MinRate ===

impl MinRate {
    /// `inner` held to `limits`' minimum rate.
    pub fn new(inner: Body, limits: Limits) -> MinRate {
        MinRate { inner, started: Instant::now(), received: 0, limits, timer: None }
    }

    /// When the body must have sent its next byte.
    fn deadline(&self) -> Instant {
        let allowed = Duration::from_secs_f64(self.received as f64 / self.limits.body_min_bytes_per_sec as f64);
        self.started + self.limits.body_grace + allowed
    }
}

impl hyper::body::Body for MinRate {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
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
            other => other,
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
}
