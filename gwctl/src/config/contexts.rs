//! Named contexts: `~/.config/gwctl/config.toml` (or `$GWCTL_CONFIG`)
//! holds, per control plane, its endpoint, the file its admin key is in and
//! the CA file of its certificate, and which context is current. Keys stay
//! in their own files: the config names them and is never a secret itself;
//! it is written whole to a temporary file, owner-only, then renamed.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::Global;
use crate::output::{self, Output};

/// The config file.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct File {
    /// The context used when `--context` is not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

/// One control plane.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Context {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Read on every call; the key itself is never stored here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_key_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// `gwctl config` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the contexts; `*` marks the current one.
    #[command(after_help = "Examples:\n  gwctl config get-contexts\n  gwctl config get-contexts -o json")]
    GetContexts,
    /// Print the current context's name.
    #[command(after_help = "Examples:\n  gwctl config current-context")]
    CurrentContext,
    /// Make a context the current one.
    #[command(after_help = "Examples:\n  gwctl config use-context prod")]
    UseContext {
        /// Name of the context.
        name: String,
    },
    /// Create a context or change one; it takes the global --endpoint,
    /// --admin-key-file and --ca-file given (flags or GW_* variables).
    #[command(after_help = "Examples:\n  \
        gwctl config set-context prod --endpoint https://cp.prod:7070 --admin-key-file ~/.config/gwctl/prod.key --ca-file ~/prod-ca.pem\n  \
        gwctl config set-context local --endpoint 127.0.0.1:7070 --admin-key-file ~/.gw/admin.key --use")]
    SetContext {
        /// Name of the context.
        name: String,
        /// Also make it the current context.
        #[arg(long = "use")]
        make_current: bool,
    },
    /// Remove a context.
    #[command(after_help = "Examples:\n  gwctl config delete-context old-staging")]
    DeleteContext {
        /// Name of the context.
        name: String,
    },
}

/// A row of `get-contexts`.
#[derive(Debug, Serialize)]
struct Row {
    name: String,
    current: bool,
    endpoint: Option<String>,
    admin_key_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
}

// === impl File ===

impl File {
    /// The context `name`; fails naming the contexts there are.
    pub fn get(&self, name: &str) -> Result<&Context> {
        self.contexts.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.contexts.keys().map(String::as_str).collect();
            match known.is_empty() {
                true => anyhow!("no context {name:?}: the config file has none (gwctl config set-context)"),
                false => anyhow!("no context {name:?}; there are {}", known.join(", ")),
            }
        })
    }

    /// The current context, if one is set; fails when it names a missing one.
    pub fn current(&self) -> Result<Option<&Context>> {
        self.current_context.as_deref().map(|name| self.get(name)).transpose()
    }
}

/// The config file's path: `$GWCTL_CONFIG`, else
/// `$XDG_CONFIG_HOME/gwctl/config.toml`, else `~/.config/gwctl/config.toml`.
pub fn path() -> Result<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(path) = var("GWCTL_CONFIG") {
        return Ok(path);
    }
    let base = var("XDG_CONFIG_HOME")
        .or_else(|| var("HOME").map(|home| home.join(".config")))
        .context("no config file: set GWCTL_CONFIG, XDG_CONFIG_HOME or HOME")?;
    Ok(base.join("gwctl").join("config.toml"))
}

/// The config at `path`; an absent file is an empty config.
pub fn load(path: &Path) -> Result<File> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).with_context(|| format!("reading config file {}", path.display())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(File::default()),
        Err(err) => Err(err).with_context(|| format!("reading config file {}", path.display())),
    }
}

/// Writes `file` to `path`, readable by the owner only, replacing it whole.
pub fn save(path: &Path, file: &File) -> Result<()> {
    let text = toml::to_string(file).context("encoding the config file")?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let temp = dir.join(format!(".config.toml.{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(&temp).with_context(|| format!("writing {}", temp.display()))?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.sync_all())
        .with_context(|| format!("writing {}", temp.display()))?;
    std::fs::rename(&temp, path).with_context(|| format!("replacing {}", path.display()))
}

/// Runs one `gwctl config` verb on the file at `path`; returns what to print.
pub fn run(command: Command, global: &Global, path: &Path) -> Result<String> {
    let mut file = load(path)?;
    match command {
        Command::GetContexts => {
            let rows: Vec<Row> = file
                .contexts
                .iter()
                .map(|(name, c)| Row {
                    name: name.clone(),
                    current: file.current_context.as_deref() == Some(name),
                    endpoint: c.endpoint.clone(),
                    admin_key_file: c.admin_key_file.clone(),
                    ca_file: c.ca_file.clone(),
                })
                .collect();
            contexts_text(global.output, &rows)
        }
        Command::CurrentContext => match &file.current_context {
            Some(name) => Ok(format!("{name}\n")),
            None => bail!("no current context (gwctl config use-context NAME)"),
        },
        Command::UseContext { name } => {
            file.get(&name)?;
            file.current_context = Some(name.clone());
            save(path, &file)?;
            Ok(format!("switched to context {name:?}\n"))
        }
        Command::SetContext { name, make_current } => {
            if global.admin_key.is_some() && global.admin_key_file.is_none() {
                bail!("a context names the file of its admin key, never the key: pass --admin-key-file");
            }
            let absolute = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
            let context = file.contexts.entry(name.clone()).or_default();
            let created = *context == Context::default();
            if let Some(endpoint) = &global.endpoint {
                context.endpoint = Some(endpoint.clone());
            }
            if let Some(key_file) = &global.admin_key_file {
                context.admin_key_file = Some(absolute(key_file));
            }
            if let Some(ca_file) = &global.ca_file {
                context.ca_file = Some(absolute(ca_file));
            }
            if make_current || file.current_context.is_none() {
                file.current_context = Some(name.clone());
            }
            save(path, &file)?;
            Ok(format!("context {name:?} {}\n", if created { "created" } else { "changed" }))
        }
        Command::DeleteContext { name } => {
            file.get(&name)?;
            file.contexts.remove(&name);
            if file.current_context.as_deref() == Some(name.as_str()) {
                file.current_context = None;
            }
            save(path, &file)?;
            Ok(format!("deleted context {name:?}\n"))
        }
    }
}

fn contexts_text(out: Output, rows: &[Row]) -> Result<String> {
    let show = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "-".into());
    match out {
        Output::Json => output::json_text(&rows),
        Output::Yaml => output::yaml_text(&rows),
        Output::Name => Ok(rows.iter().map(|r| format!("{}\n", r.name)).collect()),
        Output::Table | Output::Wide | Output::Csv => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        if r.current { "*" } else { "" }.to_owned(),
                        r.name.clone(),
                        r.endpoint.clone().unwrap_or_else(|| "-".into()),
                        show(&r.admin_key_file),
                        show(&r.ca_file),
                    ]
                })
                .collect();
            let columns = ["CURRENT", "NAME", "ENDPOINT", "ADMIN KEY FILE", "CA FILE"];
            Ok(if out == Output::Csv {
                output::csv_text(&columns, &cells)
            } else {
                output::table_text(&columns, &cells)
            })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn set_use_and_delete_contexts_round_trip_through_an_owner_only_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gwctl/config.toml");
        let prod = Global {
            endpoint: Some("https://cp.prod:7070".into()),
            admin_key_file: Some(dir.path().join("prod.key")),
            ca_file: Some(dir.path().join("ca.pem")),
            ..Global::default()
        };
        assert_eq!(
            run(Command::SetContext { name: "prod".into(), make_current: false }, &prod, &path).unwrap(),
            "context \"prod\" created\n"
        );
        let dev = Global { endpoint: Some("127.0.0.1:7070".into()), ..Global::default() };
        run(Command::SetContext { name: "dev".into(), make_current: false }, &dev, &path).unwrap();

        let file = load(&path).unwrap();
        assert_eq!(file.current_context.as_deref(), Some("prod"), "the first context becomes current");
        assert_eq!(file.contexts["prod"].admin_key_file.as_deref(), Some(dir.path().join("prod.key").as_path()));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("current-context = \"prod\"") && text.contains("[contexts.dev]"), "{text}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }

        run(Command::UseContext { name: "dev".into() }, &Global::default(), &path).unwrap();
        assert_eq!(run(Command::CurrentContext, &Global::default(), &path).unwrap(), "dev\n");
        let table = run(Command::GetContexts, &Global::default(), &path).unwrap();
        assert!(table.lines().any(|l| l.starts_with("*") && l.contains("dev")), "{table}");
        let err = run(Command::UseContext { name: "stage".into() }, &Global::default(), &path).unwrap_err();
        assert!(err.to_string().contains("there are dev, prod"), "{err}");

        run(Command::DeleteContext { name: "dev".into() }, &Global::default(), &path).unwrap();
        assert!(run(Command::CurrentContext, &Global::default(), &path).is_err());

        let inline = Global { admin_key: Some("secret".into()), ..Global::default() };
        let err = run(Command::SetContext { name: "x".into(), make_current: false }, &inline, &path).unwrap_err();
        assert!(err.to_string().contains("--admin-key-file"), "{err}");
        assert!(!std::fs::read_to_string(&path).unwrap().contains("secret"));
    }

    #[test]
    fn unknown_keys_in_the_file_are_reported() {
        let err = toml::from_str::<File>("[contexts.a]\nadmin-key = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("admin-key"), "{err}");
    }
}
