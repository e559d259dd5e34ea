//! Reading batch requests before they go upstream: every line of an OpenAI
//! batch file, or every request of an Anthropic message batch, must name
//! the same model (and, for files, the same endpoint); each line's bound is
//! its body's length in bytes as prompt tokens (no token is shorter than a
//! byte) and its `max_tokens` as completion tokens. A channel that maps the
//! model gets the lines with its own model name.

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::{batches::Bound, error::ProxyError};

/// The endpoints an OpenAI batch's lines may call.
pub const ENDPOINTS: [&str; 4] = ["/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions"];
/// The completion bound of a line that names no `max_tokens`.
pub const DEFAULT_COMPLETION_TOKENS: i64 = 4_096;
/// Most requests in one batch (the providers' own limit).
pub const MAX_LINES: usize = 50_000;

/// What the lines of a batch come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    pub model: String,
    /// The OpenAI endpoint they call (`/v1/messages` for message batches).
    pub endpoint: &'static str,
    pub bound: Bound,
}

fn invalid(field: &'static str, reason: String) -> ProxyError {
    ProxyError::InvalidField { field, reason }
}

/// Reads an OpenAI batch file: JSON objects, one a line, each with a
/// unique `custom_id`, `method` POST, a `url` of `ENDPOINTS` and a `body`
/// naming the model; every line the same model and url.
pub fn read_file(bytes: &[u8]) -> Result<Lines, ProxyError> {
    let mut seen = HashSet::new();
    let mut first: Option<(String, &'static str)> = None;
    let mut bound = Bound::default();
    for (number, line) in bytes.split(|b| *b == b'\n').enumerate().map(|(i, l)| (i + 1, l.trim_ascii())) {
        if line.is_empty() {
            continue;
        }
        let bad = |reason: &str| invalid("file", format!("line {number}: {reason}"));
        let Ok(Value::Object(line_object)) = serde_json::from_slice::<Value>(line) else {
            return Err(bad("is not a JSON object"));
        };
        let custom_id = line_object.get("custom_id").and_then(Value::as_str).ok_or_else(|| bad("needs a custom_id"))?;
        if !seen.insert(custom_id.to_owned()) {
            return Err(bad(&format!("custom_id {custom_id:?} is used twice")));
        }
        if line_object.get("method").and_then(Value::as_str) != Some("POST") {
            return Err(bad("method must be POST"));
        }
        let url = line_object.get("url").and_then(Value::as_str).unwrap_or_default();
        let endpoint = ENDPOINTS
            .into_iter()
            .find(|e| *e == url)
            .ok_or_else(|| bad(&format!("url must be one of {}", ENDPOINTS.join(", "))))?;
        let body = line_object.get("body").and_then(Value::as_object).ok_or_else(|| bad("needs a body object"))?;
        let model = body.get("model").and_then(Value::as_str).filter(|m| !m.is_empty());
        let model = model.ok_or_else(|| bad("the body needs a model"))?;
        match &first {
            None => first = Some((model.to_owned(), endpoint)),
            Some((m, e)) if m == model && *e == endpoint => {}
            Some(_) => return Err(bad("every line must call the same model at the same url")),
        }
        add(&mut bound, body, endpoint == "/v1/embeddings")?;
    }
    let (model, endpoint) = first.ok_or_else(|| invalid("file", "holds no requests".into()))?;
    Ok(Lines { model, endpoint, bound })
}

/// Reads an Anthropic message batch: `requests`, each with a unique
/// `custom_id` and `params` naming the model; every request the same model.
pub fn read_requests(body: &Value) -> Result<Lines, ProxyError> {
    let requests = body.get("requests").and_then(Value::as_array).ok_or(ProxyError::MissingField("requests"))?;
    let mut seen = HashSet::new();
    let mut model: Option<&str> = None;
    let mut bound = Bound::default();
    for (index, request) in requests.iter().enumerate() {
        let bad = |reason: &str| invalid("requests", format!("request {index}: {reason}"));
        let custom_id = request.get("custom_id").and_then(Value::as_str).ok_or_else(|| bad("needs a custom_id"))?;
        if !seen.insert(custom_id) {
            return Err(bad(&format!("custom_id {custom_id:?} is used twice")));
        }
        let params = request.get("params").and_then(Value::as_object).ok_or_else(|| bad("needs params"))?;
        let named = params.get("model").and_then(Value::as_str).filter(|m| !m.is_empty());
        let named = named.ok_or_else(|| bad("params need a model"))?;
        match model {
            None => model = Some(named),
            Some(m) if m == named => {}
            Some(_) => return Err(bad("every request of a batch must name the same model")),
        }
        add(&mut bound, params, false)?;
    }
    let model = model.ok_or_else(|| invalid("requests", "holds no requests".into()))?;
    Ok(Lines { model: model.to_owned(), endpoint: "/v1/messages", bound })
}

/// Adds one request's bound.
fn add(bound: &mut Bound, body: &Map<String, Value>, embedding: bool) -> Result<(), ProxyError> {
    if bound.lines as usize >= MAX_LINES {
        return Err(invalid("file", format!("a batch holds at most {MAX_LINES} requests")));
    }
    let prompt = serde_json::to_vec(body).map_or(0, |bytes| bytes.len() as i64);
    let completion = if embedding {
        0
    } else {
        ["max_completion_tokens", "max_tokens", "max_output_tokens"]
            .iter()
            .find_map(|key| body.get(*key).and_then(Value::as_i64))
            .map_or(DEFAULT_COMPLETION_TOKENS, |n| n.max(0))
    };
    bound.lines += 1;
    bound.prompt_tokens = bound.prompt_tokens.saturating_add(prompt);
    bound.completion_tokens = bound.completion_tokens.saturating_add(completion);
    Ok(())
}

/// The file with every line's `body.model` set to `upstream_model`.
pub fn rename_file_model(bytes: &[u8], upstream_model: &str) -> Bytes {
    let mut out = Vec::with_capacity(bytes.len());
    for line in bytes.split(|b| *b == b'\n').map(<[u8]>::trim_ascii).filter(|l| !l.is_empty()) {
        let mut value: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
        if let Some(body) = value.get_mut("body").and_then(Value::as_object_mut) {
            body.insert("model".into(), upstream_model.into());
        }
        out.extend(serde_json::to_vec(&value).unwrap_or_default());
        out.push(b'\n');
    }
    Bytes::from(out)
}

/// The requests with every `params.model` set to `upstream_model`.
pub fn rename_request_model(body: &mut Value, upstream_model: &str) {
    for request in body.get_mut("requests").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) {
            params.insert("model".into(), upstream_model.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_file_of_one_model_is_bounded_by_its_bytes_and_max_tokens() {
        let file = concat!(
            r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":10}}"#,
            "\n\n",
            r#"{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}"#,
            "\n"
        );
        let lines = read_file(file.as_bytes()).expect("a good file");
        assert_eq!((lines.model.as_str(), lines.endpoint), ("m", "/v1/chat/completions"));
        let prompt = (r#"{"max_tokens":10,"model":"m"}"#.len() + r#"{"model":"m"}"#.len()) as i64;
        assert_eq!(
            lines.bound,
            Bound { lines: 2, prompt_tokens: prompt, completion_tokens: 10 + DEFAULT_COMPLETION_TOKENS }
        );
    }

    #[test]
    fn bad_files_are_refused_with_the_line() {
        let line = |id: &str, model: &str, url: &str| {
            format!(r#"{{"custom_id":"{id}","method":"POST","url":"{url}","body":{{"model":"{model}"}}}}"#)
        };
        let cases = [
            (
                format!("{}\n{}", line("a", "m", "/v1/chat/completions"), line("a", "m", "/v1/chat/completions")),
                "line 2",
            ),
            (
                format!("{}\n{}", line("a", "m", "/v1/chat/completions"), line("b", "n", "/v1/chat/completions")),
                "same model",
            ),
            (line("a", "m", "/v1/images/generations"), "url must be"),
            ("not json".to_owned(), "line 1"),
            (String::new(), "no requests"),
        ];
        for (file, expected) in cases {
            let error = read_file(file.as_bytes()).expect_err("refused");
            assert!(error.message().contains(expected), "{:?} should mention {expected:?}", error.message());
        }
    }

    #[test]
    fn message_batches_name_one_model_and_models_are_renamed() {
        let mut body = json!({"requests": [
            {"custom_id": "a", "params": {"model": "claude", "max_tokens": 100, "messages": []}},
            {"custom_id": "b", "params": {"model": "claude", "max_tokens": 50, "messages": []}},
        ]});
        let lines = read_requests(&body).expect("good requests");
        assert_eq!((lines.bound.lines, lines.bound.completion_tokens), (2, 150));
        rename_request_model(&mut body, "claude-upstream");
        assert_eq!(body["requests"][1]["params"]["model"], "claude-upstream");
        body["requests"][1]["params"]["model"] = json!("other");
        assert!(read_requests(&body).is_err(), "two models are refused");
        let renamed = rename_file_model(br#"{"custom_id":"a","body":{"model":"m"}}"#, "up");
        assert_eq!(renamed.as_ref(), b"{\"body\":{\"model\":\"up\"},\"custom_id\":\"a\"}\n");
    }
}
