//! A request's access line written straight to the log writer: the line
//! `PlainText` writes for the same event in the request's span, laid out
//! here without tracing's dispatch, span lookup and field visitors, which
//! cost about as much as the rest of a small request's logging. Used only
//! where that is all the event would become: plain text lines (no terminal,
//! no JSON), levels chosen by target, and no OpenTelemetry layer (which
//! turns events into span events). Anywhere else `write` says no and the
//! caller logs the event through tracing as before.

use std::{io::Write as _, sync::OnceLock};

use tracing_subscriber::fmt::{MakeWriter as _, format::Writer, time::FormatTime as _};

use crate::{clock::CachedTime, lines::Lines, text};

/// One field's value.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// A string field, as `Debug` writes it (quoted).
    Str(&'a str),
    /// A field recorded by `Display` (`%value`), as it is.
    Bare(&'a str),
    U64(u64),
    Bool(bool),
}

/// Where direct lines go, once `init` found them possible.
static DIRECT: OnceLock<Lines<std::io::Stderr>> = OnceLock::new();

thread_local! {
    /// The line being laid out, reused.
    static LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Lines written by `write` go to `lines` from now on.
pub(crate) fn install(lines: Lines<std::io::Stderr>) {
    let _ = DIRECT.set(lines);
}

/// Writes the INFO line of `target` saying `message` with `fields`, in the
/// span `request{request_id=<request_id>}`, as the installed subscriber
/// would; `false` (nothing written) when it would write it some other way,
/// and the caller logs it through tracing. The caller checks first that
/// the target's INFO lines are enabled.
pub fn write(request_id: &str, target: &str, message: &str, fields: &[(&str, Value<'_>)]) -> bool {
    let Some(lines) = DIRECT.get() else {
        return false;
    };
    LINE.with_borrow_mut(|line| {
        line.clear();
        if CachedTime.format_time(&mut Writer::new(line)).is_err() {
            line.push_str("<unknown time>");
        }
        format(line, request_id, target, message, fields);
        // A log line that cannot be written has nowhere to be reported.
        let _ = lines.make_writer().write_all(line.as_bytes());
    });
    true
}

/// The line after its time stamp.
fn format(line: &mut String, request_id: &str, target: &str, message: &str, fields: &[(&str, Value<'_>)]) {
    line.push_str("  INFO request{request_id=");
    line.push_str(request_id);
    line.push_str("}: ");
    line.push_str(target);
    line.push_str(": ");
    line.push_str(message);
    for (name, value) in fields {
        line.push(' ');
        line.push_str(name);
        line.push('=');
        match value {
            Value::Str(value) => {
                let _ = text::write_str(line, value);
            }
            Value::Bare(value) => line.push_str(value),
            Value::U64(value) => line.push_str(itoa::Buffer::new().format(*value)),
            Value::Bool(value) => line.push_str(if *value { "true" } else { "false" }),
        }
    }
    line.push('\n');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::text::tests::Lines as Capture;

    /// The line the plain text subscriber writes for the access event,
    /// and the one `format` lays out, both without their time stamps.
    fn both(request_id: &str, path: &str, model: &str, status: u64, closed: bool) -> (String, String) {
        let capture = Capture::default();
        let subscriber = {
            let capture = capture.clone();
            tracing_subscriber::fmt()
                .with_writer(move || capture.clone())
                .with_ansi(false)
                .with_timer(CachedTime)
                .fmt_fields(text::PlainFields)
                .event_format(text::PlainText)
                .finish()
        };
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", request_id = %request_id);
            tracing::info!(
                target: "gw_data_plane::access",
                parent: &span,
                method = %"POST",
                path,
                status,
                model,
                client_closed = closed,
                "request"
            );
        });
        let written = capture.text();
        let mut direct = String::from("<time>");
        let fields = [
            ("method", Value::Bare("POST")),
            ("path", Value::Str(path)),
            ("status", Value::U64(status)),
            ("model", Value::Str(model)),
            ("client_closed", Value::Bool(closed)),
        ];
        format(&mut direct, request_id, "gw_data_plane::access", "request", &fields);
        let untimed = |line: &str| line.split_once(' ').map(|(_, rest)| rest.to_owned()).unwrap_or_default();
        (untimed(&written), untimed(&direct))
    }

    #[test]
    fn the_direct_line_is_the_one_the_subscriber_writes() {
        let (written, direct) = both("0190abcdef", "/v1/chat/completions", "gpt-4o", 200, false);
        assert_eq!(direct, written);
        assert!(
            written
                .starts_with(" INFO request{request_id=0190abcdef}: gw_data_plane::access: request method=POST path=")
        );
    }

    proptest! {
        #[test]
        fn it_stays_so_whatever_the_values(
            id in "[0-9a-f]{0,32}",
            path in any::<String>(),
            model in any::<String>(),
            status in any::<u64>(),
            closed in any::<bool>(),
        ) {
            let (written, direct) = both(&id, &path, &model, status, closed);
            prop_assert_eq!(direct, written);
        }
    }
}
