//! The console's services: users who sign in with a password, their
//! sessions, and top-up codes. What a signed-in user may do is decided by
//! the same role table as for credentials (`services::access::rules`): a
//! user becomes a `Caller` of its role.

pub mod sessions;
pub mod topup;
pub mod users;

pub use self::sessions::{SessionError, SessionLimits, Sessions, Signed};
pub use self::topup::{Redeemed, TopupCodes, TopupError};
pub use self::users::{AttemptLimits, Link, LoginError, UserError, Users};
