//! The relay of messages events passed through byte for byte, for the one
//! streaming pump (`meter::pump`): the stream coding agents send most. Each
//! event gets a glance (`meter::glance`); only the opening ones and those
//! that may report usage are parsed, by the lean messages-event reader, and
//! the text is left to the meter to read if it is ever counted (translated
//! streams go through `through::Through`).

use bytes::Bytes;

use crate::meter::{
    Meter, answer::MessagesStreamUsage, event::MessagesEvent, glance::Glance, pump::EventRelay, text::Carrier,
};

/// Messages events passed through untouched, usage read on the way.
#[derive(Default)]
pub struct PassMessages {
    usage: MessagesStreamUsage,
    /// An event past the opening ones (`message_start`, the first
    /// `content_block_start`, `ping`) went by.
    started: bool,
    done: bool,
}

// === impl PassMessages ===

impl EventRelay for PassMessages {
    fn event(&mut self, raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes {
        let glance = Glance::messages(data);
        // Parsed only while its type may start the answer, or when it may
        // report usage; the text waits in the meter until it is counted.
        if !self.started || glance.usage {
            let event = MessagesEvent::read(data);
            self.usage.observe_event(&event);
            self.started |=
                !data.is_empty() && !matches!(event.kind(), Some("message_start" | "content_block_start" | "ping"));
        }
        if let Some(meter) = meter {
            meter.read_event(data);
            if !data.is_empty() {
                meter.add_event(data, Carrier::Messages);
            }
            if let Some(usage) = self.usage.usage() {
                meter.observe(usage);
            }
            if !data.is_empty() {
                meter.add_chunks(1);
            }
        }
        self.done |= glance.message_stop;
        raw
    }

    fn finish(&mut self, _meter: Option<&mut Meter>) -> Bytes {
        Bytes::new()
    }

    fn complete(&self) -> bool {
        self.done
    }

    fn started(&self) -> bool {
        self.started
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

    #[test]
    fn an_answer_starts_with_its_first_token_not_its_opening_events() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut meter = Meter::new(Charge::test("r1"), UsageSink::new(tx, "node"), 40);
        let mut push = |events: &mut dyn crate::meter::pump::Relay, event: &str| {
            events.push(Bytes::copy_from_slice(event.as_bytes()), Some(&mut meter));
            events.started()
        };
        let mut passed = Events::new(PassMessages::default());
        let opening = [
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\"}}\n\n",
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        ];
        for event in opening {
            assert!(!push(&mut passed, event), "{event}");
        }
        let delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}}\n\n";
        assert!(push(&mut passed, delta));

        let (decoder, encoder) = crate::translate::chat_to_messages_stream();
        let mut translated = Events::new(super::super::through::Through::new(decoder, encoder));
        let role = "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        assert!(!push(&mut translated, role), "the role-only chunk opens the answer");
        let token =
            "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
        assert!(push(&mut translated, token));
    }

    /// Every event parsed whole, its text read as it passes: what the
    /// glancing relay must agree with.
    #[derive(Default)]
    struct Parsed {
        usage: MessagesStreamUsage,
        started: bool,
        done: bool,
    }

    impl EventRelay for Parsed {
        fn event(&mut self, raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes {
            let event = MessagesEvent::read(data);
            self.usage.observe_event(&event);
            self.started |=
                !data.is_empty() && !matches!(event.kind(), Some("message_start" | "content_block_start" | "ping"));
            if let Some(meter) = meter {
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
            self.done |= data.windows(14).any(|w| w == b"\"message_stop\"");
            raw
        }

        fn finish(&mut self, _meter: Option<&mut Meter>) -> Bytes {
            Bytes::new()
        }

        fn complete(&self) -> bool {
            self.done
        }

        fn started(&self) -> bool {
            self.started
        }
    }

    /// What a relay made of `chunks`: the bytes sent, whether it had
    /// started and was complete after each chunk, the usage seen and the
    /// estimate.
    type Outcome = (Vec<u8>, Vec<(bool, bool)>, Option<crate::pricing::Usage>, crate::pricing::Usage);

    fn outcome<E: EventRelay>(relay: E, chunks: &[Vec<u8>]) -> Outcome {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut meter = Meter::new(Charge::test("r1"), UsageSink::new(tx, "node"), 40);
        let mut events = Events::new(relay);
        let (mut out, mut states) = (Vec::new(), Vec::new());
        for chunk in chunks {
            out.extend_from_slice(&events.push(Bytes::copy_from_slice(chunk), Some(&mut meter)));
            states.push((events.started(), events.complete()));
        }
        out.extend_from_slice(&events.finish(Some(&mut meter)));
        states.push((events.started(), events.complete()));
        let (seen, estimate) = (meter.seen(), meter.estimate());
        meter.cancel();
        (out, states, seen, estimate)
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn a_glancing_relay_meters_as_one_that_parses_every_event(
            chunks in proptest::prop_oneof![crate::meter::event::tests::event_stream(), crate::fuzz::sse_chunks()],
        ) {
            proptest::prop_assert_eq!(outcome(PassMessages::default(), &chunks), outcome(Parsed::default(), &chunks));
        }

        #[test]
        fn any_upstream_stream_is_relayed_in_either_dialect_without_a_panic(
            chunks in crate::fuzz::sse_chunks(),
            include_usage: bool,
        ) {
            let passed = relay(PassMessages::default(), &chunks);
            proptest::prop_assert_eq!(passed, chunks.concat(), "messages events pass byte for byte");
            let (decoder, encoder) = crate::translate::chat_to_messages_stream();
            let _ = relay(super::super::through::Through::new(decoder, encoder), &chunks);
            let (decoder, encoder) = crate::translate::messages_to_chat_stream(include_usage, 0);
            let _ = relay(super::super::through::Through::new(decoder, encoder), &chunks);
        }
    }
}
