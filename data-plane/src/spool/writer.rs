//! The spool's one writer task. It takes every entry waiting on its channel,
//! encodes them into one buffer, appends it to the current segment with one
//! write(2) (fsyncing first under `SyncPolicy::Batch`), then wakes the
//! waiters of all of them. File work runs on the blocking pool. A failed
//! write is logged and the segment sealed; the group is held, its waiters
//! still waiting (so no answer goes out whose record is nowhere), and
//! written again into a clean file each interval until it fits, with every
//! entry that arrives meanwhile behind it. The spool's `Health` says so
//! while any writer holds such entries.
//!
//! Under `SyncPolicy::Interval` a sealed segment is fsynced by a task of its
//! own, in order, before the reporter gets it: the writer goes on with the
//! next segment meanwhile, so no request waits on that fsync.

use std::{
    fs::File,
    io::Write as _,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::MissedTickBehavior,
};

use super::{Encoded, Entry, Health, Kind, Sealed, SyncPolicy, log};

/// Most entries in one group commit.
const MAX_GROUP: usize = 4096;

/// The writer task's state.
pub struct Writer {
    dir: PathBuf,
    /// The next segment's number, shared by every writer of the spool.
    next_seq: Arc<AtomicU64>,
    sync: SyncPolicy,
    entries: mpsc::UnboundedReceiver<Entry>,
    flush: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    /// To the syncer, which hands segments on to the reporter.
    sealed: mpsc::UnboundedSender<Handoff>,
    syncer: JoinHandle<()>,
    current: Option<Segment>,
    encoder: log::Encoder,
    /// Entries a failed write left unwritten, oldest first; their waiters
    /// wait until they are written.
    stalled: Vec<Entry>,
    health: Health,
}

/// A sealed segment on its way to the reporter: its file to fsync first,
/// and who waits for it to arrive (a flush).
struct Handoff {
    /// `None` when a flush found no segment to seal.
    sealed: Option<Sealed>,
    file: Option<File>,
    done: Option<oneshot::Sender<()>>,
}

/// The segment being appended to.
struct Segment {
    seq: u64,
    path: PathBuf,
    file: Option<File>,
    entries: Vec<(Kind, Encoded)>,
    failed: bool,
}

// === impl Writer ===

impl Writer {
    /// A writer of segments in `dir`, numbered from `next_seq`.
    pub fn new(
        dir: PathBuf,
        next_seq: Arc<AtomicU64>,
        sync: SyncPolicy,
        entries: mpsc::UnboundedReceiver<Entry>,
        flush: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
        sealed: mpsc::UnboundedSender<Sealed>,
        health: Health,
    ) -> Writer {
        let (handoffs, queued) = mpsc::unbounded_channel();
        let syncer = tokio::spawn(sync_and_hand_over(queued, sealed));
        Writer {
            dir,
            next_seq,
            sync,
            entries,
            flush,
            sealed: handoffs,
            syncer,
            current: None,
            encoder: log::Encoder::default(),
            stalled: Vec::new(),
            health,
        }
    }

    /// Appends and seals until every entry sender is gone; seals what is
    /// left on the way out, and ends once the reporter has it.
    pub async fn run(mut self, interval: Duration) {
        let interval = interval.max(Duration::from_millis(1));
        // The first seal one interval from now, not at once.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                entry = self.entries.recv() => match entry {
                    Some(entry) => self.commit_waiting(entry).await,
                    None => break,
                },
                Some(done) = self.flush.recv() => {
                    while let Ok(entry) = self.entries.try_recv() {
                        self.commit_waiting(entry).await;
                    }
                    self.retry().await;
                    self.seal(Some(done));
                }
                _ = tick.tick() => {
                    self.seal(None);
                    self.retry().await;
                }
            }
        }
        self.retry().await;
        self.give_up();
        self.seal(None);
        let Writer { sealed, syncer, .. } = self;
        drop(sealed);
        let _ = syncer.await;
    }

    /// Commits `first` and whatever else is waiting, as one group. When
    /// `first` came alone, the writer first lets the runtime run the other
    /// tasks that are ready, so that the entries they are about to send
    /// join this group rather than each costing a write(2) of its own.
    async fn commit_waiting(&mut self, first: Entry) {
        let mut group = vec![first];
        self.take_waiting(&mut group);
        if group.len() == 1 {
            tokio::task::yield_now().await;
            self.take_waiting(&mut group);
        }
        self.commit(group).await;
    }

    fn take_waiting(&mut self, group: &mut Vec<Entry>) {
        while group.len() < MAX_GROUP {
            match self.entries.try_recv() {
                Ok(entry) => group.push(entry),
                Err(_) => break,
            }
        }
    }

    /// Writes the entries a failed write left, if any, into a new segment.
    async fn retry(&mut self) {
        if self.stalled.is_empty() {
            return;
        }
        let group = std::mem::take(&mut self.stalled);
        self.write(group, true).await;
        if self.stalled.is_empty() {
            tracing::info!("usage spool writable again; the records held meanwhile are written");
            self.health.recovered();
        }
    }

    /// On the way out with entries still unwritten: they go to the
    /// reporter from memory (a last try), and their waiters are let go.
    fn give_up(&mut self) {
        if self.stalled.is_empty() {
            return;
        }
        tracing::error!(records = self.stalled.len(), "usage spool still cannot be written; reporting from memory");
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let path = log::segment_path(&self.dir, seq);
        let mut entries = Vec::new();
        for entry in std::mem::take(&mut self.stalled) {
            if let Some(done) = entry.done {
                let _ = done.send(());
            }
            entries.push((entry.kind, Encoded::new(entry.record)));
        }
        self.seal(None);
        self.current = Some(Segment { seq, path, file: None, entries, failed: true });
        self.health.recovered();
    }

    async fn commit(&mut self, group: Vec<Entry>) {
        if !self.stalled.is_empty() {
            // Behind the held ones, in order; written with them.
            self.stalled.extend(group);
            return;
        }
        self.write(group, false).await;
        if !self.stalled.is_empty() {
            self.health.stalled();
        }
    }

    /// Appends `group` to the current segment; on failure seals the segment
    /// and holds the group in `stalled` (logged once, not on each `retry`).
    async fn write(&mut self, group: Vec<Entry>, retry: bool) {
        let mut bytes = Vec::with_capacity(group.len() * 256);
        let ranges: Vec<_> =
            group.iter().map(|entry| self.encoder.encode(entry.kind, &entry.record, &mut bytes)).collect();
        let bytes = bytes::Bytes::from(bytes);
        let segment = match &mut self.current {
            Some(segment) => segment,
            None => {
                let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
                let path = log::segment_path(&self.dir, seq);
                self.current.insert(Segment { seq, path, file: None, entries: Vec::new(), failed: false })
            }
        };
        let (file, sync) = (segment.file.take(), self.sync);
        let written = match sync {
            // A write(2) into the page cache takes microseconds: done here,
            // without a hop to the blocking pool and back per group.
            SyncPolicy::Interval => Ok(append(file, &segment.path, &bytes, sync)),
            SyncPolicy::Batch => {
                let (path, bytes) = (segment.path.clone(), bytes.clone());
                tokio::task::spawn_blocking(move || append(file, &path, &bytes, sync)).await
            }
        };
        match written {
            Ok(Ok(file)) => segment.file = Some(file),
            Ok(Err(error)) if retry => {
                tracing::debug!(%error, file = %segment.path.display(), "usage spool still cannot be written");
                segment.failed = true;
            }
            Ok(Err(error)) => {
                tracing::error!(
                    %error,
                    file = %segment.path.display(),
                    "cannot append to the usage spool; holding its records and refusing spending requests until it can"
                );
                segment.failed = true;
            }
            Err(error) => {
                tracing::error!(%error, "usage spool write did not finish");
                segment.failed = true;
            }
        }
        if segment.failed {
            // What the segment holds was written before; the group was not.
            self.seal(None);
            self.stalled = group;
            return;
        }
        for (entry, at) in group.into_iter().zip(ranges) {
            if let Some(done) = entry.done {
                let _ = done.send(());
            }
            segment.entries.push((entry.kind, Encoded { record: entry.record, bytes: bytes.slice(at) }));
        }
    }

    /// Closes the current segment and queues it for the reporter (fsynced
    /// first under `Interval`); `done` hears when it got there, also when
    /// there was no segment to seal.
    fn seal(&mut self, done: Option<oneshot::Sender<()>>) {
        let handoff = match self.current.take() {
            Some(mut segment) => {
                let file = segment.file.take().filter(|_| self.sync == SyncPolicy::Interval);
                let sealed = Sealed { seq: segment.seq, path: segment.path, entries: segment.entries };
                Handoff { sealed: Some(sealed), file, done }
            }
            None if done.is_some() => Handoff { sealed: None, file: None, done },
            None => return,
        };
        if self.sealed.send(handoff).is_err() {
            tracing::debug!("usage spool syncer is gone; segment left for the next start");
        }
    }
}

/// Fsyncs each queued segment's file, in order, then hands the segment to
/// the reporter and tells whoever waits for it.
async fn sync_and_hand_over(mut queued: mpsc::UnboundedReceiver<Handoff>, reporter: mpsc::UnboundedSender<Sealed>) {
    while let Some(Handoff { sealed, file, done }) = queued.recv().await {
        if let (Some(file), Some(sealed)) = (file, &sealed) {
            let synced = tokio::task::spawn_blocking(move || file.sync_data()).await;
            if !matches!(synced, Ok(Ok(()))) {
                tracing::error!(file = %sealed.path.display(), "cannot fsync a usage spool segment");
            }
        }
        if let Some(sealed) = sealed
            && reporter.send(sealed).is_err()
        {
            tracing::debug!("usage reporter is gone; segment left for the next start");
        }
        if let Some(done) = done {
            let _ = done.send(());
        }
    }
}

/// Appends `bytes` to `file` (creating `path`, 0600, when there is none)
/// and fsyncs under `Batch`; a new file's directory entry is fsynced too.
fn append(file: Option<File>, path: &std::path::Path, bytes: &[u8], sync: SyncPolicy) -> std::io::Result<File> {
    let mut file = match file {
        Some(file) => file,
        None => {
            let mut options = std::fs::OpenOptions::new();
            options.append(true).create(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt as _;
                options.mode(0o600);
            }
            let file = options.open(path)?;
            if sync == SyncPolicy::Batch
                && let Some(dir) = path.parent()
            {
                File::open(dir)?.sync_all()?;
            }
            file
        }
    };
    file.write_all(bytes)?;
    if sync == SyncPolicy::Batch {
        file.sync_data()?;
    }
    Ok(file)
}
