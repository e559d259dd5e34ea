//! The `/v1` handlers, one module per endpoint family. Each reads as the
//! pipeline's steps (`pipeline`): admit, parse its own body, route, attempts
//! on a provider, meter. Handlers never import one another.

mod api;
pub mod batch;
pub mod billing;
pub mod chat;
pub mod gemini;
pub mod messages;
mod multipart;
pub mod realtime;
pub mod rerank;
mod subprotocol;
pub mod video;

pub use api::routes;
