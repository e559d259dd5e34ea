//! The open-file limit the data plane serves under. Every client connection
//! holds a descriptor and, while it is answered, usually one to its
//! upstream; the listeners, the spool, the saved snapshot and the link to
//! the control plane need a few more. At start the soft limit is raised to
//! the hard one, and `max_connections` is lowered to what the limit can
//! hold, so a burst of slow clients waits in the listen backlog instead of
//! failing every `accept` and upstream connect with "too many open files".

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept for everything but client connections and their
/// upstream connections.
pub const RESERVED: u64 = 256;

/// Raises the soft open-file limit to the hard one; returns the soft limit
/// now in force, `None` when it is unlimited. A refusal to raise it is
/// logged and the old limit kept.
pub fn raise() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return limit.current;
    }
    match setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum }) {
        Ok(()) => limit.maximum,
        Err(error) => {
            tracing::warn!(%error, soft = ?limit.current, hard = ?limit.maximum, "could not raise the open-file limit");
            limit.current
        }
    }
}

/// The most client connections `limit` descriptors can serve, at most
/// `wanted`: two for each connection (itself and its upstream) after
/// `RESERVED`, and at least one.
pub fn fit(wanted: usize, limit: Option<u64>) -> usize {
    let Some(limit) = limit else { return wanted };
    let room = usize::try_from(limit.saturating_sub(RESERVED) / 2).unwrap_or(usize::MAX);
    wanted.min(room).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_fit_two_descriptors_each_after_the_reserve() {
        assert_eq!(fit(10_000, None), 10_000, "no limit");
        assert_eq!(fit(10_000, Some(1_048_576)), 10_000, "room to spare");
        assert_eq!(fit(10_000, Some(1_024)), 384);
        assert_eq!(fit(100, Some(1_024)), 100, "never raised");
        assert_eq!(fit(10_000, Some(100)), 1, "at least one");
    }
}
