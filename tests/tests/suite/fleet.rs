//! One fleet view: every control-plane replica lists every data plane, from
//! the registry in the store, with the replica holding it, the revision it
//! applied (a reconnect with nothing new counts), its heartbeats' spool
//! backlog and request rate; a data plane that left can be removed.

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::{Admin, Cluster, eventually},
    redis::RedisServer,
};

async fn listed(admin: &Admin) -> Option<pb::ListDataPlanesResponse> {
    Some(admin.clone().list_data_planes(pb::ListRequest::default()).await.ok()?.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_lists_the_same_fleet_with_heartbeats_and_removes_what_left() {
    let redis = RedisServer::start().await.expect("redis-server");
    let mut cluster = Cluster::start(&redis.url(), 2).await.expect("cluster");
    let replica = cluster.start_replica(1).await.expect("replica");
    let first = cluster.control_plane.addr.to_string();

    // Both data planes hold streams on the first replica; the second lists
    // them too, in sync, with the replica that holds them.
    let other = replica.admin();
    let fleet = eventually("the second replica to list both data planes", Duration::from_secs(10), || async {
        let list = listed(&other).await?;
        let in_sync = list.items.iter().filter(|d| d.connected && d.acked_revision == list.revision).count();
        (in_sync == 2).then_some(list)
    })
    .await;
    for plane in &fleet.items {
        assert_eq!(plane.replica, first, "{plane:?}");
        assert_eq!(plane.liveness, "connected");
    }
    let via_first = listed(&cluster.admin()).await.expect("list via the first replica");
    let nodes = |list: &pb::ListDataPlanesResponse| list.items.iter().map(|d| d.node_id.clone()).collect::<Vec<_>>();
    assert_eq!(nodes(&via_first), nodes(&fleet), "the replicas list different fleets");

    // Requests show in the heartbeats.
    let url = format!("{}/models", cluster.base_url(0));
    for _ in 0..20 {
        let _ = cluster.http().get(&url).send().await;
    }
    let node = cluster.data_planes[0].node_id.clone();
    eventually("a heartbeat to report the request rate", Duration::from_secs(15), || async {
        let list = listed(&other).await?;
        list.items.iter().any(|d| d.node_id == node && d.requests_per_second > 0.0).then_some(())
    })
    .await;

    // A restarted control plane with nothing new to send: the data planes
    // reconnect and are in sync at once (their reconnect counts as an ACK).
    cluster.stop_control_plane().await;
    cluster.start_control_plane().await.expect("restart the control plane");
    let revision = fleet.revision;
    eventually("both data planes to be back in sync", Duration::from_secs(15), || async {
        let list = listed(&other).await?;
        let back = list.items.iter().filter(|d| d.connected && d.acked_revision == revision).count();
        (list.revision == revision && back == 2).then_some(())
    })
    .await;

    // A data plane that left is shown so, and can be removed.
    cluster.stop_data_plane(1).await;
    let gone = cluster.data_planes[1].node_id.clone();
    eventually("the stopped data plane to show as disconnected", Duration::from_secs(10), || async {
        let list = listed(&other).await?;
        list.items.iter().any(|d| d.node_id == gone && !d.connected).then_some(())
    })
    .await;
    let removed = cluster.gwctl(&["dataplanes", "remove", &gone, "--yes"]).await.expect("gwctl dataplanes remove");
    assert_eq!(removed["deleted"], true, "{removed}");
    let list = listed(&other).await.expect("list");
    assert!(list.items.iter().all(|d| d.node_id != gone), "removed data plane still listed: {list:?}");
    let json = cluster.gwctl(&["dataplanes", "list"]).await.expect("gwctl dataplanes list");
    assert_eq!(json["items"].as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(json["items"][0]["state"], "in sync", "{json}");
    replica.shutdown().await;
}
