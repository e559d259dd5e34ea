//! Reading what a form sent (lists, dollars, whole numbers) and answering
//! a write with a redirect that carries its notice; shared by every page.

use std::str::FromStr;

use axum::response::{IntoResponse, Redirect, Response};

use super::{Console, ConsoleError, page};

/// Redirects to `path` (a console path) with the notice `done`.
pub fn done(console: &Console, path: &str, done: &str) -> Response {
    let separator = if path.contains('?') { '&' } else { '?' };
    Redirect::to(&console.link(&format!("{path}{separator}done={}", page::encode(done)))).into_response()
}

/// A console path with `id` as its last segment.
pub fn path_of(base: &str, id: &str) -> String {
    format!("{base}/{}", page::encode(id))
}

/// Comma-separated entries, trimmed, empty ones dropped.
pub fn split_list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// An amount of dollars typed in a form, never negative; empty is 0.
pub fn dollars(field: &str, text: &str) -> Result<i64, ConsoleError> {
    if text.trim().is_empty() {
        return Ok(0);
    }
    page::parse_money(text)
        .ok_or_else(|| ConsoleError::Invalid(format!("{field} {text:?} is not an amount of dollars")))
}

/// An amount of dollars typed in a form that may be negative (`-5`, `-$5`).
pub fn signed_dollars(field: &str, text: &str) -> Result<i64, ConsoleError> {
    let trimmed = text.trim();
    let (negative, rest) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed),
    };
    let micros = page::parse_money(rest)
        .ok_or_else(|| ConsoleError::Invalid(format!("{field} {text:?} is not an amount of dollars")))?;
    Ok(if negative { -micros } else { micros })
}

/// Micro-dollars as a form field's value: dollars without the sign.
pub fn dollars_value(micros: i64) -> String {
    page::money(micros).replacen('$', "", 1)
}

/// A whole number typed in a form; empty is the default (0: no limit).
pub fn whole<T: FromStr + Default>(field: &str, text: &str) -> Result<T, ConsoleError> {
    match text.trim() {
        "" => Ok(T::default()),
        text => text.parse().map_err(|_| ConsoleError::Invalid(format!("{field} {text:?} is not a whole number"))),
    }
}
