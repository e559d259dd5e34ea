//! `gw-data-plane`: parses flags (or `GW_*` variables), starts the data plane
//! and stops it gracefully on ctrl-c or SIGTERM. Exits 64 on bad config.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use clap::Parser;
use gw_data_plane::{Config, parse_trusted_proxies, read_node_key};
use gw_telemetry::{LogFormat, OtelConfig};

/// The gateway's data plane: the OpenAI-compatible /v1 proxy.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[arg(long, env = "GW_DP_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Admin listener serving /metrics (Prometheus text) and /healthz; off unless set
    #[arg(long, env = "GW_DP_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    #[arg(long, env = "GW_DP_CONTROL_PLANE", default_value = "http://127.0.0.1:7070")]
    control_plane: String,
    #[arg(long, env = "GW_DP_DATA_DIR", default_value = "gw-data-plane")]
    data_dir: PathBuf,
    /// Node credential [default: contents of <data-dir>/node.key]
    #[arg(long, env = "GW_NODE_KEY", hide_env_values = true, conflicts_with = "node_key_file")]
    node_key: Option<String>,
    /// File holding the node credential (keeps it out of the process list)
    #[arg(long, env = "GW_NODE_KEY_FILE")]
    node_key_file: Option<PathBuf>,
    #[arg(long, env = "GW_DP_NODE_ID")]
    node_id: Option<String>,
    /// Comma-separated CIDRs whose X-Forwarded-For / X-Real-IP are believed
    #[arg(long, env = "GW_DP_TRUSTED_PROXIES", default_value = "")]
    trusted_proxies: String,
    /// Upstream attempts per request, across channels
    #[arg(long, env = "GW_DP_MAX_ATTEMPTS", default_value_t = 3)]
    max_attempts: u32,
    /// Upstream connect timeout for channels without their own, in ms
    #[arg(long, env = "GW_DP_CONNECT_TIMEOUT_MS", default_value_t = 10_000)]
    connect_timeout_ms: u64,
    /// Time to the response headers of a streamed request, in ms
    #[arg(long, env = "GW_DP_FIRST_BYTE_TIMEOUT_MS", default_value_t = 60_000)]
    first_byte_timeout_ms: u64,
    /// Longest silence inside an upstream response, in ms
    #[arg(long, env = "GW_DP_IDLE_TIMEOUT_MS", default_value_t = 300_000)]
    idle_timeout_ms: u64,
    /// Deadline of a whole upstream exchange, in ms
    #[arg(long, env = "GW_DP_TOTAL_TIMEOUT_MS", default_value_t = 600_000)]
    total_timeout_ms: u64,
    /// Client connections served at once (more wait in the listen backlog)
    #[arg(long, env = "GW_DP_MAX_CONNECTIONS", default_value_t = 10_000)]
    max_connections: usize,
    /// Time a client has to send request headers; also how long an idle keep-alive connection stays open, in ms
    #[arg(long, env = "GW_DP_HEADER_READ_TIMEOUT_MS", default_value_t = 30_000)]
    header_read_timeout_ms: u64,
    /// Slowest request body accepted, in bytes per second on average after a 10 s grace
    #[arg(long, env = "GW_DP_BODY_MIN_RATE", default_value_t = 1024)]
    body_min_rate: u64,
    /// Lifetime of spending-budget leases in seconds, renewed while in use
    #[arg(long, env = "GW_DP_LEASE_TTL_SECS", default_value_t = 60)]
    lease_ttl_secs: u64,
    /// What this data plane may admit per token quota or account balance
    /// beyond its leases while the control plane is unreachable: `share` (what
    /// was left divided by the data planes) or an amount in USD
    #[arg(long, env = "GW_DP_OFFLINE_ALLOWANCE", default_value = "share")]
    offline_allowance: String,
    /// Output tokens reserved for a request that names no maximum
    #[arg(long, env = "GW_DP_DEFAULT_MAX_OUTPUT_TOKENS", default_value_t = 4096)]
    default_max_output_tokens: i64,
    /// When the usage spool fsyncs: `batch` (each group commit, before the
    /// answer is released; survives power loss) or `interval` (each 200 ms
    /// segment; a process crash still loses nothing)
    #[arg(long, env = "GW_DP_SPOOL_SYNC", default_value = "batch")]
    spool_sync: gw_data_plane::SpoolSync,
    /// Log lines as `text` (colour only on a terminal) or `json` (one object a line)
    #[arg(long, env = "GW_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

fn config() -> Result<(Config, LogFormat, OtelConfig), String> {
    let cli = Cli::try_parse().map_err(|e| if e.use_stderr() { e.to_string() } else { e.exit() })?;
    let given = match &cli.node_key_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?),
        None => cli.node_key.clone(),
    };
    let node_key = match given.filter(|k| !k.trim().is_empty()) {
        Some(key) => key,
        None => read_node_key(&cli.data_dir)?,
    };
    let mut config = Config::new(cli.listen, cli.control_plane, cli.data_dir, node_key.trim());
    config.node_id = cli.node_id;
    config.admin_listen = cli.admin_listen;
    config.trusted_proxies =
        parse_trusted_proxies(&cli.trusted_proxies).map_err(|e| format!("--trusted-proxies: {e}"))?;
    config.upstream.max_attempts = cli.max_attempts;
    config.upstream.connect_timeout = Duration::from_millis(cli.connect_timeout_ms);
    config.upstream.first_byte_timeout = Duration::from_millis(cli.first_byte_timeout_ms);
    config.upstream.idle_timeout = Duration::from_millis(cli.idle_timeout_ms);
    config.upstream.total_timeout = Duration::from_millis(cli.total_timeout_ms);
    config.limits.max_connections = cli.max_connections;
    config.limits.header_read_timeout = Duration::from_millis(cli.header_read_timeout_ms);
    config.limits.body_min_bytes_per_sec = cli.body_min_rate;
    config.budget.lease_ttl = Duration::from_secs(cli.lease_ttl_secs);
    config.budget.offline_allowance = match cli.offline_allowance.as_str() {
        "share" => None,
        usd => Some(
            gw_pricing::parse_usd_non_negative(usd)
                .map_err(|e| format!("--offline-allowance {usd:?}: {e} (or \"share\")"))?,
        ),
    };
    config.budget.default_max_output_tokens = cli.default_max_output_tokens;
    config.spool_sync = cli.spool_sync;
    config.validate().map_err(|e| format!("{e:#}"))?;
    let otel = OtelConfig::from_env().map_err(|e| e.to_string())?;
    Ok((config, cli.log_format, otel))
}

#[tokio::main]
async fn main() -> ExitCode {
    let (config, log_format, otel) = match config() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("gw-data-plane: {}", message.trim_end());
            return ExitCode::from(64);
        }
    };
    let telemetry = match gw_telemetry::init(log_format, &otel, "gw-data-plane") {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("gw-data-plane: {error}");
            return ExitCode::from(64);
        }
    };
    let code = match gw_data_plane::start(config).await {
        Ok(handle) => {
            gw_data_plane::shutdown_signal().await;
            handle.shutdown().await;
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!("cannot start: {error:#}");
            ExitCode::FAILURE
        }
    };
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    code
}
