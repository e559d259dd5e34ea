//! What the control plane's own calls to upstreams (video tasks, batches)
//! share: what became of a data plane's submission, ids made safe for a URL
//! path, and failures described without the URL, since a base URL may carry
//! credentials.

/// What became of a submission to the upstream, as the data plane that made
/// it reports.
#[derive(Debug, Clone)]
pub enum Submission {
    /// The upstream's answer: the task or batch object, with at least its `id`.
    Accepted(serde_json::Value),
    /// The upstream refused it or could not be reached.
    Rejected { code: String, message: String },
}

/// `id` made safe for one URL path segment.
pub fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A reqwest failure without its URL.
pub fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else if error.is_decode() || error.is_body() {
        "unreadable answer"
    } else {
        "request failed"
    };
    kind.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_one_path_segment() {
        assert_eq!(path_segment("vid_1-a.b~c"), "vid_1-a.b~c");
        assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
    }
}
