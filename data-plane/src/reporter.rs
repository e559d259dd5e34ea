//! Reports usage to the control plane from the spool (see `spool`). Records
//! are on disk before the reporter ever sees them: the spool's writer seals
//! a segment every report interval and hands its entries here, whatever the
//! control plane is doing, so a frozen or dead control plane never stops
//! spooling. The reporter sends the segments' final records oldest first,
//! those of every segment ready in one `ReportUsage` call (at most
//! `MAX_BATCH`, retried with backoff), each as the bytes the spool wrote
//! for it rather than encoded again (`EncodedUsageReport`), and deletes a
//! segment only once its records were acknowledged and every
//! request it opened was closed (a stream's progress entry moves its open
//! request to the progress entry's segment); an open entry that outlives
//! its segment by `CARRY_AFTER` is copied forward so the old file can go. What a
//! previous run left is replayed first. The control plane applies a record
//! once per request id, so sending one again after a crash is harmless.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use tokio::{
    sync::{mpsc, watch},
    time::{Instant, MissedTickBehavior},
};

use crate::{
    backoff::Backoff,
    control,
    spool::{Encoded, Kind, Replay, Sealed, SegmentFile, Spool},
    usage::UsageRecord,
};

/// Most records per `ReportUsage` call.
pub const MAX_BATCH: usize = 1000;
/// How long one `ReportUsage` call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the final report on shutdown may take.
const SHUTDOWN_REPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a reported segment may be kept only for requests still open.
const CARRY_AFTER: Duration = Duration::from_secs(30);
/// The segment key of what a previous run left (the writer counts from 1).
const REPLAYED: u64 = 0;
/// Where an open entry lives while its carried copy is not yet sealed.
const CARRYING: u64 = u64::MAX;

/// The usage reporter task; see the module docs.
pub struct Reporter {
    /// Segments as the spool's writer seals them.
    pub sealed: mpsc::UnboundedReceiver<Sealed>,
    /// What a previous run left.
    pub replay: Replay,
    pub spool: Spool,
    pub control: control::ControlPlane,
    pub node_id: String,
    pub interval: Duration,
    pub vitals: Arc<crate::vitals::Vitals>,
    pub shutdown: watch::Receiver<bool>,
}

/// Spooled segments not yet deleted, and the requests still open.
#[derive(Default)]
struct Backlog {
    segments: BTreeMap<u64, Pending>,
    /// Open requests: the segment holding their open entry, and its record.
    open: HashMap<Arc<str>, (u64, UsageRecord), foldhash::fast::RandomState>,
}

/// One part of a segment file (or the replay of a previous run) on its way
/// out.
struct Pending {
    /// Its shares of the files it is in (see `SegmentFile`).
    files: Vec<Arc<SegmentFile>>,
    /// Its final records, encoded, each in an allocation of its own: the
    /// segment's buffers (open entries and all) go once it is folded.
    records: Vec<Bytes>,
    /// How many of `records` were acknowledged.
    sent: usize,
    /// Open requests whose open entry is in this segment.
    opens: usize,
    sealed_at: Instant,
}

/// Records for one `ReportUsage` call: the oldest not yet acknowledged,
/// at most `MAX_BATCH`, from as many segments as hold them.
#[derive(Debug, PartialEq)]
struct Batch<'a> {
    /// Each segment's number and its records in the batch, oldest first.
    parts: Vec<(u64, &'a [Bytes])>,
}

// === impl Reporter ===

impl Reporter {
    /// Runs until shutdown is signalled (or the writer is gone), then
    /// flushes the spool and tries one last report.
    pub async fn run(mut self) {
        let mut backlog = Backlog::default();
        if !self.replay.records.is_empty() {
            tracing::info!(
                records = self.replay.records.len(),
                unfinished = self.replay.unfinished,
                "resending usage spooled by a previous run"
            );
        }
        backlog.replayed(std::mem::take(&mut self.replay));
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut retry_at = backlog.has_unsent().then(Instant::now);
        let mut tick = tokio::time::interval(self.interval.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            crate::telemetry::metrics::spool_backlog(backlog.unsent(), backlog.segments.len());
            self.vitals.set_backlog(backlog.unsent());
            let deadline = retry_at;
            let retry = async move {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.shutdown.changed() => break,
                sealed = self.sealed.recv() => match sealed {
                    Some(sealed) => {
                        backlog.sealed(sealed);
                        if backlog.has_unsent() {
                            retry_at = retry_at.or_else(|| Some(Instant::now()));
                        }
                    }
                    None => break,
                },
                _ = tick.tick() => self.carry_stale(&mut backlog).await,
                () = retry => {
                    retry_at = match self.send_all(&mut backlog).await {
                        Ok(()) => {
                            backoff.reset();
                            None
                        }
                        Err(()) => Some(Instant::now() + backoff.next_delay()),
                    };
                }
            }
        }
        // Shutting down: everything appended goes into a sealed segment,
        // then one try to send it.
        self.spool.flush().await;
        while let Ok(sealed) = self.sealed.try_recv() {
            backlog.sealed(sealed);
        }
        if backlog.has_unsent()
            && tokio::time::timeout(SHUTDOWN_REPORT_TIMEOUT, self.send_all(&mut backlog)).await != Ok(Ok(()))
        {
            tracing::warn!(segments = backlog.segments.len(), "usage left in the spool for the next start");
        }
    }

    /// Copies forward the open entries of reported segments kept longer
    /// than `CARRY_AFTER`, then deletes those segments.
    async fn carry_stale(&self, backlog: &mut Backlog) {
        for (seq, records) in backlog.stale(Instant::now()) {
            let count = records.len();
            self.spool.carry(records).wait().await;
            backlog.carried(seq);
            tracing::debug!(seq, open = count, "open usage entries carried to a new segment");
        }
    }

    /// Sends unacknowledged records oldest first; stops at the first failure.
    async fn send_all(&self, backlog: &mut Backlog) -> Result<(), ()> {
        while let Some(batch) = backlog.next_batch() {
            let count = batch.len();
            let parts = batch.counts();
            // The records as the spool encoded them, not encoded again.
            let records = batch.parts.iter().flat_map(|(_, records)| records.iter().cloned()).collect();
            let call = control::report_usage(&self.control, &self.node_id, records, CALL_TIMEOUT);
            let result = tokio::time::timeout(CALL_TIMEOUT, call).await;
            match result {
                Ok(Ok(response)) => {
                    tracing::debug!(
                        applied = response.applied,
                        duplicates = response.duplicates,
                        refused = response.refused,
                        "usage reported"
                    );
                    backlog.acked(&parts);
                }
                Ok(Err(control::ReportError::Refused(status))) => {
                    tracing::error!(%status, records = count, "control plane refused a usage batch");
                    let (seq, _) = parts[0];
                    let name = format!("{seq:020}-{}", backlog.segments.get(&seq).map_or(0, |p| p.sent));
                    let refused = backlog.next_batch().map(|batch| batch.records().collect()).unwrap_or_default();
                    self.spool.reject(&name, refused);
                    backlog.acked(&parts);
                }
                Ok(Err(control::ReportError::Failed(status))) => {
                    tracing::warn!(%status, pending = backlog.segments.len(), "usage report failed; will retry");
                    return Err(());
                }
                Err(_) => {
                    tracing::warn!(pending = backlog.segments.len(), "usage report timed out; will retry");
                    return Err(());
                }
            }
        }
        Ok(())
    }
}

// === impl Backlog ===

impl Backlog {
    /// Takes what a previous run left: all final records by now.
    fn replayed(&mut self, replay: Replay) {
        if replay.paths.is_empty() && replay.records.is_empty() {
            return;
        }
        let records = replay.records.into_iter().map(|record| Encoded::new(record).bytes).collect();
        let files = replay.paths.into_iter().map(|path| Arc::new(SegmentFile { path })).collect();
        let pending = Pending { files, records, sent: 0, opens: 0, sealed_at: Instant::now() };
        self.segments.insert(REPLAYED, pending);
        self.reap(REPLAYED);
    }

    /// Takes a sealed segment: its final records are to send; its open
    /// entries keep it until their requests close.
    fn sealed(&mut self, sealed: Sealed) {
        let seq = sealed.seq;
        let mut pending =
            Pending { files: vec![sealed.file], records: Vec::new(), sent: 0, opens: 0, sealed_at: Instant::now() };
        for (kind, entry) in sealed.entries {
            let id = &entry.record.request_id;
            match kind {
                Kind::Open => {
                    self.close(id, seq, &mut pending);
                    self.open.insert(id.clone(), (seq, entry.record));
                    pending.opens += 1;
                }
                Kind::Carried => {
                    if let Some(open) = self.open.get_mut(id)
                        && open.0 == CARRYING
                    {
                        open.0 = seq;
                        pending.opens += 1;
                    }
                }
                // The request's latest state moves to this segment: the
                // one before may go, and a carried copy copies this one.
                Kind::Progress => {
                    if self.open.contains_key(id) {
                        self.close(id, seq, &mut pending);
                        self.open.insert(id.clone(), (seq, entry.record));
                        pending.opens += 1;
                    }
                }
                Kind::Final => {
                    self.close(id, seq, &mut pending);
                    pending.records.push(Bytes::copy_from_slice(&entry.bytes));
                }
                Kind::Void => self.close(id, seq, &mut pending),
            }
        }
        self.segments.insert(seq, pending);
        self.reap(seq);
    }

    /// The request `id` ended: its open entry no longer keeps its segment
    /// (`current`, numbered `seq`, is the one being taken in).
    fn close(&mut self, id: &str, seq: u64, current: &mut Pending) {
        let Some((at, _)) = self.open.remove(id) else {
            return;
        };
        if at == seq {
            current.opens = current.opens.saturating_sub(1);
        } else if let Some(pending) = self.segments.get_mut(&at) {
            pending.opens = pending.opens.saturating_sub(1);
            self.reap(at);
        }
    }

    /// Records not yet acknowledged.
    fn unsent(&self) -> usize {
        self.segments.values().map(|p| p.records.len() - p.sent).sum()
    }

    fn has_unsent(&self) -> bool {
        self.segments.values().any(|p| p.sent < p.records.len())
    }

    /// The oldest records not yet acknowledged, at most `MAX_BATCH`;
    /// `None` when every record was.
    fn next_batch(&self) -> Option<Batch<'_>> {
        let mut parts = Vec::new();
        let mut room = MAX_BATCH;
        for (seq, pending) in &self.segments {
            if room == 0 {
                break;
            }
            let left = &pending.records[pending.sent..];
            if !left.is_empty() {
                let take = left.len().min(room);
                parts.push((*seq, &left[..take]));
                room -= take;
            }
        }
        (!parts.is_empty()).then_some(Batch { parts })
    }

    /// The counts of records of each segment acknowledged.
    fn acked(&mut self, parts: &[(u64, usize)]) {
        for &(seq, count) in parts {
            if let Some(pending) = self.segments.get_mut(&seq) {
                pending.sent = (pending.sent + count).min(pending.records.len());
            }
            self.reap(seq);
        }
    }

    /// Lets part `seq` go if all its records were acknowledged and none of
    /// its requests is open, deleting each of its files no other part (nor
    /// the writer) still holds.
    fn reap(&mut self, seq: u64) {
        let done = self.segments.get(&seq).is_some_and(|p| p.sent == p.records.len() && p.opens == 0);
        if !done {
            return;
        }
        if let Some(pending) = self.segments.remove(&seq) {
            pending.files.into_iter().for_each(SegmentFile::release);
        }
    }

    /// Reported segments kept longer than `CARRY_AFTER` only for open
    /// requests, each with the open records to copy forward.
    fn stale(&self, now: Instant) -> Vec<(u64, Vec<UsageRecord>)> {
        let old: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, p)| p.sent == p.records.len() && p.opens > 0 && now - p.sealed_at >= CARRY_AFTER)
            .map(|(seq, _)| *seq)
            .collect();
        old.into_iter()
            .map(|seq| {
                let records =
                    self.open.values().filter(|(at, _)| *at == seq).map(|(_, record)| record.clone()).collect();
                (seq, records)
            })
            .collect()
    }

    /// The open entries of segment `seq` were copied forward: it can go.
    fn carried(&mut self, seq: u64) {
        for (at, _) in self.open.values_mut() {
            if *at == seq {
                *at = CARRYING;
            }
        }
        if let Some(pending) = self.segments.get_mut(&seq) {
            pending.opens = 0;
        }
        self.reap(seq);
    }
}

// === impl Batch ===

impl Batch<'_> {
    fn len(&self) -> usize {
        self.parts.iter().map(|(_, records)| records.len()).sum()
    }

    /// The batch's records, decoded again (to set aside refused ones).
    fn records(&self) -> impl Iterator<Item = UsageRecord> {
        let bytes = self.parts.iter().flat_map(|(_, records)| records.iter());
        bytes.filter_map(|bytes| UsageRecord::decode(bytes))
    }

    /// Each segment's number and how many of its records the batch holds.
    fn counts(&self) -> Vec<(u64, usize)> {
        self.parts.iter().map(|(seq, records)| (*seq, records.len())).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn record(id: &str) -> UsageRecord {
        UsageRecord { request_id: id.into(), cost_micros: 5, ..UsageRecord::default() }
    }

    fn segment(dir: &std::path::Path, seq: u64, entries: &[(Kind, &str)]) -> Sealed {
        let path = crate::spool::log::segment_path(dir, seq);
        std::fs::write(&path, b"x").unwrap();
        let file = Arc::new(SegmentFile { path });
        Sealed { seq, file, entries: entries.iter().map(|(kind, id)| (*kind, Encoded::new(record(id)))).collect() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_segment_goes_once_reported_and_closed_and_open_entries_are_carried_when_old() {
        let dir = tempfile::tempdir().unwrap();
        let mut backlog = Backlog::default();
        let first = segment(dir.path(), 1, &[(Kind::Open, "a"), (Kind::Open, "b"), (Kind::Final, "x")]);
        let first_path = first.file.path.clone();
        backlog.sealed(first);
        let batch = backlog.next_batch().unwrap();
        assert_eq!(batch.counts(), [(1, 1)]);
        assert_eq!(backlog.next_batch().unwrap(), batch, "a batch stays the next until acknowledged");
        backlog.acked(&[(1, 1)]);
        assert!(first_path.exists(), "a and b are still open");

        backlog.sealed(segment(dir.path(), 2, &[(Kind::Final, "a")]));
        assert!(first_path.exists(), "b is still open");
        assert!(backlog.stale(Instant::now()).is_empty(), "not old yet");
        tokio::time::advance(CARRY_AFTER).await;
        let stale = backlog.stale(Instant::now());
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].1.iter().map(|r| &*r.request_id).collect::<Vec<_>>(), ["b"]);
        backlog.carried(1);
        assert!(!first_path.exists(), "its open entry was copied forward");

        let batch = backlog.next_batch().unwrap();
        let first = batch.records().next().unwrap();
        assert_eq!((batch.counts(), &*first.request_id), (vec![(2, 1)], "a"));
        backlog.acked(&[(2, 1)]);
        let third = segment(dir.path(), 3, &[(Kind::Carried, "b"), (Kind::Carried, "a")]);
        let third_path = third.file.path.clone();
        backlog.sealed(third);
        assert!(third_path.exists(), "b's carried entry keeps it; a's closed one does not count");
        backlog.sealed(segment(dir.path(), 4, &[(Kind::Void, "b")]));
        assert!(!third_path.exists());
        assert!(backlog.open.is_empty());
        assert!(backlog.segments.is_empty(), "{:?}", backlog.segments.keys().collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn a_streams_progress_moves_it_to_the_newest_segment_and_is_what_a_carry_copies() {
        let dir = tempfile::tempdir().unwrap();
        let mut backlog = Backlog::default();
        let first = segment(dir.path(), 1, &[(Kind::Open, "s")]);
        let first_path = first.file.path.clone();
        backlog.sealed(first);
        let mut progress = segment(dir.path(), 2, &[(Kind::Progress, "s"), (Kind::Progress, "gone")]);
        progress.entries[0].1 = Encoded::new(UsageRecord { completion_tokens: 40, ..record("s") });
        let second_path = progress.file.path.clone();
        backlog.sealed(progress);
        assert!(!first_path.exists(), "the open entry is superseded by the progress");
        assert!(second_path.exists(), "the stream is still open");
        assert!(!backlog.open.contains_key("gone"), "progress of a request not open opens nothing");
        tokio::time::advance(CARRY_AFTER).await;
        let stale = backlog.stale(Instant::now());
        assert_eq!(stale.len(), 1);
        assert_eq!((stale[0].0, stale[0].1[0].completion_tokens), (2, 40));
        backlog.sealed(segment(dir.path(), 3, &[(Kind::Final, "s")]));
        assert!(!second_path.exists());
        assert!(backlog.open.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn segments_of_several_writers_may_arrive_out_of_number_order() {
        // A worker's writer holds the requests' own entries (5, 7, 8); the
        // first writer the carried copies (6), sealed after the worker's 7.
        let dir = tempfile::tempdir().unwrap();
        let mut backlog = Backlog::default();
        backlog.sealed(segment(dir.path(), 5, &[(Kind::Open, "a"), (Kind::Open, "b")]));
        tokio::time::advance(CARRY_AFTER).await;
        assert_eq!(backlog.stale(Instant::now()).len(), 1);
        backlog.carried(5);
        backlog.sealed(segment(dir.path(), 7, &[(Kind::Final, "a")]));
        let carried = segment(dir.path(), 6, &[(Kind::Carried, "a"), (Kind::Carried, "b")]);
        let carried_path = carried.file.path.clone();
        backlog.sealed(carried);
        assert!(carried_path.exists(), "b is still open; a's close came first and does not count");
        backlog.sealed(segment(dir.path(), 8, &[(Kind::Final, "b")]));
        let mut sent = Vec::new();
        while let Some(batch) = backlog.next_batch() {
            sent.extend(batch.records().map(|r| r.request_id.to_string()));
            let parts = batch.counts();
            backlog.acked(&parts);
        }
        assert_eq!(sent, ["a", "b"]);
        assert!(!carried_path.exists());
        assert!(backlog.open.is_empty());
        assert!(backlog.segments.is_empty(), "{:?}", backlog.segments.keys().collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn batches_hold_at_most_max_batch_records_in_spool_order_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let mut backlog = Backlog::default();
        let path = dir.path().join("old.log");
        std::fs::write(&path, b"x").unwrap();
        let records = (0..MAX_BATCH + 1).map(|i| record(&format!("old{i}"))).collect();
        backlog.replayed(Replay { paths: vec![path.clone()], records, unfinished: 0, next_seq: 1 });
        backlog.sealed(segment(dir.path(), 1, &[(Kind::Final, "new"), (Kind::Final, "newer")]));
        backlog.sealed(segment(dir.path(), 2, &[(Kind::Final, "newest")]));
        let batch = backlog.next_batch().unwrap();
        assert_eq!(batch.counts(), [(REPLAYED, MAX_BATCH)]);
        backlog.acked(&[(REPLAYED, MAX_BATCH)]);
        let batch = backlog.next_batch().unwrap();
        assert_eq!(batch.counts(), [(REPLAYED, 1), (1, 2), (2, 1)], "what is left of every segment, in one call");
        let ids: Vec<String> = batch.records().map(|r| r.request_id.to_string()).collect();
        assert_eq!(ids, [format!("old{MAX_BATCH}").as_str(), "new", "newer", "newest"]);
        backlog.acked(&[(REPLAYED, 1), (1, 1)]);
        assert!(!path.exists(), "the replay was all acknowledged");
        let batch = backlog.next_batch().unwrap();
        assert_eq!(batch.counts(), [(1, 1), (2, 1)], "a part acknowledged is not sent again");
        let parts = batch.counts();
        backlog.acked(&parts);
        assert!(backlog.next_batch().is_none());
        assert!(backlog.segments.is_empty());
    }
}
