//! Conversation affinity: requests of one conversation go to the channel
//! and key that served it last, so the upstream's prompt cache keeps
//! hitting, while that pair stays healthy; they move only when it fails.
//!
//! A conversation is named, in this order, by the body's
//! `prompt_cache_key`, the Codex `session_id` (or `session-id`,
//! `conversation_id`) header, Claude Code's `x-claude-code-session-id`
//! header, then the body's `user` (OpenAI) or `metadata.user_id`
//! (messages). The name is hashed with a per-process key together with the
//! model and group, so no client string is kept. The map lives on this data
//! plane only, holds at most `capacity` conversations (two generations: the
//! older is dropped whole when the newer fills) and forgets one idle longer
//! than `idle`.

use std::{
    collections::HashMap,
    hash::BuildHasher,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use axum::http::{HeaderMap, HeaderName};
use serde::Deserialize;

use crate::json_body::JsonBody;

/// Default most conversations remembered.
pub const DEFAULT_CAPACITY: usize = 100_000;
/// Default time after which an idle conversation is forgotten.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(3600);
/// Longest conversation name read; longer ones are cut before hashing.
const MAX_NAME: usize = 512;

/// Headers that name a conversation, after `prompt_cache_key`: Codex's
/// (several spellings over its versions), then Claude Code's.
const SESSION_HEADERS: [HeaderName; 4] = [
    HeaderName::from_static("session_id"),
    HeaderName::from_static("session-id"),
    HeaderName::from_static("conversation_id"),
    HeaderName::from_static("x-claude-code-session-id"),
];

/// Conversation → (channel id, key id), bounded.
pub struct Affinity {
    generations: Mutex<Generations>,
    /// Keys the hash of conversation names.
    hasher: std::collections::hash_map::RandomState,
    capacity: usize,
    idle: Duration,
}

/// The channel and key a conversation is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub channel: String,
    pub key: String,
    last_used: Instant,
}

/// A conversation of one model in one group, hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Session(u64);

#[derive(Default)]
struct Generations {
    current: HashMap<Session, Binding>,
    previous: HashMap<Session, Binding>,
}

/// What of a body's `metadata` may name its conversation.
#[derive(Deserialize)]
struct MetadataHints {
    #[serde(default)]
    user_id: Option<serde_json::Value>,
}

// === impl Affinity ===

impl Affinity {
    /// A map of at most `capacity` conversations (0 turns affinity off),
    /// each forgotten after `idle` without a request.
    pub fn new(capacity: usize, idle: Duration) -> Affinity {
        Affinity {
            generations: Mutex::default(),
            hasher: std::collections::hash_map::RandomState::new(),
            capacity,
            idle,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // Every update is a map insert or removal: nothing is left half done.
        self.generations.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The conversation of a request for `model` in `group` with `headers`
    /// and JSON `body` (`None` for other bodies); `None` when nothing names
    /// one or affinity is off.
    pub fn session(&self, headers: &HeaderMap, body: Option<&JsonBody>, model: &str, group: &str) -> Option<Session> {
        if self.capacity == 0 {
            return None;
        }
        let name = conversation_name(headers, body)?;
        Some(Session(self.hasher.hash_one((name.as_str(), model, group))))
    }

    /// The (channel id, key id) `session` was last served by, unless it
    /// has been idle too long.
    pub fn get(&self, session: Session) -> Option<(String, String)> {
        let mut generations = self.lock();
        let now = Instant::now();
        let binding = match generations.current.get_mut(&session) {
            Some(binding) => binding,
            None => {
                let moved = generations.previous.remove(&session)?;
                generations.insert(session, moved, self.capacity)
            }
        };
        if now.duration_since(binding.last_used) > self.idle {
            generations.current.remove(&session);
            return None;
        }
        binding.last_used = now;
        Some((binding.channel.clone(), binding.key.clone()))
    }

    /// Binds `session` to `channel` and `key` (they just served it).
    pub fn bind(&self, session: Session, channel: &str, key: &str) {
        let mut generations = self.lock();
        if let Some(binding) = generations.current.get_mut(&session)
            && binding.channel == channel
            && binding.key == key
        {
            binding.last_used = Instant::now();
            return;
        }
        generations.previous.remove(&session);
        let binding = Binding { channel: channel.to_owned(), key: key.to_owned(), last_used: Instant::now() };
        generations.insert(session, binding, self.capacity);
    }

    /// Conversations remembered (both generations).
    pub fn len(&self) -> usize {
        let generations = self.lock();
        generations.current.len() + generations.previous.len()
    }

    /// Whether no conversation is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// === impl Generations ===

impl Generations {
    /// Puts `binding` in the current generation; when that holds half of
    /// `capacity`, it becomes the previous one first (the older dropped).
    fn insert(&mut self, session: Session, binding: Binding, capacity: usize) -> &mut Binding {
        if self.current.len() >= (capacity / 2).max(1) {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.entry(session).insert_entry(binding).into_mut()
    }
}

/// The string that names the request's conversation, by the order in the
/// module header; `None` when nothing does.
fn conversation_name(headers: &HeaderMap, body: Option<&JsonBody>) -> Option<String> {
    // Top-level fields the body was read into already: only these small
    // values are parsed, never the prompt around them.
    let value = |name: &str| body?.value::<serde_json::Value>(name);
    let text = |value: Option<serde_json::Value>| -> Option<String> {
        let name = match value? {
            serde_json::Value::String(s) => s.trim().to_owned(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => return None,
        };
        (!name.is_empty()).then(|| cut(name))
    };
    let header = |name: &HeaderName| {
        let value = headers.get(name)?.to_str().ok()?.trim();
        (!value.is_empty()).then(|| cut(value.to_owned()))
    };
    let tagged = |tag: &str, name: Option<String>| name.map(|name| format!("{tag}:{name}"));
    tagged("cache", text(value("prompt_cache_key")))
        .or_else(|| SESSION_HEADERS.iter().find_map(|name| tagged("session", header(name))))
        .or_else(|| tagged("user", text(value("user"))))
        .or_else(|| {
            let metadata = body?.value::<MetadataHints>("metadata")?;
            tagged("user", text(metadata.user_id))
        })
}

/// `name` cut to `MAX_NAME` bytes at a character boundary.
fn cut(mut name: String) -> String {
    if name.len() > MAX_NAME {
        let mut end = MAX_NAME;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap())).collect()
    }

    fn json(body: &'static str) -> Option<JsonBody> {
        JsonBody::parse(bytes::Bytes::from_static(body.as_bytes())).ok()
    }

    #[test]
    fn the_conversation_is_named_in_the_documented_order() {
        let name = |headers: &HeaderMap, body: &'static str| conversation_name(headers, json(body).as_ref());
        let all = headers(&[("session_id", "codex"), ("x-claude-code-session-id", "claude")]);
        let body = r#"{"prompt_cache_key":"pck","user":"u","metadata":{"user_id":"m"}}"#;
        assert_eq!(name(&all, body).unwrap(), "cache:pck");
        assert_eq!(name(&all, r#"{"user":"u"}"#).unwrap(), "session:codex");
        let claude = headers(&[("x-claude-code-session-id", "claude")]);
        assert_eq!(name(&claude, r#"{"user":"u"}"#).unwrap(), "session:claude");
        assert_eq!(name(&HeaderMap::new(), r#"{"user":"u"}"#).unwrap(), "user:u");
        assert_eq!(name(&HeaderMap::new(), r#"{"user":7}"#).unwrap(), "user:7");
        assert_eq!(name(&HeaderMap::new(), r#"{"metadata":{"user_id":"m"}}"#).unwrap(), "user:m");
        assert_eq!(name(&HeaderMap::new(), r#"{"user":"  "}"#), None);
        assert_eq!(name(&HeaderMap::new(), "not json"), None);
        assert_eq!(conversation_name(&HeaderMap::new(), None), None, "a form body names none");
        // Only top-level fields count: a role or a nested key is not one.
        let roles = r#"{"messages":[{"role":"user","content":"say \"user\": 1","user":"x"}]}"#;
        assert_eq!(name(&HeaderMap::new(), roles), None);
        let spaced = r#"{"messages":[{"role":"user"}], "user"
            : "u2"}"#;
        assert_eq!(name(&HeaderMap::new(), spaced).as_deref(), Some("user:u2"));
        // One odd field spoils no other, and escaped names are read.
        assert_eq!(name(&HeaderMap::new(), r#"{"metadata":"x","us\u0065r":"u3"}"#).as_deref(), Some("user:u3"));
        let odd = r#"{"prompt_cache_key":{"a":1},"metadata":{"user_id":"m2"}}"#;
        assert_eq!(name(&HeaderMap::new(), odd).as_deref(), Some("user:m2"));
    }

    #[test]
    fn sessions_differ_by_model_and_group_and_keep_no_client_string() {
        let affinity = Affinity::new(10, DEFAULT_IDLE);
        let h = headers(&[("session_id", "s1")]);
        let a = affinity.session(&h, None, "m", "g").unwrap();
        assert_eq!(affinity.session(&h, None, "m", "g"), Some(a));
        assert_ne!(affinity.session(&h, None, "m2", "g"), Some(a));
        assert_ne!(affinity.session(&h, None, "m", "g2"), Some(a));
        assert_eq!(Affinity::new(0, DEFAULT_IDLE).session(&h, None, "m", "g"), None, "capacity 0 is off");
    }

    #[test]
    fn a_binding_is_kept_rebound_and_forgotten_when_idle() {
        let affinity = Affinity::new(10, Duration::from_secs(3600));
        let s = Session(1);
        assert_eq!(affinity.get(s), None);
        affinity.bind(s, "c1", "k1");
        assert_eq!(affinity.get(s), Some(("c1".into(), "k1".into())));
        affinity.bind(s, "c2", "k2");
        assert_eq!(affinity.get(s), Some(("c2".into(), "k2".into())));
        let forgetful = Affinity::new(10, Duration::ZERO);
        forgetful.bind(s, "c1", "k1");
        let bound = Instant::now();
        while bound.elapsed().is_zero() {
            std::hint::spin_loop();
        }
        assert_eq!(forgetful.get(s), None);
    }

    #[test]
    fn the_map_stays_within_its_capacity() {
        let affinity = Affinity::new(100, DEFAULT_IDLE);
        for i in 0..1_000 {
            affinity.bind(Session(i), "c", "k");
            assert!(affinity.len() <= 100, "{} at {i}", affinity.len());
        }
        assert_eq!(affinity.get(Session(999)), Some(("c".into(), "k".into())), "recent ones are kept");
        assert_eq!(affinity.get(Session(0)), None, "old ones are dropped");
    }
}
