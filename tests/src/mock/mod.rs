//! The mock upstream provider: one HTTP server that speaks each provider's
//! wire protocol. `upstream` holds the server, its scripts and what it
//! recorded; the other parts add one family of endpoints each (`messages`,
//! `endpoints` for the other OpenAI endpoints, `rerank` for Cohere's and
//! Jina's rerank, `video`, `batches` for files and batches of both APIs, `azure` for Azure OpenAI's URLs, `google` for
//! the Gemini API and Vertex AI, their keys and service-account tokens).
//! `thinking` is a server of its own: an upstream silent before its first
//! token.

pub mod azure;
pub mod batches;
pub mod endpoints;
pub mod google;
pub mod messages;
pub mod realtime;
pub mod rerank;
pub mod thinking;
pub mod upstream;
pub mod video;
