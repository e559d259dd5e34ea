//! What byte searches tell of a stream event's data without parsing it:
//! whether it may report usage (then it is parsed), and the markers of a
//! stream's end. `"usage"` is found as written, quotes included; a `\u`
//! escape anywhere (which could spell the name) counts as naming it, so an
//! event a glance says names no usage certainly reports none.

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// One glance at an event's data.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Glance {
    /// It may name `usage`.
    pub usage: bool,
    /// It holds `"message_stop"`: a messages stream's last event.
    pub message_stop: bool,
    /// It holds `"response.completed"`, `"response.failed"` or
    /// `"response.incomplete"`: a typed stream's last event.
    pub terminal: bool,
}

/// The searches a glance makes, each built once.
struct Needles {
    usage: Finder<'static>,
    message_stop: Finder<'static>,
    /// What every typed event's type begins with; the terminal ones are
    /// told by what follows.
    response: Finder<'static>,
}

static NEEDLES: LazyLock<Needles> = LazyLock::new(|| Needles {
    usage: Finder::new(b"\"usage\""),
    message_stop: Finder::new(b"\"message_stop\""),
    response: Finder::new(b"\"response."),
});

// === impl Glance ===

impl Glance {
    /// Glances at the data of a messages event: its usage and
    /// `message_stop` (`terminal` left false).
    pub fn messages(data: &[u8]) -> Glance {
        let n = &*NEEDLES;
        Glance {
            usage: n.usage.find(data).is_some() || has_unicode_escape(data),
            message_stop: n.message_stop.find(data).is_some(),
            terminal: false,
        }
    }

    /// Glances at the data of a typed event: its usage and whether it ends
    /// the stream (`message_stop` left false).
    pub fn typed(data: &[u8]) -> Glance {
        let n = &*NEEDLES;
        let terminal = n.response.find_iter(data).any(|at| {
            let kind = &data[at + b"\"response.".len()..];
            [&b"completed\""[..], b"failed\"", b"incomplete\""].iter().any(|end| kind.starts_with(end))
        });
        Glance { usage: n.usage.find(data).is_some() || has_unicode_escape(data), message_stop: false, terminal }
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
    fn usage_is_seen_as_written_and_escapes_as_anything() {
        let delta = br#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}"#;
        assert_eq!(Glance::messages(delta), Glance::default());
        assert_eq!(Glance::typed(delta), Glance::default());
        let usage = Glance::messages(br#"{"type":"message_delta","usage":{"output_tokens":3}}"#);
        assert!(usage.usage && !usage.message_stop);
        assert!(Glance::messages(br#"{"type":"message_stop"}"#).message_stop);
        assert!(Glance::typed(br#"{"type":"response.failed","response":{}}"#).terminal);
        assert!(!Glance::typed(br#"{"type":"response.output_text.delta","delta":"response.failed x"}"#).terminal);
        let escaped = br#"{"type":"message_delta","\u0075sage":{"output_tokens":3}}"#;
        assert!(Glance::messages(escaped).usage && Glance::typed(escaped).usage);
        let quoted = Glance::messages(br#"{"text":"say \"usage\" twice"}"#);
        assert!(!quoted.usage, "a quote inside a string is no name");
        assert_eq!(Glance::typed(b"[DONE]"), Glance::default());
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn what_a_glance_misses_a_parse_does_not_find(
            data in prop_oneof![event(), crate::fuzz::body()],
            escape: bool,
        ) {
            // `usage` written with an escape of its first letter.
            let data = if escape {
                String::from_utf8_lossy(&data).replacen("\"usage\"", "\"\\u0075sage\"", 1).into_bytes()
            } else {
                data
            };
            let glance = Glance::messages(&data);
            if !glance.usage {
                prop_assert!(MessagesEvent::read(&data).usage().is_none());
            }
            prop_assert_eq!(glance.message_stop, holds(&data, b"\"message_stop\""));
            let glance = Glance::typed(&data);
            if !glance.usage {
                prop_assert!(TypedEvent::read(&data).usage().is_none());
            }
            prop_assert_eq!(glance.terminal, TypedEvent::is_terminal(&data));
        }
    }
}
