//! The global flags of every command and where their values come from: the
//! flag, then its `GW_*` environment variable, then the context chosen in
//! the config file (`contexts`), then a default. The admin key falls back
//! to `<data-dir>/admin.key`, the file `gwctl up` writes.

pub mod contexts;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::output::Output;

/// Admin key file name inside the data directory.
pub const ADMIN_KEY_FILE: &str = "admin.key";

/// Default control-plane address, also where `gwctl up` listens for admins.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7070";

/// Flags accepted before or after any subcommand.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Context of the config file to use [default: its current-context].
    #[arg(long, env = "GW_CONTEXT", global = true)]
    pub context: Option<String>,

    /// Control plane's gRPC address; several replicas as a comma-separated
    /// list, tried in order [default: the context's, else http://127.0.0.1:7070].
    #[arg(long, env = "GW_ENDPOINT", global = true)]
    pub endpoint: Option<String>,

    /// Admin key [default: the context's key file, else <data-dir>/admin.key].
    #[arg(long, env = "GW_ADMIN_KEY", hide_env_values = true, global = true)]
    pub admin_key: Option<String>,

    /// File holding the admin key (keeps it out of the process list).
    #[arg(long, env = "GW_ADMIN_KEY_FILE", value_name = "PATH", global = true)]
    pub admin_key_file: Option<PathBuf>,

    /// PEM file of the CA that signed an https:// control plane's certificate.
    #[arg(long, env = "GW_CA_FILE", value_name = "PATH", global = true)]
    pub ca_file: Option<PathBuf>,

    /// Directory of the single-node gateway and its admin key [default: $HOME/.gw].
    #[arg(long, env = "GW_DATA_DIR", value_name = "PATH", global = true)]
    pub data_dir: Option<PathBuf>,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

/// Where and how to reach the control plane, once flags, variables and the
/// context are merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub endpoint: String,
    pub admin_key: String,
    pub ca_file: Option<PathBuf>,
    /// Where the admin key came from, in words, for a refusal to name it.
    pub key_source: String,
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

    /// The control plane to talk to: flags and `GW_*` variables, then the
    /// chosen context of the config file, then the defaults. Fails when a
    /// named context does not exist or no admin key can be found.
    pub fn target(&self) -> Result<Target> {
        self.target_in(&contexts::load(&contexts::path()?)?)
    }

    /// `target` with the config file `file`.
    pub fn target_in(&self, file: &contexts::File) -> Result<Target> {
        let context_name = self.context.clone().or_else(|| file.current_context.clone()).unwrap_or_default();
        let context = match &self.context {
            Some(name) => Some(file.get(name)?),
            None => file.current()?,
        };
        let endpoint = self
            .endpoint
            .clone()
            .or_else(|| context.and_then(|c| c.endpoint.clone()))
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        let key_file = self.admin_key_file.clone().or_else(|| {
            // A key given on the command line wins over the context's file.
            if self.admin_key.is_some() { None } else { context.and_then(|c| c.admin_key_file.clone()) }
        });
        let admin_key = self.admin_key(key_file.as_deref())?;
        let ca_file = self.ca_file.clone().or_else(|| context.and_then(|c| c.ca_file.clone()));
        let key_source = match (&self.admin_key_file, &self.admin_key, &key_file) {
            (Some(path), _, _) => format!("--admin-key-file / GW_ADMIN_KEY_FILE {}", path.display()),
            (None, Some(_), _) => "--admin-key / GW_ADMIN_KEY".to_owned(),
            (None, None, Some(path)) => {
                let mut text = format!("the key file {} of context {context_name:?}", path.display());
                if self.data_dir.is_some() {
                    text.push_str(
                        ", which wins over --data-dir / GW_DATA_DIR: pass --admin-key-file, --context or `gwctl config use-context`",
                    );
                }
                text
            }
            (None, None, None) => format!("{}", self.data_dir()?.join(ADMIN_KEY_FILE).display()),
        };
        Ok(Target { endpoint: endpoint_uri(&endpoint), admin_key, ca_file, key_source })
    }

    /// The admin key: from `key_file`, the flag or `GW_ADMIN_KEY`, else the
    /// trimmed contents of `<data-dir>/admin.key`. Fails when none is
    /// available.
    pub fn admin_key(&self, key_file: Option<&Path>) -> Result<String> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        if let Some(path) = key_file.or(self.admin_key_file.as_deref()) {
            let path = expand_home(path, home.as_deref());
            let key = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            return Ok(key.trim().to_string());
        }
        if let Some(key) = &self.admin_key {
            return Ok(key.trim().to_string());
        }
        let path = self.data_dir()?.join(ADMIN_KEY_FILE);
        let key = match std::fs::read_to_string(&path) {
            Ok(key) => key.trim().to_string(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => bail!(
                "no admin key: pass --admin-key-file or --admin-key, choose a context (gwctl config get-contexts), or point --data-dir at the directory of `gwctl up` ({} does not exist)",
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
}

/// The endpoint (or comma-separated endpoints) as URIs; a bare
/// `host:port` gets `http://`.
pub fn endpoint_uri(endpoint: &str) -> String {
    let uri = |e: &str| if e.contains("://") { e.to_string() } else { format!("http://{e}") };
    endpoint.split(',').map(str::trim).filter(|e| !e.is_empty()).map(uri).collect::<Vec<_>>().join(",")
}

/// Expands a leading `~` (which shells leave alone in `--data-dir=~/x`).
pub fn expand_home(path: &Path, home: Option<&Path>) -> PathBuf {
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
            endpoint: Some("127.0.0.1:7070".into()),
            admin_key: admin_key.map(String::from),
            data_dir: data_dir.map(Path::to_path_buf),
            ..Global::default()
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
        let dir = tempfile::tempdir().unwrap();
        let missing = global(Some(dir.path()), None).admin_key(None).unwrap_err();
        assert!(format!("{missing:#}").contains("no admin key"), "{missing:#}");

        std::fs::write(dir.path().join(ADMIN_KEY_FILE), "adm-secret\n").unwrap();
        assert_eq!(global(Some(dir.path()), None).admin_key(None).unwrap(), "adm-secret");
        assert_eq!(global(Some(dir.path()), Some("flag")).admin_key(None).unwrap(), "flag");
    }

    #[test]
    fn flags_beat_the_context_which_beats_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("prod.key");
        std::fs::write(&key_file, "prod-key\n").unwrap();
        let text = format!(
            "current-context = \"prod\"\n\n[contexts.prod]\nendpoint = \"https://cp.prod:7070\"\nadmin-key-file = {:?}\nca-file = \"/etc/gw/ca.pem\"\n\n[contexts.dev]\nendpoint = \"10.0.0.1:7070\"\n",
            key_file
        );
        let file: contexts::File = toml::from_str(&text).unwrap();
        let bare = Global { data_dir: Some(dir.path().to_path_buf()), ..Global::default() };

        let prod = bare.target_in(&file).unwrap();
        assert!(
            prod.key_source
                .starts_with(&format!("the key file {} of context \"prod\", which wins", key_file.display()))
        );
        assert_eq!(prod.endpoint, "https://cp.prod:7070");
        assert_eq!(prod.admin_key, "prod-key");
        assert_eq!(prod.ca_file.as_deref(), Some(Path::new("/etc/gw/ca.pem")));

        let flags =
            Global { endpoint: Some("cp.other:7070".into()), admin_key: Some("flag-key".into()), ..bare.clone() };
        let target = flags.target_in(&file).unwrap();
        assert_eq!((target.endpoint.as_str(), target.admin_key.as_str()), ("http://cp.other:7070", "flag-key"));

        let dev = Global { context: Some("dev".into()), admin_key: Some("k".into()), ..bare.clone() };
        assert_eq!(dev.target_in(&file).unwrap().endpoint, "http://10.0.0.1:7070");
        let missing = Global { context: Some("stage".into()), ..bare.clone() }.target_in(&file).unwrap_err();
        assert!(format!("{missing:#}").contains("no context \"stage\""), "{missing:#}");

        let none = Global { admin_key: Some("k".into()), ..Global::default() };
        assert_eq!(none.target_in(&contexts::File::default()).unwrap().endpoint, DEFAULT_ENDPOINT);
    }

    #[test]
    fn bare_endpoint_gets_http_scheme() {
        assert_eq!(endpoint_uri("127.0.0.1:7070"), "http://127.0.0.1:7070");
        assert_eq!(endpoint_uri("https://cp.example:7070"), "https://cp.example:7070");
        assert_eq!(endpoint_uri("10.0.0.1:7070, https://cp-b:7070"), "http://10.0.0.1:7070,https://cp-b:7070");
    }
}
