//! The usage spool: the durable half of metering, an append-only log of
//! segment files in a private directory (0700, files 0600). Every request
//! that reaches an upstream gets an `Open` entry (its prompt part, priced)
//! before it is sent, and a `Final` entry (its usage record) or a `Void`
//! entry (the attempt failed before any answer) when it ends.
//!
//! One writer task appends whatever entries are waiting in one write(2)
//! (group commit) and then wakes all their waiters, so a caller that awaits
//! `Written` knows its entry survives a `kill -9`. With `SyncPolicy::Batch`
//! the group is also fsynced before the wake-up (it survives a power loss
//! too). Every report interval the writer seals the current segment and
//! hands its entries to the reporter, which deletes the file only once the
//! control plane acknowledged its records and none of its requests is
//! still open (see `reporter`). A restart folds what is left into records
//! (`log::replay`): a request opened and never closed is billed its prompt
//! part, under its own request id, so the control plane applies it once.

pub mod log;
mod writer;

use std::{path::PathBuf, str::FromStr, time::Duration};

use tokio::sync::{mpsc, oneshot};

pub use self::log::Replay;
use crate::meter::UsageRecord;

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

/// A segment the writer sealed: its file and every entry in it, in order.
#[derive(Debug)]
pub struct Sealed {
    pub seq: u64,
    pub path: PathBuf,
    pub entries: Vec<(Kind, UsageRecord)>,
}

/// The spool as the rest of the data plane uses it: appending goes through
/// the writer task. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
    entries: mpsc::UnboundedSender<Entry>,
    flush: mpsc::UnboundedSender<oneshot::Sender<()>>,
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
        let (entries, entries_rx) = mpsc::unbounded_channel();
        let (flush, flush_rx) = mpsc::unbounded_channel();
        let (sealed_tx, sealed) = mpsc::unbounded_channel();
        let writer = writer::Writer::new(dir.clone(), replay.next_seq, sync, entries_rx, flush_rx, sealed_tx);
        tokio::spawn(writer.run(interval));
        Ok((Spool { dir, entries, flush }, replay, sealed))
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

    /// Writes every entry appended so far and seals the segment; resolves
    /// once it is sealed (or at once if the writer is gone).
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.flush.send(done).is_ok() {
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

/// Sends one entry to the writer; `Written` resolves once it is on disk.
/// If the writer is gone the entry is lost, and logged as such.
pub fn append(entries: &mpsc::UnboundedSender<Entry>, kind: Kind, record: UsageRecord) -> Written {
    let (done, wait) = oneshot::channel();
    if let Err(mpsc::error::SendError(entry)) = entries.send(Entry { kind, record, done: Some(done) }) {
        tracing::error!(request_id = %entry.record.request_id, kind = ?entry.kind, "usage spool is gone; entry lost");
        return Written::ready();
    }
    Written(Some(wait))
}
