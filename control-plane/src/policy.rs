//! `PolicyService`: streams snapshots and deltas to data planes and takes
//! their usage reports. Each watch runs in its own task: it answers the
//! Hello with a full snapshot (or the deltas since the data plane's revision),
//! then sends one delta per batch of store changes, and records ACKs. It is
//! also the single authority on rate limits: data planes lease permits of the
//! current fixed window from it (`AcquirePermits`), counted in the store.

use std::{collections::BTreeSet, pin::Pin, sync::Arc};

use futures_util::Stream;
use gw_proto::pb;
use tokio::sync::{mpsc, watch};
use tokio_stream::{StreamExt as _, wrappers::ReceiverStream};
use tonic::{Request, Response, Status, Streaming};

use crate::{
    convert,
    domain::{AUTO_DISABLED, Change, ENABLED, Kind, UsageRecord, now_unix},
    error::error_chain,
    fleet::Fleet,
    store::{self, Store, StoreError},
    video::{self, Videos},
};

/// Records accepted in one `ReportUsage` call.
const MAX_BATCH: usize = 10_000;
/// Consecutive failures on one data plane that take a channel out of rotation.
pub const AUTO_DISABLE_AFTER: u32 = 5;
/// Asks accepted in one `AcquirePermits` call.
const MAX_ASKS: usize = 1_000;
/// Longest permit key accepted (`group:<group>:<account id>`).
const MAX_KEY_LEN: usize = 1_024;

/// The policy service of one replica.
pub struct PolicyApi {
    store: Arc<dyn Store>,
    fleet: Fleet,
    shutdown: watch::Receiver<bool>,
    videos: Option<Arc<Videos>>,
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;

// === impl PolicyApi ===

impl PolicyApi {
    pub fn new(store: Arc<dyn Store>, fleet: Fleet, shutdown: watch::Receiver<bool>) -> PolicyApi {
        PolicyApi { store, fleet, shutdown, videos: None }
    }

    /// Serves the video task RPCs with `videos` (without it they answer
    /// Unavailable).
    pub fn with_videos(mut self, videos: Arc<Videos>) -> PolicyApi {
        self.videos = Some(videos);
        self
    }

    fn videos(&self) -> Result<&Videos, Status> {
        self.videos.as_deref().ok_or_else(|| Status::unavailable("video tasks are not served here"))
    }
}

#[tonic::async_trait]
impl pb::policy_service_server::PolicyService for PolicyApi {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<Streaming<pb::WatchRequest>>) -> Result<Response<WatchStream>, Status> {
        let mut incoming = request.into_inner();
        let hello = match incoming.next().await {
            Some(Ok(pb::WatchRequest { kind: Some(pb::watch_request::Kind::Hello(hello)) })) => hello,
            Some(Err(status)) => return Err(status),
            _ => return Err(Status::invalid_argument("the first message of a watch must be a hello")),
        };
        if hello.node_id.is_empty() {
            return Err(Status::invalid_argument("hello needs a node_id"));
        }
        let (tx, rx) = mpsc::channel(16);
        let session = Session {
            store: self.store.clone(),
            fleet: self.fleet.clone(),
            node_id: hello.node_id.clone(),
            sent: 0,
            tx,
        };
        self.fleet.connected(&hello.node_id, &hello.address, &hello.version);
        tracing::info!(node = %hello.node_id, revision = hello.revision, "data plane connected");
        tokio::spawn(session.run(hello.revision, incoming, self.shutdown.clone()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report_usage(
        &self,
        request: Request<pb::ReportUsageRequest>,
    ) -> Result<Response<pb::ReportUsageResponse>, Status> {
        let request = request.into_inner();
        if request.records.len() > MAX_BATCH {
            return Err(Status::invalid_argument(format!("at most {MAX_BATCH} records per report")));
        }
        if let Some(bad) = request.records.iter().find(|r| r.request_id.is_empty()) {
            return Err(Status::invalid_argument(format!(
                "usage record without request_id for token {:?}",
                bad.token_id
            )));
        }
        let records: Vec<UsageRecord> = request.records.into_iter().map(Into::into).collect();
        let outcome = self.store.apply_usage(&records).await.map_err(Status::from)?;
        if !request.node_id.is_empty() {
            self.fleet.seen(&request.node_id);
        }
        Ok(Response::new(pb::ReportUsageResponse {
            applied: outcome.applied,
            duplicates: outcome.duplicates,
            revision: outcome.revision,
        }))
    }

    async fn acquire_permits(
        &self,
        request: Request<pb::AcquirePermitsRequest>,
    ) -> Result<Response<pb::AcquirePermitsResponse>, Status> {
        let request = request.into_inner();
        if request.asks.len() > MAX_ASKS {
            return Err(Status::invalid_argument(format!("at most {MAX_ASKS} asks per call")));
        }
        for ask in &request.asks {
            validate_ask(ask)?;
        }
        // One clock for the whole call: every grant of it is for the window
        // that holds this instant.
        let now = now_unix();
        let mut grants = Vec::with_capacity(request.asks.len());
        for ask in request.asks {
            let (window_start, window_end) = window(now, ask.window_minutes);
            let want = ask.want.min(ask.max_requests);
            let granted = self
                .store
                .take_permits(&ask.key, window_start, window_end - window_start, ask.max_requests, want)
                .await?;
            grants.push(pb::PermitGrant { key: ask.key, granted, window_start, window_end });
        }
        if !request.node_id.is_empty() {
            self.fleet.seen(&request.node_id);
        }
        Ok(Response::new(pb::AcquirePermitsResponse { grants }))
    }

    async fn create_video_task(
        &self,
        request: Request<pb::CreateVideoTaskRequest>,
    ) -> Result<Response<pb::CreateVideoTaskResponse>, Status> {
        video::rpc::create(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn record_video_upstream(
        &self,
        request: Request<pb::RecordVideoUpstreamRequest>,
    ) -> Result<Response<pb::VideoTask>, Status> {
        video::rpc::record(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn get_video_task(
        &self,
        request: Request<pb::GetVideoTaskRequest>,
    ) -> Result<Response<pb::VideoTask>, Status> {
        video::rpc::get(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn report_channel_health(
        &self,
        request: Request<pb::ChannelHealthRequest>,
    ) -> Result<Response<pb::ChannelHealthResponse>, Status> {
        let request = request.into_inner();
        let mut disabled = Vec::new();
        for failure in request.failures {
            if failure.consecutive_failures < AUTO_DISABLE_AFTER {
                continue;
            }
            // Only a channel in rotation is taken out; an operator's choice stands.
            if !store::switch_channel_status(self.store.as_ref(), &failure.channel_id, ENABLED, AUTO_DISABLED).await? {
                continue;
            }
            tracing::warn!(
                channel = %failure.channel_id,
                node = %request.node_id,
                failures = failure.consecutive_failures,
                status = failure.last_status,
                reason = %failure.reason,
                "channel auto-disabled after repeated failures"
            );
            disabled.push(failure.channel_id);
        }
        if !request.node_id.is_empty() {
            self.fleet.seen(&request.node_id);
        }
        Ok(Response::new(pb::ChannelHealthResponse { disabled }))
    }
}

/// One data plane's watch stream.
struct Session {
    store: Arc<dyn Store>,
    fleet: Fleet,
    node_id: String,
    /// Revision of the last response sent.
    sent: u64,
    tx: mpsc::Sender<Result<pb::WatchResponse, Status>>,
}

// === impl Session ===

impl Session {
    async fn run(mut self, known: u64, mut incoming: Streaming<pb::WatchRequest>, mut shutdown: watch::Receiver<bool>) {
        let mut revisions = self.store.subscribe();
        let result = async {
            self.send_initial(known).await?;
            loop {
                tokio::select! {
                    changed = revisions.changed() => {
                        if changed.is_err() {
                            return Ok(());
                        }
                        let newest = *revisions.borrow_and_update();
                        if newest > self.sent {
                            self.send_since().await?;
                        } else if newest < self.sent {
                            // The store went back in time (Redis lost its data): start over.
                            self.send_full().await?;
                        }
                    }
                    message = incoming.next() => match message {
                        Some(Ok(pb::WatchRequest { kind: Some(pb::watch_request::Kind::Ack(ack)) })) => {
                            let error = if ack.rejected.is_empty() {
                                ack.error.clone()
                            } else {
                                format!("rejected {}: {}", ack.rejected.join(", "), ack.error)
                            };
                            if !error.is_empty() {
                                tracing::warn!(node = %self.node_id, revision = ack.revision, %error, "data plane rejected resources");
                            }
                            self.fleet.acked(&self.node_id, ack.revision, &error);
                        }
                        Some(Ok(_)) => {}
                        Some(Err(status)) => return Err(SessionEnd::Client(status)),
                        None => return Ok(()),
                    },
                    _ = stopped(&mut shutdown) => return Ok(()),
                }
            }
        }
        .await;
        match result {
            Ok(()) | Err(SessionEnd::Closed) => {}
            Err(SessionEnd::Client(status)) => {
                tracing::debug!(node = %self.node_id, %status, "watch stream broke");
            }
            Err(SessionEnd::Store(error)) => {
                tracing::warn!(node = %self.node_id, error = %error_chain(&error), "watch ended on a store error");
                let _ = self.tx.send(Err(Status::from(error))).await;
            }
        }
        self.fleet.disconnected(&self.node_id);
        tracing::info!(node = %self.node_id, "data plane disconnected");
    }

    async fn send_initial(&mut self, known: u64) -> Result<(), SessionEnd> {
        if known > 0
            && let Some(changes) = self.store.changes_since(known).await?
        {
            self.sent = known;
            self.fleet.sent(&self.node_id, known);
            return self.send_delta(changes).await;
        }
        self.send_full().await
    }

    async fn send_since(&mut self) -> Result<(), SessionEnd> {
        match self.store.changes_since(self.sent).await? {
            Some(changes) => self.send_delta(changes).await,
            None => self.send_full().await,
        }
    }

    async fn send_full(&mut self) -> Result<(), SessionEnd> {
        let snapshot = self.store.snapshot().await?;
        let response = pb::WatchResponse {
            revision: snapshot.revision,
            full: true,
            base: 0,
            upserts: snapshot.resources.into_iter().map(convert::resource_for_data_plane).collect(),
            deletes: Vec::new(),
        };
        self.send(response).await
    }

    async fn send_delta(&mut self, changes: Vec<Change>) -> Result<(), SessionEnd> {
        let Some(revision) = changes.iter().map(|c| c.revision).max() else {
            return Ok(());
        };
        let touched: BTreeSet<(Kind, String)> = changes.into_iter().map(|c| (c.kind, c.id)).collect();
        let mut response = pb::WatchResponse { revision, full: false, base: self.sent, ..Default::default() };
        for (kind, id) in touched {
            match self.store.get(kind, &id).await? {
                Some(resource) => response.upserts.push(convert::resource_for_data_plane(resource)),
                None => response.deletes.push(pb::ResourceRef { kind: kind.as_str().to_owned(), id }),
            }
        }
        self.send(response).await
    }

    async fn send(&mut self, response: pb::WatchResponse) -> Result<(), SessionEnd> {
        let revision = response.revision;
        self.tx.send(Ok(response)).await.map_err(|_| SessionEnd::Closed)?;
        self.sent = revision;
        self.fleet.sent(&self.node_id, revision);
        Ok(())
    }
}

/// Refuses an ask that names no limit or an unknown kind of key.
fn validate_ask(ask: &pb::PermitAsk) -> Result<(), Status> {
    let known = ask.key.starts_with("token:") || ask.key.starts_with("group:");
    if !known || ask.key.len() > MAX_KEY_LEN {
        return Err(Status::invalid_argument(format!(
            "permit key {:?} is not token:<id> or group:<group>:<account> of at most {MAX_KEY_LEN} bytes",
            ask.key
        )));
    }
    // Any window length is fine: u32 minutes in seconds fit an i64.
    if ask.window_minutes == 0 || ask.max_requests == 0 {
        return Err(Status::invalid_argument(format!(
            "permit ask for {:?} needs a window of at least 1 minute and at least 1 request, got {}/{}",
            ask.key, ask.max_requests, ask.window_minutes
        )));
    }
    Ok(())
}

/// The fixed window of `window_minutes` that holds Unix second `now`:
/// `(start, end)`, end exclusive, aligned to multiples of the window's length
/// since the Unix epoch.
pub fn window(now: i64, window_minutes: u32) -> (i64, i64) {
    let length = i64::from(window_minutes.max(1)) * 60;
    let start = now - now.rem_euclid(length);
    (start, start + length)
}

/// Resolves once the server is shutting down.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

enum SessionEnd {
    Closed,
    Client(Status),
    Store(StoreError),
}

impl From<StoreError> for SessionEnd {
    fn from(error: StoreError) -> SessionEnd {
        SessionEnd::Store(error)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use gw_proto::pb::policy_service_server::PolicyService as _;

    use super::*;
    use crate::store::EmbeddedStore;

    fn api(dir: &tempfile::TempDir) -> PolicyApi {
        let store = EmbeddedStore::open(&dir.path().join("store.redb")).unwrap();
        PolicyApi::new(Arc::new(store), Fleet::default(), watch::channel(false).1)
    }

    fn ask(key: &str, window_minutes: u32, max_requests: u32, want: u32) -> pb::PermitAsk {
        pb::PermitAsk { key: key.into(), window_minutes, max_requests, want }
    }

    async fn acquire(api: &PolicyApi, asks: Vec<pb::PermitAsk>) -> Result<Vec<pb::PermitGrant>, Status> {
        let request = Request::new(pb::AcquirePermitsRequest { node_id: "dp".into(), asks });
        Ok(api.acquire_permits(request).await?.into_inner().grants)
    }

    #[test]
    fn windows_are_aligned_to_multiples_of_their_length_since_the_epoch() {
        assert_eq!(window(0, 1), (0, 60));
        assert_eq!(window(59, 1), (0, 60));
        assert_eq!(window(60, 1), (60, 120));
        assert_eq!(window(1_000_000_123, 5), (1_000_000_200 - 300, 1_000_000_200));
        assert_eq!(window(7_199, 60), (3_600, 7_200));
    }

    #[tokio::test]
    async fn grants_answer_each_ask_in_order_and_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let api = api(&dir);
        let grants = acquire(&api, vec![ask("token:t1", 1, 5, 3), ask("group:g:a1", 60, 2, 10)]).await.unwrap();
        let summary: Vec<(&str, u32, i64)> =
            grants.iter().map(|g| (g.key.as_str(), g.granted, g.window_end - g.window_start)).collect();
        assert_eq!(summary, [("token:t1", 3, 60), ("group:g:a1", 2, 3_600)], "want is capped by the limit");
        let now = now_unix();
        assert!(grants.iter().all(|g| g.window_start <= now && now < g.window_end + 1), "{grants:?}");
        let again = acquire(&api, vec![ask("token:t1", 1, 5, 3), ask("group:g:a1", 60, 2, 1)]).await.unwrap();
        let granted: Vec<u32> = again.iter().map(|g| g.granted).collect();
        assert_eq!(granted, [2, 0]);
    }

    #[tokio::test]
    async fn malformed_asks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let api = api(&dir);
        for bad in [ask("token:t1", 0, 5, 1), ask("token:t1", 1, 0, 1), ask("other:t1", 1, 5, 1), ask("", 1, 5, 1)] {
            let status = acquire(&api, vec![bad.clone()]).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}");
        }
    }
}
