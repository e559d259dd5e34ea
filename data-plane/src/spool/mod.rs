//! The usage spool: the durable half of metering, an append-only log of
//! segment files in a private directory (0700, files 0600). Every request
//! that reaches an upstream gets an `Open` entry (its prompt part, priced)
//! before it is sent, and a `Final` entry (its usage record) or a `Void`
//! entry (the attempt failed before any answer) when it ends.
//!
//! A writer task appends whatever entries are waiting in one write(2)
//! (group commit) and then wakes all their waiters, so a caller that awaits
//! `Written` knows its entry survives a `kill -9`. With `SyncPolicy::Batch`
//! the group is also fsynced before the wake-up (it survives a power loss
//! too). Each thread serving requests (`workers`) has a writer of its own
//! on its own runtime, so a request's entries never wait for another
//! thread to wake (`local_writer`); all of one request's entries go to its
//! thread's writer, in order. The writers number their segments from one
//! shared counter, and replay and the reporter take segments in any order:
//! a request's close is never in an older segment than its open, since both
//! come from the same writer. Every report interval a writer seals its
//! current segment and hands its entries to the reporter, which deletes the
//! file only once the control plane acknowledged its records and none of
//! its requests is still open (see `reporter`). A restart folds what is
//! left into records (`log::replay`): a request opened and never closed is
//! billed its prompt part, or what its last `Progress` entry says the
//! client had received, under its own request id, so the control plane
//! applies it once.

pub mod log;
mod writer;

use std::{
    cell::RefCell,
    path::PathBuf,
    str::FromStr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::{mpsc, oneshot};

pub use self::log::Replay;
use crate::usage::UsageRecord;

/// When the writer calls fsync. Either way an entry is written (write(2))
/// before its waiters are woken, so a process crash loses nothing; they
/// differ only in what a power loss or kernel crash can lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// fsync each group commit before waking its waiters: nothing a client
    /// received is lost even on power loss. Costs one fsync per group.
    Batch,
    /// fsync each segment as it is sealed (every report interval): a power
    /// loss can lose up to one interval of records. The default: a process
    /// crash loses nothing, and no request waits for the disk.
    #[default]
    Interval,
}

/// What one spool entry says about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request is about to reach an upstream; the record is its prompt
    /// part, what it is billed if it never ends (status 0, estimated).
    Open = 1,
    /// The request ended; the record is what it used.
    Final = 2,
    /// The attempt ended without an answer to bill; closes its `Open`.
    Void = 3,
    /// An `Open` entry copied forward so its old segment can be deleted.
    Carried = 4,
    /// A stream's progress: its open record with what the client received
    /// so far (status 0, estimated), what it is billed if the node dies
    /// before it ends. Written at most once a second per stream.
    Progress = 5,
}

/// One entry on its way to the writer; `done` is told once it is written.
#[derive(Debug)]
pub struct Entry {
    pub kind: Kind,
    pub record: UsageRecord,
    pub done: Option<oneshot::Sender<()>>,
}

/// Resolves once an entry is on the spool (per the `SyncPolicy`), or at
/// once if the spool is gone (the error was logged where it happened).
#[derive(Debug)]
#[must_use = "an entry is only known to be on the spool once `Written` resolves"]
pub struct Written(Option<oneshot::Receiver<()>>);

/// A part of a segment file the writer sealed (one each report interval):
/// the file it is in, which may hold parts sealed before and after it, and
/// every entry of the part, in order.
#[derive(Debug)]
pub struct Sealed {
    /// The part's number: parts of one spool never share one.
    pub seq: u64,
    pub file: Arc<SegmentFile>,
    pub entries: Vec<(Kind, Encoded)>,
}

/// A segment file on disk, shared by the writer while it appends to it and
/// by each of its parts until the reporter is done with it: whoever lets go
/// of the last share deletes the file (`release`). Dropping a share deletes
/// nothing, so what a stopped data plane held stays for the next start.
#[derive(Debug)]
pub struct SegmentFile {
    pub path: PathBuf,
}

// === impl SegmentFile ===

impl SegmentFile {
    /// Lets go of one share of `file`, deleting the file when it was the last.
    pub fn release(file: Arc<SegmentFile>) {
        if let Some(file) = Arc::into_inner(file)
            && let Err(error) = std::fs::remove_file(&file.path)
        {
            tracing::warn!(%error, file = %file.path.display(), "cannot delete a reported usage segment");
        }
    }
}

/// A usage record and its protocol encoding: what a segment holds of it,
/// which the reporter sends as it is instead of encoding it again.
#[derive(Debug)]
pub struct Encoded {
    pub record: UsageRecord,
    /// The record as a `gateway.v1.UsageRecord` message.
    pub bytes: bytes::Bytes,
}

/// The spool as the rest of the data plane uses it: appending goes through
/// the writer task. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
    entries: mpsc::UnboundedSender<Entry>,
    writers: Arc<Writers>,
}

/// Whether every writer of the spool can write: a writer whose append
/// failed holds its records (and their answers) and tries again each
/// interval; meanwhile spending requests are refused and the data plane
/// reports not ready. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Health {
    stalled: Arc<AtomicUsize>,
}

/// What starting another writer takes, and every writer's flush sender.
#[derive(Debug)]
struct Writers {
    sync: SyncPolicy,
    interval: Duration,
    next_seq: Arc<AtomicU64>,
    sealed: mpsc::UnboundedSender<Sealed>,
    flushes: Mutex<Vec<mpsc::UnboundedSender<oneshot::Sender<()>>>>,
    health: Health,
}

/// A thread's own writer (`Spool::local_writer`).
#[must_use = "close it to hand its last segment to the reporter"]
pub struct LocalWriter {
    task: tokio::task::JoinHandle<()>,
}

thread_local! {
    /// Where entries appended on this thread go, when it has a writer of its own.
    static LOCAL: RefCell<Option<mpsc::UnboundedSender<Entry>>> = const { RefCell::new(None) };
}

/// Why the spool cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare the spool directory")]
    Dir(#[source] anyhow::Error),
}

// === impl SpoolError ===

impl SpoolError {
    fn io(action: &'static str, path: &std::path::Path, source: std::io::Error) -> SpoolError {
        SpoolError::Io { action, path: path.to_owned(), source }
    }
}

// === impl SyncPolicy ===

impl FromStr for SyncPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<SyncPolicy, String> {
        match s {
            "batch" => Ok(SyncPolicy::Batch),
            "interval" => Ok(SyncPolicy::Interval),
            other => Err(format!("spool sync policy {other:?} is neither \"batch\" nor \"interval\"")),
        }
    }
}

impl std::fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SyncPolicy::Batch => "batch",
            SyncPolicy::Interval => "interval",
        })
    }
}

// === impl Health ===

impl Health {
    /// True while no writer holds records it could not write.
    pub fn writable(&self) -> bool {
        self.stalled.load(Ordering::Relaxed) == 0
    }

    /// A writer could not write; it holds its records until it can.
    fn stalled(&self) {
        if self.stalled.fetch_add(1, Ordering::Relaxed) == 0 {
            crate::telemetry::metrics::spool_writable(false);
        }
    }

    /// A stalled writer wrote what it held.
    fn recovered(&self) {
        if self.stalled.fetch_sub(1, Ordering::Relaxed) == 1 {
            crate::telemetry::metrics::spool_writable(true);
        }
    }
}

// === impl Written ===

impl Written {
    /// Already on the spool (or nowhere to wait for).
    pub fn ready() -> Written {
        Written(None)
    }

    /// Waits until the entry is written.
    pub async fn wait(self) {
        if let Some(done) = self.0 {
            let _ = done.await;
        }
    }
}

// === impl Encoded ===

impl Encoded {
    /// `record` with an encoding of its own (for records no segment holds).
    pub fn new(record: UsageRecord) -> Encoded {
        let bytes = prost::Message::encode_to_vec(&gw_proto::pb::UsageRecord::from(&record)).into();
        Encoded { record, bytes }
    }
}

// === impl Spool ===

impl Spool {
    /// Opens the spool in `dir` (created private if missing), reads what a
    /// previous run left, and spawns the writer, which seals a segment every
    /// `interval`. Returns the spool, the previous run's records and the
    /// stream of sealed segments. Fails if the directory cannot be made or
    /// read.
    pub fn start(
        dir: impl Into<PathBuf>,
        sync: SyncPolicy,
        interval: Duration,
    ) -> Result<(Spool, Replay, mpsc::UnboundedReceiver<Sealed>), SpoolError> {
        let dir = dir.into();
        crate::durable::private_dir(&dir).map_err(SpoolError::Dir)?;
        let replay = log::replay(&dir)?;
        let (sealed_tx, sealed) = mpsc::unbounded_channel();
        let writers = Arc::new(Writers {
            sync,
            interval,
            next_seq: Arc::new(AtomicU64::new(replay.next_seq)),
            sealed: sealed_tx,
            flushes: Mutex::new(Vec::new()),
            health: Health::default(),
        });
        let (entries, task) = writers.spawn(&dir);
        drop(task);
        crate::telemetry::metrics::spool_writable(true);
        Ok((Spool { dir, entries, writers }, replay, sealed))
    }

    /// Starts a writer on the current runtime for the entries appended on
    /// this thread from now on, until it is closed.
    pub fn local_writer(&self) -> LocalWriter {
        let (entries, task) = self.writers.spawn(&self.dir);
        LOCAL.with(|local| *local.borrow_mut() = Some(entries));
        LocalWriter { task }
    }

    /// Whether the spool's writers can write (shared, live).
    pub fn health(&self) -> Health {
        self.writers.health.clone()
    }

    /// The sender a `UsageSink` appends through.
    pub fn sender(&self) -> mpsc::UnboundedSender<Entry> {
        self.entries.clone()
    }

    /// Appends `records` as `Carried` copies of their open entries.
    pub fn carry(&self, records: Vec<UsageRecord>) -> Written {
        let mut last = Written::ready();
        for record in records {
            last = append(&self.entries, Kind::Carried, record);
        }
        // One group or several in order: the last written means all are.
        last
    }

    /// Writes every entry appended so far and seals the segments, in every
    /// writer; resolves once they are sealed (at once for a writer gone).
    pub async fn flush(&self) {
        let mut waits = Vec::new();
        self.writers.flushes.lock().unwrap_or_else(PoisonError::into_inner).retain(|flush| {
            let (done, wait) = oneshot::channel();
            waits.push(wait);
            flush.send(done).is_ok()
        });
        for wait in waits {
            let _ = wait.await;
        }
    }

    /// Sets aside records the control plane refused for good, in a private
    /// `rejected` directory, so an operator can look at them.
    pub fn reject(&self, name: &str, records: Vec<UsageRecord>) {
        let dir = self.dir.join("rejected");
        let request = gw_proto::pb::ReportUsageRequest {
            node_id: String::new(),
            records: records.iter().map(Into::into).collect(),
        };
        let written = crate::durable::private_dir(&dir).and_then(|()| {
            let bytes = prost::Message::encode_to_vec(&request);
            crate::durable::write_durably(&dir.join(format!("{name}.tmp")), &dir.join(format!("{name}.batch")), &bytes)
        });
        if let Err(error) = written {
            tracing::error!(error = %format!("{error:#}"), "cannot set aside refused usage records");
        }
    }
}

// === impl Writers ===

impl Writers {
    /// Spawns a writer of segments in `dir` on the current runtime: its entry
    /// sender and its task.
    fn spawn(&self, dir: &std::path::Path) -> (mpsc::UnboundedSender<Entry>, tokio::task::JoinHandle<()>) {
        let (entries, entries_rx) = mpsc::unbounded_channel();
        let (flush, flush_rx) = mpsc::unbounded_channel();
        let writer = writer::Writer::new(
            dir.to_owned(),
            self.next_seq.clone(),
            self.sync,
            entries_rx,
            flush_rx,
            self.sealed.clone(),
            self.health.clone(),
        );
        self.flushes.lock().unwrap_or_else(PoisonError::into_inner).push(flush);
        (entries, tokio::spawn(writer.run(self.interval)))
    }
}

// === impl LocalWriter ===

impl LocalWriter {
    /// Sends this thread's entries to the spool's first writer again, and
    /// waits until this writer has sealed its last segment and handed it
    /// to the reporter. Left unclosed, it goes on until its runtime ends;
    /// what it had not sealed by then is replayed at the next start.
    pub async fn close(self) {
        LOCAL.with(|local| local.borrow_mut().take());
        let _ = self.task.await;
    }
}

/// Sends one entry to this thread's writer, or else to `entries`; `Written`
/// resolves once it is on disk. If the writer is gone the entry is lost,
/// and logged as such.
pub fn append(entries: &mpsc::UnboundedSender<Entry>, kind: Kind, record: UsageRecord) -> Written {
    let (done, wait) = oneshot::channel();
    let entry = Entry { kind, record, done: Some(done) };
    let unsent = LOCAL.with(|local| local.borrow().as_ref().unwrap_or(entries).send(entry).err());
    if let Some(mpsc::error::SendError(entry)) = unsent {
        tracing::error!(request_id = %entry.record.request_id, kind = ?entry.kind, "usage spool is gone; entry lost");
        return Written::ready();
    }
    Written(Some(wait))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::future::Future;

    use super::*;

    fn record(id: &str) -> UsageRecord {
        UsageRecord { request_id: id.into(), cost_micros: 5, ..UsageRecord::default() }
    }

    /// Runs `work` on a thread of its own with a single-threaded runtime, as
    /// a worker does; resolves when it is done.
    async fn on_a_thread(work: impl Future<Output = ()> + Send + 'static) {
        let thread = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(work);
        });
        tokio::task::spawn_blocking(move || thread.join().unwrap()).await.unwrap();
    }

    fn ids(sealed: &Sealed) -> Vec<(Kind, String)> {
        sealed.entries.iter().map(|(kind, entry)| (*kind, entry.record.request_id.to_string())).collect()
    }

    #[tokio::test]
    async fn a_threads_own_writer_takes_its_entries_in_order_and_hands_its_segment_over_when_closed() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _, mut sealed) = Spool::start(dir.path(), SyncPolicy::Interval, Duration::from_secs(3600)).unwrap();
        append(&spool.sender(), Kind::Open, record("main")).wait().await;
        let worker = spool.clone();
        on_a_thread(async move {
            let local = worker.local_writer();
            append(&worker.sender(), Kind::Open, record("local")).wait().await;
            append(&worker.sender(), Kind::Final, record("local")).wait().await;
            local.close().await;
            // Closed: this thread's entries go to the first writer again.
            append(&worker.sender(), Kind::Final, record("main")).wait().await;
        })
        .await;
        let local = sealed.recv().await.unwrap();
        assert_eq!(ids(&local), [(Kind::Open, "local".to_owned()), (Kind::Final, "local".to_owned())]);
        spool.flush().await;
        let main = sealed.recv().await.unwrap();
        assert_eq!(ids(&main), [(Kind::Open, "main".to_owned()), (Kind::Final, "main".to_owned())]);
        assert_ne!(local.seq, main.seq);
        assert!(local.file.path.exists() && main.file.path.exists());
        // A restart folds the two writers' segments into both requests' records.
        let replay = log::replay(dir.path()).unwrap();
        let mut replayed: Vec<_> = replay.records.iter().map(|r| r.request_id.to_string()).collect();
        replayed.sort();
        assert_eq!(replayed, ["local", "main"]);
        assert_eq!(replay.unfinished, 0);
        assert_eq!(replay.next_seq, local.seq.max(main.seq) + 1);
    }

    #[tokio::test]
    async fn flush_seals_what_every_open_writer_holds() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _, mut sealed) = Spool::start(dir.path(), SyncPolicy::Interval, Duration::from_secs(3600)).unwrap();
        let (written, wait) = oneshot::channel();
        let (release, released) = oneshot::channel::<()>();
        let worker = spool.clone();
        let worker = tokio::spawn(on_a_thread(async move {
            let local = worker.local_writer();
            append(&worker.sender(), Kind::Open, record("streaming")).wait().await;
            let _ = written.send(());
            let _ = released.await;
            local.close().await;
        }));
        wait.await.unwrap();
        spool.flush().await;
        let segment = sealed.recv().await.unwrap();
        assert_eq!(ids(&segment), [(Kind::Open, "streaming".to_owned())]);
        release.send(()).unwrap();
        worker.await.unwrap();
    }
}
