//! The session cookie: written at sign-in (HttpOnly, SameSite=Lax, Secure
//! behind https, scoped to the console's path), read on every request, and
//! the CSRF token every write must carry, as the form field `csrf` or the
//! header `x-csrf-token`. Before there is a session, the sign-in form
//! carries a token of its own that must come back with a cookie holding the
//! same value (a double submit): another site can make a browser post to
//! `/login`, but can neither read nor set that cookie.

use axum::http::{HeaderMap, HeaderValue, header};

use super::{Console, ConsoleError};
use crate::domain::keys::{KeyCheck, generate};
use crate::services::console::{Sessions, Signed};

/// The session cookie's name.
const COOKIE: &str = "gw_console";
/// The sign-in form's cookie.
const LOGIN_COOKIE: &str = "gw_console_login";
/// How long a sign-in form may be left open before it is sent.
const LOGIN_FORM_SECS: i64 = 3_600;

/// The session cookie's value in `headers`, if any.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    cookie_named(headers, COOKIE)
}

fn cookie_named<'h>(headers: &'h HeaderMap, wanted: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(name, value)| (name == wanted).then_some(value))
}

// === impl Console ===

impl Console {
    /// The signed-in user of a request; `SignIn` when there is none.
    pub async fn signed(&self, headers: &HeaderMap) -> Result<Signed, ConsoleError> {
        Ok(self.sessions.check(cookie(headers)).await?)
    }

    /// The signed-in user of a write carrying `csrf` (or the header);
    /// `SignIn` without a session, `Forged` without its token.
    pub async fn signed_write(&self, headers: &HeaderMap, csrf: Option<&str>) -> Result<Signed, ConsoleError> {
        let signed = self.signed(headers).await?;
        let header = headers.get("x-csrf-token").and_then(|value| value.to_str().ok());
        Sessions::check_csrf(&signed, csrf.or(header))?;
        Ok(signed)
    }

    /// The `Set-Cookie` value that holds `secret` for the session's life.
    pub fn session_cookie(&self, secret: &str) -> HeaderValue {
        self.cookie_header(secret, self.sessions.limits().absolute_secs)
    }

    /// The `Set-Cookie` value that removes the session cookie.
    pub fn cleared_cookie(&self) -> HeaderValue {
        self.cookie_header("", 0)
    }

    /// A new sign-in form's token, and the `Set-Cookie` value that holds it
    /// for `LOGIN_FORM_SECS` (SameSite=Strict: only this console's own
    /// pages send it back).
    pub fn login_form(&self) -> (String, HeaderValue) {
        let token = generate("");
        let cookie = self.named_cookie(LOGIN_COOKIE, &token, LOGIN_FORM_SECS, "Strict");
        (token, cookie)
    }

    /// Whether a sign-in post carries `token` with the cookie of the form
    /// that holds it, compared in constant time.
    pub fn login_form_is_ours(&self, headers: &HeaderMap, token: &str) -> bool {
        cookie_named(headers, LOGIN_COOKIE)
            .is_some_and(|cookie| !cookie.is_empty() && KeyCheck::new(cookie).matches(token))
    }

    /// The `Set-Cookie` value that removes the sign-in form's cookie.
    pub fn cleared_login_form(&self) -> HeaderValue {
        self.named_cookie(LOGIN_COOKIE, "", 0, "Strict")
    }

    fn cookie_header(&self, value: &str, max_age: i64) -> HeaderValue {
        self.named_cookie(COOKIE, value, max_age, "Lax")
    }

    fn named_cookie(&self, name: &str, value: &str, max_age: i64, same_site: &str) -> HeaderValue {
        let path = if self.prefix.is_empty() { "/" } else { self.prefix.as_str() };
        let secure = if self.secure { "; Secure" } else { "" };
        let text = format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite={same_site}{secure}");
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("gw_console=; Max-Age=0"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; gw_console=secret; b=2"));
        assert_eq!(cookie(&headers), Some("secret"));
        let mut other = HeaderMap::new();
        other.append(header::COOKIE, HeaderValue::from_static("gw_console_old=x"));
        assert_eq!(cookie(&other), None);
    }
}
