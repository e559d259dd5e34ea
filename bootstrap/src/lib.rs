//! Bootstrap configuration of the gateway's binaries, in layers: built-in
//! defaults, then a TOML file (`--config`), then `GW_*` variables, then
//! flags. Each setting is declared once (`Setting`): its file key, flag,
//! variable, default and help. Every invalid value is collected, so an
//! operator reads them all in one report and the binary fails once, with
//! exit status 64.

use std::{fmt, path::PathBuf, process::ExitCode};

use clap::{Arg, ArgAction, ArgMatches, Command, parser::ValueSource};

/// Exit status of a binary whose configuration is invalid (`EX_CONFIG`'s
/// neighbour `EX_USAGE`, as sysexits.h has it).
pub const EXIT_BAD_CONFIG: u8 = 64;

/// One setting: `name` is its key in the file (`header_read_timeout_ms`)
/// and, with dashes, its flag (`--header-read-timeout-ms`).
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub name: &'static str,
    /// The environment variable that overrides the file.
    pub env: &'static str,
    /// Used when no layer gives a value.
    pub default: Option<&'static str>,
    pub help: &'static str,
    /// Values are never echoed (in help or in error reports).
    pub secret: bool,
}

/// The parsed layers of one binary's configuration, and the errors found so
/// far.
pub struct Layers {
    matches: ArgMatches,
    settings: &'static [Setting],
    file: Option<(PathBuf, toml::Table)>,
    errors: Vec<String>,
}

/// Why a binary should not start.
#[derive(Debug)]
pub enum Failure {
    /// `--help` or `--version` (exit 0), or a command line clap could not
    /// parse (exit 64).
    Cli(clap::Error),
    /// Every invalid value, one line each.
    Invalid(Vec<String>),
}

/// Where a value came from, for error reports.
enum Origin {
    Flag(String),
    Env(&'static str),
    File(&'static str, PathBuf),
    Default(&'static str),
}

// === impl Setting ===

impl Setting {
    /// A setting with a default (`None` for none), not secret.
    pub const fn new(name: &'static str, env: &'static str, default: Option<&'static str>, help: &'static str) -> Self {
        Setting { name, env, default, help, secret: false }
    }

    /// This setting, with its values never echoed.
    pub const fn secret(self) -> Self {
        Setting { secret: true, ..self }
    }

    fn flag(&self) -> String {
        self.name.replace('_', "-")
    }
}

// === impl Layers ===

impl Layers {
    /// Parses `args` for `command` (name, version and about), adding a flag
    /// per setting plus `--config PATH` (variable `config_env`) and
    /// `--check-config`, then reads the file. A file that cannot be read or
    /// parsed, or holds unknown keys, is recorded as errors; the command
    /// line is the only thing that fails here.
    pub fn parse<I, T>(
        command: Command,
        settings: &'static [Setting],
        config_env: &'static str,
        args: I,
    ) -> Result<Layers, Failure>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut command = command
            .arg(Arg::new("config").long("config").env(config_env).value_name("PATH").help(
                "TOML file of settings (keys as the flags, with underscores); GW_* variables override it, flags override both",
            ))
            .arg(
                Arg::new("check_config")
                    .long("check-config")
                    .action(ArgAction::SetTrue)
                    .help("Check the configuration, report every invalid value and exit (0 if valid, 64 if not)"),
            );
        for setting in settings {
            let help = match (setting.default, setting.secret) {
                (Some(default), false) => format!("{} [default: {default}]", setting.help),
                _ => setting.help.to_owned(),
            };
            command = command.arg(
                Arg::new(setting.name)
                    .long(setting.flag())
                    .env(setting.env)
                    .hide_env_values(setting.secret)
                    .value_name("VALUE")
                    .allow_hyphen_values(true)
                    .help(help),
            );
        }
        let matches = command.try_get_matches_from(args).map_err(Failure::Cli)?;
        let mut layers = Layers { matches, settings, file: None, errors: Vec::new() };
        if let Some(path) = layers.matches.get_one::<String>("config").map(PathBuf::from) {
            layers.read_file(path);
        }
        Ok(layers)
    }

    /// Whether `--check-config` was given.
    pub fn check_only(&self) -> bool {
        self.matches.get_flag("check_config")
    }

    /// The value of setting `name` from the highest layer that has one,
    /// parsed by `parse`; `None` (with the error recorded) when invalid, or
    /// when no layer and no default gives one.
    pub fn get<T>(&mut self, name: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        let setting = *self.setting(name);
        let (text, origin) = self.raw(&setting)?;
        match parse(text.trim()) {
            Ok(value) => Some(value),
            Err(message) => {
                let error = match setting.secret {
                    true => format!("{origin}: {message}"),
                    false => format!("{origin} {text:?}: {message}"),
                };
                self.errors.push(error);
                None
            }
        }
    }

    /// Records an error that involves several settings.
    pub fn error(&mut self, message: impl Into<String>) {
        self.errors.push(message.into());
    }

    /// `Ok` when no error was recorded, else every error.
    pub fn finish(self) -> Result<(), Failure> {
        match self.errors.is_empty() {
            true => Ok(()),
            false => Err(Failure::Invalid(self.errors)),
        }
    }

    fn setting(&self, name: &str) -> &Setting {
        match self.settings.iter().find(|s| s.name == name) {
            Some(setting) => setting,
            None => panic!("no setting named {name:?} was declared"),
        }
    }

    fn raw(&mut self, setting: &Setting) -> Option<(String, Origin)> {
        if let Some(value) = self.matches.get_one::<String>(setting.name) {
            let origin = match self.matches.value_source(setting.name) {
                Some(ValueSource::EnvVariable) => Origin::Env(setting.env),
                _ => Origin::Flag(format!("--{}", setting.flag())),
            };
            return Some((value.clone(), origin));
        }
        if let Some((path, table)) = &self.file
            && let Some(value) = table.get(setting.name)
        {
            let origin = Origin::File(setting.name, path.clone());
            return match file_text(value) {
                Ok(text) => Some((text, origin)),
                Err(message) => {
                    self.errors.push(format!("{origin}: {message}"));
                    None
                }
            };
        }
        setting.default.map(|default| (default.to_owned(), Origin::Default(setting.name)))
    }

    fn read_file(&mut self, path: PathBuf) {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) => return self.errors.push(format!("reading {}: {error}", path.display())),
        };
        let table = match text.parse::<toml::Table>() {
            Ok(table) => table,
            Err(error) => {
                let message = error.to_string();
                return self.errors.push(format!("{} is not TOML: {}", path.display(), message.trim_end()));
            }
        };
        for key in table.keys() {
            if !self.settings.iter().any(|s| s.name == key) {
                self.errors.push(format!("unknown key {key:?} in {}", path.display()));
            }
        }
        self.file = Some((path, table));
    }
}

/// A TOML value as the text a flag would carry: strings as they are,
/// numbers and booleans written out, arrays joined with commas.
fn file_text(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(text) => Ok(text.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(n) => Ok(n.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Array(items) => {
            items.iter().map(file_text).collect::<Result<Vec<_>, _>>().map(|items| items.join(","))
        }
        toml::Value::Datetime(_) | toml::Value::Table(_) => {
            Err("expected a string, a number or a list of them".to_owned())
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag(flag) => f.write_str(flag),
            Origin::Env(name) => f.write_str(name),
            Origin::File(key, path) => write!(f, "{key} in {}", path.display()),
            Origin::Default(name) => write!(f, "default {name}"),
        }
    }
}

// === impl Failure ===

impl Failure {
    /// Prints the failure (help and version to stdout, errors to stderr as
    /// `program: …`) and returns the exit status: 0 for help and version,
    /// 64 otherwise.
    pub fn report(&self, program: &str) -> ExitCode {
        match self {
            Failure::Cli(error) if !error.use_stderr() => {
                let _ = error.print();
                ExitCode::SUCCESS
            }
            Failure::Cli(error) => {
                eprint!("{program}: {error}");
                ExitCode::from(EXIT_BAD_CONFIG)
            }
            Failure::Invalid(errors) => {
                let count = errors.len();
                eprintln!("{program}: {count} invalid setting{}:", if count == 1 { "" } else { "s" });
                for error in errors {
                    eprintln!("  {error}");
                }
                ExitCode::from(EXIT_BAD_CONFIG)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    static SETTINGS: &[Setting] = &[
        Setting::new("listen", "GW_TEST_BOOTSTRAP_LISTEN", Some("127.0.0.1:1"), "address"),
        Setting::new("attempts", "GW_TEST_BOOTSTRAP_ATTEMPTS", Some("3"), "attempts"),
        Setting::new("proxies", "GW_TEST_BOOTSTRAP_PROXIES", None, "list"),
        Setting::new("key", "GW_TEST_BOOTSTRAP_KEY", None, "secret").secret(),
    ];

    fn layered(file: &str, flags: &[&str]) -> (Layers, tempfile::NamedTempFile) {
        let path = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(path.path(), file).unwrap();
        let config = path.path().to_str().unwrap().to_owned();
        let args = ["gw-test", "--config", &config].into_iter().chain(flags.iter().copied()).map(str::to_owned);
        let layers = Layers::parse(Command::new("gw-test"), SETTINGS, "GW_TEST_BOOTSTRAP_CONFIG", args);
        (layers.map_err(|e| format!("{e:?}")).unwrap(), path)
    }

    fn number(text: &str) -> Result<u32, String> {
        text.parse().map_err(|_| "not a number".to_owned())
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let (mut layers, _file) =
            layered("attempts = 5\nproxies = [\"10.0.0.0/8\", \"::1\"]\n", &["--listen", "0.0.0.0:80"]);
        assert_eq!(layers.get("listen", |t| Ok(t.to_owned())).unwrap(), "0.0.0.0:80");
        assert_eq!(layers.get("attempts", number), Some(5));
        assert_eq!(layers.get("proxies", |t| Ok(t.to_owned())).unwrap(), "10.0.0.0/8,::1");
        assert_eq!(layers.get("key", |t| Ok(t.to_owned())), None);
        assert!(layers.finish().is_ok());

        let (mut layers, _file) = layered("", &["--attempts", "7"]);
        assert_eq!(layers.get("attempts", number), Some(7));
        let (mut layers, _file) = layered("", &[]);
        assert_eq!(layers.get("attempts", number), Some(3));
    }

    #[test]
    fn every_invalid_value_is_reported_and_secrets_are_not_echoed() {
        let (mut layers, file) = layered("attempts = \"many\"\nlisten = { a = 1 }\nnope = 1\n", &["--key", "hunter2"]);
        assert_eq!(layers.get("attempts", number), None);
        assert_eq!(layers.get("listen", |t| Ok(t.to_owned())), None);
        assert_eq!(layers.get::<()>("key", |_| Err("too short".to_owned())), None);
        let Err(Failure::Invalid(errors)) = layers.finish() else { panic!("no errors") };
        let path = file.path().display().to_string();
        assert_eq!(errors.len(), 4, "{errors:#?}");
        assert!(errors.contains(&format!("unknown key \"nope\" in {path}")), "{errors:#?}");
        assert!(errors.contains(&format!("attempts in {path} \"many\": not a number")), "{errors:#?}");
        assert!(errors.iter().any(|e| e.starts_with(&format!("listen in {path}: expected"))), "{errors:#?}");
        assert!(errors.contains(&"--key: too short".to_owned()), "{errors:#?}");
    }

    #[test]
    fn a_file_that_is_not_toml_is_an_error_and_an_unknown_flag_fails_the_command_line() {
        let (layers, _file) = layered("attempts = = 1", &[]);
        let Err(Failure::Invalid(errors)) = layers.finish() else { panic!("no errors") };
        assert!(errors[0].contains("is not TOML"), "{errors:?}");
        let parsed =
            Layers::parse(Command::new("gw-test"), SETTINGS, "GW_TEST_BOOTSTRAP_CONFIG", ["gw-test", "--bogus"]);
        assert!(matches!(parsed, Err(Failure::Cli(_))));
    }
}
