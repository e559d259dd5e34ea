//! Who may do what on the admin API. A caller presents a credential: the
//! bootstrap admin key (the root `admin`) or one stored in the store, hashed,
//! with a role (`domain::access`). The `Authenticator` turns a key into a
//! `Caller` and writes the audit log; one table (`rules`) says which role
//! may call which RPC; a `Caller` narrows account-scoped queries to its
//! account; `Credentials` mints, rotates and revokes stored credentials.

pub mod authenticator;
pub mod caller;
pub mod credentials;
pub mod rules;

pub use self::authenticator::{AuthError, Authenticator};
pub use self::caller::Caller;
pub use self::credentials::{CredentialError, Credentials};

/// A call or a resource the caller's role or account does not allow; the
/// text names the credential and what it may not do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);

/// A resource of another account, asked for by id by a caller bound to one
/// account: answered as if it did not exist, word for word, so that such a
/// caller cannot learn which ids other accounts hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {id:?} not found")]
pub struct Hidden {
    pub kind: &'static str,
    pub id: String,
}
