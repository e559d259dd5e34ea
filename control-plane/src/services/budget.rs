//! The budget authority: the one place that hands out what data planes may
//! admit. Rate-limit permits are counted per fixed window (`permits`);
//! spending budgets (a token's quota, an account's balance) are leased
//! (`lease`, `give_back`), so the sum held by all data planes never exceeds
//! what is left. Both are atomic in the store, whichever replica answers.
//! Token-per-minute limits are permits too (one per token, keys
//! `tpm:token:<id>`, `tpm:group:<group>:<account>`), with overruns charged
//! past the limit; concurrency limits lease in-flight slots (`slots`), which
//! lapse with their lease when a data plane stops renewing them.

use std::sync::Arc;

use crate::{
    domain::clock::Clock,
    domain::now_unix,
    store::{Budget, Lease, LeaseAsk, SlotAsk, SlotLease, Store, StoreError},
};

/// Asks accepted in one call.
pub const MAX_ASKS: usize = 1_000;
/// Longest permit key accepted (`group:<group>:<account id>`).
const MAX_KEY_LEN: usize = 1_024;
/// Lease lifetimes a data plane may ask for, in seconds.
pub const MIN_LEASE_TTL_SECS: u32 = 5;
pub const MAX_LEASE_TTL_SECS: u32 = 3_600;
/// Largest amount one ask may name: a billion dollars.
const MAX_AMOUNT: i64 = 1_000_000_000_000_000;

/// Why an ask is refused.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// The ask is malformed; the text says how.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One ask for rate-limit permits: up to `want` of `max_requests` per
/// window of `window_minutes` on `key`, and `charge` units used already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitAsk {
    pub key: String,
    pub window_minutes: u32,
    pub max_requests: u32,
    pub want: u32,
    pub charge: u32,
}

/// What one `PermitAsk` got, for the window `[window_start, window_end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitGrant {
    pub key: String,
    pub granted: u32,
    pub window_start: i64,
    pub window_end: i64,
}

/// One ask for in-flight slots on `key` (`token:<id>` or
/// `group:<group>:<account>`), limited to `max_in_flight` across holders:
/// `give_back` slots returned, then `want` more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotsAsk {
    pub key: String,
    pub max_in_flight: u32,
    pub give_back: u32,
    pub want: u32,
}

/// The authority of one replica; cheap to share.
#[derive(Clone)]
pub struct Authority {
    store: Arc<dyn Store>,
    /// What leases take as now: windows of budgets are chosen by it.
    clock: Clock,
}

/// One ask for spending budget, in domain terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendAsk {
    pub budget: Budget,
    pub need: i64,
    pub want: i64,
}

// === impl Authority ===

impl Authority {
    pub fn new(store: Arc<dyn Store>) -> Authority {
        Authority { store, clock: Clock::system() }
    }

    /// Leases by `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Clock) -> Authority {
        self.clock = clock;
        self
    }

    /// Grants rate-limit permits: one grant per ask, in order, each for the
    /// fixed window that holds this instant. Refuses malformed asks.
    pub async fn permits(&self, asks: Vec<PermitAsk>) -> Result<Vec<PermitGrant>, BudgetError> {
        if asks.len() > MAX_ASKS {
            return Err(BudgetError::Invalid(format!("at most {MAX_ASKS} asks per call")));
        }
        for ask in &asks {
            validate_permit_ask(ask)?;
        }
        // One clock for the whole call: every grant of it is for the window
        // that holds this instant.
        let now = now_unix();
        let mut grants = Vec::with_capacity(asks.len());
        for ask in asks {
            let (window_start, window_end) = window(now, ask.window_minutes);
            let want = ask.want.min(ask.max_requests);
            let granted = self
                .store
                .take_permits(&ask.key, window_start, window_end - window_start, ask.max_requests, want)
                .await?;
            if ask.charge > 0 {
                // Used already: counted whatever is left, so the window may
                // end up past its limit and grant nothing more.
                self.store
                    .take_permits(&ask.key, window_start, window_end - window_start, u32::MAX, ask.charge)
                    .await?;
            }
            grants.push(PermitGrant { key: ask.key, granted, window_start, window_end });
        }
        Ok(grants)
    }

    /// Leases spending budget to data plane `holder` for `ttl_secs`
    /// (clamped to the allowed range, returned beside the grants): one
    /// lease per ask, in order.
    pub async fn lease(
        &self,
        holder: &str,
        asks: Vec<SpendAsk>,
        ttl_secs: u32,
    ) -> Result<(Vec<Lease>, u32), BudgetError> {
        if asks.len() > MAX_ASKS {
            return Err(BudgetError::Invalid(format!("at most {MAX_ASKS} asks per call")));
        }
        if holder.is_empty() {
            return Err(BudgetError::Invalid("spend asks need a node_id".into()));
        }
        for ask in &asks {
            if !(0..=MAX_AMOUNT).contains(&ask.need) || !(ask.need..=MAX_AMOUNT).contains(&ask.want) {
                return Err(BudgetError::Invalid(format!(
                    "spend ask for {} needs 0 <= need <= want <= {MAX_AMOUNT}, got need {} want {}",
                    ask.budget, ask.need, ask.want
                )));
            }
        }
        let ttl = ttl_secs.clamp(MIN_LEASE_TTL_SECS, MAX_LEASE_TTL_SECS);
        let now = self.clock.now();
        let mut leases = Vec::with_capacity(asks.len());
        for ask in asks {
            let ask = LeaseAsk {
                budget: ask.budget,
                holder: holder.to_owned(),
                need: ask.need,
                want: ask.want,
                now,
                ttl_secs: ttl.into(),
            };
            leases.push(self.store.lease(&ask).await?);
        }
        Ok((leases, ttl))
    }

    /// Leases in-flight slots to data plane `holder` for `ttl_secs` (clamped,
    /// returned beside the leases): one lease per ask, in order; every ask
    /// renews the holder's lease of its key.
    pub async fn slots(
        &self,
        holder: &str,
        asks: Vec<SlotsAsk>,
        ttl_secs: u32,
    ) -> Result<(Vec<SlotLease>, u32), BudgetError> {
        if asks.len() > MAX_ASKS {
            return Err(BudgetError::Invalid(format!("at most {MAX_ASKS} asks per call")));
        }
        if holder.is_empty() {
            return Err(BudgetError::Invalid("slot asks need a node_id".into()));
        }
        for ask in &asks {
            if !is_limit_key(&ask.key) || ask.max_in_flight == 0 {
                return Err(BudgetError::Invalid(format!(
                    "slot ask for {:?} needs a key token:<id> or group:<group>:<account> of at most \
                     {MAX_KEY_LEN} bytes and a limit of at least 1",
                    ask.key
                )));
            }
        }
        let ttl = ttl_secs.clamp(MIN_LEASE_TTL_SECS, MAX_LEASE_TTL_SECS);
        let now = now_unix();
        let mut leases = Vec::with_capacity(asks.len());
        for ask in asks {
            let ask = SlotAsk {
                key: ask.key,
                holder: holder.to_owned(),
                limit: ask.max_in_flight,
                give_back: ask.give_back,
                want: ask.want,
                now,
                ttl_secs: ttl.into(),
            };
            leases.push(self.store.lease_slots(&ask).await?);
        }
        Ok((leases, ttl))
    }

    /// Takes back budget `holder` will not spend.
    pub async fn give_back(&self, holder: &str, returns: Vec<(Budget, i64)>) -> Result<(), StoreError> {
        for (budget, amount) in returns {
            if amount > 0 {
                self.store.release(&budget, holder, amount).await?;
            }
        }
        Ok(())
    }
}

/// Refuses a permit ask that names no limit or an unknown kind of key.
fn validate_permit_ask(ask: &PermitAsk) -> Result<(), BudgetError> {
    let known = is_limit_key(ask.key.strip_prefix("tpm:").unwrap_or(&ask.key));
    if !known {
        return Err(BudgetError::Invalid(format!(
            "permit key {:?} is not [tpm:]token:<id> or [tpm:]group:<group>:<account> of at most {MAX_KEY_LEN} bytes",
            ask.key
        )));
    }
    // Any window length is fine: u32 minutes in seconds fit an i64.
    if ask.window_minutes == 0 || ask.max_requests == 0 {
        return Err(BudgetError::Invalid(format!(
            "permit ask for {:?} needs a window of at least 1 minute and at least 1 request, got {}/{}",
            ask.key, ask.max_requests, ask.window_minutes
        )));
    }
    Ok(())
}

/// Whether `key` names a token's or a group × account's limit.
fn is_limit_key(key: &str) -> bool {
    (key.starts_with("token:") || key.starts_with("group:")) && key.len() <= MAX_KEY_LEN
}

/// The fixed window of `window_minutes` that holds Unix second `now`:
/// `(start, end)`, end exclusive, aligned to multiples of the window's length
/// since the Unix epoch.
pub fn window(now: i64, window_minutes: u32) -> (i64, i64) {
    let length = i64::from(window_minutes.max(1)) * 60;
    let start = now - now.rem_euclid(length);
    (start, start + length)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::store::EmbeddedStore;

    fn api(dir: &tempfile::TempDir) -> Authority {
        Authority::new(Arc::new(EmbeddedStore::open(&dir.path().join("store.redb")).unwrap()))
    }

    fn ask(key: &str, window_minutes: u32, max_requests: u32, want: u32) -> PermitAsk {
        PermitAsk { key: key.into(), window_minutes, max_requests, want, charge: 0 }
    }

    async fn acquire(api: &Authority, asks: Vec<PermitAsk>) -> Result<Vec<PermitGrant>, BudgetError> {
        api.permits(asks).await
    }

    #[test]
    fn windows_are_aligned_to_multiples_of_their_length_since_the_epoch() {
        assert_eq!(window(0, 1), (0, 60));
        assert_eq!(window(59, 1), (0, 60));
        assert_eq!(window(60, 1), (60, 120));
        assert_eq!(window(1_000_000_123, 5), (1_000_000_200 - 300, 1_000_000_200));
        assert_eq!(window(7_199, 60), (3_600, 7_200));
    }

    #[tokio::test]
    async fn grants_answer_each_ask_in_order_and_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let api = api(&dir);
        let grants = acquire(&api, vec![ask("token:t1", 1, 5, 3), ask("group:g:a1", 60, 2, 10)]).await.unwrap();
        let summary: Vec<(&str, u32, i64)> =
            grants.iter().map(|g| (g.key.as_str(), g.granted, g.window_end - g.window_start)).collect();
        assert_eq!(summary, [("token:t1", 3, 60), ("group:g:a1", 2, 3_600)], "want is capped by the limit");
        let now = now_unix();
        assert!(grants.iter().all(|g| g.window_start <= now && now < g.window_end + 1), "{grants:?}");
        let again = acquire(&api, vec![ask("token:t1", 1, 5, 3), ask("group:g:a1", 60, 2, 1)]).await.unwrap();
        let granted: Vec<u32> = again.iter().map(|g| g.granted).collect();
        assert_eq!(granted, [2, 0]);
    }

    #[tokio::test]
    async fn token_units_charged_past_a_grant_shrink_what_the_window_grants_later() {
        let dir = tempfile::tempdir().unwrap();
        let api = api(&dir);
        let granted = acquire(&api, vec![ask("tpm:token:t1", 1, 1_000, 600)]).await.unwrap();
        assert_eq!(granted[0].granted, 600);
        let charged = PermitAsk { charge: 300, ..ask("tpm:token:t1", 1, 1_000, 0) };
        assert_eq!(acquire(&api, vec![charged]).await.unwrap()[0].granted, 0);
        let later = acquire(&api, vec![ask("tpm:token:t1", 1, 1_000, 500)]).await.unwrap();
        assert_eq!(later[0].granted, 100, "600 granted and 300 charged of 1,000");
    }

    #[tokio::test]
    async fn slots_are_granted_up_to_the_limit_across_holders() {
        let dir = tempfile::tempdir().unwrap();
        let api = api(&dir);
        let slot = |want, give_back| SlotsAsk { key: "token:t1".into(), max_in_flight: 2, give_back, want };
        let (leases, ttl) = api.slots("dp-1", vec![slot(1, 0)], 1).await.unwrap();
        assert_eq!((leases[0].granted, ttl), (1, MIN_LEASE_TTL_SECS));
        assert_eq!(api.slots("dp-2", vec![slot(2, 0)], 30).await.unwrap().0[0].granted, 1);
        assert_eq!(api.slots("dp-2", vec![slot(1, 0)], 30).await.unwrap().0[0].granted, 0);
        assert_eq!(api.slots("dp-1", vec![slot(0, 1)], 30).await.unwrap().0[0].held, 0);
        assert_eq!(api.slots("dp-2", vec![slot(1, 0)], 30).await.unwrap().0[0].granted, 1);
        let bad = SlotsAsk { key: "other:x".into(), ..slot(1, 0) };
        assert!(matches!(api.slots("dp-1", vec![bad], 30).await, Err(BudgetError::Invalid(_))));
        assert!(matches!(api.slots("", vec![slot(1, 0)], 30).await, Err(BudgetError::Invalid(_))));
    }

    #[tokio::test]
    async fn malformed_asks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let api = api(&dir);
        for bad in [ask("token:t1", 0, 5, 1), ask("token:t1", 1, 0, 1), ask("other:t1", 1, 5, 1), ask("", 1, 5, 1)] {
            let refused = acquire(&api, vec![bad.clone()]).await;
            assert!(matches!(refused, Err(BudgetError::Invalid(_))), "{bad:?}");
        }
    }
}
