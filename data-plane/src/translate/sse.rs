//! Server-sent events as the encoders write them for clients: one `data:`
//! line per event (chat), or an `event:` line naming the type before it
//! (messages). Data is one line of JSON, or chat's `[DONE]`.

/// Writes `data: <data>\n\n`.
pub(crate) fn data(out: &mut Vec<u8>, data: &str) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// Writes `event: <name>\ndata: <data>\n\n`, the data written into `out`
/// by `data` (one line of JSON).
pub(crate) fn event(out: &mut Vec<u8>, name: &str, data: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    data(out);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    #[test]
    fn events_are_framed_for_the_wire() {
        let mut out = Vec::new();
        super::event(&mut out, "message_stop", |out| out.extend_from_slice(br#"{"type":"message_stop"}"#));
        super::data(&mut out, "[DONE]");
        assert_eq!(out, b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\ndata: [DONE]\n\n");
    }
}
