//! Who may do what on the admin API. A caller presents a credential: the
//! bootstrap admin key (the root `admin`) or one stored in the store, hashed,
//! with a role (`domain::access`). One table (`rules`) says which role may
//! call which RPC; a `Caller` narrows account-scoped queries to its account.

pub mod caller;
pub mod rules;

pub use self::caller::Caller;

/// A call or a resource the caller's role or account does not allow; the
/// text names the credential and what it may not do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);
