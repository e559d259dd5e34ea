//! Concurrency limits (429): requests in flight at once, per token and per
//! group × account, exact across data planes.
//!
//! The control plane holds the count: a data plane leases one slot per
//! request (`LeaseSlots`) and gives it back when the request ends, whichever
//! way it ends (the `SlotGuard`'s drop), so the slots held by the fleet never
//! exceed the limit. Leases are renewed every `RENEW_EVERY` while held and
//! lapse `SLOT_TTL` after the last renewal: the slots of a data plane that
//! died come back on their own. Slots given back reach the control plane a
//! round trip later; meanwhile other data planes may be refused a slot that
//! is in fact free (never admitted over the limit). While the control plane
//! cannot be reached, every key is counted locally against its full limit
//! (as request limits are): N data planes may then hold up to N × M.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use tokio::time::Instant;

use crate::{
    error::{ProxyError, error_chain},
    policy::auth::Caller,
    policy::limits::{ACQUIRE_TIMEOUT, SourceError},
};

/// How long a slot lease lives past its last renewal.
pub const SLOT_TTL: Duration = Duration::from_secs(30);
/// How often held slots are renewed.
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How long keys are counted locally after the control plane failed to answer.
const LOCAL_FOR: Duration = Duration::from_secs(5);

/// One ask for slots of `key`, the protocol's `SlotAsk` in domain terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotAsk {
    pub key: String,
    pub limit: u32,
    pub give_back: u32,
    pub want: u32,
}

/// What a `SlotAsk` got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotGrant {
    pub granted: u32,
    pub held: u32,
}

/// What `SlotSource::lease` returns.
pub type SlotGrants = Pin<Box<dyn Future<Output = Result<Vec<SlotGrant>, SourceError>> + Send>>;

/// Where slots come from: the control plane (or a stand-in in tests).
pub trait SlotSource: Send + Sync + 'static {
    /// Gives back, asks for and renews slots: one grant per ask, in order.
    fn lease(&self, asks: Vec<SlotAsk>) -> SlotGrants;
}

/// The concurrency limiter of one data plane; cheap to clone.
#[derive(Clone)]
pub struct InFlight {
    inner: Arc<Inner>,
}

/// The slots one request holds; dropping it gives them back.
pub struct SlotGuard {
    inner: Option<Arc<Inner>>,
    taken: Vec<(String, Taken)>,
}

struct Inner {
    source: Arc<dyn SlotSource>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    keys: HashMap<String, Slots, foldhash::fast::RandomState>,
    /// Keys are counted locally until then.
    local_until: Option<Instant>,
}

/// This data plane's slots of one key.
#[derive(Default)]
struct Slots {
    limit: u32,
    /// Leased from the control plane.
    held: u32,
    /// Leased slots in use (the rest goes back at once).
    used: u32,
    /// In use, counted locally while the control plane was unreachable.
    local: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    Leased,
    Local,
}

// === impl InFlight ===

impl InFlight {
    /// A limiter leasing from `source`; spawns the renewal task (it ends
    /// once the limiter is dropped) when called inside a runtime.
    pub fn new(source: Arc<dyn SlotSource>) -> InFlight {
        let inner = Arc::new(Inner { source, state: Mutex::default() });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(renew(Arc::downgrade(&inner)));
        }
        InFlight { inner }
    }

    /// Takes a slot of `caller`'s token limit and of its group's (per
    /// account), or none: fails with the 429 of the first limit that is
    /// full. May wait up to `ACQUIRE_TIMEOUT` per limit for the control plane.
    pub async fn acquire(&self, caller: &Caller) -> Result<SlotGuard, ProxyError> {
        let limits = applicable(caller);
        let mut guard = SlotGuard { inner: None, taken: Vec::with_capacity(limits.len()) };
        if limits.is_empty() {
            return Ok(guard);
        }
        guard.inner = Some(self.inner.clone());
        for (key, limit) in limits {
            match self.take(&key, limit).await {
                Some(taken) => guard.taken.push((key, taken)),
                // The guard's drop gives back what was taken.
                None => return Err(ProxyError::InFlightLimited { max_in_flight: limit }),
            }
        }
        Ok(guard)
    }

    /// One slot of `key`, or `None` when `limit` are in flight.
    async fn take(&self, key: &str, limit: u32) -> Option<Taken> {
        let local = {
            let mut state = self.inner.lock();
            let local = state.local_until.is_some_and(|until| Instant::now() < until);
            let slots = state.keys.entry(key.to_owned()).or_default();
            slots.limit = limit;
            if slots.used + slots.local >= limit {
                return None;
            }
            if slots.used < slots.held {
                slots.used += 1;
                return Some(Taken::Leased);
            }
            if local {
                slots.local += 1;
                return Some(Taken::Local);
            }
            local
        };
        debug_assert!(!local);
        let ask = SlotAsk { key: key.to_owned(), limit, give_back: 0, want: 1 };
        let answer = match tokio::time::timeout(ACQUIRE_TIMEOUT, self.inner.source.lease(vec![ask])).await {
            Ok(answer) => answer,
            Err(_) => Err(SourceError::Timeout(ACQUIRE_TIMEOUT)),
        };
        let mut state = self.inner.lock();
        match answer {
            Ok(grants) => {
                if state.local_until.take().is_some() {
                    tracing::info!(
                        "control plane leases slots again; concurrency limits are shared across data planes"
                    );
                }
                let granted = grants.first().map_or(0, |g| g.granted);
                let slots = state.keys.entry(key.to_owned()).or_default();
                slots.held += granted;
                if granted == 0 {
                    if slots.held == 0 && slots.used == 0 && slots.local == 0 {
                        state.keys.remove(key);
                    }
                    return None;
                }
                // The slot is taken even if local ones filled up meanwhile:
                // the control plane counted it.
                slots.used += 1;
                Some(Taken::Leased)
            }
            Err(error) => {
                if state.local_until.is_none() {
                    tracing::warn!(
                        error = %error_chain(&error),
                        "control plane unreachable for in-flight slots; counting every limit locally \
                         (each data plane may hold up to the full limit) until it answers"
                    );
                }
                state.local_until = Some(Instant::now() + LOCAL_FOR);
                let slots = state.keys.entry(key.to_owned()).or_default();
                (slots.used + slots.local < limit).then(|| {
                    slots.local += 1;
                    Taken::Local
                })
            }
        }
    }

    /// Slots of `key` in use here (tests).
    #[cfg(test)]
    fn in_use(&self, key: &str) -> u32 {
        self.inner.lock().keys.get(key).map_or(0, |s| s.used + s.local)
    }
}

// === impl SlotGuard ===

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else { return };
        let mut returns = Vec::new();
        {
            let mut state = inner.lock();
            for (key, taken) in self.taken.drain(..) {
                let Some(slots) = state.keys.get_mut(&key) else { continue };
                match taken {
                    Taken::Local => slots.local = slots.local.saturating_sub(1),
                    Taken::Leased => {
                        slots.used = slots.used.saturating_sub(1);
                        slots.held = slots.held.saturating_sub(1);
                        returns.push(SlotAsk { key: key.clone(), limit: slots.limit.max(1), give_back: 1, want: 0 });
                    }
                }
                if slots.held == 0 && slots.used == 0 && slots.local == 0 {
                    state.keys.remove(&key);
                }
            }
        }
        if returns.is_empty() {
            return;
        }
        // Outside a runtime (shutdown) the lease lapses instead.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let given = tokio::time::timeout(ACQUIRE_TIMEOUT, inner.source.lease(returns)).await;
                if !matches!(given, Ok(Ok(_))) {
                    tracing::debug!("in-flight slots could not be given back; their lease will lapse");
                }
            });
        }
    }
}

impl std::fmt::Debug for SlotGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotGuard").field("taken", &self.taken).finish()
    }
}

// === impl Inner ===

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock; a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Renews the leases of held slots every `RENEW_EVERY` until the limiter
/// is dropped.
async fn renew(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let Some(inner) = inner.upgrade() else { return };
        let asks: Vec<SlotAsk> = inner
            .lock()
            .keys
            .iter()
            .filter(|(_, s)| s.held > 0)
            .map(|(key, s)| SlotAsk { key: key.clone(), limit: s.limit.max(1), give_back: 0, want: 0 })
            .collect();
        if asks.is_empty() {
            continue;
        }
        if let Ok(Err(error)) | Err(error) = tokio::time::timeout(ACQUIRE_TIMEOUT, inner.source.lease(asks))
            .await
            .map_err(|_| SourceError::Timeout(ACQUIRE_TIMEOUT))
        {
            tracing::debug!(error = %error_chain(&error), "in-flight slot leases could not be renewed");
        }
    }
}

/// The concurrency limits of `caller` with their keys: the token's, then
/// the group's (per account). Zero is no limit.
fn applicable(caller: &Caller) -> Vec<(String, u32)> {
    let mut limits = Vec::with_capacity(2);
    let max_in_flight = caller.token.restrictions().max_in_flight;
    if max_in_flight > 0 {
        limits.push((["token:", &caller.token.id].concat(), max_in_flight));
    }
    if caller.group.max_in_flight > 0 {
        limits.push((["group:", &caller.group.name, ":", &caller.account.id].concat(), caller.group.max_in_flight));
    }
    limits
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::policy::domain::{Group, Restrictions};
    use crate::policy::snapshot::tests as fx;

    /// The control plane's slot counting, in memory.
    #[derive(Default)]
    struct Authority {
        held: Mutex<HashMap<(String, String), u32>>,
        down: AtomicBool,
    }

    /// One data plane's view of the authority.
    struct Node(Arc<Authority>, &'static str);

    impl SlotSource for Node {
        fn lease(&self, asks: Vec<SlotAsk>) -> SlotGrants {
            if self.0.down.load(Ordering::SeqCst) {
                return Box::pin(async { Err(SourceError::Call(tonic::Status::unavailable("down").into())) });
            }
            let mut held = self.0.held.lock().unwrap();
            let grants = asks
                .into_iter()
                .map(|ask| {
                    let all: u32 = held.iter().filter(|((k, _), _)| *k == ask.key).map(|(_, n)| *n).sum();
                    let own = held.entry((ask.key.clone(), self.1.to_owned())).or_default();
                    let give = ask.give_back.min(*own);
                    *own -= give;
                    let granted = ask.want.min(ask.limit.saturating_sub(all - give));
                    *own += granted;
                    SlotGrant { granted, held: *own }
                })
                .collect();
            Box::pin(async move {
                tokio::task::yield_now().await;
                Ok(grants)
            })
        }
    }

    impl Authority {
        fn held(&self, key: &str) -> u32 {
            self.held.lock().unwrap().iter().filter(|((k, _), _)| k == key).map(|(_, n)| *n).sum()
        }
    }

    fn caller(token_limit: u32, group_limit: u32) -> Caller {
        let token =
            fx::token("t1", "sk-x").restricted(Restrictions { max_in_flight: token_limit, ..Restrictions::default() });
        let group = Group { max_in_flight: group_limit, ..fx::group("g") };
        Caller { token: Arc::new(token), account: Arc::new(fx::account("a1")), group: Arc::new(group) }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn two_data_planes_never_hold_more_than_the_limit_and_freed_slots_serve_again() {
        let authority = Arc::new(Authority::default());
        let a = InFlight::new(Arc::new(Node(authority.clone(), "dp-a")));
        let b = InFlight::new(Arc::new(Node(authority.clone(), "dp-b")));
        let caller = caller(2, 0);
        let first = a.acquire(&caller).await.unwrap();
        let second = b.acquire(&caller).await.unwrap();
        for limiter in [&a, &b] {
            let refused = limiter.acquire(&caller).await.unwrap_err();
            assert_eq!(refused, ProxyError::InFlightLimited { max_in_flight: 2 });
        }
        assert_eq!(authority.held("token:t1"), 2);
        drop(first);
        settle().await;
        assert_eq!(authority.held("token:t1"), 1, "the slot went back to the control plane");
        let third = b.acquire(&caller).await.unwrap();
        assert_eq!(b.in_use("token:t1"), 2);
        drop((second, third));
        settle().await;
        assert_eq!((authority.held("token:t1"), a.in_use("token:t1"), b.in_use("token:t1")), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_group_gives_back_the_token_slot_it_took() {
        let authority = Arc::new(Authority::default());
        let limiter = InFlight::new(Arc::new(Node(authority.clone(), "dp-a")));
        let _held = limiter.acquire(&caller(5, 1)).await.unwrap();
        let refused = limiter.acquire(&caller(5, 1)).await.unwrap_err();
        assert_eq!(refused, ProxyError::InFlightLimited { max_in_flight: 1 });
        settle().await;
        assert_eq!(authority.held("token:t1"), 1, "only the admitted request's token slot is held");
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_control_plane_each_data_plane_counts_the_full_limit_locally() {
        let authority = Arc::new(Authority::default());
        authority.down.store(true, Ordering::SeqCst);
        let a = InFlight::new(Arc::new(Node(authority.clone(), "dp-a")));
        let b = InFlight::new(Arc::new(Node(authority.clone(), "dp-b")));
        let caller = caller(2, 0);
        let mut held = Vec::new();
        for limiter in [&a, &a, &b, &b] {
            held.push(limiter.acquire(&caller).await.unwrap());
        }
        assert!(a.acquire(&caller).await.is_err() && b.acquire(&caller).await.is_err());
        held.clear();
        assert_eq!((a.in_use("token:t1"), b.in_use("token:t1")), (0, 0));
        authority.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(LOCAL_FOR).await;
        let _one = a.acquire(&caller).await.unwrap();
        assert_eq!(authority.held("token:t1"), 1, "shared again once the control plane answers");
    }

    #[tokio::test(start_paused = true)]
    async fn callers_without_limits_take_no_slot() {
        let authority = Arc::new(Authority::default());
        let limiter = InFlight::new(Arc::new(Node(authority.clone(), "dp-a")));
        let caller = caller(0, 0);
        let mut guards = Vec::new();
        for _ in 0..50 {
            guards.push(limiter.acquire(&caller).await.unwrap());
        }
        assert!(authority.held.lock().unwrap().is_empty());
    }
}
