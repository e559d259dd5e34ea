//! The data plane's gRPC link to the control plane: one lazily connected
//! tonic channel shared by discovery and the usage reporter, the node-key
//! metadata every call carries, and which failures are worth retrying.

use std::time::Duration;

use anyhow::Context as _;
use tonic::{
    Code, Status,
    metadata::MetadataValue,
    transport::{Channel, Endpoint},
};

/// The control plane's address plus the node credential.
#[derive(Clone)]
pub struct ControlPlane {
    /// Connects on first use and reconnects by itself.
    pub channel: Channel,
    authorization: MetadataValue<tonic::metadata::Ascii>,
}

// === impl ControlPlane ===

impl ControlPlane {
    /// A lazily connected channel to `address` (`http://host:port`).
    /// Fails if the address or the key cannot be used at all.
    pub fn new(address: &str, node_key: &str) -> anyhow::Result<ControlPlane> {
        let endpoint = Endpoint::from_shared(address.to_owned())
            .with_context(|| format!("control plane address {address:?}"))?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            // Detects a control plane that vanished without closing the stream.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        let authorization =
            MetadataValue::try_from(format!("Bearer {node_key}")).context("node key is not valid in a gRPC header")?;
        Ok(ControlPlane { channel: endpoint.connect_lazy(), authorization })
    }

    /// Wraps `message` in a request that carries the node key.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert("authorization", self.authorization.clone());
        // The caller's trace continues on the control plane.
        for (name, value) in gw_telemetry::context_headers(&tracing::Span::current()) {
            if let Ok(value) = value.parse() {
                request.metadata_mut().insert(name, value);
            }
        }
        request
    }
}

/// Whether a call that failed with `status` may succeed if sent again. Only a
/// request the control plane judged malformed is never resent.
pub fn is_retryable(status: &Status) -> bool {
    !matches!(status.code(), Code::InvalidArgument | Code::OutOfRange)
}
