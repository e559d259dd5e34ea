//! The chat-completions dialect around the internal form: requests
//! (`request`), whole answers (`response`) and streamed ones (`stream`),
//! each a decoder into the form and an encoder out of it. Nothing here does
//! I/O or reads a clock.

pub(super) mod encode;
pub mod request;
pub mod response;
pub mod stream;
mod text_chunk;
mod text_scan;

pub use stream::{Decoder, Encoder};
