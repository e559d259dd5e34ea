//! The event relays of the messages dialect, for the one streaming pump
//! (`meter::pump`): messages events passed through byte for byte, and the
//! two dialect translators. Usage and answer text go to the meter as they
//! pass; each relay knows the event that ends its stream.

use bytes::Bytes;

use crate::{
    meter::answer::MessagesStreamUsage,
    meter::event::{MessagesEvent, messages_event_text},
    meter::{Meter, pump::EventRelay},
    translate::{ChatToMessagesStream, MessagesToChatStream, SseEvent},
};

/// Messages events passed through untouched, usage read on the way.
#[derive(Default)]
pub struct PassMessages {
    usage: MessagesStreamUsage,
    done: bool,
}

/// A chat-completions stream from the upstream, as messages events.
pub struct ChatAsMessages {
    translator: ChatToMessagesStream,
    done: bool,
}

/// A messages stream from the upstream, as chat-completion chunks.
pub struct MessagesAsChat {
    translator: MessagesToChatStream,
    done: bool,
}

/// Feeds the text of translated messages `events` to `meter`.
fn meter_messages_events(events: &[SseEvent], meter: &mut Meter) {
    for event in events.iter().filter(|e| e.event == Some("content_block_delta")) {
        if let Some(text) = messages_event_text(event.data.as_bytes()) {
            meter.add_text(&text);
        }
    }
}

/// Whether a messages event is the stream's last (`message_stop`).
fn is_message_stop(data: &[u8]) -> bool {
    data.windows(14).any(|w| w == b"\"message_stop\"")
}

/// Whether translated messages `events` include the last one.
fn ends_messages(events: &[SseEvent]) -> bool {
    events.iter().any(|e| e.event == Some("message_stop"))
}

// === impl PassMessages ===

impl EventRelay for PassMessages {
    fn event(&mut self, raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes {
        // Read once, for its usage and its text.
        let event = MessagesEvent::read(data);
        self.usage.observe_event(&event);
        if let Some(meter) = meter {
            meter.read_event(data);
            if let Some(text) = event.text(data) {
                meter.add_text(text);
            }
            if let Some(usage) = self.usage.usage() {
                meter.observe(usage);
            }
            if !data.is_empty() {
                meter.add_chunks(1);
            }
        }
        self.done |= is_message_stop(data);
        raw
    }

    fn finish(&mut self, _meter: Option<&mut Meter>) -> Bytes {
        Bytes::new()
    }

    fn complete(&self) -> bool {
        self.done
    }
}

// === impl ChatAsMessages ===

impl ChatAsMessages {
    /// A relay for one stream.
    pub fn new() -> ChatAsMessages {
        ChatAsMessages { translator: ChatToMessagesStream::new(), done: false }
    }

    fn translated(&mut self, events: Vec<SseEvent>, meter: Option<&mut Meter>) -> Bytes {
        if let Some(meter) = meter {
            meter_messages_events(&events, meter);
            if let Some(usage) = self.translator.usage() {
                meter.observe(usage);
            }
        }
        self.done |= ends_messages(&events);
        SseEvent::encode(&events)
    }
}

impl EventRelay for ChatAsMessages {
    fn event(&mut self, _raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes {
        if data.is_empty() {
            return Bytes::new();
        }
        let mut meter = meter;
        if let Some(meter) = meter.as_deref_mut() {
            meter.read_event(data);
        }
        let events = self.translator.push(data);
        self.translated(events, meter)
    }

    fn finish(&mut self, meter: Option<&mut Meter>) -> Bytes {
        let events = self.translator.finish();
        self.translated(events, meter)
    }

    fn complete(&self) -> bool {
        self.done
    }
}

// === impl MessagesAsChat ===

impl MessagesAsChat {
    /// A relay whose chunks say they were `created` then; the usage chunk
    /// is sent only if the client asked (`include_usage`).
    pub fn new(include_usage: bool, created: i64) -> MessagesAsChat {
        MessagesAsChat { translator: MessagesToChatStream::new(include_usage, created), done: false }
    }
}

impl EventRelay for MessagesAsChat {
    fn event(&mut self, _raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes {
        if data.is_empty() {
            return Bytes::new();
        }
        if let Some(meter) = meter {
            meter.read_event(data);
            // Read once, for the meter's text and the translation.
            let event = MessagesEvent::read(data);
            if let Some(text) = event.text(data) {
                meter.add_text(text);
            }
            let out = SseEvent::encode(&self.translator.push_read(&event, data));
            if let Some(usage) = self.translator.usage() {
                meter.observe(usage);
            }
            self.done |= is_message_stop(data);
            return out;
        }
        self.done |= is_message_stop(data);
        SseEvent::encode(&self.translator.push(data))
    }

    fn finish(&mut self, _meter: Option<&mut Meter>) -> Bytes {
        let out = SseEvent::encode(&self.translator.finish());
        super::note_dropped(self.translator.dropped(), "stream");
        out
    }

    fn complete(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;
    use crate::meter::{Charge, UsageSink, pump::Events, pump::Relay as _};

    /// Sends `chunks` through `relay` with a meter; the bytes sent on.
    fn relay<E: EventRelay>(relay: E, chunks: &[Vec<u8>]) -> Vec<u8> {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut meter = Meter::new(Charge::test("r1"), UsageSink::new(tx, "node"), 40);
        let mut events = Events::new(relay);
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend_from_slice(&events.push(Bytes::copy_from_slice(chunk), Some(&mut meter)));
        }
        out.extend_from_slice(&events.finish(Some(&mut meter)));
        let _ = events.complete();
        out
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_upstream_stream_is_relayed_in_either_dialect_without_a_panic(
            chunks in crate::fuzz::sse_chunks(),
            include_usage: bool,
        ) {
            let passed = relay(PassMessages::default(), &chunks);
            proptest::prop_assert_eq!(passed, chunks.concat(), "messages events pass byte for byte");
            let _ = relay(ChatAsMessages::new(), &chunks);
            let _ = relay(MessagesAsChat::new(include_usage, 0), &chunks);
        }
    }
}
