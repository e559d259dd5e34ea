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
//! Each report interval the writer seals what it appended since the last
//! seal as one part and hands it to the reporter. A segment file takes the
//! parts of up to `SEGMENT_LIFETIME` (or `SEGMENT_BYTES`) before the next
//! part starts a new file: a file created, fsynced and deleted every
//! interval cost the kernel about 3 % of the data plane's CPU under load.
//! Under `SyncPolicy::Interval` each part's file is fsynced by a task of
//! its own, in order, before the reporter gets the part: the writer goes on
//! meanwhile, so no request waits on that fsync.

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
    time::{Instant, MissedTickBehavior},
};

use super::{Encoded, Entry, Health, Kind, Sealed, SegmentFile, SyncPolicy, log};

/// Most entries in one group commit.
const MAX_GROUP: usize = 4096;
/// How long a segment file takes new parts. A file is deleted once all its
/// parts are reported and closed, so a restart may send again up to this
/// much of what was reported (the control plane applies each record once).
const SEGMENT_LIFETIME: Duration = Duration::from_secs(1);
/// How large a segment file grows before the next part starts a new one.
const SEGMENT_BYTES: u64 = 8 << 20;

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

/// A sealed part on its way to the reporter: its file to fsync first, and
/// who waits for it to arrive (a flush).
struct Handoff {
    /// `None` when a flush found nothing to seal.
    sealed: Option<Sealed>,
    file: Option<Arc<File>>,
    done: Option<oneshot::Sender<()>>,
}

/// The segment file being appended to, and its part being written.
struct Segment {
    /// The part's number.
    seq: u64,
    shared: Arc<SegmentFile>,
    /// `None` until its first write succeeds.
    file: Option<Arc<File>>,
    /// The part's entries.
    entries: Vec<(Kind, Encoded)>,
    failed: bool,
    opened: Instant,
    bytes: u64,
}

/// Whether a seal also closes the segment file: only when it is due
/// (`Due`), or always (`Close`: a flush or the writer's end, after which
/// the reporter must be able to delete every file it was handed).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rotate {
    Due,
    Close,
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
                    self.seal(Some(done), Rotate::Close);
                }
                _ = tick.tick() => {
                    self.seal(None, Rotate::Due);
                    self.retry().await;
                }
            }
        }
        self.retry().await;
        self.give_up();
        self.seal(None, Rotate::Close);
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
        let mut entries = Vec::new();
        for entry in std::mem::take(&mut self.stalled) {
            if let Some(done) = entry.done {
                let _ = done.send(());
            }
            entries.push((entry.kind, Encoded::new(entry.record)));
        }
        self.seal(None, Rotate::Close);
        let mut segment = self.new_segment();
        (segment.entries, segment.failed) = (entries, true);
        self.current = Some(segment);
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
        // An entry is a few hundred bytes (a record's strings and counts):
        // sized once for the group, rarely grown.
        let mut bytes = Vec::with_capacity(group.len() * 512);
        let ranges: Vec<_> =
            group.iter().map(|entry| self.encoder.encode(entry.kind, &entry.record, &mut bytes)).collect();
        let bytes = bytes::Bytes::from(bytes);
        if self.current.is_none() {
            self.current = Some(self.new_segment());
        }
        let Some(segment) = self.current.as_mut() else { return };
        let (file, sync) = (segment.file.take(), self.sync);
        let written = match sync {
            // A write(2) into the page cache takes microseconds: done here,
            // without a hop to the blocking pool and back per group.
            SyncPolicy::Interval => Ok(append(file, &segment.shared.path, &bytes, sync)),
            SyncPolicy::Batch => {
                let (path, bytes) = (segment.shared.path.clone(), bytes.clone());
                tokio::task::spawn_blocking(move || append(file, &path, &bytes, sync)).await
            }
        };
        match written {
            Ok(Ok(file)) => {
                segment.file = Some(file);
                segment.bytes += bytes.len() as u64;
            }
            Ok(Err(error)) if retry => {
                tracing::debug!(%error, file = %segment.shared.path.display(), "usage spool still cannot be written");
                segment.failed = true;
            }
            Ok(Err(error)) => {
                tracing::error!(
                    %error,
                    file = %segment.shared.path.display(),
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
            self.seal(None, Rotate::Close);
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

    /// A segment file not yet created, numbered from the shared counter
    /// (which also numbers its first part).
    fn new_segment(&self) -> Segment {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(SegmentFile { path: log::segment_path(&self.dir, seq) });
        Segment { seq, shared, file: None, entries: Vec::new(), failed: false, opened: Instant::now(), bytes: 0 }
    }

    /// Seals the current part and queues it for the reporter (fsynced first
    /// under `Interval`); the file takes the next part unless `rotate` says
    /// it closes. `done` hears when the part got there, also when there was
    /// nothing to seal.
    fn seal(&mut self, done: Option<oneshot::Sender<()>>, rotate: Rotate) {
        let handoff = match self.current.take() {
            Some(mut segment) => {
                let closes = rotate == Rotate::Close
                    || segment.failed
                    || segment.file.is_none()
                    || segment.bytes >= SEGMENT_BYTES
                    || segment.opened.elapsed() >= SEGMENT_LIFETIME;
                if !closes && segment.entries.is_empty() && done.is_none() {
                    self.current = Some(segment);
                    return;
                }
                let file = segment.file.clone().filter(|_| self.sync == SyncPolicy::Interval);
                let entries = std::mem::take(&mut segment.entries);
                let sealed = if closes {
                    Sealed { seq: segment.seq, file: segment.shared, entries }
                } else {
                    let sealed = Sealed { seq: segment.seq, file: segment.shared.clone(), entries };
                    segment.seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
                    self.current = Some(segment);
                    sealed
                };
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
                tracing::error!(file = %sealed.file.path.display(), "cannot fsync a usage spool segment");
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
fn append(
    file: Option<Arc<File>>,
    path: &std::path::Path,
    bytes: &[u8],
    sync: SyncPolicy,
) -> std::io::Result<Arc<File>> {
    let file = match file {
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
            Arc::new(file)
        }
    };
    (&*file).write_all(bytes)?;
    if sync == SyncPolicy::Batch {
        file.sync_data()?;
    }
    Ok(file)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::usage::UsageRecord;

    fn entry(kind: Kind, id: &str) -> Entry {
        Entry { kind, record: UsageRecord { request_id: id.into(), ..UsageRecord::default() }, done: None }
    }

    fn ids(sealed: &Sealed) -> Vec<String> {
        sealed.entries.iter().map(|(_, entry)| entry.record.request_id.to_string()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn parts_share_a_file_until_it_is_due_and_the_last_share_deletes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (_entries, entries_rx) = mpsc::unbounded_channel();
        let (_flush, flush_rx) = mpsc::unbounded_channel();
        let (sealed_tx, mut sealed) = mpsc::unbounded_channel();
        let next_seq = Arc::new(AtomicU64::new(1));
        let health = Health::default();
        let mut writer =
            Writer::new(dir.path().into(), next_seq, SyncPolicy::Interval, entries_rx, flush_rx, sealed_tx, health);

        writer.commit(vec![entry(Kind::Open, "a")]).await;
        writer.seal(None, Rotate::Due);
        writer.commit(vec![entry(Kind::Final, "a")]).await;
        writer.seal(None, Rotate::Due);
        // An interval with nothing written seals nothing.
        writer.seal(None, Rotate::Due);
        writer.commit(vec![entry(Kind::Open, "b")]).await;
        tokio::time::advance(SEGMENT_LIFETIME).await;
        writer.seal(None, Rotate::Due);
        writer.commit(vec![entry(Kind::Final, "b")]).await;
        writer.seal(None, Rotate::Close);

        let parts: Vec<Sealed> = vec![
            sealed.recv().await.unwrap(),
            sealed.recv().await.unwrap(),
            sealed.recv().await.unwrap(),
            sealed.recv().await.unwrap(),
        ];
        assert_eq!(parts.iter().map(ids).collect::<Vec<_>>(), [["a"], ["a"], ["b"], ["b"]]);
        let seqs: std::collections::BTreeSet<u64> = parts.iter().map(|part| part.seq).collect();
        assert_eq!(seqs.len(), 4, "each part has a number of its own");
        assert!(Arc::ptr_eq(&parts[0].file, &parts[1].file) && Arc::ptr_eq(&parts[1].file, &parts[2].file));
        assert!(!Arc::ptr_eq(&parts[2].file, &parts[3].file), "the file was due after its lifetime");
        let (first, second) = (parts[0].file.path.clone(), parts[3].file.path.clone());
        // A restart reads every part of both files.
        let replay = log::replay(dir.path()).unwrap();
        assert_eq!(replay.records.len(), 2);
        assert_eq!(replay.unfinished, 0);

        let mut parts = parts.into_iter();
        for _ in 0..2 {
            SegmentFile::release(parts.next().unwrap().file);
            assert!(first.exists(), "another part still holds the file");
        }
        SegmentFile::release(parts.next().unwrap().file);
        assert!(!first.exists(), "the last part let go of a file the writer closed");
        assert!(second.exists());
        SegmentFile::release(parts.next().unwrap().file);
        assert!(!second.exists());
    }
}
