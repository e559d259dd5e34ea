//! What the control plane asks a channel about files and batches: a batch's
//! state (`GET {base}/batches/{id}`, `GET {base}/messages/batches/{id}`),
//! its cancellation, a file's deletion, and the results a batch is billed
//! from, read line by line as they stream (OpenAI's output file, Anthropic's
//! results), never held whole.

use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use serde_json::{Map, Value};

use crate::domain::{BatchKind, Channel};
use crate::services::outbound::{describe, path_segment};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(15);
/// Reading a batch's whole results may take a while.
const RESULTS_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest results line read (one answer); a longer one is not billed.
const MAX_LINE_BYTES: usize = 8 << 20;
/// `anthropic-version` of the message batches API.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// HTTP client for the batch calls to channels.
pub struct Upstream {
    http: reqwest::Client,
}

/// Why a call gave no answer.
#[derive(Debug)]
pub enum FetchError {
    /// The upstream answered 404: it does not know the batch or file.
    NotFound,
    /// Anything else; the reason is free of secrets.
    Failed(String),
}

/// What an upstream batch object says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    pub upstream_id: Option<String>,
    pub status: Option<String>,
    /// The status is final (completed, failed, expired, cancelled, ended).
    pub ended: bool,
    /// The upstream's ids of the files of results and errors (OpenAI).
    pub output_file: Option<String>,
    pub error_file: Option<String>,
    /// The whole object, for the client's view.
    pub object: Map<String, Value>,
}

/// The usage one completed results line reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineUsage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
}

// === impl Upstream ===

impl Upstream {
    pub fn new() -> anyhow::Result<Upstream> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TIMEOUT)
            .build()
            .context("building the upstream HTTP client")?;
        Ok(Upstream { http })
    }

    /// The upstream's view of batch `upstream_id` on `channel`.
    pub async fn status(
        &self,
        channel: &Channel,
        kind: BatchKind,
        upstream_id: &str,
    ) -> Result<Observation, FetchError> {
        let path = format!("{}/{}", batches_path(kind), path_segment(upstream_id));
        let body = self.json(self.call(channel, reqwest::Method::GET, &path)).await?;
        Ok(Observation::parse(kind, &body))
    }

    /// Asks the upstream to cancel batch `upstream_id`; its answer.
    pub async fn cancel(
        &self,
        channel: &Channel,
        kind: BatchKind,
        upstream_id: &str,
    ) -> Result<Observation, FetchError> {
        let path = format!("{}/{}/cancel", batches_path(kind), path_segment(upstream_id));
        let body = self.json(self.call(channel, reqwest::Method::POST, &path)).await?;
        Ok(Observation::parse(kind, &body))
    }

    /// Deletes file `upstream_id` from `channel` (one it no longer has
    /// counts as deleted).
    pub async fn delete_file(&self, channel: &Channel, upstream_id: &str) -> Result<(), FetchError> {
        let path = format!("/files/{}", path_segment(upstream_id));
        match self.json(self.call(channel, reqwest::Method::DELETE, &path)).await {
            Ok(_) | Err(FetchError::NotFound) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The usage of every completed line of a batch's results: the output
    /// file `upstream_file` (OpenAI) or the batch's results (Anthropic),
    /// read as they stream.
    pub async fn results(
        &self,
        channel: &Channel,
        kind: BatchKind,
        upstream_id: &str,
        upstream_file: &str,
    ) -> Result<Vec<LineUsage>, FetchError> {
        let path = match kind {
            BatchKind::Openai => format!("/files/{}/content", path_segment(upstream_file)),
            BatchKind::Anthropic => format!("/messages/batches/{}/results", path_segment(upstream_id)),
        };
        let response = self
            .call(channel, reqwest::Method::GET, &path)
            .timeout(RESULTS_TIMEOUT)
            .send()
            .await
            .map_err(|error| FetchError::Failed(describe(&error)))?;
        let response = accept(response)?;
        let mut lines = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|error| FetchError::Failed(describe(&error)))?;
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                lines.extend(line_usage(kind, &line));
            }
            if pending.len() > MAX_LINE_BYTES {
                tracing::warn!(channel = %channel.id, batch = %upstream_id, "a results line is too long to bill");
                pending.clear();
            }
        }
        lines.extend(line_usage(kind, &pending));
        Ok(lines)
    }

    fn call(&self, channel: &Channel, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let url = format!("{}{path}", channel.base_url.trim_end_matches('/'));
        let request = self.http.request(method, url).header(reqwest::header::ACCEPT, "application/json");
        if channel.kind == "anthropic" {
            request.header("x-api-key", channel.first_key()).header("anthropic-version", ANTHROPIC_VERSION)
        } else {
            request.bearer_auth(channel.first_key())
        }
    }

    async fn json(&self, request: reqwest::RequestBuilder) -> Result<Value, FetchError> {
        let response = request.send().await.map_err(|error| FetchError::Failed(describe(&error)))?;
        let response = accept(response)?;
        let body: Value = response.json().await.map_err(|error| FetchError::Failed(describe(&error)))?;
        if body.is_object() { Ok(body) } else { Err(FetchError::Failed("upstream answer is not a JSON object".into())) }
    }
}

fn accept(response: reqwest::Response) -> Result<reqwest::Response, FetchError> {
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(FetchError::NotFound);
    }
    if !status.is_success() {
        return Err(FetchError::Failed(format!("upstream answered {status}")));
    }
    Ok(response)
}

// === impl Observation ===

impl Observation {
    /// Reads an upstream batch object of `kind` (anything else reads as empty).
    pub fn parse(kind: BatchKind, body: &Value) -> Observation {
        let Some(object) = body.as_object() else { return Observation::default() };
        let text = |key: &str| object.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let status = match kind {
            BatchKind::Openai => text("status"),
            BatchKind::Anthropic => text("processing_status"),
        };
        let ended = status.as_deref().is_some_and(|status| match kind {
            BatchKind::Openai => matches!(status, "completed" | "failed" | "expired" | "cancelled"),
            BatchKind::Anthropic => status == "ended",
        });
        Observation {
            upstream_id: text("id"),
            status,
            ended,
            output_file: text("output_file_id"),
            error_file: text("error_file_id"),
            object: object.clone(),
        }
    }
}

/// The usage of one results line when its request completed; `None` for a
/// failed, cancelled or expired line, a blank one or one that is not JSON.
pub fn line_usage(kind: BatchKind, line: &[u8]) -> Option<LineUsage> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    let value: Value = serde_json::from_slice(line).ok()?;
    let count = |usage: &Value, path: &[&str]| -> i64 {
        path.iter().try_fold(usage, |v, key| v.get(key)).and_then(Value::as_i64).unwrap_or(0).max(0)
    };
    match kind {
        BatchKind::Openai => {
            let response = value.get("response")?;
            let status = response.get("status_code").and_then(Value::as_u64).unwrap_or(200);
            if !(200..300).contains(&status) {
                return None;
            }
            let usage = response.get("body")?.get("usage")?;
            // Chat completions and embeddings count prompt/completion
            // tokens; responses count input/output tokens.
            let prompt = count(usage, &["prompt_tokens"]).max(count(usage, &["input_tokens"]));
            let completion = count(usage, &["completion_tokens"]).max(count(usage, &["output_tokens"]));
            let cached = count(usage, &["prompt_tokens_details", "cached_tokens"])
                .max(count(usage, &["input_tokens_details", "cached_tokens"]));
            let reasoning = count(usage, &["completion_tokens_details", "reasoning_tokens"])
                .max(count(usage, &["output_tokens_details", "reasoning_tokens"]));
            Some(LineUsage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                cached_tokens: cached.min(prompt),
                cache_write_tokens: 0,
                reasoning_tokens: reasoning.min(completion),
            })
        }
        BatchKind::Anthropic => {
            let result = value.get("result")?;
            if result.get("type").and_then(Value::as_str) != Some("succeeded") {
                return None;
            }
            let usage = result.get("message")?.get("usage")?;
            let cached = count(usage, &["cache_read_input_tokens"]);
            let written = count(usage, &["cache_creation_input_tokens"]);
            Some(LineUsage {
                // Messages count the cache reads and writes apart from the
                // input; the prompt is all three.
                prompt_tokens: count(usage, &["input_tokens"]) + cached + written,
                completion_tokens: count(usage, &["output_tokens"]),
                cached_tokens: cached,
                cache_write_tokens: written,
                reasoning_tokens: 0,
            })
        }
    }
}

fn batches_path(kind: BatchKind) -> &'static str {
    match kind {
        BatchKind::Openai => "/batches",
        BatchKind::Anthropic => "/messages/batches",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_lines_are_counted_and_the_others_are_not() {
        let chat = br#"{"id":"r1","custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}},"error":null}"#;
        let seen = line_usage(BatchKind::Openai, chat).expect("a completed chat line");
        assert_eq!(
            seen,
            LineUsage {
                prompt_tokens: 10,
                completion_tokens: 5,
                cached_tokens: 4,
                cache_write_tokens: 0,
                reasoning_tokens: 2
            }
        );
        let responses = br#"{"response":{"status_code":200,"body":{"usage":{"input_tokens":7,"output_tokens":3}}}}"#;
        assert_eq!(
            line_usage(BatchKind::Openai, responses).map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((7, 3))
        );
        let failed = br#"{"response":{"status_code":400,"body":{"error":{"message":"bad"}}}}"#;
        assert_eq!(line_usage(BatchKind::Openai, failed), None);
        assert_eq!(line_usage(BatchKind::Openai, b"not json\n"), None);
        assert_eq!(line_usage(BatchKind::Openai, b"  \n"), None);

        let message = br#"{"custom_id":"a","result":{"type":"succeeded","message":{"usage":{"input_tokens":10,"output_tokens":6,"cache_read_input_tokens":3,"cache_creation_input_tokens":2}}}}"#;
        let seen = line_usage(BatchKind::Anthropic, message).expect("a succeeded line");
        assert_eq!(
            (seen.prompt_tokens, seen.cached_tokens, seen.cache_write_tokens, seen.completion_tokens),
            (15, 3, 2, 6)
        );
        let canceled = br#"{"custom_id":"b","result":{"type":"canceled"}}"#;
        assert_eq!(line_usage(BatchKind::Anthropic, canceled), None);
    }

    #[test]
    fn statuses_end_where_each_api_says() {
        let running = serde_json::json!({"id": "b1", "status": "in_progress"});
        assert!(!Observation::parse(BatchKind::Openai, &running).ended);
        for status in ["completed", "failed", "expired", "cancelled"] {
            let done = serde_json::json!({"id": "b1", "status": status, "output_file_id": "f9"});
            let seen = Observation::parse(BatchKind::Openai, &done);
            assert!(seen.ended, "{status} ends a batch");
            assert_eq!(seen.output_file.as_deref(), Some("f9"));
        }
        let canceling = serde_json::json!({"id": "m1", "processing_status": "canceling"});
        assert!(!Observation::parse(BatchKind::Anthropic, &canceling).ended);
        let ended = serde_json::json!({"id": "m1", "processing_status": "ended"});
        assert!(Observation::parse(BatchKind::Anthropic, &ended).ended);
    }
}
