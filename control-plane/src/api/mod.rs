//! The control plane's edge: the gRPC services (admin, one module per
//! resource family; policy for data planes; health), their authentication
//! and audit, and the conversion of protobuf messages to and from domain
//! types. Nothing below this layer names tonic or the generated types.

pub mod admin;
pub mod auth;
pub mod batch;
pub mod console;
pub mod convert;
pub mod credentials;
pub mod error;
pub mod guard;
pub mod health;
pub mod peer;
pub mod policy;
pub mod server;
pub mod video;
