//! The gateway data plane.
