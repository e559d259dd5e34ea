//! Usage written out in either dialect for translated answers (reading it,
//! and how the dialects' counts compose, is `meter::answer`'s). The
//! messages API counts the prompt in parts (`input_tokens` excludes cache
//! reads and writes); the gateway, like the chat dialect, counts the whole
//! prompt in `prompt_tokens` with reads and writes as parts of it. Each
//! writer keeps every count its dialect can carry: cache writes go to chat
//! as `prompt_tokens_details.cache_write_tokens` (the 5-minute/1-hour split
//! does not survive), reasoning to messages only inside `output_tokens`.

use serde_json::{Value, json};

pub(super) use crate::meter::answer::{from_chat, from_messages};
use crate::pricing::Usage;

/// The gateway's usage as a messages `usage` object.
pub(super) fn to_messages(usage: &Usage) -> Value {
    let prompt = usage.prompt_tokens.max(0);
    let cached = usage.cached_tokens.clamp(0, prompt);
    let write_5m = usage.cache_write_5m_tokens.clamp(0, prompt - cached);
    let write_1h = usage.cache_write_1h_tokens.clamp(0, prompt - cached - write_5m);
    let mut messages = json!({
        "input_tokens": prompt - cached - write_5m - write_1h,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": write_5m + write_1h,
        "cache_read_input_tokens": cached,
    });
    if write_5m + write_1h > 0 {
        messages["cache_creation"] =
            json!({ "ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h });
    }
    messages
}

/// The gateway's usage as a chat `usage` object.
pub(super) fn to_chat(usage: &Usage) -> Value {
    let mut details = json!({ "cached_tokens": usage.cached_tokens });
    let writes = usage.cache_write_5m_tokens.saturating_add(usage.cache_write_1h_tokens);
    if writes > 0 {
        details["cache_write_tokens"] = json!(writes);
    }
    let mut chat = json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": details,
    });
    if usage.reasoning_tokens > 0 {
        chat["completion_tokens_details"] = json!({ "reasoning_tokens": usage.reasoning_tokens });
    }
    chat
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn chat_usage_round_trips_through_the_messages_shape() {
        let usage = Usage { prompt_tokens: 30, completion_tokens: 7, cached_tokens: 12, ..Usage::default() };
        assert_eq!(from_messages(&to_messages(&usage)), Some(usage));
        assert_eq!(from_chat(&to_chat(&usage)), Some(usage));
        assert_eq!(from_chat(&Value::Null), None);
    }

    #[test]
    fn cache_writes_and_reasoning_keep_their_counts_in_each_dialect() {
        let usage = Usage {
            prompt_tokens: 100,
            completion_tokens: 40,
            cached_tokens: 50,
            cache_write_5m_tokens: 10,
            cache_write_1h_tokens: 20,
            reasoning_tokens: 30,
            ..Usage::default()
        };
        // Messages carries the writes and their split, not reasoning apart.
        assert_eq!(from_messages(&to_messages(&usage)), Some(Usage { reasoning_tokens: 0, ..usage }));
        assert_eq!(to_messages(&usage)["input_tokens"], 20);
        // Chat carries reasoning and the writes, not their split.
        let chat = from_chat(&to_chat(&usage)).unwrap();
        assert_eq!(chat, Usage { cache_write_5m_tokens: 30, cache_write_1h_tokens: 0, ..usage });
    }
}
