//! The record of what a translation left out on purpose, so that the caller
//! can log it: a field or block with no place in the target dialect is never
//! dropped silently. Names are static, so recording one never allocates a
//! string and logs stay low-cardinality.

use std::fmt;

/// What one translation dropped because the target dialect has no place
/// for it, each name once, sorted. Empty when nothing was dropped.
///
/// Names in use:
/// - content blocks by their messages type: `thinking`, `redacted_thinking`,
///   `server_tool_use`, `web_search_tool_result`, …; a block type this
///   gateway does not know is `unknown_block`, a chat content part it cannot
///   carry is named by its chat type (`input_audio`, `file`, `refusal`) or
///   `unknown_part`; an `image` or `document` whose source the target
///   cannot reference is `image` or `document`
/// - markers and attributes: `cache_control`, `citations`, `signature`,
///   `is_error`, `name` (a chat message's participant name),
///   `reasoning_content` (chat reasoning replayed in a request)
/// - tools: `server_tool` (a messages server tool), `custom_tool` (a chat
///   tool other than a function), `tool_choice`
/// - request fields by their own name (`top_k`, `seed`, …), except the
///   messages `thinking` configuration, which is `thinking_config` to tell
///   it from the blocks; `function_message` for the deprecated chat role
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dropped(Vec<&'static str>);

// === impl Dropped ===

impl Dropped {
    /// Nothing dropped yet.
    pub fn new() -> Dropped {
        Dropped::default()
    }

    /// True when the translation dropped nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names of what was dropped, sorted, without repeats.
    #[cfg(test)]
    pub fn names(&self) -> &[&'static str] {
        &self.0
    }

    /// Records what `other` dropped too.
    pub fn extend(&mut self, other: &Dropped) {
        for name in &other.0 {
            self.note(name);
        }
    }

    /// Records that `name` was dropped.
    pub(super) fn note(&mut self, name: &'static str) {
        if let Err(at) = self.0.binary_search(&name) {
            self.0.insert(at, name);
        }
    }

    /// Records that a content block of type `kind` was dropped, under its
    /// own name when it is a type the messages API documents.
    pub(super) fn note_block(&mut self, kind: Option<&str>) {
        const KNOWN: &[&str] = &[
            "text",
            "image",
            "document",
            "search_result",
            "tool_use",
            "tool_result",
            "thinking",
            "redacted_thinking",
            "server_tool_use",
            "web_search_tool_result",
            "web_fetch_tool_result",
            "code_execution_tool_result",
            "bash_code_execution_tool_result",
            "text_editor_code_execution_tool_result",
            "mcp_tool_use",
            "mcp_tool_result",
            "container_upload",
        ];
        let known = kind.and_then(|kind| KNOWN.iter().find(|name| **name == kind));
        self.note(known.copied().unwrap_or("unknown_block"));
    }

    /// Records that a chat content part of type `kind` was dropped.
    pub(super) fn note_part(&mut self, kind: Option<&str>) {
        const KNOWN: &[&str] = &["text", "image_url", "input_audio", "file", "refusal"];
        let known = kind.and_then(|kind| KNOWN.iter().find(|name| **name == kind));
        self.note(known.copied().unwrap_or("unknown_part"));
    }
}

/// The names joined by `, `, for a log field.
impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_is_listed_once_in_order() {
        let mut dropped = Dropped::new();
        assert!(dropped.is_empty());
        dropped.note("thinking");
        dropped.note("cache_control");
        dropped.note("thinking");
        assert_eq!(dropped.names(), ["cache_control", "thinking"]);
        assert_eq!(dropped.to_string(), "cache_control, thinking");
    }

    #[test]
    fn unknown_kinds_get_one_static_name() {
        let mut dropped = Dropped::new();
        dropped.note_block(Some("web_search_tool_result"));
        dropped.note_block(Some("hologram"));
        dropped.note_block(None);
        dropped.note_part(Some("input_audio"));
        dropped.note_part(Some("video"));
        assert_eq!(dropped.names(), ["input_audio", "unknown_block", "unknown_part", "web_search_tool_result"]);
    }
}
