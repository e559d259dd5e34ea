//! The background batch poller: one replica at a time (the holder of the
//! store lock `batch-poller`, renewed every round) walks the open batches,
//! refreshing the ones nobody asked about and settling those that ended.
//! Batches live in the store, so a restarted control plane simply goes on;
//! two replicas sweeping at once are harmless (every write is a
//! compare-and-set, every charge a usage record applied once).

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt as _;
use tokio::{sync::watch, task::JoinHandle};

use super::Batches;

/// Name of the store lock the sweeping replica holds.
pub const LOCK: &str = "batch-poller";
/// Open batches looked at per round.
const ROUND: usize = 1_000;
/// Batches tended at once.
const CONCURRENCY: usize = 4;

/// Spawns the poller; it sweeps every `poll_interval` while it holds the
/// lock, and releases the lock when `shutdown` turns true.
pub fn spawn(batches: Arc<Batches>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
    let holder = format!("cp-{:016x}", rand::random::<u64>());
    tokio::spawn(async move {
        let interval = batches.config().poll_interval.max(Duration::from_millis(50));
        let ttl = (interval * 3).max(Duration::from_secs(1));
        let mut leading = false;
        loop {
            match batches.store.try_lock(LOCK, &holder, ttl).await {
                Ok(held) => {
                    if held != leading {
                        tracing::info!(%holder, held, "batch poller lock changed hands");
                        leading = held;
                    }
                    if held {
                        sweep(&batches).await;
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %crate::domain::error_chain(&error), "batch poller cannot reach the store")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
        }
        if leading && let Err(error) = batches.store.unlock(LOCK, &holder).await {
            tracing::warn!(error = %crate::domain::error_chain(&error), "batch poller could not release its lock");
        }
    })
}

/// One round over the open batches, oldest first.
async fn sweep(batches: &Batches) {
    let open = match batches.store.open_batches(ROUND).await {
        Ok(open) => open,
        Err(error) => {
            tracing::warn!(error = %crate::domain::error_chain(&error), "batch poller cannot list open batches");
            return;
        }
    };
    futures_util::stream::iter(open)
        .for_each_concurrent(CONCURRENCY, |batch| async move {
            let id = batch.id.clone();
            if let Err(error) = batches.tend(batch).await {
                tracing::warn!(batch = %id, error = %crate::domain::error_chain(&error), "batch poller could not tend a batch");
            }
        })
        .await;
}
