//! How a batch moves and is billed: observations of the upstream applied
//! forward only, the object clients see (the upstream's, with our ids in
//! place of its own), and the settlement of an ended batch — the cost of
//! its completed lines at the model's batch price charged, its hold
//! released, each a usage record applied once.

use serde_json::{Map, Value, json};

use super::{BatchError, Batches, Observation, upstream::LineUsage};
use crate::domain::{Batch, BatchKind, Kind, Resource, UsageRecord, now_unix};

/// How long an upstream keeps a batch running, for the object shown before
/// the upstream answered.
const WINDOW_SECS: i64 = 24 * 60 * 60;

// === impl Batches ===

impl Batches {
    /// Settles an ended batch once: keeps its results files as the
    /// account's, reads the results, charges what the completed lines cost
    /// at the batch price and releases the hold. A batch whose results
    /// cannot be read now stays open for the poller to try again.
    pub(super) async fn settle(&self, batch: Batch) -> Result<Batch, BatchError> {
        if !batch.ended || batch.settled {
            return Ok(batch);
        }
        let mut batch = batch;
        if batch.kind == BatchKind::Openai {
            batch = self.keep_outputs(batch).await?;
        }
        let lines = if batch.upstream_id.is_empty()
            || (batch.kind == BatchKind::Openai && batch.upstream_output_file.is_empty())
        {
            Vec::new()
        } else {
            let channel = match self.channel(&batch).await {
                Ok(channel) => Some(channel),
                Err(BatchError::NotFound(_)) => None,
                Err(error) => return Err(error),
            };
            match channel {
                Some(channel) => {
                    let results =
                        self.upstream.results(&channel, batch.kind, &batch.upstream_id, &batch.upstream_output_file);
                    match results.await {
                        Ok(lines) => lines,
                        Err(error) => {
                            tracing::warn!(batch = %batch.id, ?error, "batch results unreadable; settling later");
                            return Ok(batch);
                        }
                    }
                }
                None => {
                    tracing::warn!(batch = %batch.id, "the batch's channel is gone: its results cannot be read, the hold is billed");
                    return self.bill(batch, Totals { cost_micros: None, ..Totals::default() }).await;
                }
            }
        };
        let totals = self.price(&batch, &lines).await?;
        self.bill(batch, totals).await
    }

    /// Records the upstream's results and errors files as files of the
    /// batch's account.
    async fn keep_outputs(&self, batch: Batch) -> Result<Batch, BatchError> {
        let mut kept = (batch.output_file_id.clone(), batch.error_file_id.clone());
        if kept.0.is_empty() && !batch.upstream_output_file.is_empty() {
            kept.0 = self.keep_output(&batch, &batch.upstream_output_file, "output").await?;
        }
        if kept.1.is_empty() && !batch.upstream_error_file.is_empty() {
            kept.1 = self.keep_output(&batch, &batch.upstream_error_file, "errors").await?;
        }
        self.modify(batch, |b| {
            let changed = (b.output_file_id.as_str(), b.error_file_id.as_str()) != (kept.0.as_str(), kept.1.as_str());
            (b.output_file_id, b.error_file_id) = kept.clone();
            changed
        })
        .await
    }

    /// The regular cost of `lines` (each priced alone, so each falls in its
    /// own tier) at the batch share of the model's price.
    async fn price(&self, batch: &Batch, lines: &[LineUsage]) -> Result<Totals, BatchError> {
        let model = match self.store.get(Kind::Model, &batch.model).await? {
            Some(Resource::Model(model)) => model,
            _ => {
                tracing::warn!(batch = %batch.id, model = %batch.model, "the batch's model is gone: the hold is billed");
                return Ok(Totals { cost_micros: None, ..Totals::sum(lines) });
            }
        };
        let ratio = match self.store.get(Kind::Group, &batch.group).await? {
            Some(Resource::Group(group)) => group.ratio_ppm(),
            _ => gw_pricing::RATIO_ONE_PPM,
        };
        let prices = crate::services::ledger::prices(&model);
        let regular = lines.iter().fold(0i64, |sum, line| {
            let usage = gw_pricing::Usage {
                prompt_tokens: line.prompt_tokens,
                completion_tokens: line.completion_tokens,
                cached_tokens: line.cached_tokens,
                cache_write_5m_tokens: line.cache_write_tokens,
                reasoning_tokens: line.reasoning_tokens,
                ..gw_pricing::Usage::default()
            };
            sum.saturating_add(gw_pricing::cost_micros(&usage, &prices, ratio))
        });
        Ok(Totals {
            cost_micros: Some(gw_pricing::batch_cost_micros(regular, model.batch_price_ppm)),
            ..Totals::sum(lines)
        })
    }

    /// Charges `totals` (the hold when it has no cost) and releases the
    /// hold, then marks the batch settled.
    async fn bill(&self, batch: Batch, totals: Totals) -> Result<Batch, BatchError> {
        let cost = totals.cost_micros.unwrap_or(batch.hold_micros);
        let mut billed = batch.clone();
        billed.cost_micros = cost;
        (billed.prompt_tokens, billed.completion_tokens, billed.cached_tokens, billed.billed_lines) =
            (totals.prompt_tokens, totals.completion_tokens, totals.cached_tokens, totals.lines);
        self.ledger.apply_priced(&[cost_record(&billed), release_record(&billed)]).await?;
        let batch = self
            .modify(batch, |b| {
                if b.settled {
                    return false;
                }
                b.settled = true;
                (b.cost_micros, b.prompt_tokens, b.completion_tokens, b.cached_tokens, b.billed_lines) =
                    (cost, totals.prompt_tokens, totals.completion_tokens, totals.cached_tokens, totals.lines);
                true
            })
            .await?;
        tracing::info!(batch = %batch.id, account = %batch.account_id, lines = totals.lines, cost, hold = batch.hold_micros, "batch billed");
        Ok(batch)
    }
}

/// What a batch's completed lines add up to.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    lines: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
    cached_tokens: i64,
    /// `None`: the cost cannot be known; the hold is billed.
    cost_micros: Option<i64>,
}

impl Totals {
    fn sum(lines: &[LineUsage]) -> Totals {
        lines.iter().fold(Totals { cost_micros: Some(0), ..Totals::default() }, |t, line| Totals {
            lines: t.lines + 1,
            prompt_tokens: t.prompt_tokens.saturating_add(line.prompt_tokens),
            completion_tokens: t.completion_tokens.saturating_add(line.completion_tokens),
            cached_tokens: t.cached_tokens.saturating_add(line.cached_tokens),
            cost_micros: t.cost_micros,
        })
    }
}

/// Moves `batch` to what was observed at `now_ms`: never out of an ended
/// state. Returns whether the batch is to be written (it is whenever it
/// is running: the time of the look is recorded).
pub(super) fn apply(batch: &mut Batch, observed: &Observation, now_ms: i64) -> bool {
    if batch.ended {
        return false;
    }
    batch.checked_at_ms = now_ms;
    if !observed.object.is_empty() {
        batch.upstream = Value::Object(observed.object.clone()).to_string();
    }
    if let Some(status) = &observed.status
        && *status != batch.status
    {
        status.clone_into(&mut batch.status);
        batch.updated_at = now_ms / 1000;
    }
    batch.ended = observed.ended;
    if let Some(file) = &observed.output_file {
        file.clone_into(&mut batch.upstream_output_file);
    }
    if let Some(file) = &observed.error_file {
        file.clone_into(&mut batch.upstream_error_file);
    }
    true
}

/// Ends `batch` as `status` with `code` and `message` unless it ended
/// already; whether it changed.
pub(super) fn end(batch: &mut Batch, status: &str, code: &str, message: &str, now_ms: i64) -> bool {
    if batch.ended {
        return false;
    }
    batch.ended = true;
    batch.status = match batch.kind {
        BatchKind::Openai => status.to_owned(),
        BatchKind::Anthropic => "ended".to_owned(),
    };
    code.clone_into(&mut batch.error_code);
    message.clone_into(&mut batch.error_message);
    batch.updated_at = now_ms / 1000;
    batch.checked_at_ms = now_ms;
    true
}

/// The status name of a cancelled batch of `kind`.
pub(super) fn cancelled(kind: BatchKind) -> &'static str {
    match kind {
        BatchKind::Openai => "cancelled",
        BatchKind::Anthropic => "ended",
    }
}

/// The batch object clients see: the upstream's last one (or, before the
/// upstream answered, one made from the batch) with our ids and state.
pub fn client_object(batch: &Batch) -> Value {
    let mut object = match serde_json::from_str(&batch.upstream) {
        Ok(Value::Object(object)) => object,
        _ => Map::new(),
    };
    let id_or_null = |id: &str| if id.is_empty() { Value::Null } else { Value::String(id.to_owned()) };
    match batch.kind {
        BatchKind::Openai => {
            let defaults = json!({
                "object": "batch",
                "endpoint": batch.endpoint,
                "completion_window": batch.completion_window,
                "created_at": batch.created_at,
                "expires_at": batch.created_at + WINDOW_SECS,
                "request_counts": {"total": batch.lines, "completed": 0, "failed": 0},
                "errors": null,
            });
            fill(&mut object, defaults);
            object.insert("id".into(), batch.id.clone().into());
            object.insert("input_file_id".into(), batch.input_file_id.clone().into());
            object.insert("output_file_id".into(), id_or_null(&batch.output_file_id));
            object.insert("error_file_id".into(), id_or_null(&batch.error_file_id));
            object.insert("status".into(), batch.status.clone().into());
            object.insert("model".into(), batch.model.clone().into());
            if !batch.error_code.is_empty() {
                let error =
                    json!({"code": batch.error_code, "message": batch.error_message, "line": null, "param": null});
                object.insert("errors".into(), json!({"object": "list", "data": [error]}));
            }
        }
        BatchKind::Anthropic => {
            let at = |secs: i64| jiff::Timestamp::from_second(secs).map_or(Value::Null, |t| t.to_string().into());
            let defaults = json!({
                "type": "message_batch",
                "created_at": at(batch.created_at),
                "expires_at": at(batch.created_at + WINDOW_SECS),
                "request_counts": {"processing": batch.lines, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
                "ended_at": null,
                "cancel_initiated_at": null,
                "archived_at": null,
                "results_url": null,
            });
            fill(&mut object, defaults);
            if batch.ended && object.get("ended_at").is_none_or(Value::is_null) {
                object.insert("ended_at".into(), at(batch.updated_at.max(batch.created_at)));
            }
            object.insert("id".into(), batch.id.clone().into());
            object.insert("processing_status".into(), batch.status.clone().into());
        }
    }
    Value::Object(object)
}

/// Adds the fields of `defaults` that `object` lacks.
fn fill(object: &mut Map<String, Value>, defaults: Value) {
    if let Value::Object(defaults) = defaults {
        for (key, value) in defaults {
            object.entry(key).or_insert(value);
        }
    }
}

/// The record holding `batch`'s bound, charged at creation.
pub(super) fn hold_record(batch: &Batch) -> UsageRecord {
    UsageRecord { status: 202, ..record(batch, "batch-hold", batch.hold_micros) }
}

/// The record giving the hold back, applied when the batch is billed.
pub(super) fn release_record(batch: &Batch) -> UsageRecord {
    record(batch, "batch-release", -batch.hold_micros)
}

/// The record of what the batch's completed lines cost.
fn cost_record(batch: &Batch) -> UsageRecord {
    UsageRecord {
        prompt_tokens: batch.prompt_tokens,
        completion_tokens: batch.completion_tokens,
        cached_tokens: batch.cached_tokens.min(batch.prompt_tokens),
        status: 200,
        ..record(batch, "batch", batch.cost_micros)
    }
}

fn record(batch: &Batch, prefix: &str, cost_micros: i64) -> UsageRecord {
    UsageRecord {
        request_id: format!("{prefix}:{}", batch.id),
        token_id: batch.token_id.clone(),
        account_id: batch.account_id.clone(),
        group: batch.group.clone(),
        model: batch.model.clone(),
        channel_id: batch.channel_id.clone(),
        endpoint: batch.kind.endpoint().to_owned(),
        cost_micros,
        created_at: now_unix(),
        node_id: batch.node_id.clone(),
        ..UsageRecord::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn batch(kind: BatchKind) -> Batch {
        Batch {
            id: "batch_ours".into(),
            kind,
            model: "m".into(),
            input_file_id: "file-ours".into(),
            endpoint: "/v1/chat/completions".into(),
            completion_window: "24h".into(),
            lines: 3,
            status: "validating".into(),
            created_at: 1_700_000_000,
            ..Batch::default()
        }
    }

    #[test]
    fn clients_see_our_ids_in_the_upstreams_object() {
        let mut openai = batch(BatchKind::Openai);
        let fresh = client_object(&openai);
        assert_eq!((fresh["object"].as_str(), fresh["status"].as_str()), (Some("batch"), Some("validating")));
        assert_eq!(fresh["request_counts"]["total"], 3, "a batch the upstream has not answered yet");
        let upstream = json!({"id": "batch_up", "object": "batch", "status": "completed", "input_file_id": "file-up",
                              "output_file_id": "file-up-out", "request_counts": {"total": 3, "completed": 3, "failed": 0}});
        let observed = Observation::parse(BatchKind::Openai, &upstream);
        assert!(apply(&mut openai, &observed, 5_000));
        openai.output_file_id = "file-ours-output".into();
        let seen = client_object(&openai);
        assert_eq!((seen["id"].as_str(), seen["input_file_id"].as_str()), (Some("batch_ours"), Some("file-ours")));
        assert_eq!(
            (seen["output_file_id"].as_str(), seen["status"].as_str()),
            (Some("file-ours-output"), Some("completed"))
        );
        assert_eq!(seen["request_counts"]["completed"], 3, "the upstream's counts pass through");
        assert!((openai.ended, openai.upstream_output_file.as_str()) == (true, "file-up-out"));
        assert!(!end(&mut openai, "failed", "x", "y", 6_000), "an ended batch stays as it ended");

        let mut anthropic = batch(BatchKind::Anthropic);
        anthropic.status = "in_progress".into();
        let fresh = client_object(&anthropic);
        assert_eq!(fresh["created_at"], "2023-11-14T22:13:20Z", "Anthropic's times are RFC 3339");
        assert_eq!((fresh["type"].as_str(), fresh["results_url"].is_null()), (Some("message_batch"), true));
        assert!(end(
            &mut anthropic,
            cancelled(BatchKind::Anthropic),
            "cancelled",
            "before the upstream",
            1_700_000_100_000
        ));
        let ended = client_object(&anthropic);
        assert_eq!(
            (ended["processing_status"].as_str(), ended["ended_at"].as_str()),
            (Some("ended"), Some("2023-11-14T22:15:00Z"))
        );
    }

    #[test]
    fn the_three_records_are_keyed_once_per_batch() {
        let mut billed = Batch {
            hold_micros: 900,
            cost_micros: 400,
            prompt_tokens: 10,
            cached_tokens: 20,
            ..batch(BatchKind::Openai)
        };
        let hold = hold_record(&billed);
        assert_eq!((hold.request_id.as_str(), hold.cost_micros), ("batch-hold:batch_ours", 900));
        let release = release_record(&billed);
        assert_eq!((release.request_id.as_str(), release.cost_micros), ("batch-release:batch_ours", -900));
        billed.kind = BatchKind::Anthropic;
        let cost = cost_record(&billed);
        assert_eq!(
            (cost.request_id.as_str(), cost.cost_micros, cost.endpoint.as_str()),
            ("batch:batch_ours", 400, "/v1/messages/batches")
        );
        assert_eq!(cost.cached_tokens, 10, "never more cached than prompt tokens");
    }
}
