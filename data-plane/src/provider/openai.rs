//! What an OpenAI-compatible (`openai`) channel expects: chat completions at
//! `/chat/completions` (the other endpoints at their own paths under the
//! base URL) and the key as `Authorization: Bearer`.

use axum::http::{HeaderName, HeaderValue, header};

use crate::{error::ProxyError, policy::domain::Channel};

/// Where chat completions go under the channel's base URL.
pub const CHAT_PATH: &str = "/chat/completions";

/// The channel's key as this kind of upstream takes it.
pub fn credential(channel: &Channel) -> Result<(HeaderName, HeaderValue), ProxyError> {
    Ok((header::AUTHORIZATION, super::secret(channel, &format!("Bearer {}", channel.api_key))?))
}
