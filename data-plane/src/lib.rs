//! The gateway data plane: the `/v1` HTTP proxy. It enforces the policy
//! snapshot the control plane streams to it (held in memory, read
//! lock-free, saved to disk), forwards requests to upstream channels, meters
//! their usage onto a local spool (before the client has the answer) and
//! reports it from there.
//!
//! `start` runs the whole thing in-process and returns a `Handle`; the
//! `gw-data-plane` binary is a thin wrapper around it.

mod affinity;
mod backoff;
mod batches;
mod config;
mod control;
mod durable;
mod endpoints;
mod error;
/// `limits` with `max_connections` lowered to what the open-file limit
/// holds, after raising that to its hard limit; logs what it chose.
fn fit_open_files(mut limits: http::Limits) -> http::Limits {
    let open_files = open_files::raise();
    let wanted = limits.max_connections;
    limits.max_connections = open_files::fit(wanted, open_files);
    if limits.max_connections < wanted {
        tracing::warn!(
            open_files,
            wanted,
            max_connections = limits.max_connections,
            "max_connections lowered to fit the open-file limit (two descriptors a connection); raise `ulimit -n` (LimitNOFILE) to serve more"
        );
    } else {
        tracing::info!(open_files, max_connections = limits.max_connections, "open-file limit");
    }
    limits
}

#[cfg(test)]
mod fuzz;
mod http;
mod json_body;
mod meter;
mod open_files;
mod openai;
mod pipeline;
mod policy;
mod pricing;
mod provider;
mod reporter;
mod spool;
mod telemetry;
mod tokens;
mod trail;
mod translate;
mod usage;
mod videos;
mod vitals;
mod workers;

pub use config::{Config, ListenerTls, Loaded, load as load_config, parse_trusted_proxies, read_node_key};
pub use control::ClientTls;
pub use http::Limits;
pub use provider::Config as UpstreamConfig;
pub use spool::SyncPolicy as SpoolSync;

/// The revision and store lineage of the snapshot saved in `data_dir`
/// (sealed under `node_key`); `None` when none is saved. Fails on a file
/// sealed under another key, or altered.
pub fn saved_snapshot(data_dir: &std::path::Path, node_key: &str) -> anyhow::Result<Option<(u64, String)>> {
    Ok(control::persist::load(data_dir, node_key)?.map(|snapshot| (snapshot.revision, snapshot.store_id)))
}

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

use crate::{
    control::ControlPlane, control::Discovery, meter::UsageSink, pipeline::App, policy::snapshot::Snapshot,
    reporter::Reporter,
};

/// How long `Handle::shutdown` lets in-flight requests and open sockets
/// finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// How long sockets told to end at once, after the grace period, have to
/// write their records and close (a realtime drain waits `DRAIN_WAIT`).
const CUT_WAIT: Duration = Duration::from_secs(10);

/// A running data plane. Call `shutdown` to stop it gracefully; merely
/// dropping the handle also stops it, in the background: open client
/// connections are cut at once (what their requests spooled is reported
/// from the spool at the next start), and no last usage report is waited
/// for.
pub struct Handle {
    /// The bound client-facing address.
    pub addr: SocketAddr,
    /// The bound admin address (`/metrics`), when one was configured.
    pub admin_addr: Option<SocketAddr>,
    node_id: String,
    snapshot: Arc<ArcSwap<Snapshot>>,
    stop_server: watch::Sender<bool>,
    stop_tasks: watch::Sender<bool>,
    stop_reporter: watch::Sender<bool>,
    /// The open client WebSockets, told to end and waited for.
    sockets: pipeline::sockets::Sockets,
    /// The threads serving client connections (`workers`).
    server: workers::Workers,
    tasks: Vec<JoinHandle<()>>,
    reporter: JoinHandle<()>,
}

// === impl Handle ===

impl Handle {
    /// Stops gracefully: stops accepting, tells open WebSockets to end, lets
    /// in-flight requests (streams included) and the sockets' running
    /// responses finish for up to 30 s (then cuts them, billed as clients
    /// that left), waits for every socket to settle, spools all usage and
    /// tries one last report, then stops discovery and saves the snapshot.
    pub async fn shutdown(self) {
        let _ = self.stop_server.send(true);
        self.sockets.close();
        let mut server = self.server;
        // Upgrades answered before the server stopped have taken their
        // place by then, so `settled` misses none.
        let settled = async {
            let served = server.served().await;
            self.sockets.settled().await;
            served
        };
        match tokio::time::timeout(SHUTDOWN_GRACE, settled).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "server ended with an error"),
            Err(_) => {
                tracing::warn!("requests or sockets still running after the grace period; cutting them off");
                // Sockets first: cutting the server ends the worker runtimes
                // their tasks run on.
                self.sockets.cut();
                if tokio::time::timeout(CUT_WAIT, self.sockets.settled()).await.is_err() {
                    tracing::warn!("sockets still open after being cut; their records may be lost");
                }
                server.cut();
            }
        }
        // The last report goes while the watch is still open: the control
        // plane takes reports only over the connection of their node's watch.
        let _ = self.stop_reporter.send(true);
        let _ = self.reporter.await;
        let _ = self.stop_tasks.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        // Blocks until the worker threads end, which they do at once now.
        let _ = tokio::task::spawn_blocking(move || server.release()).await;
        tracing::info!("data plane stopped");
    }

    /// Revision of the snapshot in use; 0 when none is held.
    pub fn revision(&self) -> u64 {
        let snapshot = self.snapshot.load();
        if snapshot.held { snapshot.revision } else { 0 }
    }

    /// The id this node reports to the control plane.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }
}

/// Binds `config.listen`, loads the saved snapshot (if any), spawns
/// discovery, the snapshot writer and the usage reporter, and serves.
/// Fails if the data directory, the address or the credentials are unusable;
/// an unreachable control plane is not an error (discovery keeps trying).
pub async fn start(config: Config) -> anyhow::Result<Handle> {
    config.validate()?;
    // Loads the tokenizers off the request path: the first usage estimate
    // would otherwise stall a runtime thread while they are built.
    std::thread::spawn(tokens::warm_up);
    let data_dir: PathBuf = config.data_dir.clone();
    durable::private_dir(&data_dir).with_context(|| format!("preparing data dir {}", data_dir.display()))?;
    let node_id = config.resolve_node_id().context("resolving the node id")?;
    gw_tls::install_provider();
    let control = ControlPlane::new(&config.control_plane, &config.node_key, &config.control_plane_tls)?;
    let snapshot_secret = config.snapshot_secret()?;
    let tls = match &config.tls {
        Some(tls) => {
            let cert = gw_tls::ReloadingCert::load(&tls.cert_file, &tls.key_file)
                .with_context(|| format!("loading the listener's certificate {}", tls.cert_file.display()))?;
            let server = gw_tls::server_config(cert.clone(), None)?;
            Some((cert, tls.reload_interval, tokio_rustls::TlsAcceptor::from(Arc::new(server))))
        }
        None => None,
    };
    let initial = match control::persist::load(&data_dir, &snapshot_secret) {
        Ok(Some(snapshot)) => {
            tracing::info!(
                revision = snapshot.revision,
                "serving the saved policy snapshot until the control plane answers"
            );
            snapshot
        }
        Ok(None) => Snapshot::default(),
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), "ignoring an unreadable saved snapshot");
            Snapshot::default()
        }
    };
    let snapshot = Arc::new(ArcSwap::from_pointee(initial));
    let (spool, replay, sealed) =
        spool::Spool::start(data_dir.join("spool"), config.spool_sync, config.report_interval)
            .context("opening the usage spool")?;
    let limits = fit_open_files(config.limits);
    let listener = TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let admin = match config.admin_listen {
        Some(admin) => Some(gw_telemetry::admin::bind(admin).await.with_context(|| format!("binding {admin}"))?),
        None => None,
    };
    let admin_addr = admin.as_ref().map(TcpListener::local_addr).transpose().context("reading the admin address")?;

    let (stop_tasks, tasks_stopped) = watch::channel(false);
    let (stop_reporter, reporter_stopped) = watch::channel(false);
    let (persist_tx, persist_rx) = tokio::sync::mpsc::unbounded_channel();

    let persister =
        tokio::spawn(control::persist::run(data_dir.clone(), snapshot_secret, persist_rx, tasks_stopped.clone()));
    let vitals = Arc::new(vitals::Vitals::default());
    let discovery = Discovery {
        control: control.clone(),
        node_id: node_id.clone(),
        address: addr.to_string(),
        snapshot: snapshot.clone(),
        persist: persist_tx,
        vitals: vitals.clone(),
        shutdown: tasks_stopped,
    };
    let discovery = tokio::spawn(discovery.run());
    let videos = control::Videos::new(control.clone(), &node_id);
    let batches = control::Batches::new(control.clone(), &node_id);
    let permits = control::ControlPlanePermits { control: control.clone(), node_id: node_id.clone() };
    let spend = control::ControlPlaneBudgets { control: control.clone(), node_id: node_id.clone() };
    let slots = control::ControlPlaneSlots { control: control.clone(), node_id: node_id.clone() };
    let health = provider::Health::new(control::HealthReports::new(control.clone(), &node_id));
    let usage_tx = spool.sender();
    let spool_health = spool.health();
    let worker_spool = spool.clone();
    let reporter = Reporter {
        sealed,
        replay,
        spool,
        control,
        node_id: node_id.clone(),
        interval: config.report_interval,
        vitals: vitals.clone(),
        shutdown: reporter_stopped,
    };
    let reporter = tokio::spawn(reporter.run());

    let sockets = pipeline::sockets::Sockets::new(config.sockets);
    let app = Arc::new(App {
        snapshot: snapshot.clone(),
        usage: UsageSink::new(usage_tx, &node_id).with_health(spool_health),
        upstreams: config.upstream.build(health),
        trusted_proxies: config.trusted_proxies.clone(),
        limits: policy::limits::Limiter::new(Arc::new(permits)),
        in_flight: policy::inflight::InFlight::new(Arc::new(slots)),
        budgets: policy::budget::Budgets::new(Arc::new(spend), config.budget, Some(data_dir.join("fleet"))),
        videos,
        batches,
        vitals,
        console: config.console_url.as_deref().and_then(error::ConsoleLinks::new),
        responses_websocket: config.responses_websocket,
        sockets: sockets.clone(),
    });
    telemetry::metrics::observe(&app);
    let sweeper = tokio::spawn(app.budgets.clone().sweep_idle(stop_tasks.subscribe()));
    let mut tasks = vec![discovery, persister, sweeper];
    let acceptor = tls.map(|(cert, interval, acceptor)| {
        tasks.push(cert.watch(interval, stop_tasks.subscribe()));
        acceptor
    });
    if let Some(admin) = admin {
        let shutdown = stopped(stop_tasks.subscribe());
        tasks.push(tokio::spawn(async move {
            if let Err(error) = gw_telemetry::admin::serve(admin, shutdown).await {
                tracing::warn!(%error, "admin listener failed");
            }
        }));
    }
    let (stop_server, server_stopped) = watch::channel(false);
    let router = http::router(app);
    // One accept loop, on this runtime, deals connections to the workers.
    let (dealer, queues) = http::Dealer::new(config.workers);
    telemetry::metrics::connections(&dealer.open());
    tokio::spawn(http::accept(listener, dealer, http::slots(&limits), stopped(server_stopped.clone())));
    let server = workers::spawn(queues, move |_, queue| {
        let (router, acceptor, spool) = (router.clone(), acceptor.clone(), worker_spool.clone());
        let shutdown = stopped(server_stopped.clone());
        async move {
            // This thread's usage entries go to a spool writer on its own runtime.
            let local = spool.local_writer();
            http::serve(queue, router, limits, acceptor, shutdown).await;
            local.close().await;
        }
    })
    .context("starting the worker threads")?;
    let tls = config.tls.is_some();
    tracing::info!(%addr, ?admin_addr, node_id, tls, control_plane = %config.control_plane, "data plane listening");
    Ok(Handle {
        addr,
        admin_addr,
        node_id,
        snapshot,
        stop_server,
        stop_tasks,
        stop_reporter,
        sockets,
        server,
        tasks,
        reporter,
    })
}

/// Resolves once `stop` turns true, or its sender is gone.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Resolves on ctrl-c or SIGTERM: when a binary should call `shutdown`.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    #[cfg(unix)]
    let terminated = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminated = std::future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated => {}
    }
    tracing::info!("shutting down");
}

/// Current Unix time in seconds.
pub(crate) fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
