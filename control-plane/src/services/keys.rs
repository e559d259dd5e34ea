//! The admin and node credentials. Given ones win; otherwise each is read from
//! its file in the data dir, or generated there (mode 0600) when the store is
//! still empty. A replica joining a store that is already in use never mints
//! keys of its own: it must be given the fleet's keys. A key must have at
//! least `MIN_KEY_LEN` characters and no key may serve two roles (the admin
//! and node keys differ, and no stored credential reuses either), so a
//! node's credential never opens the admin API (`domain::keys` holds the
//! rules, which stored credentials follow too).

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use crate::domain::keys::{KeyError, check_length, generate};
use anyhow::Context as _;

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
    /// Resolves both keys. Missing files are created in `data_dir` only when
    /// `first_start` (the store is empty); otherwise a missing key is an error.
    pub fn load(
        data_dir: &Path,
        admin: Option<String>,
        node: Option<String>,
        first_start: bool,
    ) -> anyhow::Result<Keys> {
        let (admin, admin_file) = match admin.filter(|k| !k.is_empty()) {
            Some(key) => (key, None),
            None => {
                let path = data_dir.join("admin.key");
                (read_or_create(&path, "gwadm-", first_start, "--admin-key / GW_ADMIN_KEY")?, Some(path))
            }
        };
        let node = match node.filter(|k| !k.is_empty()) {
            Some(key) => key,
            None => read_or_create(&data_dir.join("node.key"), "gwnode-", first_start, "--node-key / GW_NODE_KEY")?,
        };
        check_length(&admin, "admin")?;
        check_length(&node, "node")?;
        if admin == node {
            return Err(KeyError::Reused { role: "admin", other: "node" }.into());
        }
        Ok(Keys { admin, node, admin_file })
    }

    /// The hashes (`domain::keys::hash_key`) of the keys no stored credential may
    /// reuse, each with its role.
    pub fn reserved(&self) -> Vec<(&'static str, String)> {
        vec![("admin", crate::domain::keys::hash_key(&self.admin)), ("node", crate::domain::keys::hash_key(&self.node))]
    }
}

fn read_or_create(path: &Path, prefix: &str, create: bool, flag: &str) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_owned()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    }
    if !create {
        anyhow::bail!(
            "{} is missing and the store is already in use: give the fleet's key with {flag} or copy the file",
            path.display()
        );
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
    use crate::domain::keys::MIN_KEY_LEN;

    #[test]
    fn generated_keys_are_written_once_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Keys::load(dir.path(), None, None, true).expect("first load");
        let second = Keys::load(dir.path(), None, None, false).expect("second load");
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
        let (admin, node) = ("a".repeat(MIN_KEY_LEN), "n".repeat(MIN_KEY_LEN));
        let keys = Keys::load(dir.path(), Some(admin.clone()), Some(node.clone()), false).expect("load");
        assert!(keys.admin_file.is_none());
        assert_eq!((keys.admin, keys.node), (admin, node));
    }

    #[test]
    fn keys_are_not_minted_for_a_store_in_use() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error = Keys::load(dir.path(), None, None, false).expect_err("must refuse");
        assert!(error.to_string().contains("GW_ADMIN_KEY"), "{error}");
        assert!(!dir.path().join("admin.key").exists());
    }

    #[test]
    fn short_or_shared_keys_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let long = |c: char| c.to_string().repeat(MIN_KEY_LEN);
        let short = Keys::load(dir.path(), Some("x".into()), Some(long('n')), false).expect_err("short");
        assert!(short.to_string().contains("admin key must have at least 32"), "{short}");
        let shared = Keys::load(dir.path(), Some(long('k')), Some(long('k')), false).expect_err("shared");
        assert!(shared.to_string().contains("must differ"), "{shared}");
        assert!(Keys::load(dir.path(), Some(long('a')), Some(long('n')), false).is_ok());
    }
}
