//! The ledger: how a usage record, a video charge or a video refund changes
//! token use and account balance, each exactly once per request id.
//!
//! Data planes are not trusted with money: every reported record is checked
//! (no negative or impossible amounts, not older than the idempotency
//! window, a model the catalogue knows) and priced here from the catalogue
//! and its counts; the cost a data plane sent is only compared. A record
//! must name a token and an account that exist, and the token must be the
//! account's; its group, model and channel must be ones the data plane's
//! policy allowed (`allowed`). It is booked to the data plane that
//! reported it, whatever node it names (so no data plane spends another's
//! leases). Refused records are logged, counted (`gw.ledger.records` with
//! outcome `refused`, alerted on) and never charged.

use std::sync::{Arc, Mutex, PoisonError};

use foldhash::{HashMap, HashMapExt};

use gw_pricing::{Prices, Units, Usage};

use crate::{
    domain::{Kind, Resource, UsageOutcome, UsageRecord, VideoTask, now_unix},
    store::{Charged, IDEMPOTENCY_WINDOW_SECS, Store, StoreError},
};

mod allowed;

use allowed::{Allowed, Changed, same_payer_and_policy};

/// Why the ledger could not apply or charge.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Most tokens (or images, or audio milliseconds) one record may count.
const MAX_COUNT: i64 = 1_000_000_000;
/// How far ahead of our clock a record's time may be.
const MAX_FUTURE_SECS: i64 = 3_600;
/// The endpoint video charges are recorded under.
pub const VIDEO_ENDPOINT: &str = "/v1/videos";

/// The ledger of one replica; cheap to share.
pub struct Ledger {
    store: Arc<dyn Store>,
    catalogue: Mutex<Option<Arc<Catalogue>>>,
}

/// Prices and group ratios at one revision of one store lineage.
struct Catalogue {
    /// The store's lineage: a store that lost its data (and was confirmed
    /// empty) is another lineage, whatever its revision.
    lineage: String,
    revision: u64,
    prices: HashMap<String, Prices>,
    ratios: HashMap<String, i64>,
}

/// Why a reported record was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("record names no token or account")]
    Unattributed,
    #[error("negative or impossible count or cost")]
    Impossible,
    #[error("record is older than the idempotency window ({0} s)")]
    TooOld(i64),
    #[error("record is dated in the future")]
    Future,
    #[error("model {0:?} is not in the catalogue")]
    UnknownModel(String),
    #[error("token {0:?} does not exist")]
    UnknownToken(String),
    #[error("account {0:?} does not exist")]
    UnknownAccount(String),
    #[error("token {token:?} belongs to account {owner:?}, not to {account:?}")]
    NotTheAccounts { token: String, owner: String, account: String },
    #[error("group {group:?} is not the token's ({token:?})")]
    NotTheTokensGroup { group: String, token: String },
    #[error("the account may not use group {0:?}")]
    GroupNotAllowed(String),
    #[error("group {0:?} does not exist")]
    UnknownGroup(String),
    #[error("model {0:?} is outside the token's allowlist")]
    ModelNotAllowed(String),
    #[error("channel {0:?} does not exist")]
    UnknownChannel(String),
    #[error("channel {channel:?} does not serve model {model:?} to group {group:?}")]
    NotServed { channel: String, model: String, group: String },
}

// === impl Ledger ===

impl Ledger {
    pub fn new(store: Arc<dyn Store>) -> Ledger {
        Ledger { store, catalogue: Mutex::new(None) }
    }

    /// Checks and prices records data plane `node` reported, then applies
    /// the good ones once per request id. `base` is the revision the data
    /// plane held when its watch session began (0: none): what changed
    /// after it is not held against a record. Refused records are logged
    /// and counted.
    pub async fn apply_reported(
        &self,
        node: &str,
        base: u64,
        records: Vec<UsageRecord>,
    ) -> Result<UsageOutcome, LedgerError> {
        let catalogue = self.catalogue().await?;
        let allowed = Allowed::read(self.store.as_ref(), &records).await?;
        // The change feed is read only when the policy as it is now would
        // refuse a record: almost never.
        let mut changed = None;
        let now = now_unix();
        let mut good = Vec::with_capacity(records.len());
        let mut refused = 0;
        for mut record in records {
            if record.node_id != node {
                // A spool replayed under a new node id, or a forgery.
                tracing::debug!(request_id = %record.request_id, named = %record.node_id, node, "usage record booked to the node that reported it");
                node.clone_into(&mut record.node_id);
            }
            let mut checked = catalogue.price(&mut record, now);
            // A batch is mostly one token's records of one model: a record
            // naming what the last good one named passes what it passed.
            if checked.is_ok() && !good.last().is_some_and(|last| same_payer_and_policy(last, &record)) {
                checked = allowed.payer(&record);
                if checked.is_ok() && allowed.policy(&record, &Changed::everything_kept()).is_err() {
                    if changed.is_none() {
                        changed = Some(Changed::since(self.store.as_ref(), base).await?);
                    }
                    checked = changed.as_ref().map_or(Ok(()), |changed| allowed.policy(&record, changed));
                }
            }
            match checked {
                Ok(()) => good.push(record),
                Err(refusal) => {
                    refused += 1;
                    tracing::warn!(
                        request_id = %record.request_id,
                        token = %record.token_id,
                        node = %record.node_id,
                        cost = record.cost_micros,
                        created_at = record.created_at,
                        reason = %refusal,
                        "usage record refused"
                    );
                }
            }
        }
        let mut outcome = if good.is_empty() { UsageOutcome::default() } else { self.store.apply_usage(&good).await? };
        outcome.refused = refused;
        crate::services::telemetry::ledger_applied(&outcome, good.iter().map(|r| r.created_at), now);
        Ok(outcome)
    }

    /// Charges a video task when its token's quota and its account's balance
    /// (net of what data planes hold) cover its cost, in one step.
    pub async fn charge_video(&self, task: &VideoTask) -> Result<Charged, LedgerError> {
        Ok(self.store.charge(&video_record(task, false), now_unix()).await?)
    }

    /// Charges a video task whatever its budgets hold (a task an older
    /// control plane created before charging it), once.
    pub async fn record_video_charge(&self, task: &VideoTask) -> Result<(), LedgerError> {
        self.store.apply_usage(&[video_record(task, false)]).await?;
        Ok(())
    }

    /// Refunds a failed video task's charge, once.
    pub async fn refund_video(&self, task: &VideoTask) -> Result<(), LedgerError> {
        self.store.apply_usage(&[video_record(task, true)]).await?;
        Ok(())
    }

    /// Charges `record`, priced here (a batch's hold), when its token's
    /// quota and its account's balance cover it, in one step; once.
    pub async fn charge_priced(&self, record: &UsageRecord) -> Result<Charged, LedgerError> {
        Ok(self.store.charge(record, now_unix()).await?)
    }

    /// Applies records priced here (a batch's cost, the release of its
    /// hold) whatever the budgets hold, each once per request id.
    pub async fn apply_priced(&self, records: &[UsageRecord]) -> Result<(), LedgerError> {
        self.store.apply_usage(records).await?;
        Ok(())
    }

    /// The catalogue at the store's current revision, reloaded when a
    /// change (of any kind) came since it was read, or the store is another
    /// lineage (it lost its data: nothing is priced from what it had).
    async fn catalogue(&self) -> Result<Arc<Catalogue>, StoreError> {
        let lineage = self.store.lineage().await?.id;
        let revision = *self.store.subscribe().borrow();
        let cached = self.catalogue.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(catalogue) = cached.filter(|c| c.lineage == lineage && c.revision >= revision) {
            return Ok(catalogue);
        }
        let mut catalogue = Catalogue { lineage, revision, prices: HashMap::new(), ratios: HashMap::new() };
        for resource in self.store.list(Kind::Model).await? {
            if let Resource::Model(m) = resource {
                catalogue.prices.insert(m.id.clone(), prices(&m));
            }
        }
        for resource in self.store.list(Kind::Group).await? {
            if let Resource::Group(g) = resource {
                catalogue.ratios.insert(g.name.clone(), g.ratio_ppm());
            }
        }
        let catalogue = Arc::new(catalogue);
        *self.catalogue.lock().unwrap_or_else(PoisonError::into_inner) = Some(catalogue.clone());
        Ok(catalogue)
    }
}

// === impl Catalogue ===

impl Catalogue {
    /// Checks `record` and sets its cost from the catalogue.
    fn price(&self, record: &mut UsageRecord, now: i64) -> Result<(), Refusal> {
        check(record, now)?;
        let prices = self.prices.get(&record.model).ok_or_else(|| Refusal::UnknownModel(record.model.clone()))?;
        // A group deleted since the request: list prices.
        let ratio = self.ratios.get(&record.group).copied().unwrap_or(gw_pricing::RATIO_ONE_PPM);
        let usage = Usage {
            prompt_tokens: record.prompt_tokens,
            completion_tokens: record.completion_tokens,
            cached_tokens: record.cached_tokens,
            cache_write_5m_tokens: record.cache_write_5m_tokens,
            cache_write_1h_tokens: record.cache_write_1h_tokens,
            reasoning_tokens: record.reasoning_tokens,
            audio_prompt_tokens: record.audio_prompt_tokens,
            audio_completion_tokens: record.audio_completion_tokens,
            audio_cached_tokens: record.audio_cached_tokens,
        };
        record.tier = gw_pricing::tier(record.prompt_tokens, prices);
        let units =
            Units { images: record.images, audio_millis: record.audio_millis, search_units: record.search_units };
        let cost = gw_pricing::cost_micros(&usage, prices, ratio)
            .saturating_add(gw_pricing::units_cost_micros(&units, prices, ratio));
        if cost != record.cost_micros {
            tracing::debug!(
                request_id = %record.request_id,
                reported = record.cost_micros,
                priced = cost,
                "reported cost differs from the catalogue's; charging the catalogue's"
            );
            record.cost_micros = cost;
        }
        Ok(())
    }
}

/// The checks every reported record passes before it is priced.
fn check(record: &UsageRecord, now: i64) -> Result<(), Refusal> {
    if record.token_id.is_empty() || record.account_id.is_empty() {
        return Err(Refusal::Unattributed);
    }
    let counts = [
        record.prompt_tokens,
        record.completion_tokens,
        record.cached_tokens,
        record.cache_write_5m_tokens,
        record.cache_write_1h_tokens,
        record.reasoning_tokens,
        record.audio_prompt_tokens,
        record.audio_completion_tokens,
        record.audio_cached_tokens,
        record.images,
        record.audio_millis,
        record.search_units,
    ];
    // The parts of the prompt cannot add up to more than the prompt.
    let prompt_parts =
        record.cached_tokens.saturating_add(record.cache_write_5m_tokens).saturating_add(record.cache_write_1h_tokens);
    if record.cost_micros < 0
        || counts.iter().any(|n| !(0..=MAX_COUNT).contains(n))
        || prompt_parts > record.prompt_tokens
        || record.reasoning_tokens > record.completion_tokens
        || record.audio_prompt_tokens > record.prompt_tokens
        || record.audio_cached_tokens > record.cached_tokens.min(record.audio_prompt_tokens)
        || record.audio_completion_tokens > record.completion_tokens
    {
        return Err(Refusal::Impossible);
    }
    if record.created_at < now - IDEMPOTENCY_WINDOW_SECS {
        return Err(Refusal::TooOld(IDEMPOTENCY_WINDOW_SECS));
    }
    if record.created_at > now + MAX_FUTURE_SECS {
        return Err(Refusal::Future);
    }
    Ok(())
}

/// The price formula's view of `model`.
pub(crate) fn prices(model: &crate::domain::Model) -> Prices {
    Prices {
        input_price_micros: model.input_price_micros,
        output_price_micros: model.output_price_micros,
        cached_price_micros: model.cached_price_micros,
        request_price_micros: model.request_price_micros,
        second_price_micros: model.second_price_micros,
        image_price_micros: model.image_price_micros,
        tier_threshold_tokens: model.tier_threshold_tokens,
        tier_input_price_micros: model.tier_input_price_micros,
        tier_output_price_micros: model.tier_output_price_micros,
        tier_cached_price_micros: model.tier_cached_price_micros,
        cache_write_5m_price_micros: model.cache_write_5m_price_micros,
        cache_write_1h_price_micros: model.cache_write_1h_price_micros,
        reasoning_price_micros: model.reasoning_price_micros,
        audio_input_price_micros: model.audio_input_price_micros,
        audio_output_price_micros: model.audio_output_price_micros,
        audio_cached_price_micros: model.audio_cached_price_micros,
        search_unit_price_micros: model.search_unit_price_micros,
    }
}

/// The ledger record of a task's charge, or of its refund (the charge
/// negated), keyed so that each is applied once.
fn video_record(task: &VideoTask, refund: bool) -> UsageRecord {
    let (prefix, cost, status) =
        if refund { ("video-refund", -task.cost_micros, 0) } else { ("video", task.cost_micros, 200) };
    UsageRecord {
        request_id: format!("{prefix}:{}", task.id),
        token_id: task.token_id.clone(),
        account_id: task.account_id.clone(),
        group: task.group.clone(),
        model: task.model.clone(),
        channel_id: task.channel_id.clone(),
        endpoint: VIDEO_ENDPOINT.to_owned(),
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        cost_micros: cost,
        latency_ms: 0,
        status,
        created_at: now_unix(),
        node_id: task.node_id.clone(),
        estimated: false,
        images: 0,
        audio_millis: 0,
        search_units: 0,
        cache_write_5m_tokens: 0,
        cache_write_1h_tokens: 0,
        reasoning_tokens: 0,
        audio_prompt_tokens: 0,
        audio_completion_tokens: 0,
        audio_cached_tokens: 0,
        tier: 0,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn record(id: &str) -> UsageRecord {
        UsageRecord {
            request_id: id.into(),
            token_id: "t1".into(),
            account_id: "a1".into(),
            group: "default".into(),
            model: "m".into(),
            channel_id: "c".into(),
            endpoint: "/v1/chat/completions".into(),
            prompt_tokens: 1_000,
            completion_tokens: 500,
            cached_tokens: 0,
            cost_micros: 1,
            latency_ms: 5,
            status: 200,
            created_at: 1_000_000,
            node_id: "dp".into(),
            estimated: false,
            images: 0,
            audio_millis: 0,
            search_units: 0,
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            reasoning_tokens: 0,
            audio_prompt_tokens: 0,
            audio_completion_tokens: 0,
            audio_cached_tokens: 0,
            tier: 0,
        }
    }

    fn catalogue() -> Catalogue {
        let prices = Prices { input_price_micros: 1_000_000, output_price_micros: 2_000_000, ..Prices::default() };
        Catalogue {
            lineage: "l1".into(),
            revision: 1,
            prices: [("m".to_owned(), prices)].into_iter().collect(),
            ratios: [("default".to_owned(), 2_000_000)].into_iter().collect(),
        }
    }

    #[test]
    fn reported_costs_are_replaced_by_the_catalogues() {
        let mut forged = record("r1");
        forged.cost_micros = 1;
        catalogue().price(&mut forged, 1_000_000).unwrap();
        // (1000 × $1/M + 500 × $2/M) × 2.
        assert_eq!(forged.cost_micros, 4_000);
    }

    #[test]
    fn the_catalogue_prices_cache_writes_reasoning_and_the_tier_and_records_the_tier() {
        let mut catalogue = catalogue();
        let long = Prices {
            input_price_micros: 1_000_000,
            output_price_micros: 2_000_000,
            tier_threshold_tokens: 1_000,
            tier_input_price_micros: 3_000_000,
            cache_write_1h_price_micros: 4_000_000,
            reasoning_price_micros: 5_000_000,
            ..Prices::default()
        };
        catalogue.prices.insert("long".into(), long);
        let mut short =
            UsageRecord { model: "long".into(), cache_write_1h_tokens: 200, reasoning_tokens: 100, ..record("r") };
        catalogue.price(&mut short, 1_000_000).unwrap();
        // (800 × 1 + 200 × 4 + 400 × 2 + 100 × 5) µ$ × ratio 2.
        assert_eq!((short.cost_micros, short.tier), (5_800, 0));
        let mut past = UsageRecord { prompt_tokens: 1_001, tier: 0, ..short.clone() };
        catalogue.price(&mut past, 1_000_000).unwrap();
        // (801 × 3 + 200 × 4 + 400 × 2 + 100 × 5) µ$ × 2.
        assert_eq!((past.cost_micros, past.tier), (9_006, 1));
    }

    #[test]
    fn the_catalogue_prices_search_units_beside_tokens() {
        let mut catalogue = catalogue();
        let rerank = Prices { input_price_micros: 50_000, search_unit_price_micros: 2_000, ..Prices::default() };
        catalogue.prices.insert("rerank".into(), rerank);
        let mut forged = UsageRecord {
            model: "rerank".into(),
            prompt_tokens: 1_000_000,
            completion_tokens: 0,
            search_units: 3,
            cost_micros: 0,
            ..record("r")
        };
        catalogue.price(&mut forged, 1_000_000).unwrap();
        // (1M × $0.05/M + 3 × 2000 µ$) × ratio 2.
        assert_eq!(forged.cost_micros, 112_000);
    }

    #[test]
    fn the_catalogue_prices_realtime_audio_apart_and_refuses_audio_beyond_its_whole() {
        let mut catalogue = catalogue();
        let realtime = Prices {
            input_price_micros: 4_000_000,
            output_price_micros: 16_000_000,
            audio_input_price_micros: 32_000_000,
            audio_output_price_micros: 64_000_000,
            ..Prices::default()
        };
        catalogue.prices.insert("realtime".into(), realtime);
        let mut forged = UsageRecord {
            model: "realtime".into(),
            prompt_tokens: 1_000,
            audio_prompt_tokens: 600,
            completion_tokens: 500,
            audio_completion_tokens: 400,
            cost_micros: 0,
            ..record("r")
        };
        catalogue.price(&mut forged, 1_000_000).unwrap();
        // (400 × 4 + 600 × 32 + 100 × 16 + 400 × 64) µ$ × ratio 2.
        assert_eq!(forged.cost_micros, 96_000);
        let mut beyond = UsageRecord { audio_completion_tokens: 501, ..forged };
        assert!(matches!(catalogue.price(&mut beyond, 1_000_000), Err(Refusal::Impossible)));
    }

    #[test]
    fn impossible_old_future_and_unpriced_records_are_refused() {
        let now = 1_000_000;
        type Case = (fn(&mut UsageRecord), Refusal);
        let cases: [Case; 11] = [
            (|r| (r.cached_tokens, r.cache_write_5m_tokens) = (600, 600), Refusal::Impossible),
            (|r| r.reasoning_tokens = 501, Refusal::Impossible),
            (|r| (r.cache_write_1h_tokens, r.reasoning_tokens) = (i64::MAX, i64::MAX), Refusal::Impossible),
            (|r| r.cost_micros = -5_000_000, Refusal::Impossible),
            (|r| r.prompt_tokens = -1, Refusal::Impossible),
            (|r| r.search_units = -1, Refusal::Impossible),
            (|r| r.cached_tokens = 2_000, Refusal::Impossible),
            (|r| r.completion_tokens = MAX_COUNT + 1, Refusal::Impossible),
            (|r| r.created_at = 1_000_000 - IDEMPOTENCY_WINDOW_SECS - 1, Refusal::TooOld(IDEMPOTENCY_WINDOW_SECS)),
            (|r| r.created_at = 1_000_000 + MAX_FUTURE_SECS + 1, Refusal::Future),
            (|r| r.model = "ghost".into(), Refusal::UnknownModel("ghost".into())),
        ];
        for (change, refusal) in cases {
            let mut bad = record("r");
            change(&mut bad);
            assert_eq!(catalogue().price(&mut bad, now), Err(refusal));
        }
        let mut unattributed = record("r");
        unattributed.account_id.clear();
        assert_eq!(catalogue().price(&mut unattributed, now), Err(Refusal::Unattributed));
    }
}
