//! Wraps the admin gRPC service: authenticates every call (Unauthenticated
//! without a valid credential), authorises it with the role table
//! (PermissionDenied), gives the handler a `Caller`, and records every write,
//! and every write refused for its role, in the audit log with its outcome.
//!
//! Credentials are looked up in the store on every call, so a revoked or
//! rotated secret stops working at once on every replica sharing the store.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service};
use tonic::server::NamedService;
use tonic::{Code, Status};

use crate::services::access::rules::{self, Access};
use crate::services::access::{Authenticator, Caller};

/// The admin service `S` behind authentication, the role table and the
/// audit log.
#[derive(Clone)]
pub struct Guard<S> {
    inner: S,
    auth: Arc<Authenticator>,
}

/// The caller the guard admitted for `request`. Unauthenticated when there
/// is none, which happens only if the service runs without its guard.
pub fn caller_of<T>(request: &tonic::Request<T>) -> Result<Caller, Status> {
    request.extensions().get::<Caller>().cloned().ok_or_else(|| Status::unauthenticated("missing credential"))
}

// === impl Guard ===

impl<S> Guard<S> {
    pub fn new(inner: S, auth: Arc<Authenticator>) -> Guard<S> {
        Guard { inner, auth }
    }
}

impl<S> NamedService for Guard<S>
where
    S: NamedService,
{
    const NAME: &'static str = S::NAME;
}

impl<S> Service<Request<Body>> for Guard<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Response<Body>, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        // The clone is ready only after its own poll_ready; keep the one that
        // was polled, as tower's services do.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone();
        Box::pin(async move {
            let method = request.uri().path().rsplit('/').next().unwrap_or_default().to_owned();
            let key = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "));
            let caller = match auth.authenticate(key).await {
                Ok(caller) => caller,
                Err(refused) => return Ok(Status::from(refused).into_http()),
            };
            let admitted = match Admitted::check(&auth, caller, &method).await {
                Ok(admitted) => admitted,
                Err(status) => return Ok(status.into_http()),
            };
            request.extensions_mut().insert(admitted.caller.clone());
            let response = inner.call(request).await?;
            // A failed unary call answers with its status in the headers.
            let outcome = Status::from_header_map(response.headers()).map_or(Code::Ok, |status| status.code());
            admitted.finish(&auth, outcome).await;
            Ok(response)
        })
    }
}

/// A call the role table admitted, to be finished (audited, when it
/// writes) once it answered. The gRPC guard and the console both admit
/// calls through it, so both follow one table and write one audit log.
pub struct Admitted {
    pub caller: Caller,
    method: String,
    kind: &'static str,
    write: bool,
}

// === impl Admitted ===

impl Admitted {
    /// Admits `caller` to `method` by the role table; PermissionDenied
    /// otherwise, audited when the method writes.
    pub async fn check(auth: &Authenticator, caller: Caller, method: &str) -> Result<Admitted, Status> {
        let rule = rules::find(method);
        let write = rule.is_none_or(|rule| rule.access == Access::Write);
        let kind = rule.map_or("unknown", |rule| rule.kind);
        if let Err(denied) = rules::authorize(&caller, method) {
            let status = Status::from(denied);
            if write {
                auth.audit(&caller, method, kind, code_name(status.code())).await;
            }
            return Err(status);
        }
        Ok(Admitted { caller, method: method.to_owned(), kind, write })
    }

    /// Records the call's `outcome` in the audit log when it writes.
    pub async fn finish(&self, auth: &Authenticator, outcome: Code) {
        if self.write {
            auth.audit(&self.caller, &self.method, self.kind, code_name(outcome)).await;
        }
    }

    /// A request carrying `message` for the handler, with the caller in its
    /// extensions as the guard gives it.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.extensions_mut().insert(self.caller.clone());
        request
    }
}

/// `ok`, `permission_denied`, …: a gRPC code as the audit log spells it.
pub fn code_name(code: Code) -> String {
    let name = format!("{code:?}");
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_snake_case() {
        assert_eq!(code_name(Code::Ok), "ok");
        assert_eq!(code_name(Code::PermissionDenied), "permission_denied");
        assert_eq!(code_name(Code::NotFound), "not_found");
    }
}
