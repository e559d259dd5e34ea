//! The gateway's control plane: the only writer of state. It serves the admin
//! API (gwctl) and the policy API (data planes) over gRPC on one listener,
//! keeps state in a `Store`, and streams every change to connected data
//! planes as deltas they acknowledge.

pub mod api;
pub mod config;
pub mod domain;
pub mod services;
pub mod store;

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

use crate::{
    api::{admin, health, peer, policy, server},
    domain::{Group, Kind, RateLimit, Resource, calendar, clock, secrets},
    services::{access, batch, console, continuity, fleet, keys, ledger, mirror, probe, retention, telemetry, video},
    store::Store,
};

/// Bootstrap settings of one control-plane replica.
#[derive(Debug, Clone)]
pub struct Config {
    /// gRPC address for both services; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The admin listener (`/metrics`, `/healthz`); `None` keeps it off.
    pub admin_listen: Option<SocketAddr>,
    /// `redis://…` for Redis; empty for the embedded store in `data_dir`.
    pub store: String,
    /// Holds the embedded store and the generated key files.
    pub data_dir: PathBuf,
    /// Admin credential; when `None` it is read from (or created in) `data_dir/admin.key`.
    pub admin_key: Option<String>,
    /// Data-plane credential; when `None` it is read from (or created in) `data_dir/node.key`.
    pub node_key: Option<String>,
    /// Video task timing: overall deadline, poller interval, refresh age.
    pub video: video::Config,
    /// Batch timing: poller interval, refresh age.
    pub batch: batch::Config,
    /// How often auto-disabled channels are probed back into rotation.
    pub probe: probe::Config,
    /// Refuse to start on a store that keeps nothing across a restart of
    /// its server (or does not say); without it, such a store is a warning.
    pub require_store_persistence: bool,
    /// How long raw usage records and usage rollups are kept.
    pub retention: store::Retention,
    /// TLS of the gRPC listener; `None` serves plain HTTP/2.
    pub tls: Option<ServerTls>,
    /// CA bundle a `rediss://` store's certificate is checked against;
    /// `None` trusts the system's roots.
    pub store_ca_file: Option<PathBuf>,
    /// Master keys sealing upstream keys at rest; empty keeps them plain.
    pub master_keys: secrets::Keyring,
    /// What leases and window budget answers take as now (tests move it).
    pub clock: clock::Clock,
    /// The zone of window budgets written without one.
    pub budget_time_zone: String,
    /// Resources per message of a full snapshot on a watch stream (at
    /// least 1).
    pub snapshot_chunk: usize,
    /// Serves full snapshots from a copy of the policy state kept in memory
    /// (`mirror`); otherwise each is read from the store.
    pub snapshot_in_memory: bool,
    /// The web console; off unless it has a listen address.
    pub console: api::console::Config,
}

/// TLS of the gRPC listener (admin and policy services).
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// PEM certificate chain and private key the listener presents.
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// PEM CA bundle: data planes showing a client certificate it signed are
    /// admitted to the policy service as the node the certificate names.
    pub client_ca_file: Option<PathBuf>,
    /// The policy service refuses calls without such a certificate (the
    /// node key alone is not enough). Needs `client_ca_file`.
    pub require_client_cert: bool,
}

/// A running control plane. Dropping it leaves the server running until
/// `shutdown` is called or the runtime ends.
pub struct Handle {
    /// Bound gRPC address.
    pub addr: SocketAddr,
    /// The bound admin address (`/metrics`), when one was configured.
    pub admin_addr: Option<SocketAddr>,
    pub admin_key: String,
    pub node_key: String,
    /// Where the admin key is kept, when it came from a file.
    pub admin_key_file: Option<PathBuf>,
    /// The bound console address, when the console is on.
    pub console_addr: Option<SocketAddr>,
    /// The console's public base URL; empty when it is off.
    pub console_url: String,
    /// The one-time link that creates the first admin user, while the
    /// console is on and has none.
    pub setup_link: Option<String>,
    pub store: Arc<dyn Store>,
    stop: oneshot::Sender<()>,
    server: JoinHandle<anyhow::Result<()>>,
    video_poller: JoinHandle<()>,
    batch_poller: JoinHandle<()>,
    prober: JoinHandle<()>,
    pruner: JoinHandle<()>,
    health: JoinHandle<()>,
    mirror: Option<JoinHandle<()>>,
    admin: Option<JoinHandle<()>>,
    console: Option<JoinHandle<anyhow::Result<()>>>,
}

// === impl Config ===

impl Config {
    /// Embedded store in `data_dir`, keys from (or created in) `data_dir`.
    pub fn new(listen: SocketAddr, data_dir: impl Into<PathBuf>) -> Config {
        Config {
            listen,
            admin_listen: None,
            store: String::new(),
            data_dir: data_dir.into(),
            admin_key: None,
            node_key: None,
            video: video::Config::default(),
            batch: batch::Config::default(),
            probe: probe::Config::default(),
            require_store_persistence: false,
            retention: store::Retention::default(),
            tls: None,
            store_ca_file: None,
            master_keys: secrets::Keyring::default(),
            clock: clock::Clock::system(),
            budget_time_zone: calendar::DEFAULT_TIME_ZONE.to_owned(),
            snapshot_chunk: policy::SNAPSHOT_CHUNK,
            snapshot_in_memory: true,
            console: api::console::Config::default(),
        }
    }
}

// === impl Handle ===

impl Handle {
    /// Stops accepting calls, ends open watch streams and waits for the server.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        match self.server.await {
            Ok(Err(error)) => tracing::warn!(error = format!("{error:#}"), "control plane server ended with an error"),
            Err(error) => tracing::warn!(%error, "control plane server task failed"),
            Ok(Ok(())) => {}
        }
        // It stops with the server and releases its lock for the next replica.
        if tokio::time::timeout(std::time::Duration::from_secs(5), self.video_poller).await.is_err() {
            tracing::warn!("the video poller did not stop in time");
        }
        if tokio::time::timeout(std::time::Duration::from_secs(5), self.batch_poller).await.is_err() {
            tracing::warn!("the batch poller did not stop in time");
        }
        if tokio::time::timeout(std::time::Duration::from_secs(5), self.prober).await.is_err() {
            tracing::warn!("the channel probe did not stop in time");
        }
        let _ = self.pruner.await;
        let _ = self.health.await;
        if let Some(mirror) = self.mirror {
            let _ = mirror.await;
        }
        if let Some(admin) = self.admin {
            let _ = admin.await;
        }
        if let Some(console) = self.console
            && let Ok(Err(error)) = console.await
        {
            tracing::warn!(error = format!("{error:#}"), "the console ended with an error");
        }
    }
}

/// Opens the store, makes sure the keys and the `default` group exist, binds
/// `config.listen` and serves both gRPC services until `Handle::shutdown`.
pub async fn start(config: Config) -> anyhow::Result<Handle> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    // It holds the keys and the embedded store: the owner's alone.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&config.data_dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private", config.data_dir.display()))?;
    }
    gw_tls::install_provider();
    let sealing = store::Sealing::new(config.master_keys.clone());
    let store = store::open(
        &config.store,
        &config.data_dir,
        config.store_ca_file.as_deref(),
        config.retention,
        sealing.clone(),
    )
    .await
    .context("opening the store")?;
    check_sealed(store.as_ref(), &sealing).await?;
    let first_start = store.revision().await.context("reading the store's revision")? == 0;
    let keys = keys::Keys::load(&config.data_dir, config.admin_key.clone(), config.node_key.clone(), first_start)
        .context("loading credentials")?;
    refuse_reused_keys(store.as_ref(), &keys).await?;
    bootstrap(store.as_ref()).await.context("creating the default group")?;
    check_persistence(store.as_ref(), config.require_store_persistence).await?;
    refuse_eviction(store.as_ref()).await?;
    refuse_old_server(store.as_ref()).await?;
    let lineage = store.lineage().await.context("reading the store's lineage")?;

    let listener = TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let admin_listener = match config.admin_listen {
        Some(admin) => Some(gw_telemetry::admin::bind(admin).await.with_context(|| format!("binding {admin}"))?),
        None => None,
    };
    let admin_addr =
        admin_listener.as_ref().map(TcpListener::local_addr).transpose().context("reading the admin address")?;
    let (stop, stopped) = oneshot::channel::<()>();
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let fleet = fleet::Fleet::start(store.clone(), fleet::replica_name(addr), shutdown_rx.clone());
    telemetry::observe(&fleet);

    let ledger = Arc::new(ledger::Ledger::new(store.clone()));
    let videos = Arc::new(video::Videos::new(store.clone(), ledger.clone(), config.video.clone())?);
    let video_poller = video::poller::spawn(videos.clone(), shutdown_rx.clone());
    let batches = Arc::new(batch::Batches::new(store.clone(), ledger.clone(), config.batch.clone())?);
    let batch_poller = batch::poller::spawn(batches.clone(), shutdown_rx.clone());
    let prober = probe::spawn(store.clone(), config.probe, shutdown_rx.clone())?;
    let pruner = retention::spawn(store.clone(), shutdown_rx.clone());
    let continuity = continuity::Continuity::new(store.clone());
    let console_listener = match config.console.listen {
        Some(console) => Some(TcpListener::bind(console).await.with_context(|| format!("binding {console}"))?),
        None => None,
    };
    let console_addr =
        console_listener.as_ref().map(TcpListener::local_addr).transpose().context("reading the console address")?;
    let console_url = console_addr.map(|addr| config.console.base_url(addr)).unwrap_or_default();
    let users = Arc::new(console::Users::new(store.clone(), config.console.attempts));
    let admin = admin::AdminApi::new(store.clone(), fleet.clone(), continuity.clone())
        .with_videos(videos.clone())
        .with_batches(batches.clone())
        .with_credentials(access::Credentials::new(store.clone(), keys.reserved()))
        .with_secrets(sealing)
        .with_clock(config.clock.clone())
        .with_time_zone(config.budget_time_zone.clone())
        .with_topup(Arc::new(crate::services::console::TopupCodes::new(store.clone())))
        .with_console(admin::ConsoleLinks { users: users.clone(), base_url: console_url.clone() });
    let admin = Arc::new(admin);
    let (health, health_task) = health::spawn(store.clone(), shutdown_rx.clone());
    let admin_stopped = shutdown_rx.clone();
    let console_stopped = shutdown_rx.clone();
    let (mirror, mirror_task) = if config.snapshot_in_memory {
        let (mirror, task) = mirror::Mirror::start(store.clone(), policy::encode_resource, shutdown_rx.clone());
        (mirror, Some(task))
    } else {
        (mirror::Mirror::default(), None)
    };
    let policy = policy::PolicyApi::new(store.clone(), ledger, fleet, continuity, shutdown_rx)
        .with_mirror(mirror)
        .with_videos(videos)
        .with_batches(batches)
        .with_clock(config.clock.clone())
        .with_snapshot_chunk(config.snapshot_chunk);
    let admin_auth = Arc::new(access::Authenticator::new(&keys.admin, store.clone()));
    let setup_link = match &console_listener {
        Some(_) => users.setup_link().await.context("making the console's setup link")?,
        None => None,
    }
    .map(|link| link.url(&console_url));
    let console_server = console_listener.map(|listener| {
        let sessions = console::Sessions::new(store.clone(), config.console.sessions);
        let pages = api::console::Console::new(
            &config.console,
            console_url.clone(),
            admin.clone(),
            admin_auth.clone(),
            users.clone(),
            sessions,
        );
        let mut stopped = console_stopped;
        api::console::spawn(listener, Arc::new(pages), async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })
    });
    let require_cert = config.tls.as_ref().is_some_and(|tls| tls.require_client_cert);
    let node_auth = peer::NodeAuth::new(&keys.node, require_cert);
    let services = server::Services { health, admin, admin_auth, policy, node_auth };
    let server = server::spawn(listener, config.tls.as_ref(), services, async move {
        let _ = stopped.await;
        // Watch streams never end by themselves; tell them to close.
        let _ = shutdown_tx.send(true);
    })?;
    let admin_server = admin_listener.map(|admin| {
        let mut stopped = admin_stopped;
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            if let Err(error) = gw_telemetry::admin::serve(admin, shutdown).await {
                tracing::warn!(%error, "admin listener failed");
            }
        })
    });
    tracing::info!(
        %addr,
        store = %store_name(&config.store),
        lineage = %lineage.id,
        tls = config.tls.is_some(),
        "control plane listening"
    );
    if let Some(addr) = console_addr {
        tracing::info!(%addr, url = %console_url, "console listening");
    }
    if let Some(link) = &setup_link {
        // Printed, not logged only: the operator needs it to sign in at all.
        tracing::warn!("the console has no admin user yet; create one with this one-time link: {link}");
    }
    Ok(Handle {
        addr,
        admin_addr,
        admin: admin_server,
        admin_key: keys.admin,
        node_key: keys.node,
        admin_key_file: keys.admin_file,
        console_addr,
        console_url,
        setup_link,
        console: console_server,
        store,
        stop,
        server,
        video_poller,
        batch_poller,
        prober,
        pruner,
        health: health_task,
        mirror: mirror_task,
    })
}

/// Warns about (or, with `require`, refuses) a store that loses everything
/// when its server restarts: data planes would then refuse it (see
/// `continuity`) until an operator confirms it.
async fn check_persistence(store: &dyn Store, require: bool) -> anyhow::Result<()> {
    use store::Persistence;
    let persistence = store.persistence().await.context("asking the store how it persists")?;
    let problem = match persistence {
        Persistence::None => {
            "the store keeps nothing on disk (redis: appendonly no, save \"\"): a restart of it loses every account, token and balance"
        }
        Persistence::Unknown => "the store does not say how it persists (redis CONFIG GET is refused)",
        _ => return Ok(()),
    };
    if require {
        anyhow::bail!("{problem}; refusing to start (require_store_persistence is set)");
    }
    tracing::warn!(persistence = persistence.as_str(), "{problem}; set appendonly yes on the redis server");
    Ok(())
}

/// Refuses a store that may evict keys when it fills up: the markers that
/// apply each usage record once, the balances and the leases would go
/// without a word. Warns when the store does not say.
async fn refuse_eviction(store: &dyn Store) -> anyhow::Result<()> {
    match store.eviction().await.context("asking the store whether it evicts keys")? {
        store::Eviction::Never => Ok(()),
        store::Eviction::Evicts(policy) => anyhow::bail!(
            "the redis maxmemory-policy is {policy}: when memory runs out it evicts keys that keep usage applied exactly once, balances and leases; set maxmemory-policy noeviction (writes are then refused when full, never lost); refusing to start"
        ),
        store::Eviction::Unknown => {
            tracing::warn!(
                "the store does not say whether it evicts keys (redis CONFIG GET is refused); make sure its maxmemory-policy is noeviction"
            );
            Ok(())
        }
    }
}

/// The oldest Redis the store's scripts run on (`SMISMEMBER`, `GETDEL`).
const OLDEST_REDIS: (u32, u32) = (6, 2);

/// Refuses a Redis older than `OLDEST_REDIS`, whose first usage batch would
/// fail; says nothing when the store does not tell its version.
async fn refuse_old_server(store: &dyn Store) -> anyhow::Result<()> {
    match store.server_version().await.context("asking the store for its version")? {
        Some(version) if version < OLDEST_REDIS => anyhow::bail!(
            "the redis server is version {}.{}; the gateway needs {}.{} or later; refusing to start",
            version.0,
            version.1,
            OLDEST_REDIS.0,
            OLDEST_REDIS.1
        ),
        _ => Ok(()),
    }
}

/// Refuses to start when a stored upstream key does not open with the
/// configured master keys; warns when keys are kept in plain text.
async fn check_sealed(store: &dyn Store, sealing: &store::Sealing) -> anyhow::Result<()> {
    let inventory = store::seal::inspect(store, sealing)
        .await
        .context("checking the stored upstream keys against the master keys")?;
    match sealing.keys().current_id() {
        None => tracing::warn!(
            plain = inventory.plain,
            "no master key is configured: upstream keys are stored in plain text (set master_key_file)"
        ),
        Some(key_id) if inventory.plain + inventory.older > 0 => tracing::warn!(
            key_id,
            plain = inventory.plain,
            older = inventory.older,
            "some upstream keys are not sealed under the current master key; `gwctl secrets rotate` seals them"
        ),
        Some(key_id) => tracing::info!(key_id, sealed = inventory.current, "upstream keys are sealed at rest"),
    }
    Ok(())
}

fn store_name(url: &str) -> &str {
    if url.is_empty() {
        "embedded"
    } else if url.starts_with("redis") {
        "redis"
    } else {
        url
    }
}

/// Refuses to start when the admin or node key is also the secret of a
/// stored credential: a key serves one role.
async fn refuse_reused_keys(store: &dyn Store, keys: &keys::Keys) -> anyhow::Result<()> {
    for (role, hash) in keys.reserved() {
        if let Some(credential) = store.credential_by_key(&hash).await.context("reading credentials")? {
            return Err(domain::keys::KeyError::Reused { role, other: "credential" })
                .with_context(|| format!("credential {} has the {role} key as its secret", credential.id));
        }
    }
    Ok(())
}

/// A fresh store gets the `default` group every token starts in.
async fn bootstrap(store: &dyn Store) -> anyhow::Result<()> {
    if store.get(Kind::Group, "default").await?.is_some() || store.revision().await? > 0 {
        return Ok(());
    }
    let group = Group {
        name: "default".into(),
        ratio: 1.0,
        deprecated: false,
        description: "created at first start".into(),
        rate_limit: RateLimit::default(),
        tokens_per_minute: 0,
        max_in_flight: 0,
    };
    match store.create(Resource::Group(group)).await {
        Ok(_) | Err(store::StoreError::AlreadyExists { .. }) => Ok(()),
        Err(error) => Err(error.into()),
    }
}
