//! Converse's `usage` read into the gateway's usage and written back.
//! `inputTokens` counts only the prompt tokens neither read from nor
//! written to the cache, so the whole prompt is `inputTokens +
//! cacheReadInputTokens + cacheWriteInputTokens`; writes are split by TTL
//! where `cacheDetails` says (`1h` entries), the rest count as 5-minute
//! writes. `outputTokens` includes reasoning, which Converse does not count
//! apart.

use serde_json::{Map, Value, json};

use crate::pricing::Usage;

/// The usage in a Converse `usage` object; `None` when `usage` is not an
/// object or has neither input nor output tokens.
pub fn from_converse(usage: &Value) -> Option<Usage> {
    let usage = usage.as_object()?;
    if !usage.contains_key("inputTokens") && !usage.contains_key("outputTokens") {
        return None;
    }
    let count = |key: &str| usage.get(key).and_then(Value::as_i64).unwrap_or(0).max(0);
    let read = count("cacheReadInputTokens");
    let written = count("cacheWriteInputTokens");
    let written_1h: i64 = usage
        .get("cacheDetails")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|detail| detail.get("ttl").and_then(Value::as_str) == Some("1h"))
        .filter_map(|detail| detail.get("inputTokens").and_then(Value::as_i64))
        .sum::<i64>()
        .clamp(0, written);
    Some(Usage {
        prompt_tokens: count("inputTokens").saturating_add(read).saturating_add(written),
        completion_tokens: count("outputTokens"),
        cached_tokens: read,
        cache_write_5m_tokens: written - written_1h,
        cache_write_1h_tokens: written_1h,
        reasoning_tokens: 0,
        ..Usage::default()
    })
}

/// The gateway's usage as a Converse `usage` object.
pub fn to_converse(usage: &Usage) -> Value {
    let prompt = usage.prompt_tokens.max(0);
    let read = usage.cached_tokens.clamp(0, prompt);
    let write_5m = usage.cache_write_5m_tokens.clamp(0, prompt - read);
    let write_1h = usage.cache_write_1h_tokens.clamp(0, prompt - read - write_5m);
    let input = prompt - read - write_5m - write_1h;
    let output = usage.completion_tokens.max(0);
    let mut out = Map::new();
    out.insert("inputTokens".into(), json!(input));
    out.insert("outputTokens".into(), json!(output));
    out.insert("totalTokens".into(), json!(prompt.saturating_add(output)));
    if read > 0 {
        out.insert("cacheReadInputTokens".into(), json!(read));
    }
    if write_5m + write_1h > 0 {
        out.insert("cacheWriteInputTokens".into(), json!(write_5m + write_1h));
        let mut details = Vec::new();
        if write_1h > 0 {
            details.push(json!({ "ttl": "1h", "inputTokens": write_1h }));
        }
        if write_5m > 0 {
            details.push(json!({ "ttl": "5m", "inputTokens": write_5m }));
        }
        out.insert("cacheDetails".into(), Value::Array(details));
    }
    Value::Object(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::pricing::Prices;

    #[test]
    fn cache_reads_and_writes_are_added_to_the_prompt() {
        let usage = from_converse(&json!({
            "inputTokens": 100, "outputTokens": 50, "totalTokens": 1350,
            "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 200,
        }))
        .unwrap();
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 1300,
                completion_tokens: 50,
                cached_tokens: 1000,
                cache_write_5m_tokens: 200,
                ..Usage::default()
            }
        );
        assert_eq!(from_converse(&to_converse(&usage)), Some(usage));
    }

    #[test]
    fn one_hour_writes_are_told_apart_by_cache_details() {
        let usage = from_converse(&json!({
            "inputTokens": 10, "outputTokens": 5, "cacheWriteInputTokens": 300,
            "cacheDetails": [{"ttl": "1h", "inputTokens": 200}, {"ttl": "5m", "inputTokens": 100}],
        }))
        .unwrap();
        assert_eq!((usage.prompt_tokens, usage.cache_write_1h_tokens, usage.cache_write_5m_tokens), (310, 200, 100));
        assert_eq!(from_converse(&to_converse(&usage)), Some(usage));
        assert_eq!(from_converse(&json!({"latencyMs": 3})), None);
    }

    // Golden: $3 input, $15 output, $0.30 cache reads, $3.75 5-minute
    // writes per million tokens (a Claude Sonnet price list).
    #[test]
    fn a_cached_converse_answer_costs_exactly_its_parts_in_micro_usd() {
        let usage = from_converse(&json!({
            "inputTokens": 1_000, "outputTokens": 2_000,
            "cacheReadInputTokens": 10_000, "cacheWriteInputTokens": 4_000,
        }))
        .unwrap();
        let prices = Prices {
            input_price_micros: 3_000_000,
            output_price_micros: 15_000_000,
            cached_price_micros: 300_000,
            cache_write_5m_price_micros: 3_750_000,
            ..Prices::default()
        };
        // 1000 × 3 + 2000 × 15 + 10000 × 0.3 + 4000 × 3.75 = 3000 + 30000 + 3000 + 15000
        assert_eq!(gw_pricing::cost_micros(&usage, &prices, 1_000_000), 51_000);
    }
}
