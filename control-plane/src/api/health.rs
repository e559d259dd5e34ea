//! The standard `grpc.health.v1.Health` service, for load balancers and
//! orchestrators: SERVING while the store answers, NOT_SERVING while it does
//! not. One task asks the store for its revision every `CHECK_INTERVAL`
//! (each check bounded by `CHECK_TIMEOUT`) and sets the status of the whole
//! server (`""`) and of both gateway services. It needs no credential.

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, task::JoinHandle};
use tonic_health::{
    ServingStatus,
    pb::health_server::{Health, HealthServer},
    server::HealthReporter,
};

use crate::store::Store;

/// How often the store is checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// A check the store has not answered within this fails.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The services whose status is reported, besides the server's own (`""`).
const SERVICES: [&str; 2] = ["gateway.v1.AdminService", "gateway.v1.PolicyService"];

/// The health service, and the task that keeps its statuses current until
/// `shutdown` turns true. Statuses start as NOT_SERVING until the first
/// check answers.
pub fn spawn(
    store: Arc<dyn Store>,
    mut shutdown: watch::Receiver<bool>,
) -> (HealthServer<impl Health>, JoinHandle<()>) {
    let (reporter, service) = tonic_health::server::health_reporter();
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(CHECK_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = None;
        loop {
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => break,
                _ = ticks.tick() => {}
            }
            let answered = matches!(tokio::time::timeout(CHECK_TIMEOUT, store.revision()).await, Ok(Ok(_)));
            let status = if answered { ServingStatus::Serving } else { ServingStatus::NotServing };
            if last != Some(status) {
                if !answered {
                    tracing::warn!("the store does not answer; health checks report NOT_SERVING");
                } else if last.is_some() {
                    tracing::info!("the store answers again; health checks report SERVING");
                }
                set_all(&reporter, status).await;
                last = Some(status);
            }
        }
        // A replica on its way out takes no new work.
        set_all(&reporter, ServingStatus::NotServing).await;
    });
    (service, task)
}

async fn set_all(reporter: &HealthReporter, status: ServingStatus) {
    reporter.set_service_status("", status).await;
    for service in SERVICES {
        reporter.set_service_status(service, status).await;
    }
}
