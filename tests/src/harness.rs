//! Runs the real gateway for end-to-end suites: a control plane and data
//! planes in a temporary directory, either started in-process with their
//! `start()` handles on port 0 in the test's own runtime (the default), or as
//! child processes of the built binaries (for tests that kill or restart
//! them). Admin calls go through an in-process gRPC `AdminService` client;
//! the `gwctl` binary is run only by tests about gwctl itself.
//!
//! Process mode looks the binaries up next to the test executable
//! (`target/<profile>`) or in `GW_BIN_DIR`; build them first with
//! `cargo build --workspace --bins`.

use std::{
    future::Future,
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    sync::Once,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use gw_proto::pb::admin_service_client::AdminServiceClient;
use serde_json::Value;
use tokio::process::{Child, Command};
use tonic::{
    metadata::{Ascii, MetadataValue},
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Channel, Endpoint},
};

pub use crate::sdk::sdk;
pub use gw_control_plane::services::video::Config as VideoConfig;

/// How long a started control plane or data plane has to get ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// An `AdminService` client that sends the cluster's admin key with every
/// call, the way gwctl does.
pub type Admin = AdminServiceClient<InterceptedService<Channel, AdminKey>>;

/// Adds `authorization: Bearer <admin key>` to every admin call.
#[derive(Clone)]
pub struct AdminKey(MetadataValue<Ascii>);

/// How a cluster runs its control plane and data planes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `gw_control_plane::start` and `gw_data_plane::start` in the test's
    /// runtime, on port 0. Stopping one calls its `shutdown()`, which is what
    /// the binaries do on SIGTERM.
    InProcess,
    /// The built binaries as child processes, on free ports: for tests that
    /// crash (SIGKILL) or restart them.
    Processes,
}

/// Polls `check` every 20 ms until it yields `Some`, or panics naming `what`
/// after `timeout`. The one way suites wait for asynchronous state.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match try_eventually(timeout, check).await {
        Some(value) => value,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// `eventually`, returning `None` instead of panicking after `timeout`.
pub async fn try_eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A protobuf message as JSON, field for field (gwctl's `-o json` has its
/// own documented schema instead).
pub fn json<T: serde::Serialize>(message: &T) -> Value {
    serde_json::to_value(message).unwrap_or_else(|error| panic!("a message that is not JSON: {error}"))
}

/// Path of a workspace binary built by `cargo build --workspace --bins`.
pub fn binary(name: &str) -> PathBuf {
    let dir = std::env::var_os("GW_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| {
        // target/<profile>/deps/<test> -> target/<profile>
        let exe = std::env::current_exe().unwrap_or_default();
        let deps = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        deps.parent().map(Path::to_path_buf).unwrap_or(deps)
    });
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (cargo build --workspace --bins) or set GW_BIN_DIR",
        path.display()
    );
    path
}

/// A free TCP port on 127.0.0.1, found by binding port 0.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|error| panic!("no free port: {error}"))
}

/// Logs of in-process control and data planes go to the test's output, as
/// a child process's stderr did; `RUST_LOG` filters them (default `info`).
fn init_logging() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    });
}

/// A child process that is killed when dropped.
struct Process {
    child: Child,
}

/// A running control plane or data plane.
enum Running<H> {
    InProcess(H),
    Process(Process),
}

/// The control plane of a cluster.
pub struct ControlPlane {
    /// Its gRPC address; the first in-process start picks it (port 0), and
    /// restarts bind it again.
    pub addr: SocketAddr,
    pub store: String,
    pub data_dir: PathBuf,
    /// Video task timing (`--video-*` flags of the binary).
    pub video: VideoConfig,
    /// Batch timing (`--batch-*` flags of the binary).
    pub batch: gw_control_plane::services::batch::Config,
    /// Extra environment of the process (process mode only).
    pub env: Vec<(String, String)>,
    /// TLS of its gRPC listener (in-process only); clients then trust
    /// `Cluster::ca_file`.
    pub tls: Option<gw_control_plane::ServerTls>,
    /// CA bundle of a `rediss://` store (in-process only).
    pub store_ca_file: Option<PathBuf>,
    /// Master keys sealing upstream keys at rest (in-process only).
    pub master_keys: gw_control_plane::domain::secrets::Keyring,
    /// What its leases and window budget answers take as now (in-process
    /// only); `advance` it to step into the next budget window.
    pub clock: gw_control_plane::domain::clock::Clock,
    /// Resources per full-snapshot message (in-process only); `None` keeps
    /// the default.
    pub snapshot_chunk: Option<usize>,
    /// Full snapshots served from the in-memory copy (in-process only).
    pub snapshot_in_memory: bool,
    /// The web console (in-process only, not on replicas); off by default.
    pub console: gw_control_plane::api::console::Config,
    running: Option<Running<gw_control_plane::Handle>>,
}

/// One data plane of a cluster.
pub struct DataPlane {
    /// Its client-facing address; kept across restarts.
    pub addr: SocketAddr,
    /// Its admin listener (`/metrics`, `/healthz`) on 127.0.0.1; a process
    /// keeps its port across restarts.
    pub admin_addr: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub node_id: String,
    /// `--offline-allowance` in micro-USD; `None` keeps the default (share).
    pub offline_allowance: Option<i64>,
    /// TLS of its `/v1` listener (in-process only); clients then trust
    /// `Cluster::ca_file`.
    pub tls: Option<gw_data_plane::ListenerTls>,
    /// TLS to the control plane: CA file, client certificate (in-process only).
    pub control_plane_tls: gw_data_plane::ClientTls,
    /// The node key it sends; `None` sends the cluster's.
    pub node_key: Option<String>,
    /// The control-plane addresses it dials (`--control-plane`); `None`
    /// dials the cluster's control plane.
    pub control_plane: Option<String>,
    /// `--stream-keepalive-ms`; `None` keeps the default (15 s).
    pub stream_keepalive: Option<Duration>,
    running: Option<Running<gw_data_plane::Handle>>,
    /// It answered `/ready` once: its address is its own from then on.
    served: bool,
}

/// A further control-plane replica of a cluster on Redis
/// ([`Cluster::start_replica`]): same store, same keys, its own address and
/// data directory. Data planes stay on the cluster's first control plane.
pub struct Replica {
    pub addr: SocketAddr,
    admin: Admin,
    /// The CA file its TLS certificate is checked against (TLS clusters).
    ca_file: Option<PathBuf>,
    handle: gw_control_plane::Handle,
}

/// A control plane, data planes and the keys that reach them.
pub struct Cluster {
    pub control_plane: ControlPlane,
    pub data_planes: Vec<DataPlane>,
    pub admin_key: String,
    pub node_key: String,
    /// The CA every TLS listener's certificate chains to; clients of the
    /// cluster (admin, HTTP) trust it. `None` when no listener uses TLS.
    pub ca_file: Option<PathBuf>,
    mode: Mode,
    admin: Option<Admin>,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

// === impl AdminKey ===

impl AdminKey {
    /// Fails when the key cannot travel in a header.
    pub fn new(key: &str) -> anyhow::Result<AdminKey> {
        let value = format!("Bearer {key}").parse().context("the admin key is not a valid header value")?;
        Ok(AdminKey(value))
    }
}

impl Interceptor for AdminKey {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

// === impl Replica ===

impl Replica {
    /// An admin client of this replica, sending the cluster's admin key.
    pub fn admin(&self) -> Admin {
        self.admin.clone()
    }

    /// An admin client of this replica that sends `key`.
    pub fn admin_as(&self, key: &str) -> Admin {
        admin_client(self.addr, key, self.ca_file.as_deref())
    }

    /// Stops the replica gracefully.
    pub async fn shutdown(self) {
        self.handle.shutdown().await;
    }
}

// === impl Process ===

impl Process {
    fn spawn(mut command: Command) -> anyhow::Result<Process> {
        command.stdin(Stdio::null()).stdout(Stdio::inherit()).stderr(Stdio::inherit()).kill_on_drop(true);
        let child = command.spawn().context("spawning a gateway binary")?;
        Ok(Process { child })
    }

    /// SIGTERM, then SIGKILL if it has not exited within 10 s.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
            if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = self.child.kill().await;
    }

    /// SIGKILL: no chance to flush anything.
    async fn crash(mut self) {
        let _ = self.child.kill().await;
    }
}

// === impl Cluster ===

impl Cluster {
    /// Starts a control plane on `store` (a `redis://` URL, or "" for the
    /// embedded store) and `data_planes` data planes in-process, and waits
    /// until every data plane is ready.
    pub async fn start(store: &str, data_planes: usize) -> anyhow::Result<Cluster> {
        Cluster::start_with(Mode::InProcess, store, data_planes, |_| {}).await
    }

    /// `start`, as child processes of the built binaries.
    pub async fn start_processes(store: &str, data_planes: usize) -> anyhow::Result<Cluster> {
        Cluster::start_with(Mode::Processes, store, data_planes, |_| {}).await
    }

    /// `start_processes`, with `env` set for the control plane process (kept
    /// across restarts).
    pub async fn start_with_env(store: &str, data_planes: usize, env: &[(&str, &str)]) -> anyhow::Result<Cluster> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Cluster::start_with(Mode::Processes, store, data_planes, |cp| cp.env = env).await
    }

    /// Starts a cluster in `mode`, after `configure` has adjusted the control
    /// plane's settings (kept across restarts).
    pub async fn start_with(
        mode: Mode,
        store: &str,
        data_planes: usize,
        configure: impl FnOnce(&mut ControlPlane),
    ) -> anyhow::Result<Cluster> {
        Cluster::start_configured(mode, store, data_planes, |cluster| configure(&mut cluster.control_plane), |_, _| {})
            .await
    }

    /// Starts a cluster in `mode`, after `configure` has adjusted the
    /// cluster (its control plane, `ca_file`; its scratch directory exists)
    /// and `configure_data_plane` each data plane by number.
    pub async fn start_configured(
        mode: Mode,
        store: &str,
        data_planes: usize,
        configure: impl FnOnce(&mut Cluster),
        configure_data_plane: impl Fn(usize, &mut DataPlane),
    ) -> anyhow::Result<Cluster> {
        if mode == Mode::InProcess {
            init_logging();
        }
        let dir = tempfile::tempdir().context("creating a temp dir")?;
        // Port 0 in-process: the control plane's `start` picks the port.
        let port = |mode| if mode == Mode::InProcess { 0 } else { free_port() };
        let control_plane = ControlPlane {
            addr: SocketAddr::from(([127, 0, 0, 1], port(mode))),
            store: store.to_owned(),
            data_dir: dir.path().join("control-plane"),
            video: VideoConfig::default(),
            batch: Default::default(),
            env: Vec::new(),
            tls: None,
            store_ca_file: None,
            master_keys: Default::default(),
            clock: Default::default(),
            snapshot_chunk: None,
            snapshot_in_memory: true,
            console: Default::default(),
            running: None,
        };
        let mut cluster = Cluster {
            control_plane,
            data_planes: Vec::new(),
            admin_key: format!("gwadm-test-{}-0123456789abcdefghijklmnop", free_port()),
            node_key: format!("gwnode-test-{}-0123456789abcdefghijklmnop", free_port()),
            ca_file: None,
            mode,
            admin: None,
            http: reqwest::Client::new(),
            dir,
        };
        configure(&mut cluster);
        if let Some(ca) = &cluster.ca_file {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            let root = reqwest::Certificate::from_pem(&pem).context("the cluster's CA")?;
            cluster.http = reqwest::Client::builder().tls_certs_only([root]).build().context("an HTTPS client")?;
        }
        cluster.start_control_plane().await?;
        for i in 0..data_planes {
            let mut dp = DataPlane {
                addr: SocketAddr::from(([127, 0, 0, 1], port(mode))),
                admin_addr: None,
                data_dir: cluster.dir.path().join(format!("data-plane-{i}")),
                node_id: format!("dp-{i}"),
                offline_allowance: None,
                tls: None,
                control_plane_tls: Default::default(),
                node_key: None,
                control_plane: None,
                stream_keepalive: None,
                running: None,
                served: false,
            };
            configure_data_plane(i, &mut dp);
            cluster.data_planes.push(dp);
            cluster.start_data_plane(i).await?;
        }
        Ok(cluster)
    }

    /// How this cluster runs its planes.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Starts (or restarts) the control plane on its address and store, and
    /// waits until it accepts connections.
    pub async fn start_control_plane(&mut self) -> anyhow::Result<()> {
        let mut config = self.in_process_config(self.control_plane.addr, self.control_plane.data_dir.clone());
        config.console = self.control_plane.console.clone();
        let cp = &mut self.control_plane;
        match self.mode {
            Mode::InProcess => {
                let handle = gw_control_plane::start(config).await.context("starting the control plane")?;
                cp.addr = handle.addr;
                cp.running = Some(Running::InProcess(handle));
            }
            Mode::Processes => {
                let mut command = Command::new(binary("gw-control-plane"));
                command
                    .arg("--listen")
                    .arg(cp.addr.to_string())
                    .arg("--store")
                    .arg(&cp.store)
                    .arg("--data-dir")
                    .arg(&cp.data_dir);
                // Only settings changed from the defaults become flags, so
                // `GW_CP_VIDEO_*` in `env` still count.
                let default = VideoConfig::default();
                for (flag, value, default) in [
                    ("--video-timeout", cp.video.timeout, default.timeout),
                    ("--video-poll-interval", cp.video.poll_interval, default.poll_interval),
                    ("--video-refresh-after", cp.video.refresh_after, default.refresh_after),
                ] {
                    if value != default {
                        command.arg(flag).arg(format!("{}ms", value.as_millis()));
                    }
                }
                let default = gw_control_plane::services::batch::Config::default();
                for (flag, value, default) in [
                    ("--batch-poll-interval", cp.batch.poll_interval, default.poll_interval),
                    ("--batch-refresh-after", cp.batch.refresh_after, default.refresh_after),
                ] {
                    if value != default {
                        command.arg(flag).arg(format!("{}ms", value.as_millis()));
                    }
                }
                command
                    .env("GW_ADMIN_KEY", &self.admin_key)
                    .env("GW_NODE_KEY", &self.node_key)
                    .envs(cp.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                cp.running = Some(Running::Process(Process::spawn(command)?));
                let addr = cp.addr;
                let listening =
                    try_eventually(READY_WITHIN, || async { tokio::net::TcpStream::connect(addr).await.ok() }).await;
                if listening.is_none() {
                    bail!("control plane did not listen on {addr}");
                }
            }
        }
        if self.admin.is_none() {
            self.admin = Some(self.admin_client(self.control_plane.addr));
        }
        Ok(())
    }

    /// Starts replica number `n` (from 1) of the control plane in-process, on
    /// port 0, the same store and the same keys, in a data directory of its
    /// own. Fails unless the cluster is in-process on Redis: an embedded
    /// store cannot be shared, and a second replica on a separate one would
    /// silently be another gateway.
    pub async fn start_replica(&self, n: usize) -> anyhow::Result<Replica> {
        let cp = &self.control_plane;
        if self.mode != Mode::InProcess || !cp.store.starts_with("redis") {
            bail!("control-plane replicas need an in-process cluster on redis, not {:?} on {:?}", self.mode, cp.store);
        }
        let data_dir = self.dir.path().join(format!("control-plane-replica-{n}"));
        let config = self.in_process_config(SocketAddr::from(([127, 0, 0, 1], 0)), data_dir);
        let handle = gw_control_plane::start(config).await.with_context(|| format!("starting replica {n}"))?;
        let admin = self.admin_client(handle.addr);
        Ok(Replica { addr: handle.addr, admin, ca_file: self.tls_ca().map(Path::to_path_buf), handle })
    }

    /// The settings of an in-process control plane on `listen` and
    /// `data_dir`, with the cluster's store, keys and video timing.
    fn in_process_config(&self, listen: SocketAddr, data_dir: PathBuf) -> gw_control_plane::Config {
        let cp = &self.control_plane;
        let mut config = gw_control_plane::Config::new(listen, data_dir);
        config.store = cp.store.clone();
        config.admin_key = Some(self.admin_key.clone());
        config.node_key = Some(self.node_key.clone());
        config.video = cp.video.clone();
        config.batch = cp.batch.clone();
        config.tls = cp.tls.clone();
        config.store_ca_file = cp.store_ca_file.clone();
        config.master_keys = cp.master_keys.clone();
        config.clock = cp.clock.clone();
        if let Some(chunk) = cp.snapshot_chunk {
            config.snapshot_chunk = chunk;
        }
        config.snapshot_in_memory = cp.snapshot_in_memory;
        config
    }

    /// The in-process control plane's handle: its console's URL and setup link.
    pub fn control_plane_handle(&self) -> Option<&gw_control_plane::Handle> {
        if let Some(Running::InProcess(handle)) = &self.control_plane.running { Some(handle) } else { None }
    }

    /// The control plane's gRPC URL: `https://` when it serves TLS.
    pub fn control_plane_url(&self) -> String {
        match self.control_plane.tls {
            Some(_) => format!("https://localhost:{}", self.control_plane.addr.port()),
            None => format!("http://{}", self.control_plane.addr),
        }
    }

    /// An admin client of the control plane at `addr`, sending the admin key
    /// and trusting `ca_file` when the control plane serves TLS.
    fn admin_client(&self, addr: SocketAddr) -> Admin {
        admin_client(addr, &self.admin_key, self.tls_ca())
    }

    /// The CA file admin clients trust, when the control plane serves TLS.
    fn tls_ca(&self) -> Option<&Path> {
        self.control_plane.tls.as_ref().and(self.ca_file.as_deref())
    }

    /// Stops the control plane gracefully (`shutdown()`, or SIGTERM).
    pub async fn stop_control_plane(&mut self) {
        match self.control_plane.running.take() {
            Some(Running::InProcess(handle)) => handle.shutdown().await,
            Some(Running::Process(process)) => process.stop().await,
            None => {}
        }
    }

    /// Starts (or restarts) data plane `i` and waits until `/ready` answers 200.
    /// A process whose first start finds its free port taken meanwhile (by
    /// another test's socket) exits; it is started again on other ports.
    pub async fn start_data_plane(&mut self, i: usize) -> anyhow::Result<()> {
        let mut attempt = 0;
        loop {
            let started = self.launch_data_plane(i).await;
            let dp = &mut self.data_planes[i];
            let exited = match &mut dp.running {
                Some(Running::Process(process)) => process.child.try_wait().ok().flatten().is_some(),
                _ => false,
            };
            if started.is_ok() || dp.served || !exited || attempt == 2 {
                dp.served |= started.is_ok();
                return started;
            }
            attempt += 1;
            dp.running = None;
            dp.addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            dp.admin_addr = None;
        }
    }

    async fn launch_data_plane(&mut self, i: usize) -> anyhow::Result<()> {
        let endpoint = self.data_planes[i].control_plane.clone().unwrap_or_else(|| self.control_plane_url());
        let dp = &mut self.data_planes[i];
        match self.mode {
            Mode::InProcess => {
                let node_key = dp.node_key.clone().unwrap_or_else(|| self.node_key.clone());
                let mut config = gw_data_plane::Config::new(dp.addr, endpoint, dp.data_dir.clone(), node_key);
                config.tls = dp.tls.clone();
                config.control_plane_tls = dp.control_plane_tls.clone();
                config.node_id = Some(dp.node_id.clone());
                config.budget.offline_allowance = dp.offline_allowance;
                if let Some(interval) = dp.stream_keepalive {
                    config.upstream.keepalive_interval = interval;
                }
                config.admin_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
                let handle = gw_data_plane::start(config).await.with_context(|| format!("starting data plane {i}"))?;
                dp.addr = handle.addr;
                dp.admin_addr = handle.admin_addr;
                dp.running = Some(Running::InProcess(handle));
            }
            Mode::Processes => {
                let mut command = Command::new(binary("gw-data-plane"));
                command
                    .arg("--listen")
                    .arg(dp.addr.to_string())
                    .arg("--control-plane")
                    .arg(endpoint)
                    .arg("--data-dir")
                    .arg(&dp.data_dir)
                    .arg("--node-id")
                    .arg(&dp.node_id)
                    .env("GW_NODE_KEY", &self.node_key);
                let admin = *dp.admin_addr.get_or_insert_with(|| SocketAddr::from(([127, 0, 0, 1], free_port())));
                command.arg("--admin-listen").arg(admin.to_string());
                if let Some(interval) = dp.stream_keepalive {
                    command.arg("--stream-keepalive-ms").arg(interval.as_millis().to_string());
                }
                if let Some(micros) = dp.offline_allowance {
                    command.arg("--offline-allowance").arg(format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000));
                }
                dp.running = Some(Running::Process(Process::spawn(command)?));
            }
        }
        let url = match dp.tls {
            Some(_) => format!("https://localhost:{}/ready", dp.addr.port()),
            None => format!("http://{}/ready", dp.addr),
        };
        let http = &self.http;
        let ready = try_eventually(READY_WITHIN, || async {
            let response = http.get(&url).send().await.ok()?;
            response.status().is_success().then_some(())
        })
        .await;
        if ready.is_none() {
            bail!("data plane {i} was not ready at {url}");
        }
        Ok(())
    }

    /// Stops data plane `i` gracefully (`shutdown()`, or SIGTERM): it
    /// flushes its usage spool.
    pub async fn stop_data_plane(&mut self, i: usize) {
        match self.data_planes[i].running.take() {
            Some(Running::InProcess(handle)) => handle.shutdown().await,
            Some(Running::Process(process)) => process.stop().await,
            None => {}
        }
    }

    /// Kills data plane `i` without warning (SIGKILL). Only a process can be
    /// killed that way: panics in `Mode::InProcess`.
    pub async fn crash_data_plane(&mut self, i: usize) {
        match self.data_planes[i].running.take() {
            Some(Running::Process(process)) => process.crash().await,
            Some(Running::InProcess(_)) => panic!("crash_data_plane needs a cluster started in Mode::Processes"),
            None => {}
        }
    }

    /// Usage data plane `i` has spooled and not yet had acknowledged (or
    /// still holds for a request in flight): segment files in its spool
    /// directory, so this reads the same in both modes.
    pub fn pending_usage_batches(&self, i: usize) -> usize {
        let spool = self.data_planes[i].data_dir.join("spool");
        std::fs::read_dir(spool)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.path().extension().is_some_and(|x| x == "log" || x == "batch"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Waits (up to 10 s) until data plane `i` admits `key`: its snapshot
    /// holds the token. Panics if it never does.
    pub async fn wait_until_served(&self, i: usize, key: &str) {
        let url = format!("{}/models", self.base_url(i));
        eventually(&format!("data plane {i} to know the token"), Duration::from_secs(10), || async {
            let response = self.http().get(&url).bearer_auth(key).send().await.ok()?;
            response.status().is_success().then_some(())
        })
        .await;
    }

    /// `wait_until_served` on every data plane.
    pub async fn wait_until_served_everywhere(&self, key: &str) {
        for i in 0..self.data_planes.len() {
            self.wait_until_served(i, key).await;
        }
    }

    /// `http://addr/v1` of data plane `i`, as an SDK's base URL.
    pub fn base_url(&self, i: usize) -> String {
        let dp = &self.data_planes[i];
        match dp.tls {
            Some(_) => format!("https://localhost:{}/v1", dp.addr.port()),
            None => format!("http://{}/v1", dp.addr),
        }
    }

    /// An in-process client of the control plane's `AdminService`, sending
    /// the admin key. It connects lazily and reconnects after a restart.
    pub fn admin(&self) -> Admin {
        match &self.admin {
            Some(admin) => admin.clone(),
            None => self.admin_client(self.control_plane.addr),
        }
    }

    /// An in-process admin client of the control plane that sends `key`
    /// (a credential other than the cluster's admin key).
    pub fn admin_as(&self, key: &str) -> Admin {
        admin_client(self.control_plane.addr, key, self.tls_ca())
    }

    /// Runs the `gwctl` binary with `-o json <args>` against the control
    /// plane and parses its output; fails with gwctl's stderr when it exits
    /// non-zero. For tests about gwctl; other tests use [`Cluster::admin`].
    pub async fn gwctl(&self, args: &[&str]) -> anyhow::Result<Value> {
        self.gwctl_as(&self.admin_key, args).await
    }

    /// `gwctl`, sending `key` instead of the cluster's admin key.
    pub async fn gwctl_as(&self, key: &str, args: &[&str]) -> anyhow::Result<Value> {
        let output = self.gwctl_raw_as(key, args).await?;
        if !output.status.success() {
            bail!("gwctl {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
        }
        serde_json::from_slice(&output.stdout).with_context(|| {
            format!("gwctl {} printed no JSON: {}", args.join(" "), String::from_utf8_lossy(&output.stdout))
        })
    }

    /// Runs `gwctl -o json <args>` and returns its raw output.
    pub async fn gwctl_raw(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        self.gwctl_raw_as(&self.admin_key, args).await
    }

    /// `gwctl_raw`, sending `key` instead of the cluster's admin key.
    pub async fn gwctl_raw_as(&self, key: &str, args: &[&str]) -> anyhow::Result<std::process::Output> {
        let mut command = Command::new(binary("gwctl"));
        if let (Some(_), Some(ca)) = (&self.control_plane.tls, &self.ca_file) {
            command.arg("--ca-file").arg(ca);
        }
        command
            .arg("--endpoint")
            .arg(self.control_plane_url())
            .arg("--admin-key")
            .arg(key)
            .arg("-o")
            .arg("json")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .context("running gwctl")
    }

    /// A shared HTTP client for requests to the data planes.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The cluster's scratch directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// An admin client of the control plane at `addr` sending `key`; over TLS
/// trusting `ca` when given, else plaintext.
fn admin_client(addr: SocketAddr, key: &str, ca: Option<&Path>) -> Admin {
    let key = AdminKey::new(key).unwrap_or_else(|error| panic!("{error:#}"));
    let url = match ca {
        Some(_) => format!("https://localhost:{}", addr.port()),
        None => format!("http://{addr}"),
    };
    let mut endpoint = Endpoint::from_shared(url)
        .unwrap_or_else(|error| panic!("control plane address {addr}: {error}"))
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60));
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).unwrap_or_else(|error| panic!("reading {}: {error}", ca.display()));
        let tls = tonic::transport::ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(pem));
        endpoint = endpoint.tls_config(tls).unwrap_or_else(|error| panic!("admin client TLS: {error}"));
    }
    AdminServiceClient::with_interceptor(endpoint.connect_lazy(), key)
}
