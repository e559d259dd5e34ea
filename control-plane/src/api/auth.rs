//! Checks the `authorization: Bearer <key>` metadata of every gRPC call
//! against one expected key, comparing in constant time: the policy
//! service's node key. The admin service's guard (`access`) uses the same
//! comparison for the bootstrap admin key.

use sha2::{Digest as _, Sha256};
use tonic::{Request, Status, service::Interceptor};

/// Interceptor that admits calls carrying one key.
#[derive(Clone)]
pub struct KeyCheck {
    /// SHA-256 of the key, so comparisons take the same time for any input.
    expected: [u8; 32],
}

// === impl KeyCheck ===

impl KeyCheck {
    pub fn new(key: &str) -> KeyCheck {
        KeyCheck { expected: Sha256::digest(key.as_bytes()).into() }
    }

    /// Whether `presented` is the key, compared in constant time.
    pub fn matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        digest.iter().zip(self.expected.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

impl Interceptor for KeyCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("missing credential"))?;
        if self.matches(presented) { Ok(request) } else { Err(Status::unauthenticated("invalid credential")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(check: &mut KeyCheck, header: Option<&str>) -> Result<(), Status> {
        let mut request = Request::new(());
        if let Some(h) = header {
            request.metadata_mut().insert("authorization", h.parse().expect("header"));
        }
        check.call(request).map(|_| ())
    }

    #[test]
    fn only_the_exact_bearer_key_is_admitted() {
        let mut check = KeyCheck::new("secret");
        assert!(call(&mut check, Some("Bearer secret")).is_ok());
        assert!(call(&mut check, Some("Bearer secreT")).is_err());
        assert!(call(&mut check, Some("secret")).is_err());
        assert!(call(&mut check, None).is_err());
    }
}
