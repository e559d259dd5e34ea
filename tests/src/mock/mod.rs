//! The mock upstream provider: one HTTP server that speaks each provider's
//! wire protocol. `upstream` holds the server, its scripts and what it
//! recorded; the other parts add one family of endpoints each (`messages`,
//! `endpoints` for the other OpenAI endpoints, `video`, `azure` for Azure
//! OpenAI's URLs, `google` for the Gemini API and Vertex AI, their
//! keys and service-account tokens).

pub mod azure;
pub mod endpoints;
pub mod google;
pub mod messages;
pub mod upstream;
pub mod video;
