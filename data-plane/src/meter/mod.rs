//! Metering: turns what a response used into a priced usage record, settles
//! the request's budget reservation with its cost, and queues the record for
//! the reporter.
//! Streamed answers reach the client through the one `pump`.
//!
//! A `Meter` records exactly once: when the response ends, or when it is
//! dropped because the client went away.

pub mod answer;
pub mod pump;
pub mod sse;

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use tokio::sync::mpsc;

use crate::{
    policy::budget::Reservation,
    policy::domain::{Channel, Model},
    pricing::{Units, Usage, cost_micros, units_cost_micros},
};

/// Who pays for one request and at what price.
#[derive(Debug, Clone)]
pub struct Charge {
    pub request_id: String,
    pub token_id: String,
    pub account_id: String,
    pub group: String,
    /// The model name the client asked for (what is billed).
    pub model: Arc<Model>,
    pub channel_id: String,
    pub endpoint: &'static str,
    pub ratio_ppm: i64,
    pub started: Instant,
    /// The request's budget reservation, settled by the first record (shared
    /// by the attempts' copies; released if none records anything).
    pub reservation: Arc<Mutex<Option<Reservation>>>,
}

/// What one request used and cost, as the reporter sends it (it turns it
/// into the protocol's record at its edge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRecord {
    /// The idempotency key: the control plane applies a record once per id.
    pub request_id: String,
    pub token_id: String,
    pub account_id: String,
    pub group: String,
    pub model: String,
    pub channel_id: String,
    pub endpoint: String,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub cost_micros: i64,
    pub latency_ms: u32,
    /// The HTTP status the request ended with (499: the client went away).
    pub status: u16,
    /// Unix seconds.
    pub created_at: i64,
    pub node_id: String,
    /// Whether the gateway counted the tokens itself.
    pub estimated: bool,
    /// Units priced besides tokens.
    pub units: Units,
}

/// Settles reservations and queues usage records for the reporter.
#[derive(Clone)]
pub struct UsageSink {
    tx: mpsc::UnboundedSender<UsageRecord>,
    node_id: Arc<str>,
}

/// Records a request's usage once: by `finish`, or on drop with what was
/// seen so far (the client went away mid-stream).
pub struct Meter {
    charge: Option<Charge>,
    sink: UsageSink,
    seen: Option<Usage>,
    /// Content chunks seen, the completion estimate when no usage came
    /// (and no text was handed to `add_text`).
    chunks: i64,
    prompt_estimate: i64,
    /// The request body, counted with `tokens` only if no usage came.
    prompt_body: Option<bytes::Bytes>,
    /// Answer text seen, counted with `tokens` only if no usage came.
    completion_text: String,
}

// === impl Charge ===

impl Charge {
    /// A charge for tests: request `id`, model `m`, channel `c`.
    #[cfg(test)]
    pub fn test(id: &str) -> Charge {
        Charge {
            request_id: id.into(),
            token_id: "t".into(),
            account_id: "a".into(),
            group: "g".into(),
            model: Arc::new(crate::policy::snapshot::tests::model("m")),
            channel_id: "c".into(),
            endpoint: "/v1/chat/completions",
            ratio_ppm: 1_000_000,
            started: Instant::now(),
            reservation: Arc::default(),
        }
    }

    /// The same charge for one attempt on `channel`.
    pub fn on_channel(&self, channel: &Channel) -> Charge {
        Charge { channel_id: channel.id.clone(), ..self.clone() }
    }
}

// === impl UsageSink ===

impl UsageSink {
    /// A sink feeding `tx`, stamping records with `node_id`.
    pub fn new(tx: mpsc::UnboundedSender<UsageRecord>, node_id: &str) -> UsageSink {
        UsageSink { tx, node_id: node_id.into() }
    }

    /// Prices `usage`, settles the charge's reservation with the cost and
    /// queues the record. Returns the cost in micro-USD.
    pub fn record(&self, charge: &Charge, usage: Usage, status: u16, estimated: bool) -> i64 {
        self.record_with(charge, usage, Units::default(), status, estimated)
    }

    /// `record` of a request that also used `units` (images, audio).
    pub fn record_with(&self, charge: &Charge, usage: Usage, units: Units, status: u16, estimated: bool) -> i64 {
        let cost = cost_micros(&usage, &charge.model, charge.ratio_ppm)
            .saturating_add(units_cost_micros(&units, &charge.model, charge.ratio_ppm));
        let reservation = charge.reservation.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(reservation) = reservation {
            reservation.settle(cost);
        }
        let record = UsageRecord {
            request_id: charge.request_id.clone(),
            token_id: charge.token_id.clone(),
            account_id: charge.account_id.clone(),
            group: charge.group.clone(),
            model: charge.model.id.clone(),
            channel_id: charge.channel_id.clone(),
            endpoint: charge.endpoint.to_owned(),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cached_tokens: usage.cached_tokens,
            cost_micros: cost,
            latency_ms: u32::try_from(charge.started.elapsed().as_millis()).unwrap_or(u32::MAX),
            status,
            created_at: crate::now_unix(),
            node_id: self.node_id.to_string(),
            estimated,
            units,
        };
        if self.tx.send(record).is_err() {
            tracing::error!(request_id = %charge.request_id, "usage reporter is gone; record lost");
        }
        cost
    }

}

// === impl Meter ===

impl Meter {
    /// Meters `charge`; `request_bytes` sizes the prompt estimate used if
    /// the response never reports usage.
    pub fn new(charge: Charge, sink: UsageSink, request_bytes: usize) -> Meter {
        let prompt_estimate = i64::try_from(request_bytes.div_ceil(4)).unwrap_or(i64::MAX);
        Meter {
            charge: Some(charge),
            sink,
            seen: None,
            chunks: 0,
            prompt_estimate,
            prompt_body: None,
            completion_text: String::new(),
        }
    }

    /// Estimates the prompt from `body` (a JSON request) with the model's
    /// tokenizer instead of its size, should no usage come. Costs nothing
    /// unless it is needed.
    pub fn estimate_prompt_from(&mut self, body: bytes::Bytes) {
        self.prompt_body = Some(body);
    }

    /// `text` of the answer went to the client; should no usage come, the
    /// completion is counted from all such text instead of from chunks.
    pub fn add_text(&mut self, text: &str) {
        self.completion_text.push_str(text);
    }

    /// The usage the upstream reported, if any.
    #[cfg(test)]
    pub fn seen(&self) -> Option<Usage> {
        self.seen
    }

    /// What the answer used as far as the gateway can count it: the prompt
    /// with the model family's tokenizer (or its size when no body was
    /// given), the completion from the answer text seen (or one token per
    /// content chunk when there was none).
    pub fn estimate(&self) -> Usage {
        let model = self.charge.as_ref().map_or("", |c| c.model.id.as_str());
        let prompt_tokens =
            self.prompt_body.as_ref().map_or(self.prompt_estimate, |body| crate::tokens::count_request(model, body));
        let completion_tokens = if self.completion_text.is_empty() {
            self.chunks
        } else {
            crate::tokens::count(model, &self.completion_text)
        };
        Usage { prompt_tokens, completion_tokens, cached_tokens: 0 }
    }

    /// Usage reported by the upstream; the last report wins.
    pub fn observe(&mut self, usage: Usage) {
        self.seen = Some(usage);
    }

    /// `n` more content chunks went to the client.
    pub fn add_chunks(&mut self, n: i64) {
        self.chunks = self.chunks.saturating_add(n);
    }

    /// Records the usage seen (or an estimate) with `status`.
    pub fn finish(mut self, status: u16) {
        self.record(status);
    }

    /// Records nothing: the upstream's answer was lost before the client
    /// got any of it, so there is nothing to bill.
    pub fn cancel(mut self) {
        self.charge = None;
    }

    fn record(&mut self, status: u16) {
        // No usage: bill an estimate rather than nothing, so cutting a
        // stream short is not a way to get tokens for free.
        let (usage, estimated) = match self.seen {
            Some(usage) => (usage, false),
            None => (self.estimate(), true),
        };
        let Some(charge) = self.charge.take() else {
            return;
        };
        self.sink.record(&charge, usage, status, estimated);
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // 499: the client closed the connection before the response ended.
        self.record(499);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn charge(id: &str) -> Charge {
        Charge::test(id)
    }

    #[test]
    fn meter_records_exactly_once_on_finish_or_drop() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = UsageSink::new(tx, "node");
        let mut meter = Meter::new(charge("r1"), sink.clone(), 40);
        meter.observe(Usage { prompt_tokens: 1000, completion_tokens: 500, cached_tokens: 0 });
        meter.finish(200);
        let record = rx.try_recv().unwrap();
        assert_eq!((record.prompt_tokens, record.completion_tokens, record.status), (1000, 500, 200));
        // $1/M in + $2/M out: 1000 + 1000 µ$.
        assert_eq!(record.cost_micros, 2000);
        assert!(!record.estimated);
        assert!(rx.try_recv().is_err());

        let mut dropped = Meter::new(charge("r2"), sink, 40);
        dropped.add_chunks(2);
        drop(dropped);
        let record = rx.try_recv().unwrap();
        assert_eq!((record.prompt_tokens, record.completion_tokens, record.status), (10, 2, 499));
        assert!(record.estimated);
        assert_eq!(record.node_id, "node");
        assert!(rx.try_recv().is_err());
    }
}
