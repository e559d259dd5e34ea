//! Round trips.
