//! Who may do what on the admin API. A caller presents a credential: the
//! bootstrap admin key (the root `admin`) or one stored in the store, hashed,
//! with a role (`domain::access`). One table (`rules`) says which role may
//! call which RPC; a `Caller` narrows account-scoped queries to its account.

pub mod caller;
pub mod rules;

pub use self::caller::Caller;
