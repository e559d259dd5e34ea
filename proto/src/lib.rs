//! Generated types and gRPC stubs of `gateway.v1`.
//!
//! Only the `convert` modules of the other crates name these types; domain
//! code works with its own structs.

#[allow(clippy::all, clippy::pedantic)] // generated code
pub mod v1 {
    tonic::include_proto!("gateway.v1");
}

pub use v1 as pb;
