//! Runs the real gateway for end-to-end suites: a control plane and data
//! planes as child processes of the built binaries, on free ports, in a
//! temporary directory, driven with the real `gwctl` binary.
//!
//! The binaries are looked up next to the test executable (`target/<profile>`)
//! or in `GW_BIN_DIR`; build them first with `cargo build --workspace --bins`.

use std::{
    future::Future,
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::Value;
use tokio::process::{Child, Command};

/// Polls `check` every 20 ms until it yields `Some`, or panics naming `what`
/// after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

/// A child process that is killed when dropped.
struct Process {
    child: Child,
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

/// The control plane as a child process.
pub struct ControlPlane {
    pub addr: SocketAddr,
    pub store: String,
    pub data_dir: PathBuf,
    /// Extra environment of the process (e.g. `GW_CP_VIDEO_POLL_INTERVAL`).
    pub env: Vec<(String, String)>,
    process: Option<Process>,
}

/// One data plane as a child process.
pub struct DataPlane {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub node_id: String,
    process: Option<Process>,
}

/// A control plane, data planes and the keys that reach them.
pub struct Cluster {
    pub control_plane: ControlPlane,
    pub data_planes: Vec<DataPlane>,
    pub admin_key: String,
    pub node_key: String,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

// === impl Cluster ===

impl Cluster {
    /// Starts a control plane on `store` (a `redis://` URL, or "" for the
    /// embedded store) and `data_planes` data planes, and waits until every
    /// data plane is ready.
    pub async fn start(store: &str, data_planes: usize) -> anyhow::Result<Cluster> {
        Cluster::start_with_env(store, data_planes, &[]).await
    }

    /// `start`, with `env` set for the control plane (kept across restarts).
    pub async fn start_with_env(store: &str, data_planes: usize, env: &[(&str, &str)]) -> anyhow::Result<Cluster> {
        let dir = tempfile::tempdir().context("creating a temp dir")?;
        let mut cluster = Cluster {
            control_plane: ControlPlane {
                addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
                store: store.to_owned(),
                data_dir: dir.path().join("control-plane"),
                env: env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
                process: None,
            },
            data_planes: Vec::new(),
            admin_key: format!("gwadm-test-{}", free_port()),
            node_key: format!("gwnode-test-{}", free_port()),
            http: reqwest::Client::new(),
            dir,
        };
        cluster.start_control_plane().await?;
        for i in 0..data_planes {
            let data_plane = DataPlane {
                addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
                data_dir: cluster.dir.path().join(format!("data-plane-{i}")),
                node_id: format!("dp-{i}"),
                process: None,
            };
            cluster.data_planes.push(data_plane);
            cluster.start_data_plane(i).await?;
        }
        Ok(cluster)
    }

    /// Starts (or restarts) the control plane on its address and store.
    pub async fn start_control_plane(&mut self) -> anyhow::Result<()> {
        let cp = &mut self.control_plane;
        let mut command = Command::new(binary("gw-control-plane"));
        command
            .arg("--listen")
            .arg(cp.addr.to_string())
            .arg("--store")
            .arg(&cp.store)
            .arg("--data-dir")
            .arg(&cp.data_dir)
            .env("GW_ADMIN_KEY", &self.admin_key)
            .env("GW_NODE_KEY", &self.node_key)
            .envs(cp.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cp.process = Some(Process::spawn(command)?);
        let addr = cp.addr;
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if Instant::now() > deadline {
                bail!("control plane did not listen on {addr}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Stops the control plane (SIGTERM).
    pub async fn stop_control_plane(&mut self) {
        if let Some(process) = self.control_plane.process.take() {
            process.stop().await;
        }
    }

    /// Starts (or restarts) data plane `i` and waits until `/ready` answers 200.
    pub async fn start_data_plane(&mut self, i: usize) -> anyhow::Result<()> {
        let endpoint = format!("http://{}", self.control_plane.addr);
        let dp = &mut self.data_planes[i];
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
        dp.process = Some(Process::spawn(command)?);
        let url = format!("http://{}/ready", dp.addr);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(response) = self.http.get(&url).send().await
                && response.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("data plane {i} was not ready at {url}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops data plane `i` (SIGTERM: it flushes its usage spool).
    pub async fn stop_data_plane(&mut self, i: usize) {
        if let Some(process) = self.data_planes[i].process.take() {
            process.stop().await;
        }
    }

    /// Kills data plane `i` without warning.
    pub async fn crash_data_plane(&mut self, i: usize) {
        if let Some(process) = self.data_planes[i].process.take() {
            process.crash().await;
        }
    }

    /// `http://addr/v1` of data plane `i`, as an SDK's base URL.
    pub fn base_url(&self, i: usize) -> String {
        format!("http://{}/v1", self.data_planes[i].addr)
    }

    /// Runs `gwctl -o json <args>` against the control plane and parses its
    /// output; fails with gwctl's stderr when it exits non-zero.
    pub async fn gwctl(&self, args: &[&str]) -> anyhow::Result<Value> {
        let output = self.gwctl_raw(args).await?;
        if !output.status.success() {
            bail!("gwctl {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
        }
        serde_json::from_slice(&output.stdout).with_context(|| {
            format!("gwctl {} printed no JSON: {}", args.join(" "), String::from_utf8_lossy(&output.stdout))
        })
    }

    /// Runs `gwctl -o json <args>` and returns its raw output.
    pub async fn gwctl_raw(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        Command::new(binary("gwctl"))
            .arg("--endpoint")
            .arg(format!("http://{}", self.control_plane.addr))
            .arg("--admin-key")
            .arg(&self.admin_key)
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
