//! Which decoder and encoder serve each dialect: the one table the relays
//! and handlers read, so a new dialect is one arm in each function here and
//! its own module beside `chat` and `messages`.

use serde_json::Value;

use crate::json_body::BodyEdit;

use super::{
    Dropped, TranslateError,
    ir::{self, Decode, Encode},
};

/// A wire dialect of chat-like requests and answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat completions (`/chat/completions`).
    Chat,
    /// The messages API (`/messages`; Bedrock `invoke` and Vertex
    /// `rawPredict` for Anthropic models).
    Messages,
    /// OpenAI responses (`/responses`).
    Responses,
    /// Gemini `generateContent` (Gemini API and Vertex Gemini models).
    Gemini,
    /// Bedrock `converse`.
    Converse,
}

/// What an encoder of answers needs to know of the client's request.
#[derive(Debug, Clone, Default)]
pub struct Answering {
    /// The model as the client named it, written into answers.
    pub model: String,
    /// Unix seconds the answer is dated (chat's `created`).
    pub created: i64,
    /// The chat client asked for the usage chunk (`include_usage`).
    pub include_usage: bool,
    /// Gemini clients that asked for a JSON array instead of SSE.
    pub json_array: bool,
}

/// Why a raw request body could not be translated.
#[derive(Debug)]
pub enum Untranslated {
    /// The body is not JSON.
    Json(serde_json::Error),
    Translate(TranslateError),
}

/// The raw request body `raw` in dialect `from` as a body in dialect `to`
/// naming `model` and asking for a stream when `stream`, with `edit`
/// applied to its top-level fields, and what could not be carried. Bodies
/// are read and written without a `Value` tree where the dialects have a
/// reader and a writer of their own (messages in, chat out); the result
/// is the same either way.
pub fn translate_request(
    from: Dialect,
    to: Dialect,
    raw: &[u8],
    model: &str,
    stream: bool,
    edit: &BodyEdit,
) -> Result<(Vec<u8>, Dropped), Untranslated> {
    let decoded = match from {
        Dialect::Messages => super::messages::request::decode_raw(raw),
        _ => None,
    };
    let (mut request, mut dropped) = match decoded {
        Some(decoded) => decoded,
        None => {
            let body = serde_json::from_slice::<Value>(raw).map_err(Untranslated::Json)?;
            decode_request(from, &body)
        }
    }
    .map_err(Untranslated::Translate)?;
    model.clone_into(&mut request.model);
    request.stream = stream;
    if to == Dialect::Chat {
        return Ok((super::chat::encode::request(&request, &mut dropped, edit), dropped));
    }
    let mut body = encode_request(to, &request, &mut dropped).map_err(Untranslated::Translate)?;
    edit.apply(&mut body);
    Ok((body.to_string().into_bytes(), dropped))
}

/// `body` in `dialect` as the internal form, with what could not be carried.
pub fn decode_request(dialect: Dialect, body: &Value) -> Result<(ir::Request, Dropped), TranslateError> {
    match dialect {
        Dialect::Chat => super::chat::request::decode(body),
        Dialect::Messages => super::messages::request::decode(body),
        Dialect::Responses => super::responses::decode_request(body),
        Dialect::Gemini => super::gemini::decode_request(body),
        Dialect::Converse => Err(TranslateError::NotClientFacing(dialect)),
    }
}

/// `request` as a body in `dialect`; what the dialect cannot carry is noted
/// in `dropped`.
pub fn encode_request(dialect: Dialect, request: &ir::Request, dropped: &mut Dropped) -> Result<Value, TranslateError> {
    match dialect {
        Dialect::Chat => Ok(super::chat::request::encode(request, dropped)),
        Dialect::Messages => Ok(super::messages::request::encode(request, dropped)),
        Dialect::Responses => Ok(super::responses::encode_request(request, dropped)),
        Dialect::Gemini => super::gemini::encode_request(request, dropped),
        Dialect::Converse => Ok(super::converse::encode_request(request, dropped)),
    }
}

/// A whole answer in `dialect` as the internal form.
pub fn decode_response(dialect: Dialect, body: &Value) -> ir::Response {
    match dialect {
        Dialect::Chat => super::chat::response::decode(body),
        Dialect::Messages => super::messages::response::decode(body).0,
        Dialect::Responses => super::responses::decode_response(body),
        Dialect::Gemini => super::gemini::decode_response(body),
        Dialect::Converse => super::converse::decode_response(body),
    }
}

/// `response` as a whole answer in `dialect`.
pub fn encode_response(dialect: Dialect, response: &ir::Response, answering: &Answering) -> Value {
    match dialect {
        Dialect::Chat => super::chat::response::encode(response, answering).0,
        Dialect::Messages => super::messages::response::encode(response, answering).0,
        Dialect::Responses => super::responses::encode_response(response, answering),
        Dialect::Gemini => super::gemini::encode_response(response, answering),
        Dialect::Converse => super::converse::encode_response(response, answering),
    }
}

/// A decoder of streamed answers in `dialect`.
pub fn stream_decoder(dialect: Dialect) -> Box<dyn Decode> {
    match dialect {
        Dialect::Chat => Box::new(super::chat::Decoder::new()),
        Dialect::Messages => Box::new(super::messages::Decoder::new()),
        Dialect::Responses => Box::new(super::responses::Decoder::new()),
        Dialect::Gemini => Box::new(super::gemini::Decoder::new()),
        Dialect::Converse => Box::new(super::converse::Decoder::new()),
    }
}

/// An encoder of streamed answers in `dialect` for the client.
pub fn stream_encoder(dialect: Dialect, answering: &Answering) -> Box<dyn Encode> {
    match dialect {
        Dialect::Chat => Box::new(super::chat::Encoder::new(answering)),
        Dialect::Messages => Box::new(super::messages::Encoder::new(answering)),
        Dialect::Responses => Box::new(super::responses::Encoder::new(answering)),
        Dialect::Gemini => Box::new(super::gemini::Encoder::new(answering)),
        // Never a client's dialect: nothing is written in it.
        Dialect::Converse => Box::new(Nothing),
    }
}

/// The encoder of a dialect no client speaks (Converse): writes nothing.
struct Nothing;

impl Encode for Nothing {
    fn push(&mut self, _event: &ir::Event, _out: &mut Vec<u8>) {}
    fn finish(&mut self, _out: &mut Vec<u8>) {}
}

impl Decode for Box<dyn Decode> {
    fn push(&mut self, payload: &[u8]) -> Vec<ir::Event> {
        (**self).push(payload)
    }
    fn finish(&mut self) -> Vec<ir::Event> {
        (**self).finish()
    }
    fn dropped(&self) -> Dropped {
        (**self).dropped()
    }
}

impl Encode for Box<dyn Encode> {
    fn push(&mut self, event: &ir::Event, out: &mut Vec<u8>) {
        (**self).push(event, out);
    }
    fn finish(&mut self, out: &mut Vec<u8>) {
        (**self).finish(out);
    }
    fn dropped(&self) -> Dropped {
        (**self).dropped()
    }
}
