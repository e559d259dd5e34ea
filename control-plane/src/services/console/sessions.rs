//! Console sessions: opened by a sign-in, found by the hash of the cookie's
//! value, ended by sign-out, by idling past the idle limit, by reaching the
//! absolute limit, or by the user's epoch rising (a reset, a disable, "sign
//! out everywhere"). Sessions are in the store, so any replica serves any.

use std::sync::Arc;

use crate::domain::console::{Session, User};
use crate::domain::keys::{KeyCheck, generate, hash_key};
use crate::domain::{ENABLED, now_unix};
use crate::store::{Store, StoreError};

/// A session's last use is written back at most this often.
const TOUCH_EVERY_SECS: i64 = 60;

/// How long sessions last.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Ends a session unused for this long.
    pub idle_secs: i64,
    /// Ends a session this long after sign-in, used or not.
    pub absolute_secs: i64,
}

/// Why a request's session is not admitted.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No cookie, an unknown one, or a session that expired or was ended.
    #[error("your session has ended; sign in again")]
    Ended,
    /// A write without the session's CSRF token.
    #[error("this form has expired; reload the page and try again")]
    Forged,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A live session and its user.
#[derive(Debug, Clone)]
pub struct Signed {
    pub session: Session,
    pub user: User,
}

/// The session calls of one replica.
pub struct Sessions {
    store: Arc<dyn Store>,
    limits: SessionLimits,
}

// === impl SessionLimits ===

impl Default for SessionLimits {
    fn default() -> SessionLimits {
        SessionLimits { idle_secs: 2 * 60 * 60, absolute_secs: 12 * 60 * 60 }
    }
}

// === impl Sessions ===

impl Sessions {
    pub fn new(store: Arc<dyn Store>, limits: SessionLimits) -> Sessions {
        Sessions { store, limits }
    }

    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// Opens a session for `user`; returns the cookie's value (the only copy
    /// of the secret) and the session.
    pub async fn open(&self, user: &User) -> Result<(String, Session), SessionError> {
        let secret = generate("");
        let now = now_unix();
        let session = Session {
            id_hash: hash_key(&secret),
            user_id: user.id.clone(),
            epoch: user.epoch,
            csrf: generate(""),
            created_at: now,
            last_seen_at: now,
            expires_at: now + self.limits.absolute_secs,
            playground_key: String::new(),
        };
        self.store.put_session(&session).await?;
        Ok((secret, session))
    }

    /// The live session whose cookie holds `secret`, with its user; `Ended`
    /// when there is none. Notes the use, at most once a minute.
    pub async fn check(&self, secret: Option<&str>) -> Result<Signed, SessionError> {
        let secret = secret.filter(|secret| !secret.is_empty()).ok_or(SessionError::Ended)?;
        let id_hash = hash_key(secret);
        let session = self.store.get_session(&id_hash).await?.ok_or(SessionError::Ended)?;
        let now = now_unix();
        if session.expired(now, self.limits.idle_secs) {
            self.store.delete_session(&id_hash).await?;
            return Err(SessionError::Ended);
        }
        let user = self.store.get_user(&session.user_id).await?.ok_or(SessionError::Ended)?;
        if user.status != ENABLED || user.epoch != session.epoch {
            self.store.delete_session(&id_hash).await?;
            return Err(SessionError::Ended);
        }
        if now - session.last_seen_at >= TOUCH_EVERY_SECS {
            self.store.touch_session(&id_hash, now).await?;
        }
        Ok(Signed { session, user })
    }

    /// Admits a write of `signed` carrying `token`: `Forged` unless it is the
    /// session's CSRF token (compared in constant time).
    pub fn check_csrf(signed: &Signed, token: Option<&str>) -> Result<(), SessionError> {
        match token {
            Some(token) if KeyCheck::new(&signed.session.csrf).matches(token) => Ok(()),
            _ => Err(SessionError::Forged),
        }
    }

    /// Remembers the key of the session's playground token.
    pub async fn set_playground_key(&self, signed: &Signed, key: &str) -> Result<(), SessionError> {
        Ok(self.store.set_playground_key(&signed.session.id_hash, key).await?)
    }

    /// Ends the session.
    pub async fn close(&self, signed: &Signed) -> Result<(), SessionError> {
        Ok(self.store.delete_session(&signed.session.id_hash).await?)
    }
}
