//! Stream tests.
