//! The answer text a stream carried, counted only for an estimate (no usage
//! came) and for a stream's progress entries. Events are kept as their data
//! and read for their text only when the text is asked for: upstreams
//! almost always report usage, and most streams end before their first
//! progress entry, so reading each event as it passed would be wasted.

use std::borrow::Cow;

use super::{
    answer,
    event::{MessagesEvent, TypedEvent},
};

/// Bytes of unread events room is made for at first.
const UNREAD_START: usize = 4096;

/// How an event's data holds its answer text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// A chat chunk: its choices' content, tool-call arguments and `text`
    /// (`answer::answer_text`). Counts as text even when it holds none.
    Chat,
    /// A messages event: a content block delta's text or tool arguments
    /// (`MessagesEvent::text`).
    Messages,
    /// A typed event of the responses API and its kin: a `….delta`
    /// event's `delta` (`TypedEvent::text`).
    Typed,
}

/// The text an answer carried so far: text handed over as such, then the
/// events not read yet, in the order they came.
#[derive(Debug, Default)]
pub struct AnswerText {
    read: String,
    /// The data of the events not read yet, back to back.
    unread: Vec<u8>,
    /// Where each unread event's data ends in `unread`, and how it holds
    /// its text.
    ends: Vec<(usize, Carrier)>,
    /// A chat chunk came (read or not).
    chat_chunks: bool,
}

// === impl AnswerText ===

impl AnswerText {
    /// Adds `text`, after everything added so far.
    pub fn push_str(&mut self, text: &str) {
        self.read_all();
        self.read.push_str(text);
    }

    /// Adds the text event `data` carries, read only when asked for.
    pub fn push_event(&mut self, data: &[u8], carrier: Carrier) {
        if self.unread.capacity() == 0 {
            // A few dozen events' worth before the first regrowth.
            self.unread.reserve(UNREAD_START);
        }
        self.unread.extend_from_slice(data);
        self.ends.push((self.unread.len(), carrier));
        self.chat_chunks |= carrier == Carrier::Chat;
    }

    /// All the text, the unread events read for it but kept unread.
    pub fn whole(&self) -> Cow<'_, str> {
        let mut text = Cow::Borrowed(self.read.as_str());
        self.each_unread(|piece| text.to_mut().push_str(piece));
        text
    }

    /// All the text, the unread events read into it once and for all.
    pub fn read_all(&mut self) -> &str {
        if !self.ends.is_empty() {
            let mut read = std::mem::take(&mut self.read);
            self.each_unread(|piece| read.push_str(piece));
            self.read = read;
            self.unread.clear();
            self.ends.clear();
        }
        &self.read
    }

    /// Whether nothing that counts as text came: no text once read, and
    /// no chat chunk. Reads the unread events.
    pub fn counts_nothing(&mut self) -> bool {
        self.read_all().is_empty() && !self.chat_chunks
    }

    /// Calls `f` with the text of each unread event, in order.
    fn each_unread(&self, mut f: impl FnMut(&str)) {
        let mut start = 0;
        for &(end, carrier) in &self.ends {
            let data = &self.unread[start..end];
            start = end;
            match carrier {
                Carrier::Chat => f(&answer::answer_text(data)),
                Carrier::Messages => {
                    if let Some(text) = MessagesEvent::read(data).text(data) {
                        f(text);
                    }
                }
                Carrier::Typed => {
                    if let Some(text) = TypedEvent::read(data).text(data) {
                        f(&text);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_in_order_once_asked_for() {
        let mut text = AnswerText::default();
        text.push_str("a");
        text.push_event(br#"{"type":"content_block_delta","delta":{"text":"b"}}"#, Carrier::Messages);
        text.push_event(br#"{"type":"message_delta","delta":{"text":"no"}}"#, Carrier::Messages);
        text.push_event(br#"{"type":"response.output_text.delta","delta":"c"}"#, Carrier::Typed);
        assert_eq!(text.whole(), "abc");
        text.push_str("d");
        text.push_event(br#"{"choices":[{"delta":{"content":"e"}}]}"#, Carrier::Chat);
        assert_eq!(text.whole(), "abcde");
        assert_eq!(text.read_all(), "abcde");
        assert_eq!(text.whole(), "abcde");
    }

    #[test]
    fn a_chat_chunk_counts_even_without_text_and_other_events_only_with_it() {
        let mut text = AnswerText::default();
        assert!(text.counts_nothing());
        text.push_event(br#"{"type":"content_block_delta","delta":{"thinking":"hm"}}"#, Carrier::Messages);
        assert!(text.counts_nothing());
        text.push_event(br#"{"choices":[{"delta":{"role":"assistant"}}]}"#, Carrier::Chat);
        assert!(!text.counts_nothing());
        assert_eq!(text.whole(), "");
    }
}
