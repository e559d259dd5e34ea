//! The control plane's bootstrap settings, layered by `gw-bootstrap`:
//! defaults, then the `--config` TOML file, then `GW_*` variables, then
//! flags. Every invalid value is reported before the binary fails (exit 64).
//! Key files are read only when starting, so `--check-config` runs where the
//! secrets are not mounted.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use gw_bootstrap::{Failure, Layers, Setting};
use gw_telemetry::LogFormat;

use crate::{
    Config, ServerTls,
    domain::keys::MIN_KEY_LEN,
    domain::secrets::{Keyring, MasterKey},
};

/// Every setting of `gw-control-plane`: file key, variable, default, help.
pub static SETTINGS: &[Setting] = &[
    Setting::new("listen", "GW_CP_LISTEN", Some("127.0.0.1:7070"), "gRPC listen address for gwctl and data planes"),
    Setting::new(
        "admin_listen",
        "GW_CP_ADMIN_LISTEN",
        None,
        "Admin listener serving /metrics (Prometheus text) and /healthz; off unless set",
    ),
    Setting::new(
        "console_listen",
        "GW_CP_CONSOLE_LISTEN",
        None,
        "Listen address of the web console (account owners and operators); off unless set",
    ),
    Setting::new(
        "console_url",
        "GW_CP_CONSOLE_URL",
        Some(""),
        "Public base URL of the console, with any path prefix a proxy adds (https makes its cookies Secure) [default: http://<console_listen>]",
    ),
    Setting::new(
        "console_gateway_url",
        "GW_CP_CONSOLE_GATEWAY_URL",
        Some(""),
        "Base URL of a data plane (without /v1): the console's playground sends requests there and its token page shows it; empty turns the playground off",
    ),
    Setting::new(
        "console_session_idle",
        "GW_CP_CONSOLE_SESSION_IDLE",
        Some("2h"),
        "A console session unused this long ends",
    ),
    Setting::new(
        "console_session_max",
        "GW_CP_CONSOLE_SESSION_MAX",
        Some("12h"),
        "A console session ends this long after sign-in, used or not",
    ),
    Setting::new(
        "store",
        "GW_CP_STORE",
        Some(""),
        "`redis://host:port/db` (or `rediss://`) for Redis, `redis+cluster://host:port,host:port` (or `rediss+cluster://`) for a Redis Cluster; empty for the embedded store in the data dir",
    ),
    Setting::new(
        "data_dir",
        "GW_CP_DATA_DIR",
        Some("gw-control-plane"),
        "Holds the embedded store and the generated admin.key and node.key",
    ),
    Setting::new(
        "admin_key",
        "GW_ADMIN_KEY",
        None,
        "Admin credential, at least 32 characters [default: <data-dir>/admin.key, generated on first start]",
    )
    .secret(),
    Setting::new(
        "admin_key_file",
        "GW_ADMIN_KEY_FILE",
        None,
        "File holding the admin credential (keeps it out of the process list)",
    ),
    Setting::new(
        "node_key",
        "GW_NODE_KEY",
        None,
        "Data-plane credential, at least 32 characters and not the admin key [default: <data-dir>/node.key]",
    )
    .secret(),
    Setting::new("node_key_file", "GW_NODE_KEY_FILE", None, "File holding the data-plane credential"),
    Setting::new(
        "video_timeout",
        "GW_CP_VIDEO_TIMEOUT",
        Some("30m"),
        "A video task not finished this long after submission fails and is refunded (`90s`, `30m`, `2h`)",
    ),
    Setting::new(
        "video_poll_interval",
        "GW_CP_VIDEO_POLL_INTERVAL",
        Some("5s"),
        "How often the video poller looks at unfinished tasks",
    ),
    Setting::new(
        "video_refresh_after",
        "GW_CP_VIDEO_REFRESH_AFTER",
        Some("3s"),
        "A video status query older than this asks the upstream again",
    ),
    Setting::new(
        "batch_poll_interval",
        "GW_CP_BATCH_POLL_INTERVAL",
        Some("10s"),
        "How often the batch poller refreshes running batches and bills the ones that ended",
    ),
    Setting::new(
        "batch_refresh_after",
        "GW_CP_BATCH_REFRESH_AFTER",
        Some("3s"),
        "A batch status query older than this asks the upstream again",
    ),
    Setting::new(
        "probe_interval",
        "GW_CP_PROBE_INTERVAL",
        Some("30s"),
        "How often auto-disabled channels are probed (GET /models) and re-enabled if they answer",
    ),
    Setting::new(
        "require_store_persistence",
        "GW_CP_REQUIRE_STORE_PERSISTENCE",
        Some("false"),
        "`true`: refuse to start on a Redis that keeps nothing on disk (or hides its CONFIG); `false`: warn",
    ),
    Setting::new(
        "snapshot_in_memory",
        "GW_CP_SNAPSHOT_IN_MEMORY",
        Some("true"),
        "`true`: keep the policy state in memory (encoded) and serve data planes' full syncs from it; `false`: read the store on each",
    ),
    Setting::new(
        "usage_retention_days",
        "GW_CP_USAGE_RETENTION_DAYS",
        Some("90"),
        "Raw usage records (gwctl usage list) are removed this many days after they were made",
    ),
    Setting::new(
        "usage_max_records",
        "GW_CP_USAGE_MAX_RECORDS",
        Some("1000000"),
        "At most this many raw usage records are kept, the oldest removed first; 0 for no cap",
    ),
    Setting::new(
        "rollup_retention_days",
        "GW_CP_ROLLUP_RETENTION_DAYS",
        Some("400"),
        "Hourly and daily usage rollups (gwctl usage summary) are kept this many days",
    ),
    Setting::new(
        "tls_cert_file",
        "GW_CP_TLS_CERT_FILE",
        None,
        "PEM certificate chain of the gRPC listener; with tls_key_file, serves TLS only",
    ),
    Setting::new("tls_key_file", "GW_CP_TLS_KEY_FILE", None, "PEM private key of tls_cert_file"),
    Setting::new(
        "client_ca_file",
        "GW_CP_CLIENT_CA_FILE",
        None,
        "PEM CA bundle: a data plane showing a client certificate it signed is admitted as the node the certificate names",
    ),
    Setting::new(
        "require_client_cert",
        "GW_CP_REQUIRE_CLIENT_CERT",
        Some("false"),
        "The policy service refuses data planes without a client certificate (the node key alone is not enough)",
    ),
    Setting::new(
        "store_ca_file",
        "GW_CP_STORE_CA_FILE",
        None,
        "PEM CA bundle a rediss:// (or rediss+cluster://) store's certificate is checked against [default: the system's roots]",
    ),
    Setting::new(
        "master_key",
        "GW_MASTER_KEY",
        None,
        "Master key sealing upstream keys at rest: 64 hex characters (`openssl rand -hex 32`)",
    )
    .secret(),
    Setting::new("master_key_file", "GW_MASTER_KEY_FILE", None, "File holding the master key (0600)"),
    Setting::new(
        "previous_master_key_files",
        "GW_PREVIOUS_MASTER_KEY_FILES",
        Some(""),
        "Comma-separated files of earlier master keys: they still open upstream keys, never seal new ones",
    ),
    Setting::new("log_format", "GW_LOG_FORMAT", Some("text"), "Log lines as `text` or `json`"),
    Setting::new(
        "budget_time_zone",
        "GW_CP_BUDGET_TIME_ZONE",
        Some("UTC"),
        "IANA time zone of day, week and month budgets that name none when written, e.g. Europe/Berlin",
    ),
];

/// A loaded configuration, and what the binary was asked to do with it.
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    pub log_format: LogFormat,
    /// `--check-config`: the values are valid; do not start.
    pub check_only: bool,
}

/// Reads `args` (the first is the program name), the `GW_*` variables and
/// the file `--config` names into a `Config`. Unless `--check-config` is
/// given, also reads the key files. Keys given are checked for length and
/// for differing; keys left to the data dir are checked at start. Fails
/// with every invalid value at once.
pub fn load<I, T>(args: I) -> Result<Loaded, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let command = clap::Command::new("gw-control-plane")
        .version(env!("CARGO_PKG_VERSION"))
        .about("The gateway's control plane (admin and policy gRPC services).");
    let mut layers = Layers::parse(command, SETTINGS, "GW_CP_CONFIG", args)?;
    let check_only = layers.check_only();
    // Each value the layers give replaces the default; an invalid one is
    // recorded and fails `finish` below, after every other was looked at.
    let mut config = Config::new(([127, 0, 0, 1], 7070).into(), "gw-control-plane");
    if let Some(listen) = layers.get("listen", |t| t.parse::<SocketAddr>().map_err(|e| e.to_string())) {
        config.listen = listen;
    }
    config.admin_listen = layers.get("admin_listen", |t| t.parse::<SocketAddr>().map_err(|e| e.to_string()));
    config.console.listen = layers.get("console_listen", |t| t.parse::<SocketAddr>().map_err(|e| e.to_string()));
    for (name, url) in
        [("console_url", &mut config.console.public_url), ("console_gateway_url", &mut config.console.gateway_url)]
    {
        if let Some(value) = layers.get(name, base_url) {
            *url = value;
        }
    }
    for (name, secs) in [
        ("console_session_idle", &mut config.console.sessions.idle_secs),
        ("console_session_max", &mut config.console.sessions.absolute_secs),
    ] {
        if let Some(value) = layers.get(name, parse_duration) {
            *secs = i64::try_from(value.as_secs()).unwrap_or(i64::MAX).max(1);
        }
    }
    if let Some(store) = layers.get("store", |t| match t {
        "" => Ok(String::new()),
        url => crate::store::redis::check_url(url).map(|()| url.to_owned()),
    }) {
        config.store = store;
    }
    if let Some(dir) = layers.get("data_dir", path) {
        config.data_dir = dir;
    }
    config.admin_key = key(&mut layers, "admin", check_only);
    config.node_key = key(&mut layers, "node", check_only);
    if config.admin_key.is_some() && config.admin_key == config.node_key {
        layers.error("the admin key and the node key must differ");
    }
    for (name, duration) in [
        ("video_timeout", &mut config.video.timeout),
        ("video_poll_interval", &mut config.video.poll_interval),
        ("video_refresh_after", &mut config.video.refresh_after),
        ("batch_poll_interval", &mut config.batch.poll_interval),
        ("batch_refresh_after", &mut config.batch.refresh_after),
        ("probe_interval", &mut config.probe.interval),
    ] {
        if let Some(value) = layers.get(name, parse_duration) {
            *duration = value;
        }
    }
    for (name, flag) in [
        ("require_store_persistence", &mut config.require_store_persistence),
        ("snapshot_in_memory", &mut config.snapshot_in_memory),
    ] {
        if let Some(value) = layers.get(name, |t| match t {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("must be true or false".to_owned()),
        }) {
            *flag = value;
        }
    }
    for (name, days) in [
        ("usage_retention_days", &mut config.retention.usage_days),
        ("rollup_retention_days", &mut config.retention.rollup_days),
    ] {
        if let Some(value) = layers.get(name, |t| match t.parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err("must be a whole number of days above zero".to_owned()),
        }) {
            *days = value;
        }
    }
    if let Some(cap) =
        layers.get("usage_max_records", |t| t.parse::<u64>().map_err(|_| "must be a whole number".to_owned()))
    {
        config.retention.usage_max_records = cap;
    }
    if let Some(zone) = layers
        .get("budget_time_zone", |t| crate::domain::calendar::zone(t).map(|_| t.to_owned()).map_err(|e| e.to_string()))
    {
        config.budget_time_zone = zone;
    }
    config.store_ca_file = layers.get("store_ca_file", path);
    config.tls = server_tls(&mut layers);
    config.master_keys = master_keys(&mut layers, check_only);
    let log_format = layers.get("log_format", str::parse).unwrap_or_default();
    layers.finish()?;
    Ok(Loaded { config, log_format, check_only })
}

/// The listener's TLS files; both or neither of certificate and key.
fn server_tls(layers: &mut Layers) -> Option<ServerTls> {
    let cert_file = layers.get("tls_cert_file", path);
    let key_file = layers.get("tls_key_file", path);
    let client_ca_file = layers.get("client_ca_file", path);
    let require_client_cert = layers.get("require_client_cert", parse_bool).unwrap_or(false);
    match (cert_file, key_file) {
        (Some(cert_file), Some(key_file)) => {
            if require_client_cert && client_ca_file.is_none() {
                layers.error("require_client_cert needs client_ca_file");
            }
            Some(ServerTls { cert_file, key_file, client_ca_file, require_client_cert })
        }
        (None, None) => {
            if client_ca_file.is_some() || require_client_cert {
                layers.error("client_ca_file and require_client_cert need tls_cert_file and tls_key_file");
            }
            None
        }
        _ => {
            layers.error("tls_cert_file and tls_key_file go together: give both or neither");
            None
        }
    }
}

/// The master key (given or from its file) and the previous keys' files.
/// A check reads no key file.
fn master_keys(layers: &mut Layers, check_only: bool) -> Keyring {
    let given = layers.get("master_key", |t| MasterKey::parse(t).map(Some).map_err(|e| e.to_string()));
    let file = layers.get("master_key_file", path);
    let previous: Vec<PathBuf> = layers
        .get("previous_master_key_files", |t| {
            Ok(t.split(',').map(str::trim).filter(|p| !p.is_empty()).map(PathBuf::from).collect())
        })
        .unwrap_or_default();
    let read = |layers: &mut Layers, file: &PathBuf| match MasterKey::read(file) {
        Ok(key) => Some(key),
        Err(error) => {
            layers.error(error.to_string());
            None
        }
    };
    let current = match (given.flatten(), file) {
        (Some(_), Some(_)) => {
            layers.error("master_key and master_key_file are both set (in any layer): give one");
            None
        }
        (Some(key), None) => Some(key),
        (None, Some(_)) if check_only => None,
        (None, Some(file)) => read(layers, &file),
        (None, None) => None,
    };
    if current.is_none() && !previous.is_empty() && !check_only {
        layers.error("previous_master_key_files needs a current master key (master_key_file)");
    }
    let previous = if check_only { Vec::new() } else { previous.iter().filter_map(|f| read(layers, f)).collect() };
    Keyring::new(current, previous)
}

/// An absolute `http` or `https` URL without a trailing slash; empty stays
/// empty.
fn base_url(text: &str) -> Result<String, String> {
    let text = text.trim().trim_end_matches('/');
    if text.is_empty() {
        return Ok(String::new());
    }
    match text.parse::<http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => Ok(text.to_owned()),
        _ => Err(format!("{text:?} is not an http:// or https:// URL")),
    }
}

fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" | "" => Ok(false),
        _ => Err("must be true or false".to_owned()),
    }
}

/// The `role` key (`admin` or `node`) given directly or in its file; `None`
/// when neither is set (or, for a check, when only the file is).
fn key(layers: &mut Layers, role: &str, check_only: bool) -> Option<String> {
    let given = layers.get(&format!("{role}_key"), |t| check_key(t).map(|()| t.to_owned())).filter(|k| !k.is_empty());
    let file = layers.get(&format!("{role}_key_file"), path);
    match (given, file) {
        (Some(_), Some(_)) => {
            layers.error(format!("{role}_key and {role}_key_file are both set (in any layer): give one"));
            None
        }
        (given, None) => given,
        // A check leaves key files alone: the secret may be mounted only
        // where the control plane runs.
        (None, Some(_)) if check_only => None,
        (None, Some(file)) => match std::fs::read_to_string(&file) {
            Ok(text) => match check_key(text.trim()) {
                Ok(()) => Some(text.trim().to_owned()),
                Err(message) => {
                    layers.error(format!("{role} key in {}: {message}", file.display()));
                    None
                }
            },
            Err(error) => {
                layers.error(format!("reading {}: {error}", file.display()));
                None
            }
        },
    }
}

fn check_key(key: &str) -> Result<(), String> {
    match key.chars().count() {
        0 => Ok(()),
        n if n < MIN_KEY_LEN => Err(format!("has {n} characters; at least {MIN_KEY_LEN} are needed")),
        _ => Ok(()),
    }
}

fn path(text: &str) -> Result<PathBuf, String> {
    match text.is_empty() {
        true => Err("must not be empty".to_owned()),
        false => Ok(PathBuf::from(text)),
    }
}

/// `500ms`, `90s`, `30m`, `2h`, or a bare number of seconds; never zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| "not a duration such as 90s or 30m".to_owned())?;
    let millis = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err("not a duration such as 90s or 30m".to_owned()),
    };
    match n.saturating_mul(millis) {
        0 => Err("must be longer than zero".to_owned()),
        millis => Ok(Duration::from_millis(millis)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_or_seconds_and_are_never_zero() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 days").is_err());
    }

    #[test]
    fn retention_comes_from_flags_and_refuses_zero_days() {
        let args = [
            "gw-control-plane",
            "--check-config",
            "--usage-retention-days",
            "7",
            "--rollup-retention-days",
            "800",
            "--usage-max-records",
            "0",
        ];
        let loaded = load(args).map_err(|e| format!("{e:?}")).unwrap();
        let want = crate::store::Retention { usage_days: 7, usage_max_records: 0, rollup_days: 800 };
        assert_eq!(loaded.config.retention, want);
        let defaults = load(["gw-control-plane", "--check-config"]).map_err(|e| format!("{e:?}")).unwrap();
        assert_eq!(defaults.config.retention, crate::store::Retention::default());

        let args = ["gw-control-plane", "--check-config", "--usage-retention-days", "0", "--usage-max-records", "x"];
        let Err(Failure::Invalid(errors)) = load(args) else { panic!("accepted") };
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(defaults.config.budget_time_zone, "UTC");
        let args = ["gw-control-plane", "--check-config", "--budget-time-zone", "Asia/Tokyo"];
        assert_eq!(load(args).map_err(|e| format!("{e:?}")).unwrap().config.budget_time_zone, "Asia/Tokyo");
        let args = ["gw-control-plane", "--check-config", "--budget-time-zone", "Mars/Olympus"];
        let Err(Failure::Invalid(errors)) = load(args) else { panic!("accepted") };
        assert!(errors[0].contains("unknown time zone"), "{errors:#?}");
    }

    #[test]
    fn a_cluster_store_url_is_accepted_and_a_malformed_one_is_reported() {
        let url = "redis+cluster://10.0.0.5:6379,10.0.0.6:6379";
        let loaded =
            load(["gw-control-plane", "--check-config", "--store", url]).map_err(|e| format!("{e:?}")).unwrap();
        assert_eq!(loaded.config.store, url);
        let args = ["gw-control-plane", "--check-config", "--store", "redis+cluster://10.0.0.5:6379,/2"];
        let Err(Failure::Invalid(errors)) = load(args) else { panic!("accepted") };
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(errors[0].contains("store"), "{errors:#?}");
    }

    #[test]
    fn a_check_reports_short_and_equal_keys_and_a_bad_store_together() {
        let short = "x".repeat(10);
        let args =
            ["gw-control-plane", "--check-config", "--admin-key", &short, "--node-key", &short, "--store", "mysql://x"];
        let Err(Failure::Invalid(errors)) = load(args) else { panic!("accepted") };
        assert_eq!(errors.len(), 3, "{errors:#?}");
        assert!(errors.iter().all(|e| !e.contains(&short)), "a key was echoed: {errors:#?}");

        let admin = "a".repeat(32);
        let node = "n".repeat(32);
        let args = ["gw-control-plane", "--check-config", "--admin-key", &admin, "--node-key", &node];
        let loaded = load(args).map_err(|e| format!("{e:?}")).unwrap();
        assert!(loaded.check_only);
        assert_eq!(loaded.config.node_key.as_deref(), Some(node.as_str()));
    }

    #[test]
    fn tls_files_come_in_pairs_and_a_bad_master_key_is_reported_without_echoing_it() {
        let bad_key = "0123456789abcdef-not-hex";
        let args = [
            "gw-control-plane",
            "--check-config",
            "--tls-cert-file",
            "cp.crt",
            "--require-client-cert",
            "true",
            "--master-key",
            bad_key,
        ];
        let Err(Failure::Invalid(errors)) = load(args) else { panic!("accepted") };
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(errors.iter().any(|e| e.contains("tls_cert_file and tls_key_file go together")), "{errors:#?}");
        assert!(errors.iter().any(|e| e.contains("64 hex characters")), "{errors:#?}");
        assert!(errors.iter().all(|e| !e.contains(bad_key)), "the key was echoed: {errors:#?}");

        let args = ["gw-control-plane", "--check-config", "--tls-cert-file", "a", "--tls-key-file", "b"];
        let with_mtls = [&args[..], &["--require-client-cert", "true"]].concat();
        let Err(Failure::Invalid(errors)) = load(with_mtls) else { panic!("accepted") };
        assert!(errors[0].contains("require_client_cert needs client_ca_file"), "{errors:#?}");
        let loaded = load([&args[..], &["--client-ca-file", "ca.pem", "--require-client-cert", "true"]].concat())
            .map_err(|e| format!("{e:?}"))
            .unwrap();
        let tls = loaded.config.tls.unwrap();
        assert!(tls.require_client_cert && tls.client_ca_file.is_some());

        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("master.key");
        std::fs::write(&key_file, format!("{}\n", "7f".repeat(32))).unwrap();
        let key_file = key_file.to_string_lossy().into_owned();
        let loaded = load(["gw-control-plane", "--master-key-file", key_file.as_str()]).unwrap();
        let expected = crate::domain::secrets::MasterKey::parse(&"7f".repeat(32)).unwrap();
        assert_eq!(loaded.config.master_keys.current_id(), Some(expected.id()));
    }
}
