//! Files the data plane keeps: written so that a crash leaves either the old
//! contents or all of the new ones (the policy snapshot, the node id, usage
//! the control plane refused), readable by the owner only (0600, in 0700
//! directories), since the snapshot holds upstream keys and the spool what
//! callers spent. The usage spool's own log is appended to (see `spool`).

use std::path::Path;

use anyhow::Context as _;

/// Creates `dir` (and its parents) if missing and makes it private (0700).
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private", dir.display()))?;
    }
    Ok(())
}

/// Writes `bytes` to `tmp` (mode 0600), fsyncs, renames it to `path` and
/// fsyncs the directory, so `path` holds either nothing or all of `bytes`.
pub fn write_durably(tmp: &Path, path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_durably_with(tmp, path, |out| out.write_all(bytes).map_err(Into::into))
}

/// Like `write_durably`, with what `write` writes (buffered) as the bytes,
/// so a large file never needs to be held whole; `path` is left alone when
/// `write` fails.
pub fn write_durably_with(
    tmp: &Path,
    path: &Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut file = std::io::BufWriter::with_capacity(1 << 16, private_file(tmp, false)?);
    write(&mut file).with_context(|| format!("writing {}", tmp.display()))?;
    let file =
        file.into_inner().map_err(|error| error.into_error()).with_context(|| format!("writing {}", tmp.display()))?;
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

/// Opens `path` for writing, created with mode 0600: truncated, or
/// appended to when `append`.
pub fn private_file(path: &Path, append: bool) -> anyhow::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true);
    if append {
        options.append(true);
    } else {
        options.write(true).truncate(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    options.open(path).with_context(|| format!("opening {}", path.display()))
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_and_directories_are_the_owners_alone() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data/dp");
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let path = dir.join("snapshot.pb");
        write_durably(&dir.join("snapshot.pb.tmp"), &path, b"secret").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"secret");
    }
}
