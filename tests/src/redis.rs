//! A real `redis-server` of a test's own: a free port on 127.0.0.1, a
//! temporary directory, killed when dropped; no persistence unless started
//! with `start_persistent`. Never port 6379, never a server shared with
//! anything else. `RedisCluster` is three such servers made one Redis
//! Cluster with `redis-cli --cluster create`.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// How long a started server has to answer `PING`.
const READY_WITHIN: Duration = Duration::from_secs(10);
const READY_POLL: Duration = Duration::from_millis(20);
/// How long a created cluster has to agree that every slot is served.
const CLUSTER_READY_WITHIN: Duration = Duration::from_secs(20);
/// Tries at picking a free port, in case another process takes the one we
/// picked before the server binds it.
const PORT_ATTEMPTS: usize = 3;

/// A running `redis-server`; killed on drop.
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    /// Keeps an append-only file (fsync on every write) in `dir`.
    persistent: bool,
    tls: Option<TlsFiles>,
    /// The cluster bus port when the server is a cluster node.
    cluster_port: Option<u16>,
    child: Option<Child>,
}

/// A Redis Cluster of three primaries (no replicas) on free ports, each
/// node a `RedisServer`; killed when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// PEM files of a server that speaks TLS only: its certificate and key, and
/// the CA it would check clients against (it asks none for a certificate).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
    pub ca_file: std::path::PathBuf,
}

// === impl RedisServer ===

impl RedisServer {
    /// Starts a server on a free port and waits until it answers `PING`.
    /// Fails when `redis-server` is not installed or never gets ready (the
    /// error carries its log).
    pub async fn start() -> anyhow::Result<RedisServer> {
        RedisServer::start_with(false, None).await
    }

    /// `start`, with an append-only file that `restart` comes back with.
    pub async fn start_persistent() -> anyhow::Result<RedisServer> {
        RedisServer::start_with(true, None).await
    }

    /// `start`, serving TLS only (no plain port) with `tls`' files; the URL
    /// is then `rediss://`. Ready once the port accepts connections.
    pub async fn start_tls(tls: TlsFiles) -> anyhow::Result<RedisServer> {
        RedisServer::start_with(false, Some(tls)).await
    }

    async fn start_with(persistent: bool, tls: Option<TlsFiles>) -> anyhow::Result<RedisServer> {
        RedisServer::start_node(persistent, tls, false).await
    }

    /// Starts a server; a cluster node, unconnected yet, when `cluster`.
    async fn start_node(persistent: bool, tls: Option<TlsFiles>, cluster: bool) -> anyhow::Result<RedisServer> {
        let dir = tempfile::tempdir().context("creating the redis directory")?;
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            // The bus defaults to port + 10000, which may not exist.
            let cluster_port = if cluster { Some(free_port()?) } else { None };
            match spawn(port, dir.path(), persistent, tls.as_ref(), cluster_port).await {
                Ok(child) => {
                    return Ok(RedisServer { port, dir, persistent, tls, cluster_port, child: Some(child) });
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("redis-server did not start")))
    }

    /// The URL clients connect to: `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        match self.tls {
            Some(_) => format!("rediss://localhost:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// The port the server listens on, on 127.0.0.1; kept across `restart`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server and starts a new one on the same port, waiting until
    /// it answers. Its data is lost unless the server is persistent.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await?;
        self.child =
            Some(spawn(self.port, self.dir.path(), self.persistent, self.tls.as_ref(), self.cluster_port).await?);
        Ok(())
    }

    /// Kills the server, deletes what it kept on disk and starts it again:
    /// a server that came back without its data.
    pub async fn restart_empty(&mut self) -> anyhow::Result<()> {
        self.stop().await?;
        for entry in std::fs::read_dir(self.dir.path()).context("listing the redis directory")? {
            let path = entry?.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else if path.extension().is_none_or(|x| x != "log") {
                std::fs::remove_file(&path)?;
            }
        }
        self.child =
            Some(spawn(self.port, self.dir.path(), self.persistent, self.tls.as_ref(), self.cluster_port).await?);
        Ok(())
    }

    /// Kills the server and waits for it to exit; `restart` brings it back.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await.context("killing redis-server")?;
        }
        Ok(())
    }
}

// === impl RedisCluster ===

impl RedisCluster {
    /// Starts three cluster nodes, joins them with `redis-cli --cluster
    /// create` (slots spread evenly, no replicas) and waits until every node
    /// reports `cluster_state:ok`. Fails when `redis-server` or `redis-cli`
    /// is missing or the cluster never forms.
    pub async fn start() -> anyhow::Result<RedisCluster> {
        RedisCluster::start_with(None).await
    }

    /// `start`, every node serving TLS only with `tls`' files, on the
    /// client port and the cluster bus (whose connections present the same
    /// certificate as a client: it needs both usages); the URL is then
    /// `rediss+cluster://`.
    pub async fn start_tls(tls: TlsFiles) -> anyhow::Result<RedisCluster> {
        RedisCluster::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<TlsFiles>) -> anyhow::Result<RedisCluster> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(RedisServer::start_node(false, tls.clone(), true).await?);
        }
        let cluster = RedisCluster { nodes };
        let mut create = cluster.cli(0);
        create.arg("--cluster").arg("create");
        create.args(cluster.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)));
        create.args(["--cluster-replicas", "0", "--cluster-yes"]).kill_on_drop(true);
        // It waits for the nodes to join forever: a bus that cannot connect
        // would hang the test.
        let output = tokio::time::timeout(CLUSTER_READY_WITHIN, create.output())
            .await
            .context("redis-cli --cluster create did not finish: do the nodes reach each other's bus?")?
            .context("running redis-cli --cluster create (is redis-cli installed?)")?;
        if !output.status.success() {
            bail!(
                "redis-cli --cluster create failed with {}:\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        cluster.wait_until_ok().await?;
        Ok(cluster)
    }

    /// Kills every node and starts it again on its port with its cluster
    /// configuration but without its data (nothing is persisted), then waits
    /// until the cluster is up again: a cluster that lost its data.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        for node in &mut self.nodes {
            node.stop().await?;
        }
        for node in &mut self.nodes {
            node.restart().await?;
        }
        self.wait_until_ok().await
    }

    /// `redis-cli` talking to node `i` (over TLS when the nodes speak it).
    fn cli(&self, i: usize) -> Command {
        let node = &self.nodes[i];
        let mut command = Command::new("redis-cli");
        command.args(["-h", "127.0.0.1", "-p", &node.port.to_string()]);
        if let Some(tls) = &node.tls {
            command.arg("--tls").arg("--cacert").arg(&tls.ca_file);
        }
        command.stdin(Stdio::null());
        command
    }

    /// Whether node `i` says the cluster is up (every slot served).
    async fn node_ok(&self, i: usize) -> bool {
        let output = self.cli(i).args(["CLUSTER", "INFO"]).output().await;
        output.is_ok_and(|output| String::from_utf8_lossy(&output.stdout).contains("cluster_state:ok"))
    }

    /// Waits until every node reports `cluster_state:ok`.
    async fn wait_until_ok(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        for (i, node) in self.nodes.iter().enumerate() {
            loop {
                if self.node_ok(i).await {
                    break;
                }
                if started.elapsed() > CLUSTER_READY_WITHIN {
                    bail!("redis cluster node on port {} never reported cluster_state:ok", node.port);
                }
                tokio::time::sleep(READY_POLL).await;
            }
        }
        Ok(())
    }

    /// The store URL of the cluster, naming every node:
    /// `redis+cluster://127.0.0.1:<port>,…`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)).collect();
        let scheme = if self.nodes.iter().any(|node| node.tls.is_some()) { "rediss" } else { "redis" };
        format!("{scheme}+cluster://{}", nodes.join(","))
    }

    /// The single-server URLs of the nodes, for talking to one directly.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// A port nothing listens on right now.
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a probe socket")?;
    Ok(listener.local_addr()?.port())
}

/// Spawns `redis-server` on `port` and waits until it answers `PING`.
async fn spawn(
    port: u16,
    dir: &Path,
    persistent: bool,
    tls: Option<&TlsFiles>,
    cluster_port: Option<u16>,
) -> anyhow::Result<Child> {
    let log_path = dir.join(format!("redis-{port}.log"));
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).context("opening the redis log")?;
    let mut command = Command::new("redis-server");
    match tls {
        None => command.args(["--port", &port.to_string()]),
        Some(tls) => command
            .args(["--port", "0", "--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(&tls.cert_file)
            .arg("--tls-key-file")
            .arg(&tls.key_file)
            .arg("--tls-ca-cert-file")
            .arg(&tls.ca_file),
    };
    if tls.is_some() && cluster_port.is_some() {
        command.args(["--tls-cluster", "yes"]);
    }
    if let Some(bus) = cluster_port {
        command.args(["--cluster-enabled", "yes", "--cluster-port", &bus.to_string()]);
        command.arg("--cluster-config-file").arg(dir.join(format!("nodes-{port}.conf")));
    }
    let appendonly: &[&str] =
        if persistent { &["--appendonly", "yes", "--appendfsync", "always"] } else { &["--appendonly", "no"] };
    let mut child = command
        .args(["--bind", "127.0.0.1", "--save", ""])
        .args(appendonly)
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .context("spawning redis-server (is it installed?)")?;

    let started = Instant::now();
    loop {
        let ready = match tls {
            None => ping(port).await,
            // A TLS server answers only after a handshake: one that accepts
            // connections has loaded its certificate.
            Some(_) => TcpStream::connect(("127.0.0.1", port)).await.is_ok(),
        };
        if ready {
            return Ok(child);
        }
        let exited = child.try_wait().context("checking on redis-server")?;
        if exited.is_some() || started.elapsed() > READY_WITHIN {
            let _ = child.kill().await;
            let output = std::fs::read_to_string(&log_path).unwrap_or_default();
            match exited {
                Some(status) => {
                    bail!("redis-server on port {port} exited with {status}:\n{output}")
                }
                None => bail!("redis-server on port {port} did not answer PING within {READY_WITHIN:?}:\n{output}"),
            }
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// Whether a Redis on `port` answers `PING` with `+PONG`.
async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).await?;
        Ok::<_, std::io::Error>(&reply == b"+PONG\r\n")
    };
    matches!(tokio::time::timeout(Duration::from_secs(1), attempt).await, Ok(Ok(true)))
}
