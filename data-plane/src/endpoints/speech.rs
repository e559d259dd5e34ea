//! `POST /v1/audio/speech` answers: binary audio, streamed to the client
//! chunk by chunk as the upstream sends it (never buffered whole), with the
//! idle timeout enforced per chunk and the meter recording when the body
//! ends, fails or is dropped.

use std::{io, time::Duration};

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _, stream};

use crate::usage::Meter;

/// The client-facing body for `upstream`'s audio, billed by `meter`.
pub fn metered(
    upstream: reqwest::Response,
    meter: Meter,
    idle: Duration,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let state = (Box::pin(upstream.bytes_stream()), Some(meter));
    stream::unfold(state, move |(mut body, mut meter)| async move {
        meter.as_ref()?;
        let finish = |meter: &mut Option<Meter>, status| {
            if let Some(meter) = meter.take() {
                meter.finish(status);
            }
        };
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(Ok(chunk))) => Some((Ok(chunk), (body, meter))),
            Ok(None) => {
                finish(&mut meter, 200);
                None
            }
            Ok(Some(Err(error))) => {
                tracing::warn!(error = %error.without_url(), "upstream audio stream failed");
                finish(&mut meter, 502);
                Some((Err(io::Error::other("upstream stream failed")), (body, meter)))
            }
            Err(_) => {
                tracing::warn!(idle_ms = idle.as_millis(), "upstream audio stream idle too long");
                finish(&mut meter, 504);
                Some((Err(io::Error::new(io::ErrorKind::TimedOut, "upstream idle timeout")), (body, meter)))
            }
        }
    })
}
