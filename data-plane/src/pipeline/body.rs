//! Reading a request body within the gateway's limit. A body over the limit
//! is refused with 413 after what is left of it is drained (bounded), so a
//! client that is still sending reads the answer instead of a reset.

use std::time::Duration;

use axum::{
    body::Body,
    http::{HeaderMap, header},
};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;

use crate::error::ProxyError;

/// Largest request body accepted (413 above).
pub const MAX_BODY_BYTES: usize = 32 << 20;
/// Most of a refused body read and dropped before answering 413.
const DISCARD_LIMIT: usize = 4 * MAX_BODY_BYTES;
/// Longest time spent draining a refused body.
const DISCARD_TIME: Duration = Duration::from_secs(10);

/// Reads the body, refusing more than `MAX_BODY_BYTES` (declared or sent).
pub async fn read_body(body: Body, headers: &HeaderMap) -> Result<Bytes, ProxyError> {
    let too_large = ProxyError::BodyTooLarge { limit: MAX_BODY_BYTES };
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        discard(&mut stream).await;
        return Err(too_large);
    }
    let capacity = declared.map_or(0, |n| usize::try_from(n).unwrap_or(0));
    let mut buf = BytesMut::with_capacity(capacity);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ProxyError::BodyRead)?;
        if buf.len() + chunk.len() > MAX_BODY_BYTES {
            discard(&mut stream).await;
            return Err(too_large);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Reads and drops what is left of a refused body. Bounded by
/// `DISCARD_LIMIT` bytes and `DISCARD_TIME`; past either the connection is
/// dropped.
async fn discard(stream: &mut axum::body::BodyDataStream) {
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > DISCARD_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIME, drain).await;
}
