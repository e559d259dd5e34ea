//! The on-disk copy of the policy snapshot, so a restarted data plane serves
//! on its last good policy while the control plane is unreachable.
//!
//! `snapshot.pb` is a prost-encoded `WatchResponse` with `full = true`, cut
//! into frames of about a megabyte, each sealed with ChaCha20-Poly1305 under
//! a key derived from the node key (the file holds upstream keys: without the
//! node key, which operators keep outside the data dir, `--node-key-file`, it
//! reads as noise). A frame's nonce is the file's random prefix, the frame's
//! number and whether it is the last, so a reordered, cut or altered file is
//! refused; at a million tokens neither writing nor reading ever holds the
//! whole file. The file is replaced atomically (temp file + rename), at most
//! about once per second. Deltas are appended to `snapshot.log`, sealed as
//! records bound to the file's prefix, and replayed on load as far as they
//! chain from its revision; the log is folded into a new file once it grows
//! past a quarter of it. A sealed or unsealed file of an older version (one
//! message) is still read.

use std::{
    io::{BufRead as _, BufReader, Read, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use chacha20poly1305::{
    ChaCha20Poly1305, KeyInit as _, Nonce, Tag,
    aead::{Aead as _, AeadInPlace as _, Payload},
};
use gw_proto::pb;
use prost::Message as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::{mpsc, watch};

use super::{convert, discovery};
use crate::{
    durable::{private_file, write_durably_with},
    policy::{
        domain::{Kind, Resource},
        snapshot::Snapshot,
    },
};

/// File name of the snapshot inside the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot.pb";
/// File name of the deltas applied since the snapshot file was written.
pub const LOG_FILE: &str = "snapshot.log";
/// Least time between two writes of the whole snapshot.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// What a sealed snapshot file of one message starts with; the nonce follows.
const SEALED: &[u8] = b"gw-snapshot-v1\0";
/// What a framed snapshot file starts with; the nonce prefix follows.
const FRAMED: &[u8] = b"gw-snapshot-v2\0";
/// Associated data of every log record, before the file's nonce prefix.
const LOG_LABEL: &[u8] = b"gw-snapshot-log-v1\0";
/// Plain bytes per frame of the snapshot file, about.
const FRAME_BYTES: usize = 1 << 20;
/// Largest frame or log record read back.
const MAX_FRAME: usize = 1 << 28;
/// Random bytes every frame nonce of one file starts with.
const PREFIX: usize = 7;
/// Poly1305 tag length.
const TAG: usize = 16;

/// One published snapshot, for the writer: with the encoded delta that made
/// it (appended to the log), or none for a full snapshot (written whole).
pub struct Update {
    pub snapshot: Arc<Snapshot>,
    pub delta: Option<Vec<u8>>,
}

/// What the writer knows of the files on disk.
#[derive(Default)]
struct Files {
    /// Nonce prefix of the snapshot file this writer wrote; `None` until it
    /// wrote one, so the log is only appended to a file it knows.
    prefix: Option<[u8; PREFIX]>,
    file_bytes: u64,
    log_bytes: u64,
}

/// Reads `<data_dir>/snapshot.pb`, sealed under `node_key`, and replays the
/// deltas logged after it; `None` if there is none. Fails on a file sealed
/// under another key, cut short, or altered. Resources that do not convert
/// are logged and left out; the log is replayed up to its first record that
/// does not open or does not chain.
pub fn load(data_dir: &Path, node_key: &str) -> anyhow::Result<Option<Snapshot>> {
    let path = data_dir.join(SNAPSHOT_FILE);
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let framed = reader.fill_buf().with_context(|| format!("reading {}", path.display()))?.starts_with(FRAMED);
    let cipher = cipher(node_key);
    if !framed {
        return load_message(&mut reader, &cipher).with_context(|| format!("reading {}", path.display())).map(Some);
    }
    let (snapshot, prefix) =
        load_frames(&mut reader, &cipher).with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(replay(&data_dir.join(LOG_FILE), &cipher, &prefix, snapshot)))
}

/// A file of one message, sealed (an older version's) or plain (older still).
fn load_message(reader: &mut impl Read, cipher: &ChaCha20Poly1305) -> anyhow::Result<Snapshot> {
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes)?;
    let bytes = match bytes.strip_prefix(SEALED) {
        Some(sealed) => open(sealed, cipher)?,
        None => bytes,
    };
    let full = pb::WatchResponse::decode(bytes.as_slice()).context("decoding")?;
    let mut snapshot = Snapshot::start(full.revision);
    snapshot.store_id = full.store_id;
    snapshot.add(converted(full.upserts));
    Ok(snapshot.finish())
}

/// A framed file, frame by frame; with its nonce prefix.
fn load_frames(reader: &mut impl Read, cipher: &ChaCha20Poly1305) -> anyhow::Result<(Snapshot, [u8; PREFIX])> {
    let mut head = [0u8; FRAMED.len() + PREFIX];
    reader.read_exact(&mut head).context("the snapshot is truncated")?;
    let mut prefix = [0u8; PREFIX];
    prefix.copy_from_slice(&head[FRAMED.len()..]);
    let mut snapshot: Option<Snapshot> = None;
    let mut frame = Vec::new();
    for index in 0u32.. {
        let mut header = [0u8; 5];
        reader.read_exact(&mut header).context("the snapshot is truncated")?;
        let last = match header[0] {
            0 => false,
            1 => true,
            other => anyhow::bail!("frame {index} has flag {other}"),
        };
        let len = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
        anyhow::ensure!((TAG..=MAX_FRAME).contains(&len), "frame {index} of {len} bytes");
        frame.resize(len, 0);
        reader.read_exact(&mut frame).context("the snapshot is truncated")?;
        let (text, tag) = frame.split_at_mut(len - TAG);
        cipher
            .decrypt_in_place_detached(&frame_nonce(&prefix, index, last), FRAMED, text, Tag::from_slice(tag))
            .map_err(|_| anyhow::anyhow!("sealed under another node key, or altered"))?;
        let part = pb::WatchResponse::decode(&*text).context("decoding")?;
        let building = snapshot.get_or_insert_with(|| {
            let mut snapshot = Snapshot::start(part.revision);
            snapshot.store_id.clone_from(&part.store_id);
            snapshot.reserve(discovery::expected(part.expected));
            snapshot
        });
        building.add(converted(part.upserts));
        if last {
            break;
        }
    }
    let snapshot = snapshot.context("the snapshot has no frame")?;
    Ok((snapshot.finish(), prefix))
}

/// `upserts` converted, leaving out (and logging) the ones that do not.
fn converted(upserts: Vec<pb::Resource>) -> impl Iterator<Item = Resource> {
    upserts.into_iter().filter_map(|r| match convert::resource(r) {
        Ok(resource) => Some(resource),
        Err(rejected) => {
            tracing::warn!(resource = %rejected.name, reason = %rejected.reason, "skipped a saved resource");
            None
        }
    })
}

/// `snapshot` with the deltas of the log at `path` that chain from it.
fn replay(path: &Path, cipher: &ChaCha20Poly1305, prefix: &[u8; PREFIX], mut snapshot: Snapshot) -> Snapshot {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) => {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%error, "cannot read the snapshot log");
            }
            return snapshot;
        }
    };
    let mut reader = BufReader::new(file);
    let label = log_label(prefix);
    let mut replayed = 0usize;
    loop {
        let delta = match read_record(&mut reader, cipher, &label) {
            Ok(Some(delta)) => delta,
            Ok(None) => break,
            Err(error) => {
                // A record cut short by a crash, or the log of another file.
                tracing::debug!(error = %format!("{error:#}"), "snapshot log replayed up to here");
                break;
            }
        };
        if delta.full || delta.base != snapshot.revision {
            tracing::debug!(base = delta.base, held = snapshot.revision, "snapshot log does not chain from here");
            break;
        }
        let deletes: Vec<(Kind, String)> = delta
            .deletes
            .iter()
            .filter_map(|r| convert::resource_ref(r).map(|(kind, id)| (kind, id.to_owned())))
            .collect();
        snapshot.update(delta.revision, converted(delta.upserts), deletes);
        if !delta.store_id.is_empty() {
            snapshot.store_id = delta.store_id;
        }
        replayed += 1;
    }
    if replayed > 0 {
        tracing::debug!(replayed, revision = snapshot.revision, "replayed the snapshot log");
    }
    snapshot
}

/// The next record of a log, opened; `None` at its end.
fn read_record(
    reader: &mut impl Read,
    cipher: &ChaCha20Poly1305,
    label: &[u8],
) -> anyhow::Result<Option<pb::WatchResponse>> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error.into()),
    }
    let len = u32::from_le_bytes(len) as usize;
    anyhow::ensure!((12 + TAG..=MAX_FRAME).contains(&len), "a log record of {len} bytes");
    let mut record = vec![0u8; len];
    reader.read_exact(&mut record).context("a log record cut short")?;
    let (nonce, sealed) = record.split_at(12);
    let plain = cipher
        .decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: label })
        .map_err(|_| anyhow::anyhow!("a log record that does not open"))?;
    Ok(Some(pb::WatchResponse::decode(plain.as_slice()).context("decoding a log record")?))
}

/// Writes `snapshot` to `<data_dir>/snapshot.pb` atomically, sealed under
/// `node_key` frame by frame, and empties the log (whose records belong to
/// the file replaced). Returns the new file's nonce prefix and size.
pub fn save(data_dir: &Path, snapshot: &Snapshot, node_key: &str) -> anyhow::Result<([u8; PREFIX], u64)> {
    use prost::encoding;
    let prefix: [u8; PREFIX] = rand::random();
    let cipher = cipher(node_key);
    let path = data_dir.join(SNAPSHOT_FILE);
    let mut size = 0u64;
    write_durably_with(&data_dir.join(format!("{SNAPSHOT_FILE}.tmp")), &path, |out| {
        out.write_all(FRAMED)?;
        out.write_all(&prefix)?;
        let mut buffer = Vec::with_capacity(FRAME_BYTES + (1 << 16));
        // Field numbers of `WatchResponse`: 1 revision, 2 full, 4 upserts,
        // 6 store_id, 9 expected.
        encoding::uint64::encode(1, &snapshot.revision, &mut buffer);
        encoding::bool::encode(2, &true, &mut buffer);
        if !snapshot.store_id.is_empty() {
            encoding::string::encode(6, &snapshot.store_id, &mut buffer);
        }
        let expected: usize = snapshot.counts().iter().map(|(_, n)| n).sum();
        encoding::uint64::encode(9, &(expected as u64), &mut buffer);
        let mut resources = snapshot.resources().peekable();
        for index in 0u32.. {
            while buffer.len() < FRAME_BYTES
                && let Some(resource) = resources.next()
            {
                encoding::message::encode(4, &convert::to_pb(&resource), &mut buffer);
            }
            let last = resources.peek().is_none();
            let tag = cipher
                .encrypt_in_place_detached(&frame_nonce(&prefix, index, last), FRAMED, &mut buffer)
                .map_err(|_| anyhow::anyhow!("sealing the snapshot failed"))?;
            let len = u32::try_from(buffer.len() + TAG).context("a frame past 4 GiB")?;
            out.write_all(&[u8::from(last)])?;
            out.write_all(&len.to_le_bytes())?;
            out.write_all(&buffer)?;
            out.write_all(&tag)?;
            size += 5 + u64::from(len);
            if last {
                return Ok(());
            }
            buffer.clear();
        }
        Ok(())
    })?;
    match std::fs::remove_file(data_dir.join(LOG_FILE)) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(error).context("removing the snapshot log");
        }
        _ => {}
    }
    Ok((prefix, size + (FRAMED.len() + PREFIX) as u64))
}

/// Appends `deltas` (encoded `WatchResponse`s) to `<data_dir>/snapshot.log`
/// as records bound to the snapshot file of `prefix`, and syncs it; returns
/// the bytes added.
fn append(data_dir: &Path, node_key: &str, prefix: &[u8; PREFIX], deltas: &[Vec<u8>]) -> anyhow::Result<u64> {
    let cipher = cipher(node_key);
    let label = log_label(prefix);
    let mut bytes = Vec::new();
    for delta in deltas {
        let nonce: [u8; 12] = rand::random();
        let sealed = cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: delta, aad: &label })
            .map_err(|_| anyhow::anyhow!("sealing a delta failed"))?;
        let len = u32::try_from(12 + sealed.len()).context("a delta past 4 GiB")?;
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
    }
    let path = data_dir.join(LOG_FILE);
    let mut file = private_file(&path, true)?;
    file.write_all(&bytes).with_context(|| format!("writing {}", path.display()))?;
    file.sync_data().with_context(|| format!("syncing {}", path.display()))?;
    Ok(bytes.len() as u64)
}

/// The nonce of frame `index` of the file of `prefix`.
fn frame_nonce(prefix: &[u8; PREFIX], index: u32, last: bool) -> Nonce {
    let mut nonce = [0u8; 12];
    nonce[..PREFIX].copy_from_slice(prefix);
    nonce[PREFIX..PREFIX + 4].copy_from_slice(&index.to_be_bytes());
    nonce[11] = u8::from(last);
    *Nonce::from_slice(&nonce)
}

/// Associated data of the log records of the file of `prefix`.
fn log_label(prefix: &[u8; PREFIX]) -> Vec<u8> {
    [LOG_LABEL, prefix.as_slice()].concat()
}

/// The cipher keyed by `node_key` (through SHA-256 with a label of its own).
fn cipher(node_key: &str) -> ChaCha20Poly1305 {
    let key = Sha256::new().chain_update(b"gw snapshot key v1\0").chain_update(node_key.as_bytes()).finalize();
    ChaCha20Poly1305::new(&key)
}

/// The plain bytes of a one-message file (without its marker).
fn open(sealed: &[u8], cipher: &ChaCha20Poly1305) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(sealed.len() > 12, "the sealed snapshot is truncated");
    let (nonce, ciphertext) = sealed.split_at(12);
    cipher
        .decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad: SEALED })
        .map_err(|_| anyhow::anyhow!("sealed under another node key, or altered"))
}

/// Saves what is published on `updates` until `shutdown`, then what is left
/// queued: deltas are appended to the log as they come; a full snapshot, or
/// a log grown past a quarter of the file, rewrites the file from the newest
/// snapshot, at most once per `MIN_INTERVAL`.
pub async fn run(
    data_dir: PathBuf,
    node_key: String,
    mut updates: mpsc::UnboundedReceiver<Update>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut files = Files::default();
    loop {
        let first = tokio::select! {
            update = updates.recv() => match update {
                Some(update) => update,
                None => return,
            },
            _ = shutdown.changed() => break,
        };
        let mut batch = vec![first];
        while let Ok(update) = updates.try_recv() {
            batch.push(update);
        }
        let (back, rewrote) = save_blocking(&data_dir, &node_key, files, batch).await;
        files = back;
        if rewrote {
            tokio::select! {
                () = tokio::time::sleep(MIN_INTERVAL) => {}
                _ = shutdown.changed() => break,
            }
        }
    }
    let mut batch = Vec::new();
    while let Ok(update) = updates.try_recv() {
        batch.push(update);
    }
    if !batch.is_empty() {
        save_blocking(&data_dir, &node_key, files, batch).await;
    }
}

/// Saves `batch` (published in this order) off the async workers; returns
/// what is on disk now and whether the whole file was rewritten.
async fn save_blocking(data_dir: &Path, node_key: &str, files: Files, batch: Vec<Update>) -> (Files, bool) {
    let (dir, key) = (data_dir.to_owned(), node_key.to_owned());
    match tokio::task::spawn_blocking(move || save_batch(&dir, &key, files, batch)).await {
        Ok(done) => done,
        Err(error) => {
            tracing::warn!(%error, "snapshot writer failed");
            (Files::default(), false)
        }
    }
}

fn save_batch(data_dir: &Path, node_key: &str, mut files: Files, batch: Vec<Update>) -> (Files, bool) {
    let Some(newest) = batch.last().map(|u| u.snapshot.clone()) else {
        return (files, false);
    };
    let deltas: Option<Vec<Vec<u8>>> = batch.into_iter().map(|u| u.delta).collect();
    if let (Some(prefix), Some(deltas)) = (files.prefix, deltas)
        && files.log_bytes <= files.file_bytes / 4
    {
        match append(data_dir, node_key, &prefix, &deltas) {
            Ok(added) => {
                files.log_bytes += added;
                tracing::debug!(revision = newest.revision, "snapshot delta logged");
                return (files, false);
            }
            Err(error) => tracing::warn!(error = %format!("{error:#}"), "cannot log a snapshot delta; rewriting"),
        }
    }
    files = match save(data_dir, &newest, node_key) {
        Ok((prefix, file_bytes)) => {
            tracing::debug!(revision = newest.revision, "snapshot saved");
            Files { prefix: Some(prefix), file_bytes, log_bytes: 0 }
        }
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), "cannot save the snapshot");
            Files::default()
        }
    };
    (files, true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::{policy::domain::Resource, policy::snapshot::tests as fx};

    #[test]
    fn saved_snapshot_loads_back_with_its_revision_and_indexes() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path(), "node-key").unwrap().is_none());
        let token = fx::token("t1", "sk-abc");
        let hash = token.key_hash;
        let snap = Snapshot::build(
            42,
            [
                Resource::Token(token),
                Resource::Channel(fx::channel("c1", 3, 2, &["default"], &["m"])),
                Resource::Model(fx::model("m")),
            ],
        );
        save(dir.path(), &snap, "node-key").unwrap();
        let loaded = load(dir.path(), "node-key").unwrap().unwrap();
        assert_eq!(loaded.revision, 42);
        assert!(loaded.held);
        assert_eq!(&*loaded.token(&hash).unwrap().id, "t1");
        assert_eq!(loaded.channels("default", "m")[0].api_key, "key-c1");
    }

    #[test]
    fn the_saved_snapshot_holds_no_upstream_key_in_plain_text_and_needs_the_node_key() {
        let dir = tempfile::tempdir().unwrap();
        let snap = Snapshot::build(7, [Resource::Channel(fx::channel("c1", 0, 1, &["default"], &["m"]))]);
        save(dir.path(), &snap, "node-key").unwrap();
        let file = std::fs::read(dir.path().join(SNAPSHOT_FILE)).unwrap();
        assert!(!file.windows(6).any(|w| w == b"key-c1"), "the upstream key is readable on disk");
        let Err(error) = load(dir.path(), "another-node-key") else { panic!("opened under another node key") };
        assert!(format!("{error:#}").contains("another node key"), "{error:#}");
        let mut altered = file.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        std::fs::write(dir.path().join(SNAPSHOT_FILE), &altered).unwrap();
        assert!(load(dir.path(), "node-key").is_err(), "an altered file is refused");
        // A file an older version wrote unsealed is still read.
        let plain = pb::WatchResponse { revision: 3, full: true, ..Default::default() };
        std::fs::write(dir.path().join(SNAPSHOT_FILE), plain.encode_to_vec()).unwrap();
        assert_eq!(load(dir.path(), "node-key").unwrap().unwrap().revision, 3);
    }

    fn tokens(n: usize) -> Vec<Resource> {
        (0..n).map(|i| Resource::Token(fx::token(&format!("t{i}"), &format!("sk-{i}")))).collect()
    }

    fn hash(key: &str) -> crate::policy::domain::KeyHash {
        fx::token("x", key).key_hash
    }

    #[test]
    fn a_snapshot_of_many_frames_loads_back_whole_and_a_cut_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut snap = Snapshot::build(9, tokens(30_000));
        snap.store_id = "s1".into();
        let (_, size) = save(dir.path(), &snap, "node-key").unwrap();
        let path = dir.path().join(SNAPSHOT_FILE);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        assert!(size > 2 * FRAME_BYTES as u64, "the test needs several frames: {size} bytes");
        let loaded = load(dir.path(), "node-key").unwrap().unwrap();
        assert_eq!((loaded.revision, loaded.store_id.as_str()), (9, "s1"));
        assert_eq!(loaded.counts()[2], (Kind::Token, 30_000));
        assert_eq!(&*loaded.token(&hash("sk-29999")).unwrap().id, "t29999");
        // Cut after the first frame: whole frames, but not the last one.
        let file = std::fs::read(&path).unwrap();
        let first = 5 + u32::from_le_bytes(file[23..27].try_into().unwrap()) as usize;
        std::fs::write(&path, &file[..FRAMED.len() + PREFIX + first]).unwrap();
        let Err(error) = load(dir.path(), "node-key") else { panic!("a cut file loaded") };
        assert!(format!("{error:#}").contains("truncated"), "{error:#}");
    }

    #[test]
    fn logged_deltas_replay_on_load_until_one_does_not_chain_and_a_new_file_drops_them() {
        let dir = tempfile::tempdir().unwrap();
        let snap = Snapshot::build(42, tokens(3));
        let (prefix, _) = save(dir.path(), &snap, "node-key").unwrap();
        let delta = |base: u64, revision: u64, upsert: &str, delete: &str| {
            let token = Resource::Token(fx::token(upsert, &format!("sk-{upsert}")));
            pb::WatchResponse {
                revision,
                base,
                upserts: vec![convert::to_pb(&token)],
                deletes: vec![pb::ResourceRef { kind: "token".into(), id: delete.into() }],
                ..Default::default()
            }
            .encode_to_vec()
        };
        let chained = [delta(42, 43, "t7", "t0"), delta(43, 44, "t8", "t1")];
        append(dir.path(), "node-key", &prefix, &chained).unwrap();
        // A gap: revision 46 on top of 45, which never came.
        append(dir.path(), "node-key", &prefix, &[delta(45, 46, "t9", "t2")]).unwrap();
        let loaded = load(dir.path(), "node-key").unwrap().unwrap();
        assert_eq!(loaded.revision, 44);
        assert!(loaded.token(&hash("sk-t0")).is_none() && loaded.token(&hash("sk-t1")).is_none());
        assert!(loaded.token(&hash("sk-t7")).is_some() && loaded.token(&hash("sk-t8")).is_some());
        assert!(loaded.token(&hash("sk-t9")).is_none(), "a delta past a gap was applied");
        assert!(loaded.token(&hash("sk-2")).is_some());

        // Records of another file's log (another prefix) are not replayed.
        let (_, _) = save(dir.path(), &snap, "node-key").unwrap();
        assert!(!dir.path().join(LOG_FILE).exists(), "a new file starts without a log");
        append(dir.path(), "node-key", &prefix, &chained).unwrap();
        assert_eq!(load(dir.path(), "node-key").unwrap().unwrap().revision, 42);
    }

    #[tokio::test]
    async fn the_writer_logs_deltas_after_a_full_write_and_saves_what_is_queued_at_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let writer = tokio::spawn(run(dir.path().to_owned(), "node-key".into(), rx, stopped));
        let full = Arc::new(Snapshot::build(1, tokens(2)));
        tx.send(Update { snapshot: full.clone(), delta: None }).unwrap();
        let mut held = (*full).clone();
        for revision in 2..=4 {
            let token = Resource::Token(fx::token(&format!("n{revision}"), &format!("sk-n{revision}")));
            let message = pb::WatchResponse {
                revision,
                base: revision - 1,
                upserts: vec![convert::to_pb(&token)],
                ..Default::default()
            };
            held = held.apply(revision, [token], []);
            tx.send(Update { snapshot: Arc::new(held.clone()), delta: Some(message.encode_to_vec()) }).unwrap();
        }
        stop.send_replace(true);
        writer.await.unwrap();
        let loaded = load(dir.path(), "node-key").unwrap().unwrap();
        assert_eq!(loaded.revision, 4);
        assert!(loaded.token(&hash("sk-n4")).is_some());
    }
}
