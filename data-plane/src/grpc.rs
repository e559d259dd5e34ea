//! The data plane's gRPC link to the control plane: one lazily connected
//! tonic channel shared by discovery and the usage reporter, the node-key
//! metadata every call carries, and which failures are worth retrying.

use std::time::Duration;

use anyhow::Context as _;
use tonic::{
    Code, Status,
    metadata::MetadataValue,
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
};

/// The control plane's address plus the node credential.
#[derive(Clone)]
pub struct ControlPlane {
    /// Connects on first use and reconnects by itself.
    pub channel: Channel,
    /// `None` when the data plane proves itself with a client certificate only.
    authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
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
    /// A lazily connected channel to `address` (`http://host:port`, or
    /// `https://` with `tls`). Fails if the address, the key or a TLS file
    /// cannot be used at all. An empty `node_key` sends none.
    pub fn new(address: &str, node_key: &str, tls: &ClientTls) -> anyhow::Result<ControlPlane> {
        let mut endpoint = Endpoint::from_shared(address.to_owned())
            .with_context(|| format!("control plane address {address:?}"))?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            // Detects a control plane that vanished without closing the stream.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        if address.starts_with("https://") {
            endpoint = endpoint.tls_config(client_tls(tls)?).context("configuring TLS to the control plane")?;
        }
        let authorization = match node_key {
            "" => None,
            key => Some(
                MetadataValue::try_from(format!("Bearer {key}")).context("node key is not valid in a gRPC header")?,
            ),
        };
        Ok(ControlPlane { channel: endpoint.connect_lazy(), authorization })
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
