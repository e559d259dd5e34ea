//! Bootstrap settings of one data plane, and the node identity that must
//! survive restarts (so the control plane sees one node, not a new one per
//! start).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use ipnet::IpNet;

use crate::durable::write_durably;

mod load;

pub use load::{Loaded, load};

/// File in the data directory that keeps a generated node id.
pub const NODE_ID_FILE: &str = "node.id";

/// Everything `start` needs; dynamic policy comes from the control plane.
#[derive(Debug, Clone)]
pub struct Config {
    /// Client-facing HTTP address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The admin listener (`/metrics`, `/healthz`); `None` keeps it off.
    pub admin_listen: Option<SocketAddr>,
    /// The control plane's gRPC address, e.g. `http://127.0.0.1:7070`.
    pub control_plane: String,
    /// Holds the snapshot file, the usage spool and the node id.
    pub data_dir: PathBuf,
    /// Sent as `authorization: Bearer <node_key>` on every gRPC call.
    pub node_key: String,
    /// Default: generated once and kept in `data_dir/node.id`.
    pub node_id: Option<String>,
    /// Peers whose `X-Forwarded-For` / `X-Real-IP` headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// How often the usage spool seals a segment for the reporter to send
    /// (and, under `SpoolSync::Interval`, fsyncs it).
    pub report_interval: Duration,
    /// When the usage spool calls fsync; see `SpoolSync`.
    pub spool_sync: crate::spool::SyncPolicy,
    /// Upstream timeouts (defaults for channels without their own) and the
    /// retry budget per request.
    pub upstream: crate::provider::Config,
    /// Limits on client connections: how many, how slow.
    pub limits: crate::http::Limits,
    /// Threads serving client connections, each with a runtime of its own
    /// (`workers`); one per core by default.
    pub workers: usize,
    /// Spending-budget leases: lifetime, offline allowance, default bound.
    pub budget: crate::policy::budget::Config,
    /// TLS of the client-facing listener; `None` serves plain HTTP.
    pub tls: Option<ListenerTls>,
    /// TLS to an `https://` control plane: CA file, client certificate.
    pub control_plane_tls: crate::control::ClientTls,
    /// The console's public base URL (`https://example.com/console`); the
    /// quota refusals link to its `/tokens` and `/topup` pages. `None` (or
    /// empty): no console, no links.
    pub console_url: Option<String>,
    /// Whether `GET /v1/responses` may upgrade to a WebSocket (responses
    /// over a WebSocket); when off the upgrade is refused with 426.
    pub responses_websocket: bool,
    /// Idle timeouts and the maximum lifetime of client WebSockets.
    pub sockets: crate::pipeline::sockets::Limits,
}

/// The certificate the `/v1` listener presents, read again when its files
/// change (polled every few seconds, and on SIGHUP).
#[derive(Debug, Clone)]
pub struct ListenerTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// How often the files are compared with what was loaded.
    pub reload_interval: Duration,
}

// === impl ListenerTls ===

impl ListenerTls {
    /// The pair in `cert_file` and `key_file`, checked every 2 s.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> ListenerTls {
        ListenerTls { cert_file: cert_file.into(), key_file: key_file.into(), reload_interval: Duration::from_secs(2) }
    }
}

// === impl Config ===

impl Config {
    /// A config with no admin listener, no trusted proxies, a generated
    /// node id, a 50 ms report interval, fsync per sealed segment and the
    /// default upstream settings.
    pub fn new(
        listen: SocketAddr,
        control_plane: impl Into<String>,
        data_dir: impl Into<PathBuf>,
        node_key: impl Into<String>,
    ) -> Config {
        Config {
            listen,
            admin_listen: None,
            control_plane: control_plane.into(),
            data_dir: data_dir.into(),
            node_key: node_key.into(),
            node_id: None,
            trusted_proxies: Vec::new(),
            report_interval: Duration::from_millis(50),
            spool_sync: crate::spool::SyncPolicy::default(),
            upstream: crate::provider::Config::default(),
            limits: crate::http::Limits::default(),
            workers: crate::workers::default_count(),
            budget: crate::policy::budget::Config::default(),
            tls: None,
            control_plane_tls: crate::control::ClientTls::default(),
            console_url: None,
            responses_websocket: true,
            sockets: crate::pipeline::sockets::Limits::default(),
        }
    }

    /// Checks what can be checked without touching the network or disk:
    /// the control-plane address is an `http(s)://` URI, the node key can
    /// travel in a header, the console URL (when set) is an absolute
    /// `http(s)://` URL, and the upstream settings are usable.
    pub fn validate(&self) -> anyhow::Result<()> {
        check_control_plane(&self.control_plane)
            .map_err(|e| anyhow::anyhow!("control plane address {:?}: {e}", self.control_plane))?;
        if let Some(url) = self.console_url.as_deref().map(str::trim).filter(|url| !url.is_empty()) {
            check_console_url(url).map_err(|e| anyhow::anyhow!("console URL {url:?}: {e}"))?;
        }
        // A client certificate may stand in for the node key.
        let has_cert = self.control_plane_tls.cert_file.is_some();
        if (self.node_key.is_empty() && !has_cert) || axum::http::HeaderValue::from_str(&self.node_key).is_err() {
            anyhow::bail!("the node key is empty or has characters a header cannot carry");
        }
        self.limits.validate()?;
        self.sockets.validate()?;
        anyhow::ensure!(self.workers > 0, "there must be at least one worker");
        self.budget.validate()?;
        self.upstream.validate()
    }

    /// The configured node id; else the name in the client certificate
    /// (the control plane knows the node by it); else the one kept in
    /// `data_dir` (created on first use).
    pub fn resolve_node_id(&self) -> anyhow::Result<String> {
        if let Some(id) = self.node_id.as_deref().map(str::trim).filter(|id| !id.is_empty()) {
            return Ok(id.to_owned());
        }
        if let Some(cert) = &self.control_plane_tls.cert_file {
            let certs = gw_tls::load_certs(cert)?;
            if let Some(name) = certs.first().and_then(gw_tls::peer_name) {
                return Ok(name);
            }
        }
        load_or_create_node_id(&self.data_dir)
    }

    /// The secret the saved snapshot is sealed with: the node key, or the
    /// client certificate's private key when the node has no key. Both live
    /// outside the data dir.
    pub fn snapshot_secret(&self) -> anyhow::Result<String> {
        if !self.node_key.is_empty() {
            return Ok(self.node_key.clone());
        }
        let key = self.control_plane_tls.key_file.as_ref().context("no node key and no client key")?;
        let bytes = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
        Ok(hex::encode(bytes))
    }
}

fn load_or_create_node_id(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(NODE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_owned()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    }
    let id = format!("dp-{:016x}", rand::random::<u64>());
    write_durably(&data_dir.join(format!("{NODE_ID_FILE}.tmp")), &path, format!("{id}\n").as_bytes())?;
    Ok(id)
}

/// The node key kept in `<data_dir>/node.key`, or a message saying how to
/// provide one.
pub fn read_node_key(data_dir: &Path) -> Result<String, String> {
    let path = data_dir.join("node.key");
    match std::fs::read_to_string(&path) {
        Ok(key) if !key.trim().is_empty() => Ok(key.trim().to_owned()),
        Ok(_) => Err(format!("no node key: {} is empty", path.display())),
        Err(error) => {
            Err(format!("no node key: pass --node-key or set GW_NODE_KEY, or write it to {} ({error})", path.display()))
        }
    }
}

/// Checks that `address` is an `http(s)://host[:port]` URI.
pub fn check_control_plane(addresses: &str) -> Result<(), String> {
    let mut any = false;
    for address in addresses.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let uri: axum::http::Uri = address.parse().map_err(|e| format!("{address:?} is not a URI: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!("{address:?} must look like http://host:port"));
        }
        any = true;
    }
    match any {
        true => Ok(()),
        false => Err("must name at least one address, like http://host:port".to_owned()),
    }
}

/// Checks that `url` is an absolute `http(s)://host[:port][/path]` URL that
/// page names can be appended to: no query, fragment or credentials.
pub fn check_console_url(url: &str) -> Result<(), String> {
    let uri: axum::http::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err("must be an absolute http(s) URL, like https://example.com/console".to_owned());
    }
    // `Uri` drops a fragment silently; it would swallow the page names.
    if uri.query().is_some() || url.contains('#') {
        return Err("must not have a query or a fragment".to_owned());
    }
    // The links go to every client refused for quota.
    if uri.authority().is_some_and(|authority| authority.as_str().contains('@')) {
        return Err("must not carry credentials".to_owned());
    }
    Ok(())
}

/// Parses a comma-separated list of CIDRs or bare IPs (`10.0.0.0/8,::1`).
pub fn parse_trusted_proxies(list: &str) -> Result<Vec<IpNet>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| crate::policy::client_ip::parse_allow_ip(s).map_err(|_| format!("{s:?} is not an IP address or CIDR")))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    /// `gw-data-plane --check-config --node-key k` and `extra`, loaded.
    fn check_config_with(extra: &[&str]) -> Result<Loaded, gw_bootstrap::Failure> {
        let mut args = vec!["gw-data-plane", "--check-config", "--node-key", "k"];
        args.extend_from_slice(extra);
        load(args)
    }

    #[test]
    fn node_id_is_generated_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new("127.0.0.1:0".parse().unwrap(), "http://x", dir.path(), "k");
        let first = config.resolve_node_id().unwrap();
        assert!(first.starts_with("dp-"));
        assert_eq!(config.resolve_node_id().unwrap(), first);
        assert!(config.validate().is_ok());
        let named = Config { node_id: Some("edge-1".into()), ..config };
        assert_eq!(named.resolve_node_id().unwrap(), "edge-1");
    }

    #[test]
    fn control_plane_must_be_an_http_address() {
        let config = |cp: &str, key: &str| Config::new("127.0.0.1:0".parse().unwrap(), cp, "d", key);
        assert!(config("http://127.0.0.1:7070", "k").validate().is_ok());
        assert!(config("https://cp.internal", "k").validate().is_ok());
        assert!(config("127.0.0.1:7070", "k").validate().is_err());
        assert!(config("not a url", "k").validate().is_err());
        assert!(config("http://cp:1", "").validate().is_err());
        assert!(config("http://cp:1", "bad\nkey").validate().is_err());
    }

    #[test]
    fn workers_default_to_one_per_core_and_take_a_count_from_1_to_1024() {
        let load = check_config_with;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(load(&[]).unwrap().config.workers, cores);
        assert_eq!(load(&["--workers", "3"]).unwrap().config.workers, 3);
        for bad in ["0", "1025", "many"] {
            assert!(load(&["--workers", bad]).is_err(), "{bad} accepted");
        }
        let config = Config { workers: 0, ..Config::new("127.0.0.1:0".parse().unwrap(), "http://cp:1", "d", "k") };
        assert!(config.validate().is_err());
    }

    #[test]
    fn the_report_interval_defaults_to_50_ms_and_takes_10_to_5000() {
        let load = check_config_with;
        assert_eq!(load(&[]).unwrap().config.report_interval, Duration::from_millis(50));
        let set = load(&["--report-interval-ms", "250"]).unwrap();
        assert_eq!(set.config.report_interval, Duration::from_millis(250));
        for bad in ["0", "9", "5001", "soon"] {
            assert!(load(&["--report-interval-ms", bad]).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn the_console_url_is_optional_and_must_be_an_absolute_http_url() {
        let load = check_config_with;
        assert_eq!(load(&[]).unwrap().config.console_url, None);
        assert_eq!(load(&["--console-url", ""]).unwrap().config.console_url, None, "empty means no console");
        for good in ["https://example.com/console", "http://127.0.0.1:7070/", "https://gw.example.com"] {
            assert_eq!(load(&["--console-url", good]).unwrap().config.console_url.as_deref(), Some(good));
        }
        for bad in [
            "example.com/console",
            "/console",
            "ftp://example.com",
            "https://",
            "https://example.com/console?x=1",
            "https://example.com/console#top",
            "https://user:pw@example.com",
            "https://exa mple.com",
        ] {
            let Err(gw_bootstrap::Failure::Invalid(errors)) = load(&["--console-url", bad]) else {
                panic!("{bad} accepted")
            };
            assert!(errors.len() == 1 && errors[0].starts_with("--console-url"), "{bad}: {errors:?}");
        }
        let mut config = Config::new("127.0.0.1:0".parse().unwrap(), "http://cp:1", "d", "k");
        config.console_url = Some("console.example.com".into());
        assert!(config.validate().is_err());
        config.console_url = Some(String::new());
        assert!(config.validate().is_ok());
    }

    #[test]
    fn trusted_proxies_parse_cidrs_and_ips() {
        let nets = parse_trusted_proxies("10.0.0.0/8, 127.0.0.1,::1").unwrap();
        assert_eq!(nets.len(), 3);
        assert!(parse_trusted_proxies("").unwrap().is_empty());
        assert!(parse_trusted_proxies("10.0.0.0/8,nope").is_err());
    }

    #[test]
    fn tls_files_come_in_pairs_and_a_client_certificate_stands_in_for_the_node_key() {
        let args = check_config_with;
        let Err(gw_bootstrap::Failure::Invalid(errors)) =
            args(&["--tls-cert-file", "dp.crt", "--client-key-file", "dp-1.key"])
        else {
            panic!("accepted")
        };
        assert_eq!(errors.len(), 2, "{errors:#?}");
        let loaded = args(&["--tls-cert-file", "dp.crt", "--tls-key-file", "dp.key"]).unwrap();
        assert_eq!(loaded.config.tls.unwrap().reload_interval, Duration::from_secs(2));

        let mut config = Config::new("127.0.0.1:0".parse().unwrap(), "https://cp:1", "d", "");
        assert!(config.validate().is_err(), "neither a key nor a certificate");
        config.control_plane_tls.cert_file = Some("dp-1.crt".into());
        config.control_plane_tls.key_file = Some("dp-1.key".into());
        assert!(config.validate().is_ok());
    }
}
