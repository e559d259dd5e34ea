//! The admin and node credentials. Given ones win; otherwise each is read from
//! its file in the data dir, or generated there (mode 0600) on first start.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use rand::{Rng as _, distr::Alphanumeric};

/// Credentials of one control plane.
#[derive(Debug, Clone)]
pub struct Keys {
    pub admin: String,
    pub node: String,
    /// The admin key's file, when the key came from one.
    pub admin_file: Option<PathBuf>,
}

// === impl Keys ===

impl Keys {
    /// Resolves both keys, creating missing files in `data_dir`.
    pub fn load(data_dir: &Path, admin: Option<String>, node: Option<String>) -> anyhow::Result<Keys> {
        let (admin, admin_file) = match admin.filter(|k| !k.is_empty()) {
            Some(key) => (key, None),
            None => {
                let path = data_dir.join("admin.key");
                (read_or_create(&path, "gwadm-")?, Some(path))
            }
        };
        let node = match node.filter(|k| !k.is_empty()) {
            Some(key) => key,
            None => read_or_create(&data_dir.join("node.key"), "gwnode-")?,
        };
        Ok(Keys { admin, node, admin_file })
    }
}

/// A random credential: `prefix` + 48 alphanumeric characters.
pub fn generate(prefix: &str) -> String {
    let body: String = rand::rng().sample_iter(&Alphanumeric).take(48).map(char::from).collect();
    format!("{prefix}{body}")
}

fn read_or_create(path: &Path, prefix: &str) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_owned()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    }
    let key = generate(prefix);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path).with_context(|| format!("creating {}", path.display()))?;
    writeln!(file, "{key}").with_context(|| format!("writing {}", path.display()))?;
    tracing::info!(path = %path.display(), "generated a new credential");
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_written_once_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Keys::load(dir.path(), None, None).expect("first load");
        let second = Keys::load(dir.path(), None, None).expect("second load");
        assert_eq!(first.admin, second.admin);
        assert_eq!(first.node, second.node);
        assert_ne!(first.admin, first.node);
        assert!(first.admin.len() > 40);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join("admin.key")).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn given_keys_win_over_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = Keys::load(dir.path(), Some("a".into()), Some("n".into())).expect("load");
        assert_eq!((keys.admin.as_str(), keys.node.as_str()), ("a", "n"));
        assert!(keys.admin_file.is_none());
    }
}
