//! The connections the Redis store talks over: to one server
//! (`redis://`, `rediss://`) or to a Redis Cluster (`redis+cluster://`,
//! `rediss+cluster://host:port,host:port`, any of its nodes). One `Conn`
//! type serves both, so every store call has one code path; both kinds
//! reconnect in the background with bounded pauses, and a call during an
//! outage fails with `StoreError::Redis`.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionInfo, FromRedisValue, IntoConnectionInfo, Pipeline, RedisFuture,
    RedisResult, Value,
};

use crate::store::{Result, StoreError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const RETRIES: u32 = 3;
/// Bounded: a restarted Redis is found again within a second or so, not
/// after minutes of ever longer pauses.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// Opens connections to the Redis of a store URL.
#[derive(Clone)]
#[expect(clippy::large_enum_variant, reason = "one per store, made once")]
pub(super) enum Dialer {
    Single(Client),
    Cluster(ClusterClient),
}

/// A connection of the store; cheap to clone (clones share it).
#[derive(Clone)]
pub(super) enum Conn {
    /// To one server, reconnecting on failure.
    Managed(ConnectionManager),
    /// To one server, for one task that reconnects itself.
    Direct(MultiplexedConnection),
    /// To a cluster: routes each command by its key's slot, follows
    /// redirections and reconnects to nodes on failure.
    Cluster(ClusterConnection),
}

/// The nodes of a cluster URL, as single-server URLs; `None` when `url`
/// is not a cluster URL.
fn cluster_nodes(url: &str) -> Option<std::result::Result<Vec<ConnectionInfo>, String>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        ("redis", rest)
    } else {
        ("rediss", url.strip_prefix("rediss+cluster://")?)
    };
    Some(parse_cluster(scheme, rest))
}

fn parse_cluster(scheme: &str, rest: &str) -> std::result::Result<Vec<ConnectionInfo>, String> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !matches!(path, "" | "0") {
        return Err(format!("a cluster has only database 0, not {path:?}"));
    }
    let (auth, hosts) = match authority.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), authority),
    };
    let nodes = hosts
        .split(',')
        .map(|host| {
            if host.is_empty() {
                return Err("a cluster URL needs host:port of at least one node, comma separated".to_owned());
            }
            format!("{scheme}://{auth}{host}/")
                .into_connection_info()
                .map_err(|error| format!("node {host:?}: {error}"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(nodes)
}

/// Checks a store URL names a Redis the store can use: `redis://`,
/// `rediss://`, or a cluster's `redis+cluster://` / `rediss+cluster://`
/// with comma-separated `host:port` of its nodes. The error says why not.
pub fn check_url(url: &str) -> std::result::Result<(), String> {
    if let Some(nodes) = cluster_nodes(url) {
        return nodes.map(drop);
    }
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        return url.into_connection_info().map(drop).map_err(|error| error.to_string());
    }
    Err("must be empty (embedded store), or a redis://, rediss://, redis+cluster:// or rediss+cluster:// URL"
        .to_owned())
}

/// Whether `url` names a Redis (single or cluster) rather than the
/// embedded store.
pub fn is_redis_url(url: &str) -> bool {
    ["redis://", "rediss://", "redis+cluster://", "rediss+cluster://"].iter().any(|scheme| url.starts_with(scheme))
}

// === impl Dialer ===

impl Dialer {
    /// The dialer of `url`, checking a TLS server's certificate against the
    /// PEM CA bundle `ca` when given (else the system's roots). Fails when
    /// the URL is invalid; connects to nothing yet.
    pub(super) fn new(url: &str, ca: Option<Vec<u8>>) -> Result<Self> {
        // Without TCP_NODELAY, concurrent commands on one multiplexed
        // connection can wait on each other's ACKs.
        let tcp = TcpSettings::default().set_nodelay(true);
        let certificates = |root_cert| redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
        if let Some(nodes) = cluster_nodes(url) {
            let nodes = nodes.map_err(|reason| {
                StoreError::Redis(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "bad cluster url",
                    reason,
                )))
            })?;
            let mut builder = ClusterClientBuilder::new(nodes)
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(RETRIES)
                .min_retry_wait(millis(RECONNECT_MIN))
                .max_retry_wait(millis(RECONNECT_MAX))
                .tcp_settings(tcp);
            if let Some(root_cert) = ca.filter(|_| url.starts_with("rediss+")) {
                builder = builder.certs(certificates(root_cert));
            }
            return builder.build().map(Dialer::Cluster).map_err(StoreError::Redis);
        }
        let info = url.into_connection_info().map_err(StoreError::Redis)?.set_tcp_settings(tcp);
        let client = match ca {
            Some(root_cert) if url.starts_with("rediss://") => Client::build_with_tls(info, certificates(root_cert)),
            _ => Client::open(info),
        };
        client.map(Dialer::Single).map_err(StoreError::Redis)
    }

    /// The store's shared connection; fails when no server answers.
    pub(super) async fn shared(&self) -> Result<Conn> {
        match self {
            Dialer::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(RETRIES as usize)
                    .set_min_delay(RECONNECT_MIN)
                    .set_exponent_base(2.0)
                    .set_max_delay(RECONNECT_MAX);
                ConnectionManager::new_with_config(client.clone(), config).await.map(Conn::Managed)
            }
            Dialer::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
        }
        .map_err(StoreError::Redis)
    }

    /// A connection of its own, for blocking commands that would hold up
    /// everyone on the shared one; answers may take `response_timeout`.
    /// It does not reconnect: its user opens a new one after an error.
    pub(super) async fn own(&self, response_timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Dialer::Single(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(response_timeout));
                client.get_multiplexed_async_connection_with_config(&config).await.map(Conn::Direct)
            }
            Dialer::Cluster(client) => {
                let config =
                    ClusterConfig::new().set_connection_timeout(CONNECT_TIMEOUT).set_response_timeout(response_timeout);
                client.get_async_connection_with_config(config).await.map(Conn::Cluster)
            }
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

// === impl Conn ===

impl Conn {
    /// Whether this is a connection to a cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Fails when a single-server connection reaches a node of a cluster:
    /// the store's scripts would fail on every key that node does not
    /// serve. A server that does not answer `INFO` passes.
    pub(super) async fn refuse_cluster_node(&self) -> Result<()> {
        if self.is_cluster() {
            return Ok(());
        }
        let Ok(info) = redis::cmd("INFO").arg("cluster").query_async::<String>(&mut self.clone()).await else {
            return Ok(());
        };
        if info.lines().any(|line| line.trim() == "cluster_enabled:1") {
            let reason = "this redis is a cluster node: use a redis+cluster:// store url";
            return Err(StoreError::Redis(redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, reason))));
        }
        Ok(())
    }

    /// The answer of every primary of a cluster to `cmd`, or the one
    /// server's; for server-wide commands such as `CONFIG GET`.
    pub(super) async fn on_every_primary<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<Vec<T>> {
        let Conn::Cluster(conn) = self else {
            return Ok(vec![cmd.query_async(self).await?]);
        };
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        // Without a response policy, the answer maps each node to its own.
        let reply = conn.route_command(cmd.clone(), routing).await?;
        let by_node: Vec<(String, Value)> = redis::from_redis_value(reply)?;
        by_node.into_iter().map(|(_, value)| Ok(redis::from_redis_value(value)?)).collect()
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Managed(conn) => conn.req_packed_command(cmd),
            Conn::Direct(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Managed(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Direct(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Managed(conn) => conn.get_db(),
            Conn::Direct(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_nodes() {
        let nodes = cluster_nodes("redis+cluster://u:p@127.0.0.1:7000,127.0.0.1:7001/").expect("cluster").expect("ok");
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].addr().to_string(), "127.0.0.1:7001");
        assert_eq!(nodes[0].redis_settings().password(), Some("p"));
        assert!(cluster_nodes("redis://127.0.0.1:6379").is_none());
        assert!(check_url("rediss+cluster://a:1,b:2").is_ok());
        assert!(check_url("redis://127.0.0.1:6379/0").is_ok());
    }

    #[test]
    fn bad_store_urls_are_refused() {
        assert!(check_url("redis+cluster://").is_err());
        assert!(check_url("redis+cluster://a:1,,b:2").is_err());
        assert!(check_url("redis+cluster://a:1/3").is_err());
        assert!(check_url("mysql://a").is_err());
    }
}
