//! Metering: turns what a response used into a priced usage record, settles
//! the request's budget reservation with its cost, and queues the record for
//! the reporter.
//! Streamed answers reach the client through the one `pump`.
//!
//! A `Meter` records exactly once: when the response ends, or when it is
//! dropped because the client went away. Records go to the spool (see
//! `spool`); the `Written` it returns resolves once the record is on it, which is what
//! answers wait for before their last byte. `UsageSink::in_flight` wraps an
//! upstream attempt in an open entry, so a crash mid-request still bills
//! its prompt part; a stream adds a progress entry at most every
//! `PROGRESS_EVERY` with what the client received so far, so a crash
//! mid-stream bills that too (to within the last `PROGRESS_EVERY`).

pub mod answer;
pub mod event;
pub mod glance;
mod member;
pub mod pump;
pub mod realtime;
mod reasons;
pub mod sse;
pub mod text;

use std::{
    future::Future,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use tokio::sync::mpsc;

use self::text::{AnswerText, Carrier};
use crate::{
    policy::budget::Reservation,
    policy::domain::{Channel, Model},
    policy::inflight::SlotGuard,
    policy::tpm::TokenReservation,
    pricing::{Units, Usage, cost_micros, units_cost_micros},
    spool::{self, Kind, Written},
    telemetry::Answer,
    usage::UsageRecord,
};

/// How often, at most, a stream's progress is spooled.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Who pays for one request and at what price.
#[derive(Debug, Clone)]
pub struct Charge {
    pub request_id: Arc<str>,
    pub token_id: Arc<str>,
    pub account_id: Arc<str>,
    pub group: Arc<str>,
    /// The model name the client asked for (what is billed).
    pub model: Arc<Model>,
    pub channel_id: Arc<str>,
    pub endpoint: &'static str,
    pub ratio_ppm: i64,
    pub started: Instant,
    /// The request's budget reservation, settled by the first record (shared
    /// by the attempts' copies; released if none records anything).
    pub reservation: Arc<Mutex<Option<Reservation>>>,
    /// The request's tokens-per-minute reservation, settled by the first
    /// record with the tokens used (given back whole if none records).
    pub tokens: Arc<Mutex<Option<TokenReservation>>>,
    /// The request's in-flight slots, given back by the first record (or
    /// when the request's state and every copy of its charge are dropped).
    pub in_flight: Arc<Mutex<Option<SlotGuard>>>,
    /// The request's span and trail: the usage lands on the span when the
    /// answer ends.
    pub traced: crate::telemetry::Traced,
}

/// Settles reservations and appends usage records to the spool (the
/// reporter sends them from there).
#[derive(Clone)]
pub struct UsageSink {
    tx: mpsc::UnboundedSender<spool::Entry>,
    node_id: Arc<str>,
    health: spool::Health,
}

/// An upstream attempt's open entry: closed by the request's final record,
/// or on drop with a void entry unless the attempt was `answered`.
pub struct Opened {
    sink: UsageSink,
    request_id: Arc<str>,
    armed: bool,
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
    /// Answer text seen (events kept unread until it is counted), counted
    /// with `tokens` only if no usage came, and for progress entries.
    completion: AnswerText,
    /// When the first chunk came, the answer's model and finish reasons.
    answer: Answer,
    /// What the last progress entry counted.
    progress: Progress,
}

/// A stream's progress as last spooled, counted piece by piece so that
/// each entry tokenizes only the text that came since the one before.
#[derive(Default)]
struct Progress {
    /// When the last entry was written (`None`: none yet).
    at: Option<Instant>,
    /// Bytes of the completion text counted.
    text: usize,
    completion_tokens: i64,
    /// The prompt estimate, made once.
    prompt_tokens: Option<i64>,
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
            tokens: Arc::default(),
            in_flight: Arc::default(),
            traced: crate::telemetry::Traced::default(),
        }
    }

    /// The same charge for one attempt on `channel`.
    pub fn on_channel(&self, channel: &Channel) -> Charge {
        Charge { channel_id: channel.id.as_str().into(), ..self.clone() }
    }
}

// === impl UsageSink ===

impl UsageSink {
    /// A sink appending to the spool writer behind `tx`, stamping records
    /// with `node_id`.
    pub fn new(tx: mpsc::UnboundedSender<spool::Entry>, node_id: &str) -> UsageSink {
        UsageSink { tx, node_id: node_id.into(), health: spool::Health::default() }
    }

    /// The sink, telling whether records can be kept by `health`.
    pub fn with_health(self, health: spool::Health) -> UsageSink {
        UsageSink { health, ..self }
    }

    /// Whether records appended now can be written to the spool; spending
    /// requests are refused while they cannot.
    pub fn writable(&self) -> bool {
        self.health.writable()
    }

    /// Prices `usage` and `units` (images, audio), settles the charge's
    /// reservation with the cost and appends the record to the spool; the
    /// returned `Written` resolves once it is on the spool.
    pub fn record_with(&self, charge: &Charge, usage: Usage, units: Units, status: u16, estimated: bool) -> Written {
        self.record_seen(charge, usage, units, status, estimated, &Answer::default())
    }

    /// `record_with`, with what the answer said beyond its usage (for its
    /// span and metrics).
    fn record_seen(
        &self,
        charge: &Charge,
        usage: Usage,
        units: Units,
        status: u16,
        estimated: bool,
        answer: &Answer,
    ) -> Written {
        let cost = cost_micros(&usage, &charge.model, charge.ratio_ppm).saturating_add(units_cost_micros(
            &units,
            &charge.model,
            charge.ratio_ppm,
        ));
        let reservation = charge.reservation.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(reservation) = reservation {
            reservation.settle(cost);
        }
        let tokens = charge.tokens.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(tokens) = tokens {
            tokens.settle(usage.prompt_tokens.saturating_add(usage.completion_tokens));
        }
        drop(charge.in_flight.lock().unwrap_or_else(PoisonError::into_inner).take());
        let mut record = self.record_of(charge, usage, cost, status, estimated);
        record.units = units;
        let written = spool::append(&self.tx, Kind::Final, record);
        crate::telemetry::usage(
            &charge.traced,
            &crate::telemetry::Seen {
                endpoint: charge.endpoint,
                model: &charge.model.id,
                channel: &charge.channel_id,
                usage,
                cost_micros: cost,
                estimated,
                status,
                started: charge.started,
                answer,
            },
        );
        written
    }

    /// Appends a progress entry of `charge`'s stream: `usage` so far,
    /// priced, estimated, with status 0 (a record the request's final one
    /// replaces). Settles nothing.
    pub fn progress(&self, charge: &Charge, usage: Usage) -> Written {
        let cost = cost_micros(&usage, &charge.model, charge.ratio_ppm);
        spool::append(&self.tx, Kind::Progress, self.record_of(charge, usage, cost, 0, true))
    }

    /// Runs `attempt` with `charge` under an open entry on the spool: the
    /// entry (the prompt part, estimated from `request_bytes` at the
    /// model's input price) is written before `attempt` starts, so the
    /// upstream never sees a request the spool does not know. An attempt
    /// that fails (or is dropped) without an answer closes it with a void
    /// entry; one that answers leaves that to its final record.
    pub async fn in_flight<T, E, F, Fut>(&self, charge: Charge, request_bytes: usize, attempt: F) -> Result<T, E>
    where
        F: FnOnce(Charge) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let opened = self.open(&charge, request_bytes).await;
        let result = attempt(charge).await;
        if result.is_ok() {
            opened.answered();
        }
        result
    }

    /// Appends the open entry of an attempt with `charge` and waits until
    /// it is written.
    pub async fn open(&self, charge: &Charge, request_bytes: usize) -> Opened {
        let prompt_tokens = i64::try_from(request_bytes.div_ceil(4)).unwrap_or(i64::MAX);
        let usage = Usage { prompt_tokens, ..Usage::default() };
        let cost = cost_micros(&usage, &charge.model, charge.ratio_ppm);
        // Status 0: what the request is billed if the node dies before it ends.
        let mut record = self.record_of(charge, usage, cost, 0, true);
        record.latency_ms = 0;
        spool::append(&self.tx, Kind::Open, record).wait().await;
        Opened { sink: self.clone(), request_id: charge.request_id.clone(), armed: true }
    }

    fn record_of(&self, charge: &Charge, usage: Usage, cost: i64, status: u16, estimated: bool) -> UsageRecord {
        UsageRecord {
            request_id: charge.request_id.clone(),
            token_id: charge.token_id.clone(),
            account_id: charge.account_id.clone(),
            group: charge.group.clone(),
            model: charge.model.id.as_str().into(),
            channel_id: charge.channel_id.clone(),
            endpoint: charge.endpoint.into(),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cached_tokens: usage.cached_tokens,
            cache_write_5m_tokens: usage.cache_write_5m_tokens,
            cache_write_1h_tokens: usage.cache_write_1h_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            audio_prompt_tokens: usage.audio_prompt_tokens,
            audio_completion_tokens: usage.audio_completion_tokens,
            audio_cached_tokens: usage.audio_cached_tokens,
            tier: crate::pricing::tier(usage.prompt_tokens, &charge.model),
            cost_micros: cost,
            latency_ms: u32::try_from(charge.started.elapsed().as_millis()).unwrap_or(u32::MAX),
            status,
            created_at: crate::now_unix(),
            node_id: self.node_id.clone(),
            estimated,
            units: Units::default(),
        }
    }
}

// === impl Opened ===

impl Opened {
    /// The attempt answered: its meter (or record) closes the entry.
    pub fn answered(mut self) {
        self.armed = false;
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        if self.armed {
            let record = UsageRecord { request_id: std::mem::take(&mut self.request_id), ..UsageRecord::default() };
            drop(spool::append(&self.sink.tx, Kind::Void, record));
        }
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
            completion: AnswerText::default(),
            answer: Answer::default(),
            progress: Progress::default(),
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
        self.completion.push_str(text);
    }

    /// An event whose `data` holds answer text as `carrier` says went to
    /// the client: like `add_text` with its text, read only when the text
    /// is counted (for an estimate, or a progress entry).
    pub fn add_event(&mut self, data: &[u8], carrier: Carrier) {
        self.completion.push_event(data, carrier);
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
        let text = self.completion.whole();
        let completion_tokens = if text.is_empty() { self.chunks } else { crate::tokens::count(model, &text) };
        Usage { prompt_tokens, completion_tokens, ..Usage::default() }
    }

    /// Notes the finish reasons one streamed event's `data` (as the upstream
    /// sent it) states, for the request's span.
    pub fn read_event(&mut self, data: &[u8]) {
        reasons::read_stream_event(data, &mut self.answer);
    }

    /// Notes what a whole (not streamed) answer `body` says of itself: its
    /// model and finish reasons, for its span. Reads it only while tracing.
    pub fn answered(&mut self, body: &[u8]) {
        reasons::read_answer(body, &mut self.answer);
    }

    /// Spools what the client received so far, as what the request is
    /// billed should the node die before it ends, when the last such entry
    /// (or the request's start) is `PROGRESS_EVERY` old and more came
    /// since. Nothing waits for it to be written.
    pub fn progress(&mut self) {
        let Some(charge) = &self.charge else { return };
        let now = Instant::now();
        if now.duration_since(self.progress.at.unwrap_or(charge.started)) < PROGRESS_EVERY {
            return;
        }
        let model = charge.model.id.as_str();
        let p = &mut self.progress;
        let counted = if self.completion.counts_nothing() {
            self.chunks
        } else {
            let text = self.completion.read_all();
            p.completion_tokens.saturating_add(crate::tokens::count(model, text.get(p.text..).unwrap_or_default()))
        };
        if p.at.is_some() && counted == p.completion_tokens {
            return;
        }
        p.at = Some(now);
        (p.text, p.completion_tokens) = (self.completion.read_all().len(), counted);
        let prompt_estimate = *p.prompt_tokens.get_or_insert_with(|| {
            self.prompt_body.as_ref().map_or(self.prompt_estimate, |body| crate::tokens::count_request(model, body))
        });
        let mut usage = self.seen.unwrap_or(Usage { prompt_tokens: prompt_estimate, ..Usage::default() });
        usage.completion_tokens = usage.completion_tokens.max(counted);
        drop(self.sink.progress(charge, usage));
    }

    /// Usage reported by the upstream; the last report wins.
    pub fn observe(&mut self, usage: Usage) {
        self.seen = Some(usage);
    }

    /// `n` more content chunks went to the client.
    pub fn add_chunks(&mut self, n: i64) {
        if self.answer.first_output.is_none() && n > 0 {
            self.answer.first_output = Some(Instant::now());
        }
        self.chunks = self.chunks.saturating_add(n);
    }

    /// Records the usage seen (or an estimate) with `status`; the returned
    /// `Written` resolves once the record is on the spool.
    pub fn finish(mut self, status: u16) -> Written {
        self.record(status).unwrap_or_else(Written::ready)
    }

    /// Records nothing: the upstream's answer was lost before the client
    /// got any of it, so there is nothing to bill.
    pub fn cancel(mut self) {
        self.charge = None;
    }

    fn record(&mut self, status: u16) -> Option<Written> {
        // No usage: bill an estimate rather than nothing, so cutting a
        // stream short is not a way to get tokens for free.
        let (usage, estimated) = match self.seen {
            Some(usage) => (usage, false),
            None => (self.estimate(), true),
        };
        let charge = self.charge.take()?;
        Some(self.sink.record_seen(&charge, usage, Units::default(), status, estimated, &self.answer))
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // 499: the client closed the connection before the response ended.
        // Nothing waits for it; the writer spools it as soon as it can.
        drop(self.record(499));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
pub mod tests {
    use super::*;

    fn charge(id: &str) -> Charge {
        Charge::test(id)
    }

    /// A sink whose entries are acknowledged at once by a task that passes
    /// each final record on to the returned receiver.
    pub fn recording_sink() -> (UsageSink, mpsc::UnboundedReceiver<UsageRecord>) {
        let (tx, mut entries) = mpsc::unbounded_channel::<spool::Entry>();
        let (records, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(entry) = entries.recv().await {
                if entry.kind == Kind::Final {
                    let _ = records.send(entry.record);
                }
                // `done` is dropped here, after the record was passed on.
            }
        });
        (UsageSink::new(tx, "node"), rx)
    }

    #[test]
    fn meter_records_exactly_once_on_finish_or_drop() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = UsageSink::new(tx, "node");
        let mut meter = Meter::new(charge("r1"), sink.clone(), 40);
        meter.observe(Usage { prompt_tokens: 1000, completion_tokens: 500, ..Usage::default() });
        drop(meter.finish(200));
        let entry = rx.try_recv().unwrap();
        let record = entry.record;
        assert_eq!(entry.kind, Kind::Final);
        assert_eq!((record.prompt_tokens, record.completion_tokens, record.status), (1000, 500, 200));
        // $1/M in + $2/M out: 1000 + 1000 µ$.
        assert_eq!(record.cost_micros, 2000);
        assert!(!record.estimated);
        assert!(rx.try_recv().is_err());

        let mut dropped = Meter::new(charge("r2"), sink, 40);
        dropped.add_chunks(2);
        drop(dropped);
        let record = rx.try_recv().unwrap().record;
        assert_eq!((record.prompt_tokens, record.completion_tokens, record.status), (10, 2, 499));
        assert!(record.estimated);
        assert_eq!(&*record.node_id, "node");
        assert!(rx.try_recv().is_err());
    }

    /// Acknowledges every entry at once; returns (kind, request id, status,
    /// prompt tokens, cost) of each, in order.
    fn entries(mut rx: mpsc::UnboundedReceiver<spool::Entry>) -> Vec<(Kind, String, u16, i64, i64)> {
        let mut seen = Vec::new();
        while let Ok(entry) = rx.try_recv() {
            let r = entry.record;
            seen.push((entry.kind, r.request_id.to_string(), r.status, r.prompt_tokens, r.cost_micros));
        }
        seen
    }

    #[tokio::test]
    async fn an_attempt_is_opened_before_it_starts_and_closed_by_its_record_or_a_void() {
        let (tx, mut rx) = mpsc::unbounded_channel::<spool::Entry>();
        let sink = UsageSink::new(tx, "node");
        // Acknowledge the open entry so `in_flight` proceeds.
        let ack = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Some(mut entry) = rx.recv().await {
                drop(entry.done.take());
                kept.push(entry);
                if kept.len() == 4 {
                    break;
                }
            }
            let (tx, rx) = mpsc::unbounded_channel();
            for entry in kept {
                tx.send(entry).unwrap();
            }
            rx
        });
        let inner = sink.clone();
        let answered: Result<(), ()> = sink
            .in_flight(charge("r1"), 400, |charge| async move {
                let meter = Meter::new(charge, inner, 400);
                meter.finish(200).wait().await;
                Ok(())
            })
            .await;
        answered.unwrap();
        let failed: Result<(), &str> = sink.in_flight(charge("r2"), 400, |_| async { Err("502") }).await;
        failed.unwrap_err();
        let seen = entries(ack.await.unwrap());
        // 400 bytes: 100 prompt tokens at $1/M = 100 µ$.
        assert_eq!(seen[0], (Kind::Open, "r1".into(), 0, 100, 100));
        assert_eq!((seen[1].0, seen[1].1.as_str(), seen[1].2), (Kind::Final, "r1", 200));
        assert_eq!(seen[2], (Kind::Open, "r2".into(), 0, 100, 100));
        assert_eq!((seen[3].0, seen[3].1.as_str()), (Kind::Void, "r2"));
    }
}
