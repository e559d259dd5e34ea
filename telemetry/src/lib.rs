//! How the gateway's binaries log, written once for all of them: one line
//! per event on standard error, either plain text (colour only when stderr
//! is a terminal, so files and journald get no escape codes) or one JSON
//! object per line with the span fields (the request id on every line of a
//! request). The level comes from `RUST_LOG`, `info` by default.

use std::{io::IsTerminal as _, str::FromStr};

use tracing_subscriber::EnvFilter;

/// The shape of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

// === impl LogFormat ===

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" | "" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("log format must be text or json, not {other:?}")),
        }
    }
}

/// Installs the global subscriber for `format`. Does nothing if one is set
/// already (a test, or an embedding process), which is then kept.
pub fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn formats_parse_by_name() {
        assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
        assert_eq!("TEXT".parse::<LogFormat>().unwrap(), LogFormat::Text);
        assert!("xml".parse::<LogFormat>().is_err());
    }
}
