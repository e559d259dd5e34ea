//! Text log lines without terminal colours, as `tracing_subscriber`'s
//! default (full) format writes them, but written with plain string writes
//! rather than `write!` through styles that paint nothing: every request's
//! access line passes through here. `PlainText` lays out the line (time,
//! level, spans with their fields, target), `PlainFields` writes the fields.

use std::fmt;

use tracing::{Event, Level, Subscriber, field::Field};
use tracing_subscriber::{
    fmt::{
        FmtContext, FormatEvent, FormatFields, FormattedFields,
        format::{Format, Full, Writer},
        time::FormatTime as _,
    },
    registry::LookupSpan,
};

use crate::clock::CachedTime;

/// The full format's line without colours, time stamped by `CachedTime`.
pub(crate) struct PlainText;

// === impl PlainText ===

impl<S, N> FormatEvent<S, N> for PlainText
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        if meta.target() == "log" {
            // Bridged from the `log` crate: its own target and place are in
            // fields, which the full format knows how to read back.
            let full: Format<Full, CachedTime> = tracing_subscriber::fmt::format().with_timer(CachedTime);
            return full.format_event(ctx, writer, event);
        }
        if CachedTime.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        writer.write_char(' ')?;
        writer.write_str(level(meta.level()))?;
        writer.write_char(' ')?;
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                seen = true;
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
            }
            if seen {
                writer.write_char(' ')?;
            }
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// A level as the full format writes it, five characters wide.
fn level(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// Fields of a text line without terminal colours: `name=value` (values as
/// `Debug`, so strings are quoted), the message bare, as the default
/// formatter writes them, but without painting each name with an empty
/// style, and with plain strings and numbers written directly rather than
/// through `Debug`. Makes `PlainVisitor`s.
pub(crate) struct PlainFields;

/// Writes one event's fields as `PlainFields` describes.
pub(crate) struct PlainVisitor<'w> {
    writer: Writer<'w>,
    result: fmt::Result,
    first: bool,
}

/// A string field's value as `Debug` writes it (quoted, escaped), written
/// directly when `Debug` would leave it as it is.
pub(crate) fn write_str(out: &mut impl fmt::Write, value: &str) -> fmt::Result {
    if value.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\') {
        out.write_char('"')?;
        out.write_str(value)?;
        out.write_char('"')
    } else {
        write!(out, "{value:?}")
    }
}

// === impl PlainFields ===

impl<'w> tracing_subscriber::field::MakeVisitor<Writer<'w>> for PlainFields {
    type Visitor = PlainVisitor<'w>;

    fn make_visitor(&self, writer: Writer<'w>) -> PlainVisitor<'w> {
        PlainVisitor { writer, result: Ok(()), first: true }
    }
}

// === impl PlainVisitor ===

impl PlainVisitor<'_> {
    /// Writes the separator and `name=` (nothing for the message).
    fn name(&mut self, field: &Field) -> fmt::Result {
        if !std::mem::take(&mut self.first) {
            self.writer.write_char(' ')?;
        }
        if field.name() != "message" {
            self.writer.write_str(field.name())?;
            self.writer.write_char('=')?;
        }
        Ok(())
    }

    fn write(&mut self, field: &Field, value: impl FnOnce(&mut Self) -> fmt::Result) {
        if self.result.is_ok() {
            self.result = self.name(field).and_then(|()| value(self));
        }
    }
}

impl tracing::field::Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, |this| write_str(&mut this.writer, value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.write(field, |this| this.writer.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.write(field, |this| this.writer.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.write(field, |this| write!(this.writer, "{value:?}"));
    }
}

impl tracing_subscriber::field::VisitOutput<fmt::Result> for PlainVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl tracing_subscriber::field::VisitFmt for PlainVisitor<'_> {
    fn writer(&mut self) -> &mut dyn std::fmt::Write {
        &mut self.writer
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
pub(crate) mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Lines written, shared with the subscriber that writes them.
    #[derive(Clone, Default)]
    pub(crate) struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        pub(crate) fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn plain_fields_are_written_as_debug_writes_them() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let lines = lines.clone();
                move || lines.clone()
            })
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_level(false)
            .fmt_fields(PlainFields)
            .finish();
        let odd = "quote \" back \\ tab\t é \u{7f}";
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(path = "/v1/chat", odd, status = 200u64, delta = -3i64, method = %"POST", ok = true, "request {}", 1);
            tracing::info!(zero = 0u64, max = u64::MAX, min = i64::MIN, top = i64::MAX, none = 0i64, "edges");
        });
        let line = lines.text();
        let expected = format!(
            "request 1 path=\"/v1/chat\" odd={odd:?} status=200 delta=-3 method=POST ok=true\n\
             edges zero=0 max={} min={} top={} none=0\n",
            u64::MAX,
            i64::MIN,
            i64::MAX
        );
        assert_eq!(line, expected);
    }

    /// The events every format is checked on: in no span, in nested spans
    /// with and without fields, at every level, with a target of their own.
    fn log_events() {
        tracing::warn!(reason = "none", "outside any span");
        let outer = tracing::info_span!("request", request_id = "abc", n = 3);
        let _outer = outer.enter();
        tracing::info!(target: "gw_data_plane::access", method = %"POST", status = 200u64, path = "/v1", "request");
        let inner = tracing::info_span!("bare");
        let _inner = inner.enter();
        tracing::error!(odd = "a \"quoted\" word", "inner");
        tracing::info!(target: "log", "bridged");
    }

    #[test]
    fn lines_are_what_the_full_format_writes_without_colours() {
        let (full, plain) = (Lines::default(), Lines::default());
        let subscriber = |lines: &Lines| {
            let lines = lines.clone();
            tracing_subscriber::fmt()
                .with_writer(move || lines.clone())
                .with_ansi(false)
                .with_timer(CachedTime)
                .fmt_fields(PlainFields)
        };
        tracing::subscriber::with_default(subscriber(&full).finish(), log_events);
        tracing::subscriber::with_default(subscriber(&plain).event_format(PlainText).finish(), log_events);
        // The time stamps differ; the rest must not.
        let untimed = |text: String| -> Vec<String> {
            text.lines().map(|line| line.split_once(' ').unwrap().1.to_owned()).collect()
        };
        let (full, plain) = (untimed(full.text()), untimed(plain.text()));
        assert_eq!(full.len(), 4, "{full:?}");
        assert_eq!(plain, full);
        assert!(
            full[1].starts_with(r#" INFO request{request_id="abc" n=3}: gw_data_plane::access: request "#),
            "{full:?}"
        );
    }
}
