//! End-to-end support.
