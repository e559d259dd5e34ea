//! The global flags of every command and where their values come from: the
//! flag, then its `GW_*` environment variable, then a default. The admin key
//! falls back to `<data-dir>/admin.key`, the file `gwctl up` writes.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::output::Output;

/// Admin key file name inside the data directory.
pub const ADMIN_KEY_FILE: &str = "admin.key";

/// Default control-plane address, also where `gwctl up` listens for admins.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7070";

/// Flags accepted before or after any subcommand.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Control plane's gRPC address.
    #[arg(long, env = "GW_ENDPOINT", default_value = DEFAULT_ENDPOINT, global = true)]
    pub endpoint: String,

    /// Admin key [default: contents of <data-dir>/admin.key].
    #[arg(long, env = "GW_ADMIN_KEY", hide_env_values = true, global = true)]
    pub admin_key: Option<String>,

    /// File holding the admin key (keeps it out of the process list).
    #[arg(long, env = "GW_ADMIN_KEY_FILE", global = true)]
    pub admin_key_file: Option<PathBuf>,

    /// Directory of the single-node gateway and its admin key [default: $HOME/.gw].
    #[arg(long, env = "GW_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,

    /// Output format; json prints the full objects for scripts.
    #[arg(short, long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

// === impl Global ===

impl Global {
    /// The data directory: the flag (with a leading `~/` expanded), else
    /// `$HOME/.gw`. Fails when neither the flag nor `HOME` is set.
    pub fn data_dir(&self) -> Result<PathBuf> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        match &self.data_dir {
            Some(dir) => Ok(expand_home(dir, home.as_deref())),
            None => home
                .map(|home| home.join(".gw"))
                .context("no data directory: pass --data-dir or set GW_DATA_DIR or HOME"),
        }
    }

    /// The admin key: from `--admin-key-file`, the flag or `GW_ADMIN_KEY`,
    /// else the trimmed contents of `<data-dir>/admin.key`. Fails when none
    /// is available.
    pub fn admin_key(&self) -> Result<String> {
        if let Some(path) = &self.admin_key_file {
            let key = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            return Ok(key.trim().to_string());
        }
        if let Some(key) = &self.admin_key {
            return Ok(key.trim().to_string());
        }
        let path = self.data_dir()?.join(ADMIN_KEY_FILE);
        let key = match std::fs::read_to_string(&path) {
            Ok(key) => key.trim().to_string(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => bail!(
                "no admin key: pass --admin-key, set GW_ADMIN_KEY, or point --data-dir at the directory of `gwctl up` ({} does not exist)",
                path.display()
            ),
            Err(err) => {
                return Err(err).with_context(|| format!("reading admin key {}", path.display()));
            }
        };
        if key.is_empty() {
            bail!("admin key file {} is empty", path.display());
        }
        Ok(key)
    }

    /// The endpoint as a URI; a bare `host:port` gets `http://`.
    pub fn endpoint_uri(&self) -> String {
        let endpoint = self.endpoint.trim();
        if endpoint.contains("://") { endpoint.to_string() } else { format!("http://{endpoint}") }
    }
}

/// Expands a leading `~` (which shells leave alone in `--data-dir=~/x`).
fn expand_home(path: &Path, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn global(data_dir: Option<&Path>, admin_key: Option<&str>) -> Global {
        Global {
            endpoint: "127.0.0.1:7070".into(),
            admin_key: admin_key.map(String::from),
            admin_key_file: None,
            data_dir: data_dir.map(Path::to_path_buf),
            output: Output::Table,
        }
    }

    #[test]
    fn tilde_expands_to_home() {
        let home = Path::new("/home/op");
        assert_eq!(expand_home(Path::new("~/.gw"), Some(home)), Path::new("/home/op/.gw"));
        assert_eq!(expand_home(Path::new("~"), Some(home)), Path::new("/home/op"));
        assert_eq!(expand_home(Path::new("/srv/gw"), Some(home)), Path::new("/srv/gw"));
    }

    #[test]
    fn admin_key_falls_back_to_the_trimmed_key_file() {
        let dir = std::env::temp_dir().join(format!("gwctl-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = global(Some(&dir), None).admin_key().unwrap_err();
        assert!(format!("{missing:#}").contains("no admin key"), "{missing:#}");

        std::fs::write(dir.join(ADMIN_KEY_FILE), "adm-secret\n").unwrap();
        assert_eq!(global(Some(&dir), None).admin_key().unwrap(), "adm-secret");
        assert_eq!(global(Some(&dir), Some("flag")).admin_key().unwrap(), "flag");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bare_endpoint_gets_http_scheme() {
        assert_eq!(global(None, None).endpoint_uri(), "http://127.0.0.1:7070");
        let mut tls = global(None, None);
        tls.endpoint = "https://cp.example:7070".into();
        assert_eq!(tls.endpoint_uri(), "https://cp.example:7070");
    }
}
