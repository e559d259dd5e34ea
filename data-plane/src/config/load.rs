//! The data plane's bootstrap settings, layered by `gw-bootstrap`: defaults,
//! then the `--config` TOML file, then `GW_*` variables, then flags. Every
//! invalid value is reported before the binary fails (exit 64). Key files
//! are read only when starting, so `--check-config` runs where the secrets
//! are not mounted.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use gw_bootstrap::{Failure, Layers, Setting};
use gw_telemetry::LogFormat;

use super::{Config, parse_trusted_proxies, read_node_key};

/// Every setting of `gw-data-plane`: file key, variable, default, help.
pub static SETTINGS: &[Setting] = &[
    Setting::new("listen", "GW_DP_LISTEN", Some("127.0.0.1:8080"), "Client-facing HTTP address"),
    Setting::new(
        "admin_listen",
        "GW_DP_ADMIN_LISTEN",
        None,
        "Admin listener serving /metrics (Prometheus text) and /healthz; off unless set",
    ),
    Setting::new(
        "control_plane",
        "GW_DP_CONTROL_PLANE",
        Some("http://127.0.0.1:7070"),
        "The control plane's gRPC address; several replicas as a comma-separated list (a name may resolve to several)",
    ),
    Setting::new(
        "data_dir",
        "GW_DP_DATA_DIR",
        Some("gw-data-plane"),
        "Holds the saved snapshot, the usage spool and the node id",
    ),
    Setting::new("node_key", "GW_NODE_KEY", None, "Node credential [default: contents of <data-dir>/node.key]")
        .secret(),
    Setting::new(
        "node_key_file",
        "GW_NODE_KEY_FILE",
        None,
        "File holding the node credential (keeps it out of the process list)",
    ),
    Setting::new(
        "node_id",
        "GW_DP_NODE_ID",
        None,
        "This node's name [default: generated once, kept in <data-dir>/node.id]",
    ),
    Setting::new(
        "trusted_proxies",
        "GW_DP_TRUSTED_PROXIES",
        Some(""),
        "Comma-separated CIDRs whose X-Forwarded-For / X-Real-IP are believed",
    ),
    Setting::new(
        "console_url",
        "GW_DP_CONSOLE_URL",
        None,
        "The console's public base URL (http or https); quota refusals link to its /tokens and /topup pages [default: none, no links]",
    ),
    Setting::new(
        "responses_websocket",
        "GW_DP_RESPONSES_WEBSOCKET",
        Some("on"),
        "Whether /v1/responses takes WebSocket upgrades (`on` or `off`; off answers them 426)",
    ),
    Setting::new(
        "websocket_idle_timeout_ms",
        "GW_DP_WEBSOCKET_IDLE_TIMEOUT_MS",
        Some("600000"),
        "How long a /v1/responses WebSocket may pass no message either way, no response running, before it is closed, in ms",
    ),
    Setting::new(
        "realtime_idle_timeout_ms",
        "GW_DP_REALTIME_IDLE_TIMEOUT_MS",
        Some("1800000"),
        "How long a /v1/realtime session may pass no event or audio either way before it is closed, in ms",
    ),
    Setting::new(
        "websocket_max_lifetime_ms",
        "GW_DP_WEBSOCKET_MAX_LIFETIME_MS",
        Some("3600000"),
        "How long any client WebSocket (/v1/responses, /v1/realtime) may stay open, in ms; it gets an error event and a close",
    ),
    Setting::new("max_attempts", "GW_DP_MAX_ATTEMPTS", Some("3"), "Upstream attempts per request, across channels"),
    Setting::new(
        "affinity_capacity",
        "GW_DP_AFFINITY_CAPACITY",
        Some("100000"),
        "Conversations whose channel and key are remembered; 0 turns affinity off",
    ),
    Setting::new(
        "affinity_idle_secs",
        "GW_DP_AFFINITY_IDLE_SECS",
        Some("3600"),
        "Seconds an idle conversation stays bound to its channel and key",
    ),
    Setting::new(
        "connect_timeout_ms",
        "GW_DP_CONNECT_TIMEOUT_MS",
        Some("10000"),
        "Upstream connect timeout for channels without their own, in ms",
    ),
    Setting::new(
        "first_byte_timeout_ms",
        "GW_DP_FIRST_BYTE_TIMEOUT_MS",
        Some("60000"),
        "Time to the response headers of a streamed request, in ms",
    ),
    Setting::new(
        "idle_timeout_ms",
        "GW_DP_IDLE_TIMEOUT_MS",
        Some("300000"),
        "Longest silence inside an upstream response, in ms",
    ),
    Setting::new(
        "total_timeout_ms",
        "GW_DP_TOTAL_TIMEOUT_MS",
        Some("600000"),
        "Deadline of a whole upstream exchange, in ms",
    ),
    Setting::new(
        "stream_keepalive_ms",
        "GW_DP_STREAM_KEEPALIVE_MS",
        Some("15000"),
        "How often a stream still waiting for its first token sends the client a keepalive, in ms; 0 sends none",
    ),
    Setting::new(
        "max_connections",
        "GW_DP_MAX_CONNECTIONS",
        Some("10000"),
        "Client connections served at once (more wait in the listen backlog)",
    ),
    Setting::new(
        "header_read_timeout_ms",
        "GW_DP_HEADER_READ_TIMEOUT_MS",
        Some("30000"),
        "Time a client has to send request headers, in ms",
    ),
    Setting::new(
        "keepalive_timeout_ms",
        "GW_DP_KEEPALIVE_TIMEOUT_MS",
        Some("60000"),
        "How long an idle keep-alive connection stays open between requests, in ms",
    ),
    Setting::new(
        "body_min_rate",
        "GW_DP_BODY_MIN_RATE",
        Some("1024"),
        "Slowest request body accepted, in bytes per second on average after a 10 s grace",
    ),
    Setting::new(
        "workers",
        "GW_DP_WORKERS",
        None,
        "Threads serving client connections, each running its own event loop [default: one per core]",
    ),
    Setting::new(
        "lease_ttl_secs",
        "GW_DP_LEASE_TTL_SECS",
        Some("60"),
        "Lifetime of spending-budget leases in seconds (10 to 3600), renewed while in use",
    ),
    Setting::new(
        "offline_allowance",
        "GW_DP_OFFLINE_ALLOWANCE",
        Some("share"),
        "What may be admitted beyond the leases while the control plane is unreachable: `share` or an amount in USD",
    ),
    Setting::new(
        "default_max_output_tokens",
        "GW_DP_DEFAULT_MAX_OUTPUT_TOKENS",
        Some("4096"),
        "Output tokens reserved for a request that names no maximum",
    ),
    Setting::new(
        "spool_sync",
        "GW_DP_SPOOL_SYNC",
        Some("interval"),
        "When the usage spool fsyncs: `batch` (each group commit) or `interval` (each segment as it is sealed)",
    ),
    Setting::new(
        "report_interval_ms",
        "GW_DP_REPORT_INTERVAL_MS",
        Some("50"),
        "How often each serving thread seals a usage spool segment for the reporter, in ms (10 to 5000)",
    ),
    Setting::new(
        "tls_cert_file",
        "GW_DP_TLS_CERT_FILE",
        None,
        "PEM certificate chain of the /v1 listener; with tls_key_file, serves HTTPS only (reloaded when the files change or on SIGHUP)",
    ),
    Setting::new("tls_key_file", "GW_DP_TLS_KEY_FILE", None, "PEM private key of tls_cert_file"),
    Setting::new(
        "control_plane_ca_file",
        "GW_DP_CONTROL_PLANE_CA_FILE",
        None,
        "PEM CA bundle an https:// control plane's certificate is checked against [default: the system's roots]",
    ),
    Setting::new(
        "client_cert_file",
        "GW_DP_CLIENT_CERT_FILE",
        None,
        "PEM client certificate shown to the control plane (mutual TLS); its name is the node id unless node_id is set",
    ),
    Setting::new("client_key_file", "GW_DP_CLIENT_KEY_FILE", None, "PEM private key of client_cert_file"),
    Setting::new("log_format", "GW_LOG_FORMAT", Some("text"), "Log lines as `text` or `json`"),
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
/// the file `--config` names into a validated `Config`. Unless
/// `--check-config` is given, also reads the node key (from its file, or
/// `<data-dir>/node.key`). Fails with every invalid value at once.
pub fn load<I, T>(args: I) -> Result<Loaded, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let command = clap::Command::new("gw-data-plane")
        .version(env!("CARGO_PKG_VERSION"))
        .about("The gateway's data plane: the OpenAI-compatible /v1 proxy.");
    let mut layers = Layers::parse(command, SETTINGS, "GW_DP_CONFIG", args)?;
    // Each value the layers give replaces the default; an invalid one is
    // recorded and fails `finish` below, after every other was looked at.
    let mut config = Config::new(([127, 0, 0, 1], 8080).into(), "", "gw-data-plane", "");
    if let Some(listen) = layers.get("listen", |t| t.parse::<SocketAddr>().map_err(|e| e.to_string())) {
        config.listen = listen;
    }
    config.admin_listen = layers.get("admin_listen", |t| t.parse::<SocketAddr>().map_err(|e| e.to_string()));
    if let Some(address) = layers.get("control_plane", |t| super::check_control_plane(t).map(|()| t.to_owned())) {
        config.control_plane = address;
    }
    if let Some(dir) = layers.get("data_dir", path) {
        config.data_dir = dir;
    }
    config.node_id = layers.get("node_id", |t| Ok(t.to_owned())).filter(|id| !id.is_empty());
    if let Some(proxies) = layers.get("trusted_proxies", parse_trusted_proxies) {
        config.trusted_proxies = proxies;
    }
    config.console_url = layers
        .get("console_url", |t| match t {
            "" => Ok(None),
            url => super::check_console_url(url).map(|()| Some(url.to_owned())),
        })
        .flatten();
    if let Some(on) = layers.get("responses_websocket", switch) {
        config.responses_websocket = on;
    }
    let upstream = &mut config.upstream;
    if let Some(n) =
        layers.get("max_attempts", |t| positive(t).and_then(|n| u32::try_from(n).map_err(|e| e.to_string())))
    {
        upstream.max_attempts = n;
    }
    if let Some(n) =
        layers.get("affinity_capacity", |t| t.parse::<usize>().map_err(|_| "must be a whole number".to_owned()))
    {
        upstream.affinity_capacity = n;
    }
    if let Some(secs) = layers.get("affinity_idle_secs", positive) {
        upstream.affinity_idle = Duration::from_secs(secs);
    }
    for (name, timeout) in [
        ("connect_timeout_ms", &mut upstream.connect_timeout),
        ("first_byte_timeout_ms", &mut upstream.first_byte_timeout),
        ("idle_timeout_ms", &mut upstream.idle_timeout),
        ("total_timeout_ms", &mut upstream.total_timeout),
        ("header_read_timeout_ms", &mut config.limits.header_read_timeout),
        ("keepalive_timeout_ms", &mut config.limits.keepalive_timeout),
        ("websocket_idle_timeout_ms", &mut config.sockets.idle_timeout),
        ("realtime_idle_timeout_ms", &mut config.sockets.realtime_idle_timeout),
        ("websocket_max_lifetime_ms", &mut config.sockets.max_lifetime),
    ] {
        if let Some(value) = layers.get(name, millis) {
            *timeout = value;
        }
    }
    if let Some(interval) = layers.get("stream_keepalive_ms", |t| {
        t.parse::<u64>().map(Duration::from_millis).map_err(|_| "must be a whole number of ms, 0 for none".to_owned())
    }) {
        upstream.keepalive_interval = interval;
    }
    if let Some(n) =
        layers.get("max_connections", |t| positive(t).and_then(|n| usize::try_from(n).map_err(|e| e.to_string())))
    {
        config.limits.max_connections = n;
    }
    if let Some(rate) = layers.get("body_min_rate", positive) {
        config.limits.body_min_bytes_per_sec = rate;
    }
    if let Some(interval) = layers.get("report_interval_ms", |t| match positive(t)? {
        ms @ 10..=5_000 => Ok(Duration::from_millis(ms)),
        _ => Err("must be between 10 and 5000 ms".to_owned()),
    }) {
        config.report_interval = interval;
    }
    if let Some(ttl) = layers.get("lease_ttl_secs", |t| match positive(t)? {
        secs @ 10..=3_600 => Ok(Duration::from_secs(secs)),
        _ => Err("must be between 10 and 3600 seconds".to_owned()),
    }) {
        config.budget.lease_ttl = ttl;
    }
    if let Some(allowance) = layers.get("offline_allowance", |t| match t {
        "share" => Ok(None),
        usd => gw_pricing::parse_usd_non_negative(usd).map(Some).map_err(|e| format!("{e} (or \"share\")")),
    }) {
        config.budget.offline_allowance = allowance;
    }
    if let Some(tokens) = layers.get("default_max_output_tokens", |t| {
        t.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| "must be a whole number, zero or more".to_owned())
    }) {
        config.budget.default_max_output_tokens = tokens;
    }
    if let Some(workers) = layers.get("workers", |t| {
        t.parse::<usize>()
            .ok()
            .filter(|n| (1..=1024).contains(n))
            .ok_or_else(|| "must be a whole number from 1 to 1024".to_owned())
    }) {
        config.workers = workers;
    }
    if let Some(sync) = layers.get("spool_sync", str::parse) {
        config.spool_sync = sync;
    }
    let log_format = layers.get("log_format", str::parse).unwrap_or_default();
    let check_only = layers.check_only();
    match (layers.get("tls_cert_file", path), layers.get("tls_key_file", path)) {
        (Some(cert_file), Some(key_file)) => config.tls = Some(super::ListenerTls::new(cert_file, key_file)),
        (None, None) => {}
        _ => layers.error("tls_cert_file and tls_key_file go together: give both or neither"),
    }
    let client = &mut config.control_plane_tls;
    client.ca_file = layers.get("control_plane_ca_file", path);
    client.cert_file = layers.get("client_cert_file", path);
    client.key_file = layers.get("client_key_file", path);
    if client.cert_file.is_some() != client.key_file.is_some() {
        layers.error("client_cert_file and client_key_file go together: give both or neither");
    }
    let has_client_cert = config.control_plane_tls.cert_file.is_some();
    let node_key = layers.get("node_key", |t| Ok(t.to_owned())).filter(|k| !k.is_empty());
    let node_key_file = layers.get("node_key_file", path);
    config.node_key = match (node_key, node_key_file) {
        (Some(_), Some(_)) => {
            layers.error("node_key and node_key_file are both set (in any layer): give one");
            String::new()
        }
        (Some(key), None) => key,
        // A check leaves key files alone: the secret may be mounted only
        // where the data plane runs.
        (None, _) if check_only => "unchecked".to_owned(),
        (None, Some(file)) => match std::fs::read_to_string(&file) {
            Ok(key) if !key.trim().is_empty() => key.trim().to_owned(),
            Ok(_) => {
                layers.error(format!("node key file {} is empty", file.display()));
                String::new()
            }
            Err(error) => {
                layers.error(format!("reading {}: {error}", file.display()));
                String::new()
            }
        },
        // A client certificate stands in for the node key when none is kept.
        (None, None) if has_client_cert => read_node_key(&config.data_dir).unwrap_or_default(),
        (None, None) => read_node_key(&config.data_dir).unwrap_or_else(|error| {
            layers.error(error);
            String::new()
        }),
    };
    layers.finish()?;
    // Only relations between settings are left to find here.
    if let Err(error) = config.validate() {
        return Err(Failure::Invalid(vec![format!("{error:#}")]));
    }
    Ok(Loaded { config, log_format, check_only })
}

fn path(text: &str) -> Result<PathBuf, String> {
    match text.is_empty() {
        true => Err("must not be empty".to_owned()),
        false => Ok(PathBuf::from(text)),
    }
}

fn switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err("must be on or off".to_owned()),
    }
}

fn positive(text: &str) -> Result<u64, String> {
    text.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| "must be a whole number above zero".to_owned())
}

fn millis(text: &str) -> Result<Duration, String> {
    positive(text).map(Duration::from_millis)
}
