//! The on-disk copy of the policy snapshot, so a restarted data plane serves
//! on its last good policy while the control plane is unreachable.
//!
//! The file is a prost-encoded `WatchResponse` with `full = true`, sealed
//! with ChaCha20-Poly1305 under a key derived from the node key, since it
//! holds upstream keys: without the node key (which operators keep outside
//! the data dir, `--node-key-file`) the file reads as noise, and a tampered
//! file is refused. It is replaced atomically (temp file + rename); a
//! writer task saves the newest snapshot at most about once per second,
//! however fast updates arrive. An unsealed file from an older version is
//! still read once.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use chacha20poly1305::{
    ChaCha20Poly1305, KeyInit as _, Nonce,
    aead::{Aead as _, AeadInPlace as _, Payload},
};
use gw_proto::pb;
use prost::Message as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;

use crate::{
    durable::write_durably,
    policy::{convert, snapshot::Snapshot},
};

/// File name of the snapshot inside the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot.pb";
/// Least time between two writes.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// What a sealed snapshot file starts with; the nonce follows.
const SEALED: &[u8] = b"gw-snapshot-v1\0";

/// Reads `<data_dir>/snapshot.pb`, sealed under `node_key`; `None` if there
/// is none. Fails on a file sealed under another key, or altered. Resources
/// that do not convert are logged and left out.
pub fn load(data_dir: &Path, node_key: &str) -> anyhow::Result<Option<Snapshot>> {
    let path = data_dir.join(SNAPSHOT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let bytes = match bytes.strip_prefix(SEALED) {
        Some(sealed) => open(sealed, node_key).with_context(|| format!("opening {}", path.display()))?,
        None => bytes,
    };
    let full = pb::WatchResponse::decode(bytes.as_slice()).with_context(|| format!("decoding {}", path.display()))?;
    let resources = full.upserts.into_iter().filter_map(|r| match convert::resource(r) {
        Ok(resource) => Some(resource),
        Err(rejected) => {
            tracing::warn!(resource = %rejected.name, reason = %rejected.reason, "skipped a saved resource");
            None
        }
    });
    let mut snapshot = Snapshot::build(full.revision, resources);
    snapshot.store_id = full.store_id;
    Ok(Some(snapshot))
}

/// Writes `snapshot` to `<data_dir>/snapshot.pb` atomically, sealed under
/// `node_key`. The message is encoded one resource at a time into the one
/// buffer that is then sealed in place: at a million tokens no list of
/// protobuf resources and no second copy of the bytes is ever held.
pub fn save(data_dir: &Path, snapshot: &Snapshot, node_key: &str) -> anyhow::Result<()> {
    use prost::encoding;
    let nonce: [u8; 12] = rand::random();
    let resources: usize = snapshot.counts().iter().map(|(_, n)| n).sum();
    let mut buffer = Vec::with_capacity(SEALED.len() + 12 + 64 + 160 * resources);
    buffer.extend_from_slice(SEALED);
    buffer.extend_from_slice(&nonce);
    let start = buffer.len();
    // Field numbers of `WatchResponse`: 1 revision, 2 full, 4 upserts, 6 store_id.
    encoding::uint64::encode(1, &snapshot.revision, &mut buffer);
    encoding::bool::encode(2, &true, &mut buffer);
    for resource in snapshot.resources() {
        encoding::message::encode(4, &convert::to_pb(&resource), &mut buffer);
    }
    if !snapshot.store_id.is_empty() {
        encoding::string::encode(6, &snapshot.store_id, &mut buffer);
    }
    let tag = cipher(node_key)
        .encrypt_in_place_detached(Nonce::from_slice(&nonce), SEALED, &mut buffer[start..])
        .map_err(|_| anyhow::anyhow!("sealing the snapshot failed"))?;
    buffer.extend_from_slice(&tag);
    let path = data_dir.join(SNAPSHOT_FILE);
    write_durably(&data_dir.join(format!("{SNAPSHOT_FILE}.tmp")), &path, &buffer)
}

/// The cipher keyed by `node_key` (through SHA-256 with a label of its own).
fn cipher(node_key: &str) -> ChaCha20Poly1305 {
    let key = Sha256::new().chain_update(b"gw snapshot key v1\0").chain_update(node_key.as_bytes()).finalize();
    ChaCha20Poly1305::new(&key)
}

/// The plain bytes of what `seal` made (without its marker).
fn open(sealed: &[u8], node_key: &str) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(sealed.len() > 12, "the sealed snapshot is truncated");
    let (nonce, ciphertext) = sealed.split_at(12);
    cipher(node_key)
        .decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad: SEALED })
        .map_err(|_| anyhow::anyhow!("sealed under another node key, or altered"))
}

/// Saves each snapshot published on `updates`, at most once per
/// `MIN_INTERVAL`, until `shutdown`; then saves the newest one if unsaved.
pub async fn run(
    data_dir: PathBuf,
    node_key: String,
    mut updates: watch::Receiver<Arc<Snapshot>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut saved = None;
    loop {
        tokio::select! {
            changed = updates.changed() => if changed.is_err() { break },
            _ = shutdown.changed() => break,
        }
        let snapshot = updates.borrow_and_update().clone();
        saved = Some(snapshot.revision);
        save_blocking(&data_dir, &node_key, snapshot).await;
        tokio::select! {
            () = tokio::time::sleep(MIN_INTERVAL) => {}
            _ = shutdown.changed() => break,
        }
    }
    // The sender may be gone by now (discovery stopped first), so compare
    // revisions rather than asking the channel whether it changed.
    let newest = updates.borrow().clone();
    if newest.held && saved != Some(newest.revision) {
        save_blocking(&data_dir, &node_key, newest).await;
    }
}

async fn save_blocking(data_dir: &Path, node_key: &str, snapshot: Arc<Snapshot>) {
    let (dir, key) = (data_dir.to_owned(), node_key.to_owned());
    let revision = snapshot.revision;
    match tokio::task::spawn_blocking(move || save(&dir, &snapshot, &key)).await {
        Ok(Ok(())) => tracing::debug!(revision, "snapshot saved"),
        Ok(Err(error)) => tracing::warn!(error = %format!("{error:#}"), "cannot save the snapshot"),
        Err(error) => tracing::warn!(%error, "snapshot writer failed"),
    }
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
        assert_eq!(loaded.token(&hash).unwrap().id, "t1");
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
}
