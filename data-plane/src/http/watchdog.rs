//! Closes a client connection that sits quiet too long: one that has not
//! finished a request's headers within the header read timeout (counted from
//! accept, or from the first byte after an idle spell), and a keep-alive
//! connection with no request for the keep-alive timeout. A connection with
//! a request in progress (its response not yet fully sent) is never closed
//! here; slow bodies are `MinRate`'s business. A connection upgraded to a
//! WebSocket leaves the watchdog (the socket keeps its own idle timeout and
//! lifetime) but keeps its slot, which its stream holds.
//!
//! hyper's own header timer starts as soon as a response is written, so it
//! counts keep-alive idling and header reading as one; the watchdog keeps the
//! two apart.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Instant,
};

use super::{Limits, accept::Held};

/// What one connection is doing, shared by its IO, its requests and its
/// watchdog.
pub struct Activity {
    opened: Instant,
    /// Requests whose response has not been fully sent.
    busy: AtomicUsize,
    /// Milliseconds after `opened` when the current quiet spell began.
    quiet_since_ms: AtomicU64,
    /// Whether the quiet spell is a request head being read (else idling).
    reading_head: AtomicBool,
}

/// Marks a request in progress until dropped (with the response body).
pub struct Busy(Arc<Activity>);

/// A connection's byte stream, noting when a new request starts to arrive.
/// It holds the connection's slot: whoever owns the stream (hyper, or an
/// upgraded WebSocket after it) keeps the slot taken until it drops it.
pub struct Watched<IO> {
    inner: IO,
    activity: Arc<Activity>,
    _held: Held,
}

/// A response body that keeps its request marked in progress.
pub struct Tracked {
    inner: Body,
    _busy: Busy,
}

// === impl Activity ===

impl Activity {
    /// A connection just accepted: its first request's headers are due.
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            busy: AtomicUsize::new(0),
            quiet_since_ms: AtomicU64::new(0),
            reading_head: AtomicBool::new(true),
        })
    }

    /// Marks a request (its headers read) in progress until the guard drops.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn quiet(&self, reading_head: bool) {
        self.quiet_since_ms.store(self.elapsed_ms(), Ordering::Release);
        self.reading_head.store(reading_head, Ordering::Release);
    }

    /// When the connection must be closed, or `None` while a request is in
    /// progress.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = self.opened + Duration::from_millis(self.quiet_since_ms.load(Ordering::Acquire));
        let allowed = match self.reading_head.load(Ordering::Acquire) {
            true => limits.header_read_timeout,
            false => limits.keepalive_timeout,
        };
        Some(since + allowed)
    }

    /// Resolves when the connection has been quiet past its deadline.
    ///
    /// Nothing wakes the watchdog: it looks again at the deadline, or after
    /// the shorter of the two timeouts, whichever comes first. A quiet spell
    /// beginning at any moment gets a deadline at least that timeout later,
    /// so the look is never late, and a request starting or ending costs no
    /// wake-up and no timer.
    pub async fn expired(&self, limits: Limits) {
        let step = limits.header_read_timeout.min(limits.keepalive_timeout);
        loop {
            let now = Instant::now();
            let deadline = self.deadline(&limits);
            if deadline.is_some_and(|deadline| deadline <= now) {
                let reading_head = self.reading_head.load(Ordering::Acquire);
                tracing::debug!(reading_head, "client connection quiet too long; closing");
                return;
            }
            let look = deadline.map_or(now + step, |deadline| deadline.min(now + step));
            tokio::time::sleep_until(look).await;
        }
    }
}

// === impl Busy ===

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.quiet(false);
        }
    }
}

// === impl Watched ===

impl<IO> Watched<IO> {
    /// `inner`, reporting to `activity`, holding the slot `held`.
    pub fn new(inner: IO, activity: Arc<Activity>, held: Held) -> Watched<IO> {
        Watched { inner, activity, _held: held }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let activity = &self.activity;
        if buf.filled().len() > before
            && activity.busy.load(Ordering::Acquire) == 0
            && !activity.reading_head.load(Ordering::Acquire)
        {
            // The first bytes after an idle spell: a request head is coming.
            activity.quiet(true);
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

// === impl Tracked ===

impl Tracked {
    /// `inner`, holding `busy` until it is dropped.
    pub fn new(inner: Body, busy: Busy) -> Tracked {
        Tracked { inner, _busy: busy }
    }
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(5),
            keepalive_timeout: Duration::from_secs(60),
            ..Limits::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_connection_gets_the_header_timeout_and_an_idle_one_the_keepalive_timeout() {
        let activity = Activity::new();
        let opened = Instant::now();
        assert_eq!(activity.deadline(&limits()), Some(opened + Duration::from_secs(5)));
        let busy = activity.busy();
        assert_eq!(activity.deadline(&limits()), None);
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(activity.deadline(&limits()), None, "a request in progress has no deadline");
        drop(busy);
        assert_eq!(activity.deadline(&limits()), Some(opened + Duration::from_secs(160)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_waits_out_a_long_request_then_the_keepalive_timeout() {
        let activity = Activity::new();
        let busy = activity.busy();
        let started = Instant::now();
        let watchdog = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(limits()).await }
        });
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!watchdog.is_finished(), "closed a connection with a request in progress");
        drop(busy);
        watchdog.await.unwrap_or_default();
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_secs(360) && elapsed < Duration::from_secs(366), "{elapsed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_begun_during_a_long_keepalive_spell_gets_the_header_timeout_on_time() {
        let activity = Activity::new();
        drop(activity.busy());
        let started = Instant::now();
        let watchdog = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(limits()).await }
        });
        tokio::time::sleep(Duration::from_secs(12)).await;
        // The first bytes of the next request, 12 s into a 60 s keep-alive.
        activity.quiet(true);
        watchdog.await.unwrap_or_default();
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_secs(17) && elapsed < Duration::from_secs(18), "{elapsed:?}");
    }
}
