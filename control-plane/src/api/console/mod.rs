//! The web console: pages for account owners and operators, served on a
//! listener of its own. A signed-in user calls the admin service's handlers
//! in-process as a `Caller` of its role, through the same role table and
//! audit log as gwctl (`api::guard::admit`), so the console can do exactly
//! what the user's role may and nothing more.

use std::net::SocketAddr;

use crate::services::console::{AttemptLimits, SessionLimits};

/// The console's settings.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Where it listens; `None` keeps it off.
    pub listen: Option<SocketAddr>,
    /// The public base URL browsers use (scheme, host and any path prefix a
    /// proxy adds); empty for `http://<bound address>`. An `https` URL makes
    /// cookies `Secure`.
    pub public_url: String,
    /// The data plane's base URL the playground sends requests to, and the
    /// token page shows; empty turns the playground off.
    pub gateway_url: String,
    pub sessions: SessionLimits,
    pub attempts: AttemptLimits,
}
