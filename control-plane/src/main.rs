//! `gw-control-plane`: parses flags, starts the control plane, waits for a
//! signal and shuts down.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use clap::Parser;

/// The gateway's control plane (admin and policy gRPC services).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// gRPC listen address for gwctl and data planes.
    #[arg(long, env = "GW_CP_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Admin listener serving /metrics (Prometheus text) and /healthz; off unless set.
    #[arg(long, env = "GW_CP_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    /// `redis://host:port/db` for Redis; empty for the embedded store in the data dir.
    #[arg(long, env = "GW_CP_STORE", default_value = "")]
    store: String,
    /// Holds the embedded store and the generated admin.key and node.key.
    #[arg(long, env = "GW_CP_DATA_DIR", default_value = "gw-control-plane")]
    data_dir: PathBuf,
    /// Admin credential, at least 32 characters (default: data-dir/admin.key, generated on first start).
    #[arg(long, env = "GW_ADMIN_KEY", hide_env_values = true, conflicts_with = "admin_key_file")]
    admin_key: Option<String>,
    /// File holding the admin credential (keeps it out of the process list).
    #[arg(long, env = "GW_ADMIN_KEY_FILE")]
    admin_key_file: Option<PathBuf>,
    /// Data-plane credential, at least 32 characters and not the admin key (default: data-dir/node.key).
    #[arg(long, env = "GW_NODE_KEY", hide_env_values = true, conflicts_with = "node_key_file")]
    node_key: Option<String>,
    /// File holding the data-plane credential.
    #[arg(long, env = "GW_NODE_KEY_FILE")]
    node_key_file: Option<PathBuf>,
    /// A video task not finished this long after submission fails and is refunded (`90s`, `30m`, `2h`).
    #[arg(long, env = "GW_CP_VIDEO_TIMEOUT", default_value = "30m", value_parser = parse_duration)]
    video_timeout: Duration,
    /// How often the video poller looks at unfinished tasks.
    #[arg(long, env = "GW_CP_VIDEO_POLL_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    video_poll_interval: Duration,
    /// A video status query older than this asks the upstream again.
    #[arg(long, env = "GW_CP_VIDEO_REFRESH_AFTER", default_value = "3s", value_parser = parse_duration)]
    video_refresh_after: Duration,
    /// How often auto-disabled channels are probed (GET /models) and re-enabled if they answer.
    #[arg(long, env = "GW_CP_PROBE_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    probe_interval: Duration,
    /// Log lines as `text` (colour only on a terminal) or `json` (one object a line).
    #[arg(long, env = "GW_LOG_FORMAT", default_value = "text")]
    log_format: gw_telemetry::LogFormat,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let telemetry = match gw_telemetry::OtelConfig::from_env()
        .map_err(|e| e.to_string())
        .and_then(|otel| gw_telemetry::init(args.log_format, &otel, "gw-control-plane").map_err(|e| e.to_string()))
    {
        Ok(telemetry) => telemetry,
        Err(message) => {
            eprintln!("gw-control-plane: {message}");
            return ExitCode::from(64);
        }
    };
    let (admin_key, node_key) = match (key(args.admin_key, args.admin_key_file), key(args.node_key, args.node_key_file))
    {
        (Ok(admin), Ok(node)) => (admin, node),
        (Err(message), _) | (_, Err(message)) => {
            eprintln!("gw-control-plane: {message}");
            return ExitCode::from(64);
        }
    };
    let config = gw_control_plane::Config {
        listen: args.listen,
        admin_listen: args.admin_listen,
        store: args.store,
        data_dir: args.data_dir,
        admin_key,
        node_key,
        video: gw_control_plane::video::Config {
            timeout: args.video_timeout,
            poll_interval: args.video_poll_interval,
            refresh_after: args.video_refresh_after,
        },
        probe: gw_control_plane::probe::Config {
            interval: args.probe_interval,
            ..gw_control_plane::probe::Config::default()
        },
    };
    let handle = match gw_control_plane::start(config.clone()).await {
        Ok(handle) => handle,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::from(1);
        }
    };
    println!("control plane listening on {}", handle.addr);
    if let Some(path) = &handle.admin_key_file {
        println!("admin key: {}", path.display());
    }
    if config.node_key.is_none() {
        println!("node key: {}", config.data_dir.join("node.key").display());
    }
    shutdown_signal().await;
    handle.shutdown().await;
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => return ctrl_c.await.unwrap_or_default(),
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await.unwrap_or_default();
}

/// `500ms`, `90s`, `30m`, `2h`, or a bare number of seconds; never zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("{text:?} is not a duration such as 90s or 30m"))?;
    let millis = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{text:?} is not a duration such as 90s or 30m")),
    };
    match n.saturating_mul(millis) {
        0 => Err(format!("{text:?} must be longer than zero")),
        millis => Ok(Duration::from_millis(millis)),
    }
}

/// A key given directly, or read (trimmed) from `file`.
fn key(given: Option<String>, file: Option<PathBuf>) -> Result<Option<String>, String> {
    match file {
        Some(path) => std::fs::read_to_string(&path)
            .map(|key| Some(key.trim().to_owned()))
            .map_err(|error| format!("reading {}: {error}", path.display())),
        None => Ok(given),
    }
}
