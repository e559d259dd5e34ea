//! The on-disk copy of the policy snapshot, so a restarted data plane serves
//! on its last good policy while the control plane is unreachable.
//!
//! The file is a prost-encoded `WatchResponse` with `full = true`, replaced
//! atomically (temp file + rename). A writer task saves the newest snapshot
//! at most about once per second, however fast updates arrive.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use gw_proto::pb;
use prost::Message as _;
use tokio::sync::watch;

use crate::{
    durable::write_durably,
    policy::{convert, snapshot::Snapshot},
};

/// File name of the snapshot inside the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot.pb";
/// Least time between two writes.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Reads `<data_dir>/snapshot.pb`; `None` if there is none. Resources that do
/// not convert are logged and left out.
pub fn load(data_dir: &Path) -> anyhow::Result<Option<Snapshot>> {
    let path = data_dir.join(SNAPSHOT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let full = pb::WatchResponse::decode(bytes.as_slice()).with_context(|| format!("decoding {}", path.display()))?;
    let resources = full.upserts.into_iter().filter_map(|r| match convert::resource(r) {
        Ok(resource) => Some(resource),
        Err(rejected) => {
            tracing::warn!(resource = %rejected.name, reason = %rejected.reason, "skipped a saved resource");
            None
        }
    });
    Ok(Some(Snapshot::build(full.revision, resources)))
}

/// Writes `snapshot` to `<data_dir>/snapshot.pb` atomically.
pub fn save(data_dir: &Path, snapshot: &Snapshot) -> anyhow::Result<()> {
    let full = pb::WatchResponse {
        revision: snapshot.revision,
        full: true,
        base: 0,
        upserts: snapshot.resources().map(|r| convert::to_pb(&r)).collect(),
        deletes: Vec::new(),
    };
    let path = data_dir.join(SNAPSHOT_FILE);
    write_durably(&data_dir.join(format!("{SNAPSHOT_FILE}.tmp")), &path, &full.encode_to_vec())
}

/// Saves each snapshot published on `updates`, at most once per
/// `MIN_INTERVAL`, until `shutdown`; then saves the newest one if unsaved.
pub async fn run(data_dir: PathBuf, mut updates: watch::Receiver<Arc<Snapshot>>, mut shutdown: watch::Receiver<bool>) {
    let mut saved = None;
    loop {
        tokio::select! {
            changed = updates.changed() => if changed.is_err() { break },
            _ = shutdown.changed() => break,
        }
        let snapshot = updates.borrow_and_update().clone();
        saved = Some(snapshot.revision);
        save_blocking(&data_dir, snapshot).await;
        tokio::select! {
            () = tokio::time::sleep(MIN_INTERVAL) => {}
            _ = shutdown.changed() => break,
        }
    }
    // The sender may be gone by now (discovery stopped first), so compare
    // revisions rather than asking the channel whether it changed.
    let newest = updates.borrow().clone();
    if newest.held && saved != Some(newest.revision) {
        save_blocking(&data_dir, newest).await;
    }
}

async fn save_blocking(data_dir: &Path, snapshot: Arc<Snapshot>) {
    let dir = data_dir.to_owned();
    let revision = snapshot.revision;
    match tokio::task::spawn_blocking(move || save(&dir, &snapshot)).await {
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
        assert!(load(dir.path()).unwrap().is_none());
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
        save(dir.path(), &snap).unwrap();
        let loaded = load(dir.path()).unwrap().unwrap();
        assert_eq!(loaded.revision, 42);
        assert!(loaded.held);
        assert_eq!(loaded.token(&hash).unwrap().id, "t1");
        assert_eq!(loaded.channels("default", "m")[0].api_key, "key-c1");
    }
}
