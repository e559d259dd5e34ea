//! `PolicyService`: streams snapshots and deltas to data planes and takes
//! their usage reports. Each watch runs in its own task: it answers the
//! Hello with a full snapshot (or the deltas since the data plane's revision),
//! then sends one delta per batch of store changes, and records ACKs. Permits
//! and spending leases are answered by the budget authority (`budget`),
//! usage reports by the `ledger`.
//!
//! A data plane is who its watch session says: a usage or channel-health
//! report must come over the connection of a watch whose hello named the
//! same node (under mutual TLS, a hello must name the certificate's node);
//! anything else is refused with PermissionDenied and counted.

use std::{net::SocketAddr, pin::Pin, sync::Arc, time::Duration};

use futures_util::Stream;
use gw_proto::pb;
use prost::Message as _;
use tokio::sync::{mpsc, watch};
use tokio_stream::{StreamExt as _, wrappers::ReceiverStream};
use tonic::{Request, Response, Status, Streaming};

use crate::{
    api::convert,
    domain::error_chain,
    domain::{AUTO_DISABLED, Change, ENABLED, Resource, UsageRecord, now_unix},
    services::batch::Batches,
    services::budget::Authority,
    services::continuity::Continuity,
    services::fleet::{self, Binding, Fleet},
    services::ledger::Ledger,
    services::mirror::{Frozen, Mirror, touched},
    services::video::Videos,
    store::{self, Lineage, PageCursor, Store, StoreError},
};

/// Records accepted in one `ReportUsage` call.
const MAX_BATCH: usize = 10_000;
/// Resources per message of a full snapshot, by default: a few MB at most.
pub const SNAPSHOT_CHUNK: usize = 5_000;
/// Consecutive failures on one data plane that take a channel out of rotation.
pub const AUTO_DISABLE_AFTER: u32 = 5;
/// How long a report waits for the watch of its connection to say hello.
const SESSION_WAIT: Duration = Duration::from_secs(2);

/// The policy service of one replica.
pub struct PolicyApi {
    store: Arc<dyn Store>,
    budgets: Authority,
    ledger: Arc<Ledger>,
    fleet: Fleet,
    continuity: Continuity,
    shutdown: watch::Receiver<bool>,
    videos: Option<Arc<Videos>>,
    batches: Option<Arc<Batches>>,
    snapshot_chunk: usize,
    /// Full snapshots are served from it while it holds the store.
    mirror: Mirror,
    /// Channels data planes report failing, until enough agree.
    failures: Arc<crate::services::health::Failures>,
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;
type Answer<T> = Result<Response<T>, Status>;

// === impl PolicyApi ===

impl PolicyApi {
    pub fn new(
        store: Arc<dyn Store>,
        ledger: Arc<Ledger>,
        fleet: Fleet,
        continuity: Continuity,
        shutdown: watch::Receiver<bool>,
    ) -> PolicyApi {
        let budgets = Authority::new(store.clone());
        PolicyApi {
            store,
            budgets,
            ledger,
            fleet,
            continuity,
            shutdown,
            videos: None,
            batches: None,
            snapshot_chunk: SNAPSHOT_CHUNK,
            mirror: Mirror::default(),
            failures: Arc::default(),
        }
    }

    /// Serves full snapshots from `mirror` while it holds the store (without
    /// it every full snapshot is read from the store).
    pub fn with_mirror(mut self, mirror: Mirror) -> PolicyApi {
        self.mirror = mirror;
        self
    }

    /// Sends full snapshots in messages of at most `chunk` resources.
    pub fn with_snapshot_chunk(mut self, chunk: usize) -> PolicyApi {
        self.snapshot_chunk = chunk.max(1);
        self
    }

    /// Notes that data plane `node_id` (if named) called.
    fn seen(&self, node_id: &str) {
        if !node_id.is_empty() {
            self.fleet.seen(node_id);
        }
    }

    /// Leases budgets by `clock` (the system clock by default).
    pub fn with_clock(mut self, clock: crate::domain::clock::Clock) -> PolicyApi {
        self.budgets = self.budgets.with_clock(clock);
        self
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

    /// Serves the file and batch RPCs with `batches` (without it they
    /// answer Unavailable).
    pub fn with_batches(mut self, batches: Arc<Batches>) -> PolicyApi {
        self.batches = Some(batches);
        self
    }

    fn batches(&self) -> Result<&Batches, Status> {
        self.batches.as_deref().ok_or_else(|| Status::unavailable("files and batches are not served here"))
    }
}

#[tonic::async_trait]
impl pb::policy_service_server::PolicyService for PolicyApi {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<Streaming<pb::WatchRequest>>) -> Result<Response<WatchStream>, Status> {
        let identity = request.extensions().get::<crate::api::peer::NodeIdentity>().cloned();
        let remote = request.remote_addr();
        let mut incoming = request.into_inner();
        let mut hello = match incoming.next().await {
            Some(Ok(pb::WatchRequest { kind: Some(pb::watch_request::Kind::Hello(hello)) })) => hello,
            Some(Err(status)) => return Err(status),
            _ => return Err(Status::invalid_argument("the first message of a watch must be a hello")),
        };
        if let Some(crate::api::peer::NodeIdentity(name)) = identity {
            if !hello.node_id.is_empty() && hello.node_id != name {
                return Err(impostor("watch", &hello.node_id, &name));
            }
            hello.node_id = name;
        }
        if hello.node_id.is_empty() {
            return Err(Status::invalid_argument("hello needs a node_id"));
        }
        let lineage = self.continuity.admit(&hello.node_id, &hello.store_id, hello.revision).await?;
        let other_store = !hello.store_id.is_empty() && hello.store_id != lineage.id;
        // What it holds of this lineage counts as acknowledged: a reconnect
        // with nothing new to send shows it in sync.
        let holds = if other_store { 0 } else { hello.revision };
        let (tx, rx) = mpsc::channel(16);
        let session = Session {
            binding: remote.map(|remote| self.fleet.bind(remote, &hello.node_id, holds)),
            store: self.store.clone(),
            fleet: self.fleet.clone(),
            continuity: self.continuity.clone(),
            lineage,
            node_id: hello.node_id.clone(),
            mirror: self.mirror.clone(),
            sent: 0,
            chunk: self.snapshot_chunk,
            tx,
        };
        self.fleet.connected(&hello.node_id, &hello.address, &hello.version, holds);
        tracing::info!(node = %hello.node_id, revision = hello.revision, "data plane connected");
        // Deltas only on top of this lineage's own revisions.
        let known = if hello.want_full || other_store { 0 } else { hello.revision };
        tokio::spawn(session.run(known, incoming, self.shutdown.clone()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report_usage(
        &self,
        request: Request<pb::ReportUsageRequest>,
    ) -> Result<Response<pb::ReportUsageResponse>, Status> {
        let certified = request.extensions().get::<crate::api::peer::NodeIdentity>().is_some();
        let remote = request.remote_addr();
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
        let session = self.session("usage", remote, &request.node_id).await?;
        // Under mutual TLS every record must be the certificate's node's;
        // otherwise a record naming another node is booked to this one.
        if certified
            && let Some(other) = request.records.iter().find(|r| !r.node_id.is_empty() && r.node_id != session.node_id)
        {
            return Err(impostor("usage", &other.node_id, &session.node_id));
        }
        // Kept in the data plane's spool until the store is trusted again.
        self.continuity.trusted()?;
        let records: Vec<UsageRecord> = request.records.into_iter().map(Into::into).collect();
        let outcome =
            self.ledger.apply_reported(&session.node_id, session.base(), records).await.map_err(Status::from)?;
        self.seen(&session.node_id);
        Ok(Response::new(pb::ReportUsageResponse {
            applied: outcome.applied,
            duplicates: outcome.duplicates,
            refused: outcome.refused,
            revision: 0,
        }))
    }

    async fn acquire_permits(
        &self,
        request: Request<pb::AcquirePermitsRequest>,
    ) -> Result<Response<pb::AcquirePermitsResponse>, Status> {
        let request = crate::api::peer::with_node(request, |r| &mut r.node_id);
        let asks = request.asks.into_iter().map(convert::permit_ask).collect();
        let grants = self.budgets.permits(asks).await?.into_iter().map(pb::PermitGrant::from).collect();
        self.seen(&request.node_id);
        Ok(Response::new(pb::AcquirePermitsResponse { grants }))
    }

    async fn lease_slots(
        &self,
        request: Request<pb::LeaseSlotsRequest>,
    ) -> Result<Response<pb::LeaseSlotsResponse>, Status> {
        let request = crate::api::peer::with_node(request, |r| &mut r.node_id);
        let keys: Vec<String> = request.asks.iter().map(|a| a.key.clone()).collect();
        let asks = request.asks.into_iter().map(convert::slots_ask).collect();
        let (leases, ttl_secs) = self.budgets.slots(&request.node_id, asks, request.ttl_secs).await?;
        self.seen(&request.node_id);
        let grants = keys
            .into_iter()
            .zip(leases)
            .map(|(key, lease)| pb::SlotGrant { key, granted: lease.granted, held: lease.held })
            .collect();
        Ok(Response::new(pb::LeaseSlotsResponse { grants, ttl_secs }))
    }

    async fn acquire_spend(
        &self,
        request: Request<pb::AcquireSpendRequest>,
    ) -> Result<Response<pb::AcquireSpendResponse>, Status> {
        let request = crate::api::peer::with_node(request, |r| &mut r.node_id);
        self.continuity.trusted()?;
        let asks = request.asks.into_iter().map(convert::spend_ask).collect::<Result<Vec<_>, _>>()?;
        let budgets: Vec<String> = asks.iter().map(|a| a.budget.to_string()).collect();
        let (leases, ttl_secs) = self.budgets.lease(&request.node_id, asks, request.ttl_secs).await?;
        self.seen(&request.node_id);
        let grants =
            budgets.into_iter().zip(leases).map(|(budget, lease)| convert::spend_grant(budget, lease)).collect();
        let data_planes = u32::try_from(self.fleet.live_count()).unwrap_or(u32::MAX).max(1);
        Ok(Response::new(pb::AcquireSpendResponse { grants, ttl_secs, data_planes }))
    }

    async fn return_spend(
        &self,
        request: Request<pb::ReturnSpendRequest>,
    ) -> Result<Response<pb::ReturnSpendResponse>, Status> {
        let request = crate::api::peer::with_node(request, |r| &mut r.node_id);
        if request.node_id.is_empty() {
            return Err(Status::invalid_argument("returns need a node_id"));
        }
        let returns = request
            .returns
            .into_iter()
            .map(|r| convert::budget(&r.budget).map(|budget| (budget, r.amount_micros)))
            .collect::<Result<Vec<_>, _>>()?;
        self.budgets.give_back(&request.node_id, returns).await?;
        self.seen(&request.node_id);
        Ok(Response::new(pb::ReturnSpendResponse {}))
    }

    async fn create_video_task(
        &self,
        request: Request<pb::CreateVideoTaskRequest>,
    ) -> Result<Response<pb::CreateVideoTaskResponse>, Status> {
        crate::api::video::create(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn record_video_upstream(
        &self,
        request: Request<pb::RecordVideoUpstreamRequest>,
    ) -> Result<Response<pb::VideoTask>, Status> {
        crate::api::video::record(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn get_video_task(
        &self,
        request: Request<pb::GetVideoTaskRequest>,
    ) -> Result<Response<pb::VideoTask>, Status> {
        crate::api::video::get(self.videos()?, request.into_inner()).await.map(Response::new)
    }

    async fn record_batch_file(&self, request: Request<pb::RecordBatchFileRequest>) -> Answer<pb::BatchFile> {
        crate::api::batch::record_file(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn get_batch_file(&self, request: Request<pb::BatchRef>) -> Answer<pb::BatchFile> {
        crate::api::batch::get_file(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn list_batch_files(
        &self,
        request: Request<pb::ListBatchItemsRequest>,
    ) -> Answer<pb::ListBatchFilesResponse> {
        crate::api::batch::list_files(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn delete_batch_file(&self, request: Request<pb::BatchRef>) -> Answer<pb::BatchFile> {
        crate::api::batch::delete_file(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn create_batch(&self, request: Request<pb::CreateBatchRequest>) -> Answer<pb::CreateBatchResponse> {
        crate::api::batch::create(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn record_batch_upstream(&self, request: Request<pb::RecordBatchUpstreamRequest>) -> Answer<pb::Batch> {
        crate::api::batch::record(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn get_batch(&self, request: Request<pb::BatchRef>) -> Answer<pb::Batch> {
        crate::api::batch::get(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn list_batches(&self, request: Request<pb::ListBatchItemsRequest>) -> Answer<pb::ListBatchesResponse> {
        crate::api::batch::list(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn cancel_batch(&self, request: Request<pb::BatchRef>) -> Answer<pb::Batch> {
        crate::api::batch::cancel(self.batches()?, request.into_inner()).await.map(Response::new)
    }

    async fn report_channel_health(
        &self,
        request: Request<pb::ChannelHealthRequest>,
    ) -> Result<Response<pb::ChannelHealthResponse>, Status> {
        let remote = request.remote_addr();
        let mut request = request.into_inner();
        request.node_id = self.session("health", remote, &request.node_id).await?.node_id.clone();
        let mut disabled = Vec::new();
        for failure in request.failures {
            if !failure.key_id.is_empty() {
                self.key_refused(&request.node_id, &failure).await?;
                continue;
            }
            if failure.consecutive_failures < AUTO_DISABLE_AFTER {
                continue;
            }
            // One data plane's word is not enough when this replica serves
            // several, and only data planes it serves have a say.
            let serving: Vec<String> =
                self.fleet.list().into_iter().filter(|n| n.connected).map(|n| n.node_id).collect();
            if !serving.contains(&request.node_id)
                || !self.failures.failing(&failure.channel_id, &request.node_id, serving.len())
            {
                tracing::info!(
                    channel = %failure.channel_id,
                    node = %request.node_id,
                    "channel reported failing; waiting for another data plane to agree"
                );
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
        self.fleet.seen(&request.node_id);
        Ok(Response::new(pb::ChannelHealthResponse { disabled }))
    }
}

// === impl PolicyApi ===

impl PolicyApi {
    /// The watch session of the connection `remote` a `call` came on; the
    /// node it `claims` to be (if it names one) must be the session's.
    /// FailedPrecondition when no watch is open on the connection,
    /// PermissionDenied when the claim is another node's; both counted.
    async fn session(
        &self,
        call: &str,
        remote: Option<SocketAddr>,
        claims: &str,
    ) -> Result<Arc<fleet::Session>, Status> {
        let session = match remote {
            Some(remote) => self.fleet.session_on(remote, SESSION_WAIT).await,
            None => None,
        };
        let Some(session) = session else {
            crate::services::telemetry::node_refused(call, "no_watch");
            tracing::warn!(call, node = claims, "report from a connection with no watch stream refused");
            return Err(Status::failed_precondition(
                "no watch stream is open on this connection: a data plane reports over the connection of its watch",
            ));
        };
        if !claims.is_empty() && claims != session.node_id {
            return Err(impostor(call, claims, &session.node_id));
        }
        Ok(session)
    }

    /// A data plane saw the upstream refuse one key of a channel's pool
    /// (401, 403): that key alone leaves rotation, at once, unless an
    /// operator already disabled it. Other statuses are ignored.
    async fn key_refused(&self, node_id: &str, failure: &pb::ChannelFailure) -> Result<(), Status> {
        if !matches!(failure.last_status, 401 | 403) {
            return Ok(());
        }
        let reason = format!("upstream answered {}", failure.last_status);
        let (channel, key) = (&failure.channel_id, &failure.key_id);
        let switched =
            store::switch_key_status(self.store.as_ref(), channel, key, (ENABLED, AUTO_DISABLED), reason, now_unix())
                .await?;
        if switched {
            tracing::warn!(%channel, %key, node = %node_id, status = failure.last_status, "upstream refused a channel key; key auto-disabled");
        }
        Ok(())
    }
}

/// A `call` naming node `claimed` from a data plane known to be `node`:
/// counted, logged, refused.
fn impostor(call: &str, claimed: &str, node: &str) -> Status {
    crate::services::telemetry::node_refused(call, "impostor");
    tracing::warn!(call, claimed, node, "a data plane named another node; refused");
    Status::permission_denied(format!("this data plane is {node:?}, not {claimed:?}"))
}

/// One data plane's watch stream.
struct Session {
    /// Binds its connection to its node id while it runs.
    binding: Option<Binding>,
    store: Arc<dyn Store>,
    fleet: Fleet,
    continuity: Continuity,
    /// The store lineage the data plane was admitted to.
    lineage: Lineage,
    node_id: String,
    mirror: Mirror,
    /// Revision of the last response sent.
    sent: u64,
    /// Resources per message of a full snapshot.
    chunk: usize,
    tx: mpsc::Sender<Result<pb::WatchResponse, Status>>,
}

// === impl Session ===

impl Session {
    async fn run(mut self, known: u64, mut incoming: Streaming<pb::WatchRequest>, mut shutdown: watch::Receiver<bool>) {
        let mut revisions = self.store.subscribe();
        let result = async {
            self.send_initial(known).await?;
            // A snapshot from the mirror may trail the store: look at once.
            revisions.mark_changed();
            loop {
                tokio::select! {
                    changed = revisions.changed() => {
                        if changed.is_err() {
                            return Ok(());
                        }
                        let newest = *revisions.borrow_and_update();
                        if newest != self.sent {
                            // Lower (or a new lineage) means the store lost data: that
                            // ends the session, and the data plane keeps what it has.
                            self.continuity.still(&self.node_id, &self.lineage, self.sent).await.map_err(|refused| SessionEnd::Refused(refused.into()))?;
                            self.send_since().await?;
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
                        Some(Ok(pb::WatchRequest { kind: Some(pb::watch_request::Kind::Heartbeat(beat)) })) => {
                            self.fleet.heartbeat(&self.node_id, beat.spool_backlog, beat.requests_per_second);
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
            Err(SessionEnd::Refused(status)) => {
                let _ = self.tx.send(Err(status)).await;
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

    /// Sends the whole state as chunks of at most `chunk` resources, read
    /// from the store a page at a time, so the first chunk leaves before the
    /// store is read through; the last has `more` unset. The snapshot is
    /// labelled with the revision read before the first page: whatever is
    /// written during the read comes again in the delta that follows it (the
    /// revision watch saw the write), so a resource may be newer than the
    /// label, never older.
    async fn send_full(&mut self) -> Result<(), SessionEnd> {
        self.mirror.loaded().await;
        let revision = self.store.revision().await?;
        if let Some(frozen) = self.mirror.freeze(&self.lineage.id, revision) {
            return self.send_frozen(frozen).await;
        }
        let mut expected = self.store.count().await?;
        let chunk = self.chunk.max(1);
        // Each page is read (and parsed) on a task of its own while the one
        // before is converted and sent.
        let read = |at: PageCursor| {
            let store = self.store.clone();
            tokio::spawn(async move { store.snapshot_page(&at, chunk).await })
        };
        let mut reading = Some(read(PageCursor::default()));
        let mut upserts: Vec<pb::Resource> = Vec::with_capacity(chunk);
        while let Some(task) = reading.take() {
            let page = task.await.map_err(|error| {
                // A read that panicked: the data plane retries after a backoff.
                SessionEnd::Refused(Status::internal(format!("reading the snapshot failed: {error}")))
            })??;
            reading = page.next.map(read);
            for resource in page.resources {
                if upserts.len() == chunk {
                    let full = std::mem::replace(&mut upserts, Vec::with_capacity(chunk));
                    let message = pb::WatchResponse { expected, ..self.full_chunk(revision, full, true) };
                    expected = 0;
                    self.tx.send(Ok(message)).await.map_err(|_| SessionEnd::Closed)?;
                }
                upserts.push(convert::resource_for_data_plane(resource));
            }
        }
        let last = pb::WatchResponse { expected, ..self.full_chunk(revision, upserts, false) };
        self.send(last).await
    }

    /// Sends the mirror's copy as a full snapshot, in chunks as `send_full`
    /// does. The copy may trail the store; the session's watch then sends
    /// the rest as a delta.
    async fn send_frozen(&mut self, frozen: Frozen) -> Result<(), SessionEnd> {
        let mut expected = frozen.len() as u64;
        let mut chunks = frozen.chunks(self.chunk).peekable();
        if chunks.peek().is_none() {
            return self.send(self.full_chunk(frozen.revision, Vec::new(), false)).await;
        }
        while let Some(upserts) = chunks.next() {
            // Decoding fails only if memory was corrupted: the mirror holds
            // what `encode_resource` made.
            let upserts =
                upserts.iter().map(|bytes| pb::Resource::decode(&bytes[..])).collect::<Result<Vec<_>, _>>().map_err(
                    |error| SessionEnd::Refused(Status::internal(format!("reading the held snapshot failed: {error}"))),
                )?;
            let more = chunks.peek().is_some();
            let message = pb::WatchResponse { expected, ..self.full_chunk(frozen.revision, upserts, more) };
            expected = 0;
            if more {
                self.tx.send(Ok(message)).await.map_err(|_| SessionEnd::Closed)?;
            } else {
                self.send(message).await?;
            }
        }
        Ok(())
    }

    /// One message of a full snapshot at `revision`.
    fn full_chunk(&self, revision: u64, upserts: Vec<pb::Resource>, more: bool) -> pb::WatchResponse {
        pb::WatchResponse {
            revision,
            full: true,
            base: 0,
            upserts,
            deletes: Vec::new(),
            store_id: self.lineage.id.clone(),
            store_confirmed: self.lineage.confirmed,
            more,
            expected: 0,
        }
    }

    async fn send_delta(&mut self, changes: Vec<Change>) -> Result<(), SessionEnd> {
        let Some(revision) = changes.iter().map(|c| c.revision).max() else {
            return Ok(());
        };
        let touched = touched(changes);
        let found = self.store.get_many(&touched).await?;
        let mut response = pb::WatchResponse {
            revision,
            full: false,
            base: self.sent,
            store_id: self.lineage.id.clone(),
            store_confirmed: self.lineage.confirmed,
            ..Default::default()
        };
        for ((kind, id), resource) in touched.into_iter().zip(found) {
            match resource {
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
        if let Some(binding) = &self.binding {
            binding.sent(revision);
        }
        Ok(())
    }
}

/// Resolves once the server is shutting down.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

enum SessionEnd {
    Closed,
    Client(Status),
    /// The store is not the one the data plane was admitted to.
    Refused(Status),
    Store(StoreError),
}

impl From<StoreError> for SessionEnd {
    fn from(error: StoreError) -> SessionEnd {
        SessionEnd::Store(error)
    }
}

/// A resource as the mirror holds it for sessions: the encoded message a
/// data plane is sent.
pub fn encode_resource(resource: Resource) -> Arc<[u8]> {
    convert::resource_for_data_plane(resource).encode_to_vec().into()
}
