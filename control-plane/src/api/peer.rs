//! Who may call the policy service. A data plane proves itself with the node
//! key (`domain::keys::KeyCheck`) or, when the listener trusts a client CA, with a
//! client certificate signed by it: then its node name is the certificate's
//! (common name, else first DNS name), recorded as a `NodeIdentity`
//! extension that the service uses in place of the name the data plane
//! claims. With `require_cert` the key alone is not enough.

use tonic::{Request, Status, service::Interceptor};

use crate::domain::keys::KeyCheck;

/// The node name a verified client certificate gave a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity(pub String);

/// Interceptor of the policy service.
#[derive(Clone)]
pub struct NodeAuth {
    key: KeyCheck,
    require_cert: bool,
}

// === impl NodeAuth ===

impl NodeAuth {
    /// Admits calls with a verified client certificate, or with `node_key`
    /// unless `require_cert`.
    pub fn new(node_key: &str, require_cert: bool) -> NodeAuth {
        NodeAuth { key: KeyCheck::new(node_key), require_cert }
    }
}

impl Interceptor for NodeAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        // Only certificates that chained to the client CA got through the
        // handshake; the leaf comes first.
        let name = request.peer_certs().and_then(|certs| certs.first().and_then(gw_tls::peer_name));
        match name {
            Some(name) => {
                request.extensions_mut().insert(NodeIdentity(name));
                Ok(request)
            }
            None if self.require_cert => Err(Status::unauthenticated("a client certificate is required")),
            None => self.key.call(request),
        }
    }
}

/// The message of `request`, with the node name `field` points at replaced
/// by the certificate's when the caller showed one.
pub fn with_node<T>(request: Request<T>, field: impl FnOnce(&mut T) -> &mut String) -> T {
    let identity = request.extensions().get::<NodeIdentity>().cloned();
    let mut message = request.into_inner();
    if let Some(NodeIdentity(name)) = identity {
        *field(&mut message) = name;
    }
    message
}
