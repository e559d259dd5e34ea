//! The frame every page shares: the document head, the navigation for the
//! user's role, the sign-out form, and how money, times and query values are
//! written. Pages are plain HTML that reads without JavaScript.

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::Console;
use crate::domain::access::Role;
use crate::services::console::Signed;

/// A page for a signed-in user, with the navigation of its role.
pub fn page(console: &Console, signed: &Signed, title: &str, body: Markup) -> Response {
    let user = &signed.user;
    let links: &[(&str, &str)] = match user.role {
        Role::Account => &[
            ("/", "Overview"),
            ("/tokens", "Tokens"),
            ("/models", "Models"),
            ("/usage", "Usage"),
            ("/topup", "Top up"),
            ("/playground", "Playground"),
        ],
        Role::Admin | Role::OperatorReadonly => &[
            ("/", "Overview"),
            ("/accounts", "Accounts"),
            ("/channels", "Channels"),
            ("/models", "Models"),
            ("/prices", "Prices"),
            ("/groups", "Groups"),
            ("/fleet", "Data planes"),
            ("/usage", "Usage"),
            ("/audit", "Audit log"),
            ("/users", "Users"),
            ("/topup-codes", "Top-up codes"),
        ],
    };
    let nav = html! {
        nav aria-label="Main" {
            ul {
                @for (path, label) in links {
                    li { a href=(console.link(path)) { (label) } }
                }
            }
            div.who {
                span { (user.name) " · " (user.role) }
                form method="post" action=(console.link("/logout")) {
                    (csrf(signed))
                    button type="submit" { "Sign out" }
                }
            }
        }
    };
    document(console, title, Some(nav), body)
}

/// A page without navigation (sign-in, links, errors).
pub fn bare(console: &Console, title: &str, body: Markup) -> Response {
    document(console, title, None, body)
}

fn document(console: &Console, title: &str, nav: Option<Markup>, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Gateway console" }
                link rel="stylesheet" href=(console.link("/assets/console.css"));
                script src=(console.link("/assets/console.js")) defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    a.brand href=(console.link("/")) { "Gateway console" }
                    @if let Some(nav) = nav { (nav) }
                }
                main id="main" { (body) }
            }
        }
    };
    (
        [(header::CACHE_CONTROL, "no-store"), (header::X_FRAME_OPTIONS, "DENY")],
        [(header::CONTENT_SECURITY_POLICY, "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")],
        Html(markup.into_string()),
    )
        .into_response()
}

/// The hidden form field carrying the session's CSRF token.
pub fn csrf(signed: &Signed) -> Markup {
    html! { input type="hidden" name="csrf" value=(signed.session.csrf); }
}

/// The form (`id`) posting to `action` that disables the `noun` when its
/// `status` is enabled, and enables it otherwise.
pub fn status_toggle(signed: &Signed, action: &str, id: &str, status: &str, noun: &str) -> Markup {
    let enabled = status == "enabled";
    html! {
        form.inline method="post" action=(action) id=(id) {
            (csrf(signed))
            input type="hidden" name="action" value=(if enabled { "disable" } else { "enable" });
            @if enabled {
                button.danger type="submit" { "Disable " (noun) }
            } @else {
                button type="submit" { "Enable " (noun) }
            }
        }
    }
}

/// A notice shown at the top of a page after a write.
pub fn notice(text: Option<&str>) -> Markup {
    html! {
        @if let Some(text) = text.filter(|t| !t.is_empty()) {
            p.notice role="status" { (text) }
        }
    }
}

/// Micro-dollars as dollars, with as many decimals as they need (at least 2).
pub fn money(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let micros = micros.unsigned_abs();
    let cents = format!("{:06}", micros % 1_000_000);
    let trimmed = cents.trim_end_matches('0');
    let decimals = if trimmed.len() < 2 { &cents[..2] } else { trimmed };
    format!("{sign}${}.{decimals}", micros / 1_000_000)
}

/// Dollars as typed in a form (`12.5`, `$3`) as micro-dollars.
pub fn parse_money(text: &str) -> Option<i64> {
    let text = text.trim().trim_start_matches('$').trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.len() > 6 || text.starts_with('-') {
        return None;
    }
    let whole: i64 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let fraction: i64 = format!("{fraction:0<6}").parse().ok()?;
    whole.checked_mul(1_000_000)?.checked_add(fraction)
}

/// A Unix second as `2026-11-27 05:00 UTC`; `—` for 0.
pub fn time(unix: i64) -> String {
    if unix == 0 {
        return "—".into();
    }
    jiff::Timestamp::from_second(unix)
        .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| unix.to_string())
}

/// A Unix second as the `YYYY-MM-DD` a date field holds (UTC).
pub fn date(unix: i64) -> String {
    jiff::Timestamp::from_second(unix).map(|t| t.strftime("%Y-%m-%d").to_string()).unwrap_or_default()
}

/// A `YYYY-MM-DD` date field (UTC midnight) as a Unix second.
pub fn parse_date(text: &str) -> Option<i64> {
    let date: jiff::civil::Date = text.trim().parse().ok()?;
    date.to_zoned(jiff::tz::TimeZone::UTC).ok().map(|zoned| zoned.timestamp().as_second())
}

/// `text` encoded for a query string.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A table that scrolls sideways on narrow screens instead of the page.
pub fn scroll(table: Markup) -> Markup {
    html! { div.scroll tabindex="0" role="region" aria-label="table" { (table) } }
}

/// Inline SVG, already built from escaped parts.
pub fn svg(text: String) -> Markup {
    PreEscaped(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_is_written_and_read_in_dollars() {
        assert_eq!(money(12_340_000), "$12.34");
        assert_eq!(money(1_500), "$0.0015");
        assert_eq!(money(-2_000_000), "-$2.00");
        assert_eq!(parse_money("12.5"), Some(12_500_000));
        assert_eq!(parse_money("$3"), Some(3_000_000));
        assert_eq!(parse_money(".25"), Some(250_000));
        assert_eq!(parse_money("-1"), None);
        assert_eq!(parse_money("1.0000001"), None);
        assert_eq!(parse_money("abc"), None);
    }

    #[test]
    fn dates_round_trip() {
        let day = parse_date("2026-11-27").expect("date");
        assert_eq!(date(day), "2026-11-27");
        assert_eq!(time(day), "2026-11-27 00:00 UTC");
        assert_eq!(encode("/tokens?a=b c"), "/tokens%3Fa%3Db%20c");
    }
}
