//! Usage written out in either dialect for translated answers (reading it is
//! `meter::answer`'s). The messages API counts prompt tokens in three parts
//! (`input_tokens` excludes both cache counts); the gateway, like the chat
//! dialect, counts the whole prompt in `prompt_tokens` with the cache hits
//! as a part of it. Cache writes are billed as ordinary prompt tokens.

use serde_json::{Value, json};

pub(super) use crate::meter::answer::{from_chat, from_messages};
use crate::pricing::Usage;

/// The gateway's usage as a messages `usage` object. Chat upstreams do not
/// report cache writes, so `cache_creation_input_tokens` is always 0.
pub(super) fn to_messages(usage: &Usage) -> Value {
    let cached = usage.cached_tokens.clamp(0, usage.prompt_tokens.max(0));
    json!({
        "input_tokens": usage.prompt_tokens.max(0) - cached,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    })
}

/// The gateway's usage as a chat `usage` object.
pub(super) fn to_chat(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": { "cached_tokens": usage.cached_tokens },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_usage_round_trips_through_the_messages_shape() {
        let usage = Usage { prompt_tokens: 30, completion_tokens: 7, cached_tokens: 12 };
        assert_eq!(from_messages(&to_messages(&usage)), Some(usage));
        assert_eq!(from_chat(&to_chat(&usage)), Some(usage));
        assert_eq!(from_chat(&Value::Null), None);
    }
}
