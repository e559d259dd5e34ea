//! The OpenAI responses dialect (`/v1/responses`) on the internal form:
//! requests both ways (`request`), whole answers both ways (`response`),
//! and streams both ways (`stream` writes the typed SSE events OpenAI's
//! SDKs read, `decode` reads them). Used only when a responses client meets
//! a channel of another dialect; OpenAI-shaped channels get the bytes.
//!
//! Invariants: an answer's output items are in the order of its parts, one
//! item per part; `usage.input_tokens` is the whole prompt, as the gateway
//! counts it; stream events are numbered by `sequence_number` from 0
//! without gaps.

mod decode;
mod request;
mod response;
mod stream;

#[cfg(test)]
mod tests;

pub use self::{
    decode::Decoder,
    request::{decode as decode_request, encode as encode_request},
    response::{decode as decode_response, encode as encode_response},
    stream::Encoder,
};
