//! The control plane's standard `grpc.health.v1.Health` service: SERVING
//! while its store answers, NOT_SERVING while it does not, SERVING again
//! once it is back, for the whole server and each gateway service.

use std::time::Duration;

use gw_tests::{
    harness::{Cluster, eventually},
    redis::RedisServer,
};
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

#[tokio::test]
async fn the_health_service_follows_the_store() {
    let mut redis = RedisServer::start().await.expect("redis-server");
    let cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.control_plane.addr))
        .expect("url")
        .connect_lazy();
    let health = HealthClient::new(channel);
    let status = |service: &'static str| {
        let mut health = health.clone();
        async move {
            let request = HealthCheckRequest { service: service.into() };
            health.check(request).await.ok().map(|r| r.into_inner().status())
        }
    };
    let wait_for = |want: ServingStatus| async move {
        eventually(&format!("health {want:?}"), Duration::from_secs(20), || async {
            let whole = status("").await?;
            let policy = status("gateway.v1.PolicyService").await?;
            (whole == want && policy == want).then_some(())
        })
        .await
    };
    wait_for(ServingStatus::Serving).await;
    redis.stop().await.expect("stop redis");
    wait_for(ServingStatus::NotServing).await;
    redis.restart().await.expect("restart redis");
    wait_for(ServingStatus::Serving).await;
}
