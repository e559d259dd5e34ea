//! The time stamp of log lines, as `tracing_subscriber`'s `SystemTime`
//! writes it (RFC 3339, UTC, microseconds), with the date and time of day
//! formatted once per second per thread rather than once per line: every
//! request's access line carries one.

use std::{
    cell::RefCell,
    fmt,
    time::{SystemTime, UNIX_EPOCH},
};

use tracing_subscriber::fmt::{format::Writer, time::FormatTime};

/// `tracing_subscriber::fmt::time::SystemTime`, cached per second.
#[derive(Debug, Clone, Copy, Default)]
pub struct CachedTime;

thread_local! {
    /// The second last formatted on this thread, and its text up to the
    /// fraction (`2026-01-02T03:04:05`).
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

// === impl CachedTime ===

impl FormatTime for CachedTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let (secs, micros) = now();
        let cached = SECOND.with_borrow(|(second, text)| (*second == secs).then(|| w.write_str(text)));
        match cached {
            Some(written) => {
                written?;
                w.write_str(&fraction(micros))
            }
            None => {
                // A new second: the stamp as `SystemTime` writes it, and
                // its text up to the fraction kept if the second did not
                // turn while it was written.
                let mut whole = String::new();
                tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut whole))?;
                if now().0 == secs
                    && let Some((text, _)) = whole.split_once('.')
                {
                    SECOND.with_borrow_mut(|(second, kept)| {
                        kept.clear();
                        kept.push_str(text);
                        *second = secs;
                    });
                }
                w.write_str(&whole)
            }
        }
    }
}

/// Seconds and microseconds past the epoch.
fn now() -> (u64, u32) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (now.as_secs(), now.subsec_micros())
}

/// `.uuuuuuZ`: the fraction of a second `SystemTime` writes.
fn fraction(micros: u32) -> Fraction {
    let mut text = *b".000000Z";
    let mut rest = micros.min(999_999);
    for digit in text[1..7].iter_mut().rev() {
        // `rest % 10` is one decimal digit.
        *digit = b'0' + u8::try_from(rest % 10).unwrap_or(0);
        rest /= 10;
    }
    Fraction(text)
}

/// The ASCII text `fraction` made, kept on the stack.
struct Fraction([u8; 8]);

impl std::ops::Deref for Fraction {
    type Target = str;

    fn deref(&self) -> &str {
        // Only ASCII digits, a dot and a `Z` are ever written into it.
        std::str::from_utf8(&self.0).unwrap_or(".000000Z")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(time: &impl FormatTime) -> String {
        let mut text = String::new();
        time.format_time(&mut Writer::new(&mut text)).expect("formatting a time stamp");
        text
    }

    #[test]
    fn stamps_read_as_system_time_writes_them() {
        for _ in 0..3 {
            let before = stamp(&tracing_subscriber::fmt::time::SystemTime);
            let cached = stamp(&CachedTime);
            let after = stamp(&tracing_subscriber::fmt::time::SystemTime);
            assert_eq!(cached.len(), before.len(), "{cached} vs {before}");
            assert!(before <= cached && cached <= after, "{before} <= {cached} <= {after}");
            std::thread::sleep(std::time::Duration::from_millis(600));
        }
        assert_eq!(&*fraction(42), ".000042Z");
        assert_eq!(&*fraction(999_999), ".999999Z");
    }
}
