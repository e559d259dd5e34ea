//! Gemini's `usageMetadata` read into the gateway's usage and written back.
//! Gemini counts the whole prompt in `promptTokenCount` (cached tokens,
//! `cachedContentTokenCount`, are part of it) and the answer apart from the
//! reasoning: `candidatesTokenCount` excludes `thoughtsTokenCount`, so
//! completion = candidates + thoughts. Tool-use prompts
//! (`toolUsePromptTokenCount`) are billed as prompt. Gemini has no field for
//! cache writes; writing drops them into the plain prompt count.

use serde_json::{Map, Value, json};

use crate::pricing::Usage;

/// The usage in a Gemini `usageMetadata` object; `None` when `metadata` is
/// not an object or counts nothing.
pub fn from_gemini(metadata: &Value) -> Option<Usage> {
    let metadata = metadata.as_object()?;
    let count = |key: &str| metadata.get(key).and_then(Value::as_i64).unwrap_or(0).max(0);
    if !["promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount", "totalTokenCount"]
        .iter()
        .any(|key| metadata.contains_key(*key))
    {
        return None;
    }
    let prompt = count("promptTokenCount").saturating_add(count("toolUsePromptTokenCount"));
    let thoughts = count("thoughtsTokenCount");
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: count("candidatesTokenCount").saturating_add(thoughts),
        cached_tokens: count("cachedContentTokenCount").min(prompt),
        reasoning_tokens: thoughts,
        ..Usage::default()
    })
}

/// The gateway's usage as a Gemini `usageMetadata` object.
pub fn to_gemini(usage: &Usage) -> Value {
    let prompt = usage.prompt_tokens.max(0);
    let completion = usage.completion_tokens.max(0);
    let thoughts = usage.reasoning_tokens.clamp(0, completion);
    let mut metadata = Map::new();
    metadata.insert("promptTokenCount".into(), json!(prompt));
    metadata.insert("candidatesTokenCount".into(), json!(completion - thoughts));
    metadata.insert("totalTokenCount".into(), json!(prompt.saturating_add(completion)));
    if usage.cached_tokens > 0 {
        metadata.insert("cachedContentTokenCount".into(), json!(usage.cached_tokens.min(prompt)));
    }
    if thoughts > 0 {
        metadata.insert("thoughtsTokenCount".into(), json!(thoughts));
    }
    Value::Object(metadata)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::pricing::Prices;

    #[test]
    fn thoughts_are_added_to_candidates_and_cached_tokens_stay_inside_the_prompt() {
        let metadata = json!({
            "promptTokenCount": 1200,
            "candidatesTokenCount": 300,
            "cachedContentTokenCount": 1000,
            "thoughtsTokenCount": 450,
            "totalTokenCount": 1950,
        });
        let usage = from_gemini(&metadata).unwrap();
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 1200,
                completion_tokens: 750,
                cached_tokens: 1000,
                reasoning_tokens: 450,
                ..Usage::default()
            }
        );
        assert_eq!(to_gemini(&usage), metadata);
    }

    #[test]
    fn tool_use_prompts_are_prompt_and_missing_counts_are_zero() {
        let usage = from_gemini(&json!({"promptTokenCount": 10, "toolUsePromptTokenCount": 5})).unwrap();
        assert_eq!(usage, Usage { prompt_tokens: 15, ..Usage::default() });
        assert_eq!(from_gemini(&json!({"trafficType": "ON_DEMAND"})), None);
        assert_eq!(from_gemini(&Value::Null), None);
    }

    #[test]
    fn an_answer_is_billed_in_exact_micro_usd() {
        // $1.25 per 1M prompt tokens, $0.3125 cached, $10 per 1M output.
        let prices = Prices {
            input_price_micros: 1_250_000,
            cached_price_micros: 312_500,
            output_price_micros: 10_000_000,
            ..Prices::default()
        };
        let usage = from_gemini(&json!({
            "promptTokenCount": 100_000,
            "cachedContentTokenCount": 80_000,
            "candidatesTokenCount": 2_000,
            "thoughtsTokenCount": 3_000,
        }))
        .unwrap();
        // 20k fresh × 1.25 + 80k cached × 0.3125 + 5k output × 10, per 1M.
        assert_eq!(gw_pricing::cost_micros(&usage, &prices, 1_000_000), 25_000 + 25_000 + 50_000);
    }
}
