//! The session cookie: written at sign-in (HttpOnly, SameSite=Lax, Secure
//! behind https, scoped to the console's path), read on every request, and
//! the CSRF token every write must carry, as the form field `csrf` or the
//! header `x-csrf-token`.

use axum::http::{HeaderMap, HeaderValue, header};

use super::{Console, ConsoleError};
use crate::services::console::{Sessions, Signed};

/// The cookie's name.
const COOKIE: &str = "gw_console";

/// The session cookie's value in `headers`, if any.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(name, value)| (name == COOKIE).then_some(value))
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

    fn cookie_header(&self, value: &str, max_age: i64) -> HeaderValue {
        let path = if self.prefix.is_empty() { "/" } else { self.prefix.as_str() };
        let secure = if self.secure { "; Secure" } else { "" };
        let text = format!("{COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}");
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
