//! The gRPC client of the control plane's AdminService. Every call carries
//! the admin key as `authorization: Bearer <key>` metadata, and failures turn
//! into errors that read as the control plane's own message.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use gw_proto::pb::admin_service_client::AdminServiceClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use crate::config::Global;

/// An AdminService client that authenticates every call.
pub type Admin = AdminServiceClient<InterceptedService<Channel, BearerAuth>>;

/// Where the key of this process's connection came from (`connect`).
static KEY_SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Adds the admin key to every request.
#[derive(Clone)]
pub struct BearerAuth(MetadataValue<Ascii>);

/// Unwraps a unary answer, turning a `Status` into an error that prints as
/// the control plane's message (`account "x" not found`).
pub trait RpcResult<T> {
    fn rpc(self) -> Result<T>;
}

/// Connects to the control plane named by the global flags, variables or
/// context (TLS for `https://`, trusting the CA file when one is given).
/// Fails when no admin key is available or the address cannot be reached.
pub async fn connect(global: &Global) -> Result<Admin> {
    let target = global.target()?;
    // One process, one key: a refusal names where it came from.
    let _ = KEY_SOURCE.set(target.key_source.clone());
    let auth = BearerAuth::new(&target.admin_key)?;
    // Several replicas: the first that answers (a name's addresses are
    // tried in turn by the connector).
    let mut failures = Vec::new();
    for uri in target.endpoint.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        match channel(uri, target.ca_file.as_deref()).await {
            Ok(channel) => return Ok(AdminServiceClient::with_interceptor(channel, auth)),
            Err(error) => failures.push(format!("{error:#}")),
        }
    }
    match failures.len() {
        0 => Err(anyhow!("no control plane endpoint given")),
        _ => Err(anyhow!("{}", failures.join("; "))),
    }
}

/// A connected channel to the control plane at `uri`, over TLS for
/// `https://` (trusting `ca_file`, else the system's roots).
async fn channel(uri: &str, ca_file: Option<&std::path::Path>) -> Result<tonic::transport::Channel> {
    let mut endpoint = Endpoint::from_shared(uri.to_owned())
        .with_context(|| format!("invalid endpoint {uri:?}"))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60));
    if uri.starts_with("https://") {
        let mut tls = ClientTlsConfig::new().with_native_roots();
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).with_context(|| format!("reading CA file {}", path.display()))?;
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        endpoint = endpoint.tls_config(tls).context("setting up TLS")?;
    }
    endpoint.connect().await.map_err(|error| unreachable(uri, &error))
}

/// Where to point gwctl, for messages about a wrong address.
const WHERE: &str = "the control plane's gRPC address (its listen setting, GW_CP_LISTEN, 127.0.0.1:7070 by default)";

/// Why `uri` could not be reached, in words: a refused connection, TLS
/// spoken to a plain listener, or else the transport's own causes, each once.
fn unreachable(uri: &str, error: &(dyn std::error::Error + 'static)) -> anyhow::Error {
    let mut causes: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let text = cause.to_string();
        // tonic and hyper repeat their cause's text in their own.
        if !causes.iter().any(|seen| seen.contains(&text)) {
            causes.retain(|seen| !text.contains(seen.as_str()));
            causes.push(text);
        }
        next = cause.source();
    }
    let chain = causes.join(": ");
    if chain.contains("Connection refused") {
        anyhow!("nothing listens at {uri} (connection refused): is the control plane running, and is this {WHERE}?")
    } else if uri.starts_with("https://") && (chain.contains("InvalidContentType") || chain.contains("corrupt message"))
    {
        let plain = uri.replacen("https://", "http://", 1);
        anyhow!("{uri} does not speak TLS: a control plane without tls_cert_file is reached at {plain}")
    } else {
        anyhow!("cannot reach the control plane at {uri}: {chain}")
    }
}

// === impl BearerAuth ===

impl BearerAuth {
    /// Fails when the key cannot travel in an HTTP header.
    pub fn new(key: &str) -> Result<BearerAuth> {
        let value = format!("Bearer {key}")
            .parse()
            .map_err(|_| anyhow!("the admin key has characters that cannot be sent in a header"))?;
        Ok(BearerAuth(value))
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

// === impl RpcResult ===

impl<T> RpcResult<T> for Result<tonic::Response<T>, Status> {
    fn rpc(self) -> Result<T> {
        self.map(tonic::Response::into_inner).map_err(status_error)
    }
}

/// The error for a failed call: the server's message, with a hint where the
/// operator can act on it.
pub fn status_error(status: Status) -> anyhow::Error {
    let message = match status.message() {
        "" => status.code().description().to_string(),
        message => message.to_string(),
    };
    // gRPC framing read from an HTTP answer that is not gRPC: a data plane's
    // /v1 listener, the console, or another web server.
    if message.contains("invalid compression flag") {
        let http = message.rsplit("status: ").next().filter(|_| message.contains("status: ")).unwrap_or("");
        return anyhow!(
            "the server at this address is not the control plane's admin API (it answered plain HTTP{}{http}): point gwctl at {WHERE}, not a data plane or the console",
            if http.is_empty() { "" } else { " " }
        );
    }
    match status.code() {
        Code::Unauthenticated => match KEY_SOURCE.get() {
            Some(source) => anyhow!("{message} (the key came from {source})"),
            None => anyhow!(
                "{message} (check --admin-key-file, --admin-key, the context's key file or <data-dir>/admin.key)"
            ),
        },
        Code::PermissionDenied => anyhow!("permission denied: {message}"),
        Code::Unavailable => anyhow!("control plane unavailable: {message}"),
        _ => anyhow!("{message}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn interceptor_adds_bearer_metadata() {
        let mut auth = BearerAuth::new("adm-123").unwrap();
        let request = auth.call(Request::new(())).unwrap();
        let value = request.metadata().get("authorization").unwrap();
        assert_eq!(value.to_str().unwrap(), "Bearer adm-123");
        assert!(BearerAuth::new("bad\nkey").is_err());
    }

    #[test]
    fn status_errors_print_the_server_message() {
        let err = status_error(Status::not_found("account \"x\" not found"));
        assert_eq!(format!("{err:#}"), "account \"x\" not found");
        let err = status_error(Status::new(Code::Internal, ""));
        assert_eq!(format!("{err:#}"), "Internal error");
        let err = status_error(Status::unauthenticated("invalid admin key"));
        assert!(format!("{err:#}").starts_with("invalid admin key (check"));
    }

    #[test]
    fn a_server_that_is_not_grpc_is_named_for_what_it_is() {
        let status = Status::internal(
            "protocol error: received message with invalid compression flag: 123 (valid flags are 0 and 1) while receiving response with status: 404 Not Found",
        );
        let err = format!("{:#}", status_error(status));
        assert!(err.starts_with("the server at this address is not the control plane's admin API"), "{err}");
        assert!(err.contains("plain HTTP 404 Not Found") && err.contains("GW_CP_LISTEN"), "{err}");
    }

    #[tokio::test]
    async fn a_refused_connection_and_tls_to_a_plain_listener_are_said_in_words() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let refused = channel(&format!("http://127.0.0.1:{port}"), None).await.unwrap_err();
        let text = format!("{refused:#}");
        assert!(
            text.starts_with(&format!("nothing listens at http://127.0.0.1:{port} (connection refused)")),
            "{text}"
        );

        // A plain HTTP/2 listener: any TCP server that is not TLS.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                use tokio::io::AsyncWriteExt as _;
                let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
            }
        });
        let tls = channel(&format!("https://{addr}"), None).await.unwrap_err();
        let text = format!("{tls:#}");
        assert_eq!(
            text,
            format!(
                "https://{addr} does not speak TLS: a control plane without tls_cert_file is reached at http://{addr}"
            )
        );
    }
}
