//! What byte searches tell of a stream event's data without parsing it:
//! whether it may name usage or carry answer text (then it is parsed, or
//! kept to be read), and the markers of a stream's end. Names are found as
//! written, quotes included; a `\u` escape anywhere (which could spell a
//! name) counts as naming each of them, so a name a glance misses is
//! certainly not there.

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// One glance at an event's data.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Glance {
    /// It may name `usage`.
    pub usage: bool,
    /// It may name `text` or `partial_json` (a messages delta's text).
    pub text: bool,
    /// It may name `delta` (a typed event's text).
    pub delta: bool,
    /// It holds `"message_stop"`: a messages stream's last event.
    pub message_stop: bool,
    /// It holds `"response.completed"`, `"response.failed"` or
    /// `"response.incomplete"`: a typed stream's last event.
    pub terminal: bool,
}

/// The searches a glance makes, each built once.
struct Needles {
    usage: Finder<'static>,
    text: Finder<'static>,
    partial_json: Finder<'static>,
    delta: Finder<'static>,
    message_stop: Finder<'static>,
    terminal: [Finder<'static>; 3],
}

static NEEDLES: LazyLock<Needles> = LazyLock::new(|| Needles {
    usage: Finder::new(b"\"usage\""),
    text: Finder::new(b"\"text\""),
    partial_json: Finder::new(b"\"partial_json\""),
    delta: Finder::new(b"\"delta\""),
    message_stop: Finder::new(b"\"message_stop\""),
    terminal: [
        Finder::new(b"\"response.completed\""),
        Finder::new(b"\"response.failed\""),
        Finder::new(b"\"response.incomplete\""),
    ],
});

// === impl Glance ===

impl Glance {
    /// Glances at the data of a messages event: its usage, text and
    /// `message_stop` (the flags of typed events left false).
    pub fn messages(data: &[u8]) -> Glance {
        let (n, escaped) = (&*NEEDLES, has_unicode_escape(data));
        Glance {
            usage: escaped || n.usage.find(data).is_some(),
            text: escaped || n.text.find(data).is_some() || n.partial_json.find(data).is_some(),
            message_stop: n.message_stop.find(data).is_some(),
            ..Glance::default()
        }
    }

    /// Glances at the data of a typed event: its usage, `delta` and
    /// whether it ends the stream (the flags of messages events left
    /// false).
    pub fn typed(data: &[u8]) -> Glance {
        let (n, escaped) = (&*NEEDLES, has_unicode_escape(data));
        Glance {
            usage: escaped || n.usage.find(data).is_some(),
            delta: escaped || n.delta.find(data).is_some(),
            terminal: n.terminal.iter().any(|name| name.find(data).is_some()),
            ..Glance::default()
        }
    }
}

/// Whether `data` has a `\u` (maybe part of `\\u`, which is no escape:
/// counting it only costs a parse).
fn has_unicode_escape(data: &[u8]) -> bool {
    memchr::memchr_iter(b'\\', data).any(|at| data.get(at + 1) == Some(&b'u'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::meter::event::{MessagesEvent, TypedEvent, tests::event};

    fn holds(data: &[u8], needle: &[u8]) -> bool {
        data.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn names_are_seen_as_written_and_escapes_as_anything() {
        let delta = br#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}"#;
        assert_eq!(Glance::messages(delta), Glance { text: true, ..Glance::default() });
        assert_eq!(Glance::typed(delta), Glance { delta: true, ..Glance::default() });
        let usage = Glance::messages(br#"{"type":"message_delta","usage":{"output_tokens":3}}"#);
        assert!(usage.usage && !usage.text && !usage.message_stop);
        assert!(Glance::messages(br#"{"type":"message_stop"}"#).message_stop);
        assert!(Glance::typed(br#"{"type":"response.failed","response":{}}"#).terminal);
        let escaped = br#"{"type":"message_delta","\u0075sage":{"output_tokens":3}}"#;
        assert!(Glance::messages(escaped).usage && Glance::messages(escaped).text && Glance::typed(escaped).delta);
        let quoted = Glance::messages(br#"{"text":"say \"usage\" twice"}"#);
        assert!(quoted.text && !quoted.usage, "a quote inside a string is no name");
        assert_eq!(Glance::typed(b"[DONE]"), Glance::default());
    }

    /// `event` with one of the names metering reads written with a `\u`
    /// escape of its first letter, where it has one.
    fn escaped(event: Vec<u8>, which: usize) -> Vec<u8> {
        let text = String::from_utf8_lossy(&event).into_owned();
        let names = ["\"usage\"", "\"text\"", "\"partial_json\"", "\"delta\""];
        let name = names[which % names.len()];
        let spelled = format!("\"\\u{:04x}{}", u32::from(name.as_bytes()[1]), &name[2..]);
        text.replacen(name, &spelled, 1).into_bytes()
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn what_a_glance_misses_a_parse_does_not_find(
            data in prop_oneof![event(), crate::fuzz::body()],
            escape: bool,
            which in 0usize..4,
        ) {
            let data = if escape { escaped(data, which) } else { data };
            let (glance, messages) = (Glance::messages(&data), MessagesEvent::read(&data));
            if !glance.usage {
                prop_assert!(messages.usage().is_none());
            }
            if !glance.text {
                prop_assert!(messages.text(&data).is_none());
            }
            prop_assert_eq!(glance.message_stop, holds(&data, b"\"message_stop\""));
            let (glance, typed) = (Glance::typed(&data), TypedEvent::read(&data));
            if !glance.usage {
                prop_assert!(typed.usage().is_none());
            }
            if !glance.delta {
                prop_assert!(typed.text(&data).is_none());
            }
            prop_assert_eq!(glance.terminal, TypedEvent::is_terminal(&data));
        }
    }
}
