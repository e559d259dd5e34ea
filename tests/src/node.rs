//! A stand-in data plane for tests that call `PolicyService` directly, as
//! a data plane (or someone holding its key) would: one connection with a
//! watch session open under a node id, over which its reports go.

use std::time::Duration;

use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};

use crate::harness::{AdminKey, Cluster};

/// The policy client of a stand-in data plane.
pub type Policy = PolicyServiceClient<InterceptedService<Channel, AdminKey>>;

/// A watch session held open; dropping it closes the watch.
pub struct Session {
    _hello: mpsc::Sender<pb::WatchRequest>,
    _responses: tonic::Streaming<pb::WatchResponse>,
}

/// `PolicyService` with the node key over a connection of its own, without
/// a watch session: reports over it are refused.
pub fn unbound(cluster: &Cluster) -> Policy {
    let channel = Endpoint::from_shared(cluster.control_plane_url())
        .expect("address")
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    PolicyServiceClient::with_interceptor(channel, AdminKey::new(&cluster.node_key).expect("key"))
}

/// `PolicyService` with the node key over a connection of its own, on
/// which a watch session says hello as `node_id` and has received its
/// first full snapshot.
pub async fn connect(cluster: &Cluster, node_id: &str) -> (Policy, Session) {
    connect_holding(cluster, node_id, 0).await
}

/// `connect`, the stand-in saying it holds `revision` of the store (0:
/// nothing, and then it reads its first full snapshot).
pub async fn connect_holding(cluster: &Cluster, node_id: &str, revision: u64) -> (Policy, Session) {
    let mut policy = unbound(cluster);
    let session = open(&mut policy, node_id, revision).await.expect("a watch session");
    (policy, session)
}

/// Opens a watch session as `node_id`, holding `revision`, on `policy`'s
/// connection (reading its first full snapshot when it holds nothing);
/// the status the control plane refused it with.
pub async fn open(policy: &mut Policy, node_id: &str, revision: u64) -> Result<Session, tonic::Status> {
    let (hello, requests) = mpsc::channel(4);
    let message = pb::Hello { node_id: node_id.into(), revision, ..Default::default() };
    hello
        .send(pb::WatchRequest { kind: Some(pb::watch_request::Kind::Hello(message)) })
        .await
        .expect("the hello is queued");
    let mut responses = policy.watch(ReceiverStream::new(requests)).await?.into_inner();
    // Holding nothing, the first full snapshot comes at once (holding a
    // revision with nothing since, nothing comes).
    let mut more = revision == 0;
    while more {
        let Some(response) = responses.message().await? else {
            return Err(tonic::Status::unavailable("the watch ended before its snapshot"));
        };
        more = response.more;
    }
    Ok(Session { _hello: hello, _responses: responses })
}
