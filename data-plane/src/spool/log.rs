//! The spool's on-disk form: segment files of length-prefixed, checksummed
//! entries, each a kind byte and a protobuf usage record. A reader stops at
//! the first entry that is cut short or fails its checksum (a torn tail),
//! keeping every entry before it. `replay` folds what a previous run left
//! into the records still owed to the control plane.

use std::{
    collections::{HashMap, HashSet},
    ops::Range,
    path::{Path, PathBuf},
    sync::Arc,
};

use gw_proto::pb;
use prost::Message as _;

use super::{Kind, SpoolError};
use crate::usage::{self, UsageRecord};

/// Length (4 bytes) and checksum (4 bytes) before each entry's kind byte.
const HEADER: usize = 8;
/// Extension of segment files.
pub const SEGMENT: &str = "log";
/// Extension of whole-batch files written by earlier versions.
const LEGACY_BATCH: &str = "batch";

/// What a previous run left on the spool, folded.
#[derive(Debug, Default)]
pub struct Replay {
    /// The files it came from; delete them once `records` are acknowledged.
    pub paths: Vec<PathBuf>,
    /// Final records, then one prompt-only record (status 0, estimated) for
    /// each request that was opened and never closed.
    pub records: Vec<UsageRecord>,
    /// How many of `records` stand for requests the crash cut short.
    pub unfinished: usize,
    /// The sequence number the next segment gets.
    pub next_seq: u64,
}

// === impl Kind ===

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Open,
            2 => Kind::Final,
            3 => Kind::Void,
            4 => Kind::Carried,
            5 => Kind::Progress,
            _ => return None,
        })
    }
}

/// Encodes entries, reusing one protocol record's strings from one entry
/// to the next instead of allocating them anew.
#[derive(Debug, Default)]
pub struct Encoder(pb::UsageRecord);

// === impl Encoder ===

impl Encoder {
    /// Appends one entry for `record` to `out`; returns where in `out` the
    /// record's protocol encoding is.
    pub fn encode(&mut self, kind: Kind, record: &UsageRecord, out: &mut Vec<u8>) -> Range<usize> {
        usage::fill(&mut self.0, record);
        write(kind, &self.0, out)
    }
}

fn write(kind: Kind, message: &pb::UsageRecord, out: &mut Vec<u8>) -> Range<usize> {
    let start = out.len();
    // Header first, filled in once the body is written in place behind it.
    out.extend_from_slice(&[0; HEADER]);
    out.push(kind as u8);
    // A Vec grows as needed, so encoding into it cannot fail. `encode`
    // sizes the message itself; the writer sized the buffer for the group.
    let _ = message.encode(out);
    let body = &out[start + HEADER..];
    // A record is a few hundred bytes; u32 cannot overflow in practice.
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let sum = checksum(body);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + HEADER].copy_from_slice(&sum.to_le_bytes());
    start + HEADER + 1..out.len()
}

/// The entries of one segment's `bytes`, in order, and the offset of the
/// first damaged entry if the segment does not end cleanly.
pub fn decode(bytes: &[u8]) -> (Vec<(Kind, UsageRecord)>, Option<usize>) {
    let mut entries = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(entry) = decode_one(&bytes[at..]) else {
            return (entries, Some(at));
        };
        let (kind, record, used) = entry;
        entries.push((kind, record));
        at += used;
    }
    (entries, None)
}

fn decode_one(bytes: &[u8]) -> Option<(Kind, UsageRecord, usize)> {
    let header = bytes.get(..HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let sum = u32::from_le_bytes(header[4..].try_into().ok()?);
    let body = bytes.get(HEADER..HEADER.checked_add(len)?)?;
    if len == 0 || checksum(body) != sum {
        return None;
    }
    let kind = Kind::from_byte(body[0])?;
    let record = pb::UsageRecord::decode(&body[1..]).ok()?;
    Some((kind, UsageRecord::from(record), HEADER + len))
}

/// FNV-1a: catches torn and zero-filled tails; nothing here is adversarial.
/// FNV-1a of `bytes`, taken eight bytes to a loop turn: the same sum as a
/// byte at a time, for less loop per byte on every record written.
fn checksum(bytes: &[u8]) -> u32 {
    let step = |hash: u32, byte: &u8| (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193);
    let (eights, rest) = bytes.as_chunks::<8>();
    let hash = eights.iter().fold(0x811c_9dc5_u32, |hash, eight| eight.iter().fold(hash, step));
    rest.iter().fold(hash, step)
}

/// The segment file for sequence number `seq` in `dir`.
pub fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.{SEGMENT}"))
}

/// Reads every segment (and legacy batch file) in `dir`, oldest first, and
/// folds them: a final record closes its request, a void entry closes it
/// without a record (the attempt failed before any answer), an open entry
/// not closed afterwards becomes its prompt-only record, or its latest
/// progress (what the client had received when it was written). Removes
/// half-written temporaries; a damaged tail is logged and skipped.
pub fn replay(dir: &Path) -> Result<Replay, SpoolError> {
    let listing = std::fs::read_dir(dir).map_err(|source| SpoolError::io("listing", dir, source))?;
    let mut segments = Vec::new();
    let mut legacy = Vec::new();
    for entry in listing {
        let path = entry.map_err(|source| SpoolError::io("listing", dir, source))?.path();
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        match path.extension().and_then(|e| e.to_str()) {
            Some(SEGMENT) => match stem.parse::<u64>() {
                Ok(seq) => segments.push((seq, path)),
                Err(_) => tracing::warn!(file = %path.display(), "ignoring a spool file with a foreign name"),
            },
            Some(LEGACY_BATCH) => legacy.push(path),
            Some("tmp") => {
                let _ = std::fs::remove_file(&path);
            }
            _ => {}
        }
    }
    segments.sort();
    legacy.sort();
    let mut replay = Replay { next_seq: segments.last().map_or(1, |(seq, _)| seq + 1), ..Replay::default() };
    for path in legacy {
        let bytes = std::fs::read(&path).map_err(|source| SpoolError::io("reading", &path, source))?;
        match pb::ReportUsageRequest::decode(bytes.as_slice()) {
            Ok(batch) => replay.records.extend(batch.records.into_iter().map(UsageRecord::from)),
            Err(error) => tracing::error!(%error, file = %path.display(), "unreadable usage batch skipped"),
        }
        replay.paths.push(path);
    }
    let mut fold = Fold::default();
    for (_, path) in segments {
        let bytes = std::fs::read(&path).map_err(|source| SpoolError::io("reading", &path, source))?;
        let (entries, damaged) = decode(&bytes);
        if let Some(offset) = damaged {
            tracing::warn!(file = %path.display(), offset, "usage spool segment ends in a damaged entry; kept what precedes it");
        }
        for (kind, record) in entries {
            fold.apply(kind, record);
        }
        replay.paths.push(path);
    }
    replay.records.extend(fold.finals);
    let mut unfinished: Vec<UsageRecord> = fold.open.into_values().collect();
    unfinished.sort_by(|a, b| (a.created_at, &a.request_id).cmp(&(b.created_at, &b.request_id)));
    replay.unfinished = unfinished.len();
    replay.records.extend(unfinished);
    Ok(replay)
}

/// Entries folded in log order.
#[derive(Default)]
struct Fold {
    finals: Vec<UsageRecord>,
    open: HashMap<Arc<str>, UsageRecord>,
    /// Requests a final or void entry closed (a later carried copy of their
    /// open entry does not reopen them).
    closed: HashSet<Arc<str>>,
}

// === impl Fold ===

impl Fold {
    fn apply(&mut self, kind: Kind, record: UsageRecord) {
        let id = record.request_id.clone();
        match kind {
            Kind::Open => {
                // A new attempt of a request whose earlier one failed.
                self.closed.remove(&id);
                self.open.insert(id, record);
            }
            Kind::Carried | Kind::Progress => {
                if self.closed.contains(&id) {
                    return;
                }
                // A carried copy may be older than a progress entry in an
                // earlier segment (several writers): a request's latest
                // state is the one furthest into it.
                let newer = self.open.get(&id).is_none_or(|open| record.latency_ms >= open.latency_ms);
                if newer {
                    self.open.insert(id, record);
                }
            }
            Kind::Final => {
                self.open.remove(&id);
                self.closed.insert(id);
                self.finals.push(record);
            }
            Kind::Void => {
                self.open.remove(&id);
                self.closed.insert(id);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn record(id: &str, status: u16) -> UsageRecord {
        UsageRecord { request_id: id.into(), status, cost_micros: 5, ..UsageRecord::default() }
    }

    fn encode(kind: Kind, record: &UsageRecord, out: &mut Vec<u8>) {
        Encoder::default().encode(kind, record, out);
    }

    proptest::proptest! {
        #[test]
        fn the_checksum_is_fnv1a_a_byte_at_a_time(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let general = bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193));
            proptest::prop_assert_eq!(checksum(&bytes), general);
        }
    }

    #[test]
    fn a_reused_encoder_writes_what_a_fresh_one_does_and_says_where_the_record_is() {
        let long = UsageRecord {
            request_id: "a-long-request-id".into(),
            token_id: "token".into(),
            account_id: "account".into(),
            group: "default".into(),
            model: "gpt-4o-mini".into(),
            channel_id: "channel".into(),
            endpoint: "/v1/chat/completions".into(),
            prompt_tokens: 12,
            completion_tokens: 3,
            cached_tokens: 1,
            cache_write_5m_tokens: 2,
            cache_write_1h_tokens: 4,
            reasoning_tokens: 5,
            audio_prompt_tokens: 6,
            audio_completion_tokens: 2,
            audio_cached_tokens: 1,
            tier: 1,
            cost_micros: 77,
            latency_ms: 9,
            status: 200,
            created_at: 1_700_000_000,
            node_id: "node".into(),
            estimated: true,
            units: crate::pricing::Units { images: 2, audio_millis: 300, search_units: 1 },
        };
        let short = record("r", 0);
        let mut reused = Encoder::default();
        for record in [&long, &short, &long] {
            let (mut mine, mut fresh) = (Vec::new(), Vec::new());
            let at = reused.encode(Kind::Final, record, &mut mine);
            super::write(Kind::Final, &pb::UsageRecord::from(record), &mut fresh);
            assert_eq!(mine, fresh);
            assert_eq!(mine[at].to_vec(), pb::UsageRecord::from(record).encode_to_vec(), "the record's own bytes");
            assert_eq!(decode(&mine).0, vec![(Kind::Final, record.clone())]);
        }
    }

    fn write(dir: &Path, seq: u64, entries: &[(Kind, &str)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (kind, id) in entries {
            encode(*kind, &record(id, if *kind == Kind::Final { 200 } else { 0 }), &mut bytes);
        }
        std::fs::write(segment_path(dir, seq), &bytes).unwrap();
        bytes
    }

    #[test]
    fn a_torn_tail_keeps_every_entry_before_it() {
        let mut bytes = Vec::new();
        encode(Kind::Final, &record("r1", 200), &mut bytes);
        encode(Kind::Open, &record("r2", 0), &mut bytes);
        let whole = bytes.len();
        encode(Kind::Final, &record("r3", 200), &mut bytes);
        let (entries, damaged) = decode(&bytes[..bytes.len() - 3]);
        assert_eq!(entries.len(), 2);
        assert_eq!(damaged, Some(whole));
        bytes[whole + HEADER + 2] ^= 0xff;
        let (entries, damaged) = decode(&bytes);
        assert_eq!((entries.len(), damaged), (2, Some(whole)), "a flipped byte fails the checksum");
        assert_eq!(entries[1], (Kind::Open, record("r2", 0)));
    }

    #[test]
    fn billed_counts_survive_the_spool_and_older_entries_load_without_them() {
        let billed = UsageRecord {
            prompt_tokens: 300,
            cached_tokens: 10,
            cache_write_5m_tokens: 20,
            cache_write_1h_tokens: 30,
            completion_tokens: 50,
            reasoning_tokens: 40,
            tier: 1,
            ..record("r1", 200)
        };
        let mut bytes = Vec::new();
        encode(Kind::Final, &billed, &mut bytes);
        assert_eq!(decode(&bytes), (vec![(Kind::Final, billed)], None));
        // An entry written before the fields existed is that record's
        // encoding with the new fields absent: they load as 0.
        let old = record("r2", 200);
        let mut bytes = Vec::new();
        encode(Kind::Final, &old, &mut bytes);
        let (entries, _) = decode(&bytes);
        assert_eq!((entries[0].1.reasoning_tokens, entries[0].1.tier), (0, 0));
    }

    #[test]
    fn an_unfinished_stream_is_replayed_as_its_latest_progress() {
        let dir = tempfile::tempdir().unwrap();
        let progress = |id: &str, ms: u32, completion: i64| UsageRecord {
            latency_ms: ms,
            completion_tokens: completion,
            ..record(id, 0)
        };
        let mut first = Vec::new();
        encode(Kind::Open, &record("cut", 0), &mut first);
        encode(Kind::Open, &record("ended", 0), &mut first);
        encode(Kind::Progress, &progress("cut", 1_000, 10), &mut first);
        encode(Kind::Progress, &progress("ended", 1_000, 10), &mut first);
        encode(Kind::Progress, &progress("cut", 2_000, 20), &mut first);
        std::fs::write(segment_path(dir.path(), 1), &first).unwrap();
        // A copy carried forward before the last progress, sealed later.
        let mut second = Vec::new();
        encode(Kind::Carried, &progress("cut", 1_000, 10), &mut second);
        encode(Kind::Final, &UsageRecord { completion_tokens: 30, ..record("ended", 200) }, &mut second);
        encode(Kind::Progress, &progress("ended", 3_000, 30), &mut second);
        std::fs::write(segment_path(dir.path(), 2), &second).unwrap();
        let replay = replay(dir.path()).unwrap();
        let seen: Vec<_> = replay.records.iter().map(|r| (&*r.request_id, r.status, r.completion_tokens)).collect();
        assert_eq!(seen, [("ended", 200, 30), ("cut", 0, 20)]);
        assert_eq!(replay.unfinished, 1);
    }

    #[test]
    fn open_requests_without_a_final_record_become_their_prompt_part() {
        let dir = tempfile::tempdir().unwrap();
        // r1 finished; r2's first attempt failed, its second is in flight;
        // r3 failed for good; r4 finished, and a copy of its open entry
        // carried forward after that does not reopen it; r5 was carried
        // forward and is still open.
        write(dir.path(), 7, &[(Kind::Open, "r1"), (Kind::Open, "r2"), (Kind::Void, "r2"), (Kind::Open, "r3")]);
        write(dir.path(), 9, &[(Kind::Final, "r1"), (Kind::Open, "r2"), (Kind::Void, "r3"), (Kind::Final, "r4")]);
        write(dir.path(), 12, &[(Kind::Carried, "r4"), (Kind::Carried, "r5")]);
        std::fs::write(dir.path().join("x.tmp"), b"half").unwrap();
        let replay = replay(dir.path()).unwrap();
        let ids: Vec<_> = replay.records.iter().map(|r| (&*r.request_id, r.status)).collect();
        assert_eq!(ids, [("r1", 200), ("r4", 200), ("r2", 0), ("r5", 0)]);
        assert_eq!(replay.unfinished, 2);
        assert_eq!(replay.next_seq, 13);
        assert_eq!(replay.paths.len(), 3);
        assert!(!dir.path().join("x.tmp").exists());
    }
}
