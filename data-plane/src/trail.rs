//! What the pipeline learned about one request, noted by its steps as they
//! run and read once the response is ready: for the access log line and the
//! request's span. Below the pipeline and telemetry, so both can share it.

use std::sync::{Arc, Mutex, PoisonError};

/// What the pipeline learned about one request, for its access log line:
/// filled in by the steps as they run, read once the response is ready.
#[derive(Debug, Default)]
pub struct Trail {
    inner: Mutex<TrailFields>,
}

/// The fields of a `Trail`.
#[derive(Debug, Default, Clone)]
pub struct TrailFields {
    pub token: Option<String>,
    /// Shared with the caller's token (the same values as its account's
    /// id and group's name): noting them copies nothing.
    pub account: Option<Arc<str>>,
    pub group: Option<Arc<str>>,
    pub model: Option<String>,
    pub channel: Option<String>,
    /// The channel's provider (`gen_ai.provider.name`).
    pub provider: Option<&'static str>,
    /// The model name the channel was asked for, after its mapping.
    pub upstream_model: Option<String>,
    pub attempts: u32,
    /// What the request cost, once its usage was recorded (before the
    /// response for whole answers, at the end for streams).
    pub cost_micros: Option<i64>,
}

// === impl Trail ===

impl Trail {
    /// Changes the fields with `f`.
    pub fn update(&self, f: impl FnOnce(&mut TrailFields)) {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// What `f` makes of the fields, read in place.
    pub fn read<R>(&self, f: impl FnOnce(&TrailFields) -> R) -> R {
        f(&self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A copy of the fields.
    pub fn fields(&self) -> TrailFields {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}
