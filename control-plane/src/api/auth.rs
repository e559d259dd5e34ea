//! Checks the `authorization: Bearer <key>` metadata of every gRPC call
//! against one expected key (`domain::keys::KeyCheck`, compared in constant
//! time): the policy service's node key.

use tonic::{Request, Status, service::Interceptor};

use crate::domain::keys::KeyCheck;

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
