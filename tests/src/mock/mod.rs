//! The mock upstream provider: one HTTP server that speaks each provider's
//! wire protocol. `upstream` holds the server, its scripts and what it
//! recorded; the other parts add one family of endpoints each (`messages`,
//! `endpoints` for the other OpenAI endpoints, `video`).

pub mod endpoints;
pub mod messages;
pub mod upstream;
pub mod video;
