//! Keeps the data plane's policy snapshot in sync with the control plane.
//!
//! One task holds the `Watch` stream: it says which revision it has, applies
//! each full snapshot or delta (a delta only on top of the revision it names),
//! publishes the result as a new `Arc<Snapshot>`, and ACKs it, naming any
//! resource it could not convert. A full snapshot may come in chunks: they
//! are converted as they arrive and applied together, only once the last one
//! came, so a stream broken mid-snapshot leaves the held snapshot alone. On
//! any error it keeps the last good snapshot and reconnects with jittered
//! backoff.

use std::{sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use gw_proto::pb::{self, policy_service_client::PolicyServiceClient, watch_request};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::{ControlPlane, convert, persist};
use crate::{
    backoff::Backoff,
    policy::domain::{Kind, Resource},
    policy::snapshot::Snapshot,
    vitals::Vitals,
};

/// Largest message accepted on the watch stream: a full snapshot of a
/// million tokens is a few hundred MB.
const MAX_MESSAGE: usize = 1 << 30;
/// Above this many upserts the snapshot is built off the async workers.
const BLOCKING_THRESHOLD: usize = 1000;
/// Chunks of a full snapshot received ahead of the one being converted.
const CHUNKS_AHEAD: usize = 2;
/// How often a heartbeat goes up the watch stream (the control plane counts
/// a data plane gone after three missed ones).
const HEARTBEAT: Duration = Duration::from_secs(5);

/// The discovery task and what it publishes to.
pub struct Discovery {
    pub control: ControlPlane,
    pub node_id: String,
    /// The client-facing address, shown by the control plane.
    pub address: String,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// Feeds the snapshot file writer, every published snapshot in order.
    pub persist: mpsc::UnboundedSender<persist::Update>,
    /// What the heartbeats report.
    pub vitals: Arc<Vitals>,
    pub shutdown: watch::Receiver<bool>,
}

/// Why a watch session ended.
#[derive(Debug)]
enum SessionEnd {
    /// The control plane closed the stream.
    Closed,
    /// A delta did not apply to the revision held: start over with a full one.
    Resync {
        base: u64,
        held: u64,
    },
    Failed(tonic::Status),
}

// === impl SessionEnd ===

impl SessionEnd {
    /// Whether the replica went away (closed, unreachable, silent) rather
    /// than refusing this data plane for a reason every replica shares.
    fn replica_gone(&self) -> bool {
        match self {
            SessionEnd::Closed => true,
            SessionEnd::Resync { .. } => false,
            SessionEnd::Failed(status) => !matches!(
                status.code(),
                tonic::Code::FailedPrecondition
                    | tonic::Code::Unauthenticated
                    | tonic::Code::PermissionDenied
                    | tonic::Code::InvalidArgument
            ),
        }
    }
}

/// A full snapshot arriving in chunks, converted and stored as they come
/// (no chunk's protobuf message outlives its turn).
struct Assembly {
    snapshot: Snapshot,
    rejected: Vec<String>,
    errors: Vec<String>,
}

/// An `Assembly` on a blocking thread of its own, so that the session
/// receives and decodes the next chunk while the last one is converted. A
/// dropped assembler's snapshot is finished and thrown away, never published.
struct Assembler {
    revision: u64,
    chunks: mpsc::Sender<pb::WatchResponse>,
    built: tokio::task::JoinHandle<Applied>,
}

/// What applying one `WatchResponse` produced.
struct Applied {
    snapshot: Snapshot,
    rejected: Vec<String>,
    errors: Vec<String>,
}

// === impl Discovery ===

impl Discovery {
    /// Watches until shutdown, reconnecting with backoff (100 ms → 5 s).
    pub async fn run(self) {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut want_full = false;
        let mut shutdown = self.shutdown.clone();
        loop {
            let end = tokio::select! {
                end = self.session(want_full, &mut backoff) => end,
                _ = shutdown.changed() => return,
            };
            want_full = false;
            // Another replica is tried at once; the same one after a backoff.
            if end.replica_gone() && self.control.fail_over().await {
                backoff.reset();
            }
            match end {
                SessionEnd::Closed => tracing::info!("control plane closed the watch stream"),
                SessionEnd::Resync { base, held } => {
                    tracing::warn!(base, held, "delta does not apply to the revision held; asking for a full snapshot");
                    want_full = true;
                }
                SessionEnd::Failed(status) => {
                    tracing::warn!(code = ?status.code(), message = status.message(), "watch stream failed");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    async fn session(&self, want_full: bool, backoff: &mut Backoff) -> SessionEnd {
        let held = self.snapshot.load();
        let revision = if held.held { held.revision } else { 0 };
        let store_id = held.store_id.clone();
        drop(held);
        let (tx, rx) = mpsc::channel(16);
        let hello = pb::Hello {
            node_id: self.node_id.clone(),
            revision,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            address: self.address.clone(),
            store_id,
            want_full,
        };
        // The receiver is alive right here, so this cannot fail.
        let _ = tx.send(pb::WatchRequest { kind: Some(watch_request::Kind::Hello(hello)) }).await;
        let mut client = PolicyServiceClient::new(self.control.channel()).max_decoding_message_size(MAX_MESSAGE);
        let mut stream = match client.watch(self.control.request(ReceiverStream::new(rx))).await {
            Ok(response) => response.into_inner(),
            Err(status) => return SessionEnd::Failed(status),
        };
        tracing::debug!(revision, "watching the control plane");
        let mut synced = false;
        let mut assembly: Option<Assembler> = None;
        let mut beat = tokio::time::interval(HEARTBEAT);
        let mut counted = (tokio::time::Instant::now(), self.vitals.requests());
        loop {
            let message = tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(message)) => message,
                    Ok(None) => return SessionEnd::Closed,
                    Err(status) => return SessionEnd::Failed(status),
                },
                _ = beat.tick() => {
                    let heartbeat = self.heartbeat(&mut counted);
                    if tx.send(pb::WatchRequest { kind: Some(watch_request::Kind::Heartbeat(heartbeat)) }).await.is_err() {
                        return SessionEnd::Closed;
                    }
                    continue;
                }
            };
            let full = message.full;
            let current = self.snapshot.load_full();
            if !message.full && message.base != current.revision {
                return SessionEnd::Resync { base: message.base, held: current.revision };
            }
            if let Err(why) = fits(&current, &message) {
                return SessionEnd::Failed(tonic::Status::failed_precondition(why));
            }
            let (applied, delta) = if full {
                let part = assembly.take().unwrap_or_else(|| Assembler::start(&message));
                if part.revision != message.revision {
                    let why =
                        format!("a chunk of revision {} within the snapshot of {}", message.revision, part.revision);
                    return SessionEnd::Failed(tonic::Status::failed_precondition(why));
                }
                let more = message.more;
                if let Err(status) = part.add(message).await {
                    return SessionEnd::Failed(status);
                }
                if more {
                    assembly = Some(part);
                    continue;
                }
                match part.finish().await {
                    Ok(applied) => (applied, None),
                    Err(status) => return SessionEnd::Failed(status),
                }
            } else {
                if assembly.is_some() {
                    let why = "a delta within a chunked snapshot";
                    return SessionEnd::Failed(tonic::Status::failed_precondition(why));
                }
                let encoded = prost::Message::encode_to_vec(&message);
                match off_workers(message.upserts.len(), move || apply(&current, message)).await {
                    Ok(applied) => (applied, Some(encoded)),
                    Err(status) => return SessionEnd::Failed(status),
                }
            };
            if !synced {
                synced = true;
                tracing::info!(revision = applied.snapshot.revision, full, "connected to the control plane");
            }
            let ack = self.publish(applied, delta);
            backoff.reset();
            if tx.send(pb::WatchRequest { kind: Some(watch_request::Kind::Ack(ack)) }).await.is_err() {
                return SessionEnd::Closed;
            }
        }
    }

    /// The heartbeat to send now; `counted` is when requests were last
    /// counted and how many there were.
    fn heartbeat(&self, counted: &mut (tokio::time::Instant, u64)) -> pb::Heartbeat {
        let now = tokio::time::Instant::now();
        let requests = self.vitals.requests();
        let elapsed = now.duration_since(counted.0).as_secs_f64();
        #[allow(clippy::cast_precision_loss)] // a rate; exact to far beyond any real count
        let rate = if elapsed > 0.0 { requests.saturating_sub(counted.1) as f64 / elapsed } else { 0.0 };
        *counted = (now, requests);
        pb::Heartbeat {
            revision: self.snapshot.load().revision,
            spool_backlog: self.vitals.backlog(),
            requests_per_second: rate,
        }
    }

    /// Makes `applied` the snapshot in use, hands it to the file writer
    /// (with the encoded `delta` that made it, none for a full snapshot) and
    /// returns the Ack for it.
    fn publish(&self, applied: Applied, delta: Option<Vec<u8>>) -> pb::Ack {
        let Applied { snapshot, rejected, errors } = applied;
        let revision = snapshot.revision;
        if !rejected.is_empty() {
            tracing::warn!(revision, ?rejected, "resources rejected");
        }
        let snapshot = Arc::new(snapshot);
        self.snapshot.store(snapshot.clone());
        if delta.is_none() {
            let counts = snapshot.counts().map(|(kind, n)| format!("{kind}={n}")).join(" ");
            tracing::info!(revision, %counts, "full policy snapshot applied");
        } else {
            tracing::debug!(revision, "policy updated");
        }
        // The writer outlives discovery; a closed channel is a shutdown.
        let _ = self.persist.send(persist::Update { snapshot, delta });
        pb::Ack { revision, rejected, error: errors.join("; ") }
    }
}

/// Whether `message` may replace `current`: never with the state of another
/// store unless an operator confirmed that store, never with an older
/// revision of the same one. The control plane refuses such a store itself;
/// this keeps the saved snapshot safe from one that does not.
fn fits(current: &Snapshot, message: &pb::WatchResponse) -> Result<(), String> {
    if !current.held || current.store_id.is_empty() {
        return Ok(());
    }
    if message.store_id != current.store_id && !message.store_confirmed {
        return Err(format!(
            "refused the state of store {:?} (unconfirmed) in place of store {:?}",
            message.store_id, current.store_id
        ));
    }
    if message.store_id == current.store_id && message.revision < current.revision {
        return Err(format!(
            "refused revision {} of store {:?}: revision {} is held",
            message.revision, message.store_id, current.revision
        ));
    }
    Ok(())
}

/// What a snapshot announced to hold, as room to make: capped, since a
/// wrong count must not take all memory.
pub fn expected(count: u64) -> usize {
    usize::try_from(count.min(1 << 26)).unwrap_or(0)
}

/// Runs `f` on the blocking pool when `size` items make it long, else here.
async fn off_workers<T: Send + 'static>(
    size: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tonic::Status> {
    if size > BLOCKING_THRESHOLD {
        tokio::task::spawn_blocking(f).await.map_err(|error| tonic::Status::internal(error.to_string()))
    } else {
        Ok(f())
    }
}

// === impl Assembly ===

impl Assembly {
    /// An empty assembly of the snapshot `first` starts.
    fn new(first: &pb::WatchResponse) -> Assembly {
        let mut snapshot = Snapshot::start(first.revision);
        snapshot.store_id = first.store_id.clone();
        snapshot.reserve(expected(first.expected));
        Assembly { snapshot, rejected: Vec::new(), errors: Vec::new() }
    }

    /// Converts the upserts of `chunk` into the snapshot being built; the
    /// protobuf message is dropped here.
    fn add(mut self, chunk: pb::WatchResponse) -> Assembly {
        let (rejected, errors) = (&mut self.rejected, &mut self.errors);
        let upserts = chunk.upserts.into_iter().filter_map(|resource| match convert::resource(resource) {
            Ok(resource) => Some(resource),
            Err(error) => {
                errors.push(error.to_string());
                rejected.push(error.name);
                None
            }
        });
        self.snapshot.add(upserts);
        self
    }

    /// The snapshot of every chunk.
    fn finish(self) -> Applied {
        Applied { snapshot: self.snapshot.finish(), rejected: self.rejected, errors: self.errors }
    }
}

// === impl Assembler ===

impl Assembler {
    /// Starts assembling the snapshot `first` begins (and does not add it).
    fn start(first: &pb::WatchResponse) -> Assembler {
        let (chunks, mut incoming) = mpsc::channel::<pb::WatchResponse>(CHUNKS_AHEAD);
        let mut part = Assembly::new(first);
        let built = tokio::task::spawn_blocking(move || {
            while let Some(chunk) = incoming.blocking_recv() {
                part = part.add(chunk);
            }
            part.finish()
        });
        Assembler { revision: first.revision, chunks, built }
    }

    /// Hands `chunk` over, waiting while `CHUNKS_AHEAD` are queued.
    async fn add(&self, chunk: pb::WatchResponse) -> Result<(), tonic::Status> {
        self.chunks.send(chunk).await.map_err(|_| tonic::Status::internal("the snapshot assembly stopped"))
    }

    /// The snapshot of every chunk added.
    async fn finish(self) -> Result<Applied, tonic::Status> {
        drop(self.chunks);
        self.built.await.map_err(|error| tonic::Status::internal(error.to_string()))
    }
}

/// Builds the snapshot `message` leads to from `current`, skipping (and
/// naming) resources that do not convert. A full `message` is a snapshot
/// of one chunk.
fn apply(current: &Snapshot, message: pb::WatchResponse) -> Applied {
    if message.full {
        return Assembly::new(&message).add(message).finish();
    }
    let pb::WatchResponse { revision, upserts, deletes: refs, store_id, .. } = message;
    let (mut rejected, mut errors) = (Vec::new(), Vec::new());
    let mut upserts_out: Vec<Resource> = Vec::with_capacity(upserts.len());
    for resource in upserts {
        match convert::resource(resource) {
            Ok(resource) => upserts_out.push(resource),
            Err(error) => {
                errors.push(error.to_string());
                rejected.push(error.name);
            }
        }
    }
    let mut deletes: Vec<(Kind, String)> = Vec::with_capacity(refs.len());
    for reference in &refs {
        match convert::resource_ref(reference) {
            Some((kind, id)) => deletes.push((kind, id.to_owned())),
            None => {
                rejected.push(format!("{}/{}", reference.kind, reference.id));
                errors.push(format!("unknown kind {:?}", reference.kind));
            }
        }
    }
    let mut snapshot = current.apply(revision, upserts_out, deletes);
    if !store_id.is_empty() {
        snapshot.store_id = store_id;
    }
    Applied { snapshot, rejected, errors }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn upsert_model(id: &str) -> pb::Resource {
        pb::Resource { kind: Some(pb::resource::Kind::Model(pb::Model { id: id.into(), ..Default::default() })) }
    }

    #[test]
    fn another_stores_state_is_refused_unless_confirmed_and_an_older_revision_always() {
        let mut held = Snapshot::build(7, Vec::new());
        held.store_id = "s1".into();
        let message = |store_id: &str, revision, confirmed| pb::WatchResponse {
            revision,
            full: true,
            store_id: store_id.into(),
            store_confirmed: confirmed,
            ..Default::default()
        };
        assert!(fits(&held, &message("s1", 8, false)).is_ok());
        assert!(fits(&held, &message("s1", 7, false)).is_ok());
        assert!(fits(&held, &message("s1", 6, true)).is_err(), "older revision of the same store");
        assert!(fits(&held, &message("s2", 1, false)).is_err(), "an unconfirmed other store");
        assert!(fits(&held, &message("s2", 1, true)).is_ok(), "a confirmed other store");
        assert!(fits(&Snapshot::default(), &message("s2", 1, false)).is_ok(), "nothing held");

        let applied = apply(&held, message("s2", 1, true));
        assert_eq!(applied.snapshot.store_id, "s2");
    }

    #[test]
    fn bad_resources_are_named_and_the_rest_applies() {
        let full = pb::WatchResponse {
            revision: 5,
            full: true,
            base: 0,
            upserts: vec![
                upsert_model("m1"),
                pb::Resource {
                    kind: Some(pb::resource::Kind::Token(pb::Token { id: "bad".into(), ..Default::default() })),
                },
            ],
            deletes: vec![],
            ..Default::default()
        };
        let applied = apply(&Snapshot::default(), full);
        assert_eq!(applied.rejected, ["token/bad"]);
        assert_eq!(applied.snapshot.revision, 5);
        assert!(applied.snapshot.model("m1").is_some());

        let delta = pb::WatchResponse {
            revision: 6,
            full: false,
            base: 5,
            upserts: vec![upsert_model("m2")],
            deletes: vec![
                pb::ResourceRef { kind: "model".into(), id: "m1".into() },
                pb::ResourceRef { kind: "gizmo".into(), id: "x".into() },
            ],
            ..Default::default()
        };
        let next = apply(&applied.snapshot, delta);
        assert_eq!(next.rejected, ["gizmo/x"]);
        assert!(next.snapshot.model("m1").is_none());
        assert!(next.snapshot.model("m2").is_some());
        assert_eq!(next.snapshot.revision, 6);
    }
}
