//! Writing a file so that a crash leaves either the old contents or all of
//! the new ones: the policy snapshot, usage spool batches, generated keys.

use std::{io::Write as _, path::Path};

use anyhow::Context as _;

/// Writes `bytes` to `tmp`, fsyncs, renames it to `path` and fsyncs the
/// directory, so `path` holds either nothing or all of `bytes`.
pub fn write_durably(tmp: &Path, path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut file = std::fs::File::create(tmp).with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(bytes).with_context(|| format!("writing {}", tmp.display()))?;
    file.sync_all().with_context(|| format!("syncing {}", tmp.display()))?;
    drop(file);
    std::fs::rename(tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    if let Some(dir) = path.parent() {
        // Makes the rename itself durable; not possible on every platform.
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}
