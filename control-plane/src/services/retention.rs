//! Enforces usage retention: one task prunes raw usage records (and, in the
//! embedded store, rollup buckets) past the retention the store was opened
//! with, at start and then every `EVERY`. Pruning is idempotent, so several
//! replicas on one Redis may run it at once.

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, task::JoinHandle};

use crate::{domain::error_chain, domain::now_unix, store::Store};

/// Time between two prune rounds.
const EVERY: Duration = Duration::from_secs(600);
/// Prune calls in one round at most (each removes a bounded batch).
const CALLS_PER_ROUND: usize = 100;

/// Spawns the prune task; it ends when `shutdown` turns true (or its
/// sender is dropped).
pub fn spawn(store: Arc<dyn Store>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => round(store.as_ref()).await,
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        return;
                    }
                }
            }
        }
    })
}

/// Prunes until nothing more is past retention (or the round's bound).
async fn round(store: &dyn Store) {
    let (mut records, mut rows) = (0, 0);
    for _ in 0..CALLS_PER_ROUND {
        match store.prune(now_unix()).await {
            Ok(pruned) if pruned.records == 0 && pruned.rollup_rows == 0 => break,
            Ok(pruned) => {
                records += pruned.records;
                rows += pruned.rollup_rows;
            }
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "pruning usage past retention failed");
                break;
            }
        }
    }
    if records > 0 || rows > 0 {
        tracing::info!(records, rollup_rows = rows, "pruned usage past retention");
    }
}
