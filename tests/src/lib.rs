//! End-to-end support: a mock upstream provider, a real `redis-server` on a
//! free port, and a harness that runs the real control plane, data planes and
//! `gwctl` against them.

pub mod harness;
pub mod mock_endpoints;
pub mod mock_messages;
pub mod mock_upstream;
pub mod mock_video;
pub mod redis;
pub mod schema;
