//! The gRPC listener of one replica: the health, admin and policy services
//! on one port, the admin service behind its guard and the policy service
//! behind the node check, over TLS when configured, every call in a span.

use std::{future::Future, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use gw_proto::pb;
use tokio::{net::TcpListener, task::JoinHandle};
use tonic_health::pb::health_server::{Health, HealthServer};

use crate::{
    ServerTls,
    api::{admin::AdminApi, guard::Guard, peer::NodeAuth, policy::PolicyApi},
    services::{access::Authenticator, telemetry},
};

/// What the listener serves.
pub struct Services<H> {
    pub health: HealthServer<H>,
    pub admin: Arc<AdminApi>,
    pub admin_auth: Arc<Authenticator>,
    pub policy: PolicyApi,
    pub node_auth: NodeAuth,
}

/// Serves `services` on `listener` until `shutdown` completes; the task
/// ends with the server. Fails when the TLS files cannot be read.
pub fn spawn<H: Health>(
    listener: TcpListener,
    tls: Option<&ServerTls>,
    services: Services<H>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    // Without TCP_NODELAY a response's trailers wait for the peer's delayed
    // ACK (40 ms), and so does every request waiting on a lease or permit.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(server_tls(tls)?).context("configuring TLS")?;
    }
    let Services { health, admin, admin_auth, policy, node_auth } = services;
    let server = builder
        .trace_fn(telemetry::rpc_span)
        .add_service(health)
        .add_service(Guard::new(pb::admin_service_server::AdminServiceServer::from_arc(admin), admin_auth))
        .add_service(pb::policy_service_server::PolicyServiceServer::with_interceptor(policy, node_auth))
        .serve_with_incoming_shutdown(incoming, shutdown);
    Ok(tokio::spawn(async move { server.await.context("serving gRPC") }))
}

/// How long a client has to finish the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// tonic's TLS settings from the files `tls` names.
fn server_tls(tls: &ServerTls) -> anyhow::Result<tonic::transport::ServerTlsConfig> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let read = |path: &PathBuf| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    // Parsed here too so that a bad file is named in the error.
    gw_tls::load_certs(&tls.cert_file)?;
    gw_tls::load_key(&tls.key_file)?;
    let mut config = ServerTlsConfig::new()
        .identity(Identity::from_pem(read(&tls.cert_file)?, read(&tls.key_file)?))
        .timeout(TLS_HANDSHAKE_TIMEOUT);
    if let Some(ca) = &tls.client_ca_file {
        gw_tls::load_roots(ca)?;
        // Optional at the handshake: gwctl calls the admin service with the
        // admin key and no certificate; the policy service decides (`peer`).
        config = config.client_ca_root(Certificate::from_pem(read(ca)?)).client_auth_optional(true);
    }
    Ok(config)
}
