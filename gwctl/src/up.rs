//! `gwctl up`: a whole gateway on one node. Runs the control plane (embedded
//! store in the data directory, no Redis) and one data plane in this process
//! until ctrl-c or SIGTERM, then shuts the data plane down first.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use gw_control_plane::domain::Kind;

use crate::config::{self, Global};

/// Flags of `gwctl up`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address clients reach the gateway's /v1 API on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Address of the control plane's gRPC API (gwctl, data planes): the
    /// control plane's `listen`.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub control_plane_listen: SocketAddr,
    /// Admin listener serving /metrics (Prometheus text, both planes) and
    /// /healthz, as `--admin-listen` does on the standalone binaries.
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub admin_listen: SocketAddr,
    /// Address of the web console (account owners and operators).
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub console_listen: SocketAddr,
    /// Serve no web console.
    #[arg(long)]
    pub no_console: bool,
    /// Store URL, e.g. redis://127.0.0.1:6379 or redis+cluster://host:port,host:port [default: embedded in the data directory].
    #[arg(long)]
    pub store: Option<String>,
}

/// A running single-node gateway.
pub struct Node {
    /// Where clients send `/v1` requests.
    pub api: SocketAddr,
    /// Where gwctl reaches the control plane.
    pub control_plane: SocketAddr,
    /// Where `/metrics` is served.
    pub metrics: Option<SocketAddr>,
    /// The file the admin key is kept in, when it came from one.
    pub admin_key_file: Option<PathBuf>,
    /// The console's URL; `None` when it is off.
    pub console: Option<String>,
    /// The one-time link that creates the console's first admin, while
    /// there is none.
    pub setup_link: Option<String>,
    cp: gw_control_plane::Handle,
    dp: gw_data_plane::Handle,
}

/// Starts both planes, prints where they are, waits for ctrl-c or SIGTERM
/// and shuts them down.
pub async fn run(args: Args, global: &Global) -> Result<()> {
    let telemetry = init_telemetry()?;
    let node = start(args, global).await?;
    let store = node.cp.store.clone();
    let count = |kind| {
        let store = store.clone();
        async move { store.list(kind).await.map(|items| items.len()).unwrap_or(0) }
    };
    let (accounts, channels) = (count(Kind::Account).await, count(Kind::Channel).await);
    if accounts == 0 && channels == 0 {
        print!("{}", banner(node.api, node.control_plane, node.admin_key_file.as_deref(), global));
    } else {
        let tokens = count(Kind::Token).await;
        let planes = connected_data_planes(&node).await;
        println!("{}", summary(node.api, accounts, tokens, channels, planes));
    }
    if let Some(console) = &node.console {
        println!("console: {console}");
    }
    if let Some(metrics) = node.metrics {
        println!("metrics: http://{metrics}/metrics");
    }
    if let Some(link) = &node.setup_link {
        println!("create the console's first admin (this link works once): {link}");
    }
    let signal = shutdown_signal().await;
    tracing::info!("shutting down");
    node.shutdown().await;
    tracing::info!("gateway stopped");
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    signal
}

/// Starts the control plane in `<data-dir>` and a data plane in
/// `<data-dir>/data-plane` connected to it. Fails when either cannot start;
/// the control plane is stopped again if the data plane fails.
pub async fn start(args: Args, global: &Global) -> Result<Node> {
    let data_dir = global.data_dir()?;
    let dp_dir = data_dir.join("data-plane");
    std::fs::create_dir_all(&dp_dir).with_context(|| format!("creating data directory {}", dp_dir.display()))?;

    let mut cp_config = gw_control_plane::Config::new(args.control_plane_listen, &data_dir);
    cp_config.store = args.store.unwrap_or_default();
    cp_config.admin_key = global.admin_key.clone();
    if !args.no_console {
        cp_config.console.listen = Some(args.console_listen);
        // The playground sends through this node's data plane.
        if args.listen.port() != 0 {
            cp_config.console.gateway_url = format!("http://{}", reachable(args.listen));
        }
    }
    let cp = match gw_control_plane::start(cp_config).await {
        Ok(cp) => cp,
        // redb's words for a store another process holds open.
        Err(err) if format!("{err:#}").contains("Cannot acquire lock") => bail!(
            "a gateway is already running on {} (its store is locked): stop it first, or give another --data-dir",
            data_dir.display()
        ),
        Err(err) => return Err(err.context("starting the control plane")),
    };

    let control_plane = reachable(cp.addr);
    let mut dp_config =
        gw_data_plane::Config::new(args.listen, format!("http://{control_plane}"), &dp_dir, cp.node_key.clone());
    // One process, one metrics registry: the data plane's admin listener
    // serves both planes' metrics.
    dp_config.admin_listen = Some(args.admin_listen);
    // The quota refusals link to the console's token and top-up pages.
    dp_config.console_url = cp.console_addr.map(|addr| format!("http://{}", reachable(addr)));
    let dp = match gw_data_plane::start(dp_config).await {
        Ok(dp) => dp,
        Err(err) => {
            cp.shutdown().await;
            return Err(err.context("starting the data plane"));
        }
    };
    Ok(Node {
        metrics: dp.admin_addr.map(reachable),
        api: reachable(dp.addr),
        control_plane,
        admin_key_file: cp.admin_key_file.clone(),
        console: cp.console_addr.map(|addr| format!("http://{}", reachable(addr))),
        setup_link: cp.setup_link.clone(),
        cp,
        dp,
    })
}

// === impl Node ===

impl Node {
    /// Stops the data plane (letting in-flight requests finish and usage
    /// report), then the control plane.
    pub async fn shutdown(self) {
        self.dp.shutdown().await;
        self.cp.shutdown().await;
    }
}

/// What the operator needs to start using the gateway.
fn banner(dp: SocketAddr, cp: SocketAddr, key_file: Option<&Path>, global: &Global) -> String {
    let key = match key_file {
        Some(path) => path.display().to_string(),
        None => "given by --admin-key / GW_ADMIN_KEY".to_string(),
    };
    let mut text = format!(
        "gateway is up\n\
         \x20 API base URL:   http://{dp}/v1\n\
         \x20 control plane:  http://{cp}\n\
         \x20 admin key:      {key}\n"
    );
    // gwctl finds the control plane and key by itself only at the defaults.
    let endpoint = format!("http://{cp}");
    let mut env = Vec::new();
    if endpoint != config::DEFAULT_ENDPOINT {
        env.push(format!("GW_ENDPOINT={endpoint}"));
    }
    if let (Some(dir), None) = (&global.data_dir, &global.admin_key) {
        env.push(format!("GW_DATA_DIR={}", dir.display()));
    }
    text.push_str("next steps:\n");
    if !env.is_empty() {
        text.push_str(&format!("  export {}\n", env.join(" ")));
    }
    text.push_str(
        "  gwctl model create --id gpt-4o-mini --category chat --input-price 0.15 --output-price 0.6\n\
         \x20 gwctl channel create --name main --type openai --base-url https://api.openai.com/v1 --key-file ~/.config/openai.key --models gpt-4o-mini\n\
         \x20 gwctl account create --name me --balance 10\n\
         \x20 gwctl token create --account me   # prints the sk- key once\n",
    );
    text.push_str(&format!(
        "  curl http://{dp}/v1/chat/completions -H 'Authorization: Bearer sk-...' -H 'content-type: application/json' \\\n\
         \x20      -d '{{\"model\":\"gpt-4o-mini\",\"messages\":[{{\"role\":\"user\",\"content\":\"Hello\"}}]}}'\n"
    ));
    text
}

/// The data planes connected to the node's control plane, once its own has
/// connected (or after two seconds, whichever comes first).
async fn connected_data_planes(node: &Node) -> usize {
    let global = Global {
        endpoint: Some(format!("http://{}", node.control_plane)),
        admin_key: Some(node.cp.admin_key.clone()),
        ..Global::default()
    };
    let Ok(mut admin) = crate::client::connect(&global).await else { return 0 };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let connected = match admin.list_data_planes(gw_proto::pb::ListRequest::default()).await {
            Ok(list) => list.into_inner().items.iter().filter(|p| p.connected).count(),
            Err(_) => 0,
        };
        if connected > 0 || tokio::time::Instant::now() >= deadline {
            return connected;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// One line for a gateway that is already set up.
fn summary(api: SocketAddr, accounts: usize, tokens: usize, channels: usize, planes: usize) -> String {
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    format!(
        "gateway is up at http://{api}/v1: {}, {}, {}, {} connected",
        plural(accounts, "account"),
        plural(tokens, "token"),
        plural(channels, "channel"),
        plural(planes, "data plane")
    )
}

/// The address to dial for a listener: an unspecified IP becomes loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port()),
        _ => addr,
    }
}

/// Resolves on ctrl-c or SIGTERM; fails if signals cannot be watched.
async fn shutdown_signal() -> Result<()> {
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("watching SIGTERM")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("watching ctrl-c"),
        _ = term.recv() => Ok(()),
    }
}

/// Logs to stderr as `GW_LOG_FORMAT` says (text unless `json`), `info`
/// unless `RUST_LOG` says otherwise; traces and metrics over OTLP as the
/// `OTEL_*` variables say, as the standalone binaries do. Fails on an
/// invalid `OTEL_*` value.
fn init_telemetry() -> Result<gw_telemetry::Telemetry> {
    let format = std::env::var("GW_LOG_FORMAT").ok().and_then(|f| f.parse().ok()).unwrap_or_default();
    let otel = gw_telemetry::OtelConfig::from_env().map_err(|error| anyhow::anyhow!("{error}"))?;
    gw_telemetry::init(format, &otel, "gwctl-up").map_err(|error| anyhow::anyhow!("{error}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn global(data_dir: Option<&str>) -> Global {
        Global { data_dir: data_dir.map(Into::into), ..Global::default() }
    }

    #[test]
    fn unspecified_listen_addresses_are_dialled_on_loopback() {
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(reachable(any), "127.0.0.1:8080".parse().unwrap());
        let any6: SocketAddr = "[::]:8080".parse().unwrap();
        assert_eq!(reachable(any6), "[::1]:8080".parse().unwrap());
    }

    #[test]
    fn banner_names_both_addresses_and_the_key_file() {
        let dp = "127.0.0.1:8080".parse().unwrap();
        let cp = "127.0.0.1:7070".parse().unwrap();
        let text = banner(dp, cp, Some(Path::new("/home/op/.gw/admin.key")), &global(None));
        assert!(text.contains("http://127.0.0.1:8080/v1"), "{text}");
        assert!(text.contains("http://127.0.0.1:7070"), "{text}");
        assert!(text.contains("/home/op/.gw/admin.key"), "{text}");
        assert!(!text.contains("export"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("  gwctl")).count(), 4);
        let curl = text.lines().find(|l| l.starts_with("  curl")).expect("a curl line to try");
        assert!(curl.contains("http://127.0.0.1:8080/v1/chat/completions"), "{text}");
    }

    #[test]
    fn banner_exports_settings_gwctl_cannot_guess() {
        let dp = "127.0.0.1:18080".parse().unwrap();
        let cp = "127.0.0.1:17070".parse().unwrap();
        let text = banner(dp, cp, None, &global(Some("/srv/gw")));
        assert!(text.contains("export GW_ENDPOINT=http://127.0.0.1:17070 GW_DATA_DIR=/srv/gw"), "{text}");
    }

    #[test]
    fn a_gateway_already_set_up_gets_one_summary_line() {
        let line = summary("127.0.0.1:8080".parse().unwrap(), 1, 3, 2, 1);
        assert_eq!(
            line,
            "gateway is up at http://127.0.0.1:8080/v1: 1 account, 3 tokens, 2 channels, 1 data plane connected"
        );
        assert!(!line.contains('\n'));
    }
}
