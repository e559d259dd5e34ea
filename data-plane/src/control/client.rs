//! The channel to the control plane: a lazily connected tonic channel to
//! one replica, shared by every call the data plane makes; the node-key
//! metadata every call carries; which failures are worth retrying.
//!
//! The control plane may be several addresses (a comma-separated list, each
//! name resolved to all its IPs): the link uses one replica at a time and
//! `fail_over` moves it to the next, resolving names again, when discovery
//! finds its replica dead or frozen (HTTP/2 keep-alive pings unanswered for
//! a few seconds).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tonic::{
    Code, Status,
    metadata::MetadataValue,
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
};

/// A ping unanswered this long closes the connection: a frozen replica is
/// left within `KEEPALIVE + KEEPALIVE_TIMEOUT`.
const KEEPALIVE: Duration = Duration::from_secs(2);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 receive window of one stream from the control plane.
const STREAM_WINDOW: u32 = 8 << 20;

/// The control plane's replicas plus the node credential.
#[derive(Clone)]
pub struct ControlPlane {
    links: Arc<Links>,
    /// `None` when the data plane proves itself with a client certificate only.
    authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
}

/// The configured addresses and the replica in use.
struct Links {
    /// As configured: `scheme://host:port`, in order.
    targets: Vec<Target>,
    tls: Option<ClientTlsConfig>,
    current: ArcSwap<Link>,
    /// Serialises fail-overs, so that two callers move it once.
    moving: Mutex<()>,
}

/// One configured address.
struct Target {
    https: bool,
    host: String,
    port: u16,
}

/// A channel to one replica.
struct Link {
    /// `host:port` (an IP when resolved from a name).
    address: String,
    /// Connects on first use and reconnects by itself.
    channel: Channel,
}

/// How the data plane talks TLS to an `https://` control plane.
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    /// PEM CA bundle the control plane's certificate is checked against;
    /// `None` trusts the system's roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate and key shown to a control plane that trusts
    /// their CA (mutual TLS); both or neither.
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
}

// === impl ControlPlane ===

impl ControlPlane {
    /// A link to `addresses` (a comma-separated list of `http://host:port`,
    /// or `https://` with `tls`), connected lazily to the first. Fails if an
    /// address, the key or a TLS file cannot be used at all. An empty
    /// `node_key` sends none.
    pub fn new(addresses: &str, node_key: &str, tls: &ClientTls) -> anyhow::Result<ControlPlane> {
        let targets = addresses.split(',').map(str::trim).filter(|a| !a.is_empty()).map(Target::parse);
        let targets = targets.collect::<anyhow::Result<Vec<_>>>()?;
        let Some(first) = targets.first() else { anyhow::bail!("no control plane address in {addresses:?}") };
        let tls = match targets.iter().any(|t| t.https) {
            true => Some(client_tls(tls)?),
            false => None,
        };
        let link = link(first, &first.host, tls.as_ref())?;
        let authorization = match node_key {
            "" => None,
            key => Some(
                MetadataValue::try_from(format!("Bearer {key}")).context("node key is not valid in a gRPC header")?,
            ),
        };
        let links = Links { targets, tls, current: ArcSwap::from_pointee(link), moving: Mutex::new(()) };
        Ok(ControlPlane { links: Arc::new(links), authorization })
    }

    /// The channel to the replica in use.
    pub fn channel(&self) -> Channel {
        self.links.current.load().channel.clone()
    }

    /// The replica in use, `host:port`.
    pub fn address(&self) -> String {
        self.links.current.load().address.clone()
    }

    /// Moves to the next replica: every configured address, each name
    /// resolved again to all its IPs, in order, after the one in use. Stays
    /// when there is no other; true when it moved.
    pub async fn fail_over(&self) -> bool {
        let mut candidates: Vec<(usize, String)> = Vec::new();
        for (i, target) in self.links.targets.iter().enumerate() {
            match tokio::net::lookup_host((target.host.as_str(), target.port)).await {
                Ok(addrs) => candidates.extend(addrs.map(|a| (i, a.ip().to_string()))),
                Err(error) => tracing::warn!(host = %target.host, %error, "cannot resolve a control-plane address"),
            }
        }
        let _moving = self.links.moving.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.address();
        let at = candidates.iter().position(|(i, ip)| host_port(ip, self.links.targets[*i].port) == current);
        let next = match at {
            Some(at) => candidates.get(at + 1).or(candidates.first()),
            None => candidates.first(),
        };
        let Some((i, ip)) = next else { return false };
        let target = &self.links.targets[*i];
        if host_port(ip, target.port) == current {
            return false;
        }
        match link(target, ip, self.links.tls.as_ref()) {
            Ok(link) => {
                tracing::warn!(from = %current, to = %link.address, "moving to another control-plane replica");
                self.links.current.store(Arc::new(link));
                true
            }
            Err(error) => {
                tracing::warn!(%error, "cannot use a control-plane address");
                false
            }
        }
    }

    /// Wraps `message` in a request that carries the node key.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(authorization) = &self.authorization {
            request.metadata_mut().insert("authorization", authorization.clone());
        }
        // The caller's trace continues on the control plane.
        for (name, value) in gw_telemetry::context_headers(&tracing::Span::current()) {
            if let Ok(value) = value.parse() {
                request.metadata_mut().insert(name, value);
            }
        }
        request
    }
}

// === impl Target ===

impl Target {
    fn parse(address: &str) -> anyhow::Result<Target> {
        let uri: axum::http::Uri = address.parse().with_context(|| format!("control plane address {address:?}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => anyhow::bail!("control plane address {address:?} must start with http:// or https://"),
        };
        let host = uri.host().with_context(|| format!("control plane address {address:?} has no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        Ok(Target { https, host, port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }) })
    }
}

/// `host:port`, bracketing an IPv6 address.
fn host_port(host: &str, port: u16) -> String {
    match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

/// A lazily connected channel to `target` at `host` (its own name, or one
/// of its IPs: TLS still checks the certificate against its name).
fn link(target: &Target, host: &str, tls: Option<&ClientTlsConfig>) -> anyhow::Result<Link> {
    let address = host_port(host, target.port);
    let scheme = if target.https { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
        .with_context(|| format!("control plane address {address:?}"))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        // A full snapshot is hundreds of MB: with HTTP/2's default 64 KiB
        // window the stream stalls on window updates.
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(2 * STREAM_WINDOW)
        // Detects a replica that vanished or froze without closing the stream.
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    if let (true, Some(tls)) = (target.https, tls) {
        let tls = tls.clone().domain_name(target.host.clone());
        endpoint = endpoint.tls_config(tls).context("configuring TLS to the control plane")?;
    }
    Ok(Link { address, channel: endpoint.connect_lazy() })
}

/// tonic's client TLS from the files `tls` names.
fn client_tls(tls: &ClientTls) -> anyhow::Result<ClientTlsConfig> {
    let read = |path: &std::path::Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca_file {
        Some(ca) => {
            gw_tls::load_roots(ca)?;
            config.ca_certificate(Certificate::from_pem(read(ca)?))
        }
        None => config.with_native_roots(),
    };
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            gw_tls::load_certs(cert)?;
            gw_tls::load_key(key)?;
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        (None, None) => {}
        _ => anyhow::bail!("a client certificate needs its key, and a key its certificate"),
    }
    Ok(config)
}

/// Whether a call that failed with `status` may succeed if sent again. Only a
/// request the control plane judged malformed is never resent.
pub fn is_retryable(status: &Status) -> bool {
    !matches!(status.code(), Code::InvalidArgument | Code::OutOfRange)
}
