//! Multipart forms of video submissions: reading the client's, writing the
//! upstream's. The reference file is never held whole in memory: when the
//! fields the gateway needs (`model`, `seconds`) come before it, as SDKs send
//! them, its bytes flow from the client's connection to the upstream's as
//! they arrive; otherwise it is spooled to a temporary file first. Fields
//! after the file are forwarded as they are read.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
};

use axum::{body::Body, http::HeaderMap};
use bytes::Bytes;
use futures_util::StreamExt as _;
use multer::{Constraints, Multipart, SizeLimit};
use tokio::{io::AsyncWriteExt as _, sync::mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::{error::ProxyError, provider::client::Payload};

/// Largest reference file accepted.
pub const MAX_REFERENCE_BYTES: u64 = 50 << 20;
/// Largest text field (the prompt among them).
const MAX_TEXT_BYTES: u64 = 64 << 10;
/// Text fields accepted in one form.
const MAX_FIELDS: usize = 32;
/// Longest a refused upload is read on so the refusal reaches the client.
const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);
/// The file field of a submission.
pub const FILE_FIELD: &str = "input_reference";
/// Fields the gateway reads and re-sends with its own values; a repeat of
/// one after the file is dropped rather than forwarded.
pub const OWN_FIELDS: [&str; 4] = ["model", "prompt", "seconds", "size"];

/// A client's form as far as it had to be read before submitting.
pub struct Received {
    /// Text fields in arrival order.
    pub text: Vec<(String, String)>,
    pub file: Option<FilePart>,
    /// The unread rest of the form, when the file is still arriving.
    pub rest: Option<Multipart<'static>>,
}

/// The reference file.
pub struct FilePart {
    pub filename: String,
    pub content_type: String,
    pub body: FileBody,
}

/// Where the reference file's bytes come from.
pub enum FileBody {
    /// Still arriving from the client (boxed: a field is large).
    Live(Box<multer::Field<'static>>),
    /// Read to a temporary file, removed when dropped.
    Spooled(Spool),
    /// Decoded from a JSON submission.
    Memory(Bytes),
}

/// A temporary file holding a reference; removed on drop.
pub struct Spool {
    path: PathBuf,
    len: u64,
}

/// The form sent upstream.
pub struct Outgoing {
    pub text: Vec<(String, String)>,
    pub file: Option<FilePart>,
    pub rest: Option<Multipart<'static>>,
}

/// Set when reading the client's part of the upload failed, so that the
/// failed upstream call is reported as the client's error.
pub type ClientFault = Arc<Mutex<Option<ProxyError>>>;

/// The boundary of a `multipart/form-data` request.
pub fn boundary(headers: &HeaderMap) -> Result<String, ProxyError> {
    let content_type = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    multer::parse_boundary(content_type).map_err(|_| ProxyError::InvalidField {
        field: "content-type",
        reason: "the body must be multipart/form-data with a boundary".into(),
    })
}

/// Reads text fields until the reference file, or to the end of the form.
/// The file is left streaming when `model` and `seconds` came before it,
/// and spooled to disk otherwise.
pub async fn read(body: Body, boundary: String) -> Result<Received, ProxyError> {
    let limits = SizeLimit::new()
        .whole_stream(MAX_REFERENCE_BYTES + MAX_TEXT_BYTES * MAX_FIELDS as u64)
        .per_field(MAX_TEXT_BYTES)
        .for_field(FILE_FIELD, MAX_REFERENCE_BYTES);
    let mut multipart =
        Multipart::with_constraints(body.into_data_stream(), boundary, Constraints::new().size_limit(limits));
    let mut text: Vec<(String, String)> = Vec::new();
    let mut file = None;
    while let Some(field) = multipart.next_field().await.map_err(client_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        if field.file_name().is_some() {
            if name != FILE_FIELD || file.is_some() {
                return Err(ProxyError::InvalidField {
                    field: FILE_FIELD,
                    reason: format!("only one file, named {FILE_FIELD:?}, may be sent"),
                });
            }
            let (filename, content_type) = describe(&field);
            let seen = |wanted: &str| text.iter().any(|(n, _)| n == wanted);
            if seen("model") && seen("seconds") {
                let body = FileBody::Live(Box::new(field));
                return Ok(Received {
                    text,
                    file: Some(FilePart { filename, content_type, body }),
                    rest: Some(multipart),
                });
            }
            let body = FileBody::Spooled(Spool::fill(field).await?);
            file = Some(FilePart { filename, content_type, body });
            continue;
        }
        if text.len() == MAX_FIELDS {
            return Err(ProxyError::InvalidField { field: "form", reason: format!("more than {MAX_FIELDS} fields") });
        }
        let value = field.text().await.map_err(client_error)?;
        text.push((name, value));
    }
    Ok(Received { text, file, rest: None })
}

/// A file part's name and type, with defaults that upstreams accept.
fn describe(field: &multer::Field<'_>) -> (String, String) {
    let filename = field.file_name().filter(|f| !f.is_empty()).unwrap_or("reference").to_owned();
    let content_type = match field.content_type() {
        Some(mime) => mime.to_string(),
        None => guess_type(&filename).to_owned(),
    };
    (filename, content_type)
}

/// Reads and discards what is left of a refused upload (within the form's
/// size limits, for at most `DRAIN_DEADLINE`), so that the client, which may
/// still be sending, reads the refusal instead of a reset connection.
pub async fn drain(file: Option<FilePart>, rest: Option<Multipart<'static>>) {
    let work = async move {
        if let Some(FilePart { body: FileBody::Live(mut field), .. }) = file {
            while let Ok(Some(_)) = field.chunk().await {}
        }
        if let Some(mut rest) = rest {
            while let Ok(Some(field)) = rest.next_field().await {
                if field.bytes().await.is_err() {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_DEADLINE, work).await;
}

/// A content type from a file name's extension.
pub fn guess_type(filename: &str) -> &'static str {
    let extension = filename.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "mp4" => "video/mp4",
        _ => "application/octet-stream",
    }
}

/// The client-facing error for a failure reading the client's form.
fn client_error(error: multer::Error) -> ProxyError {
    match error {
        multer::Error::FieldSizeExceeded { limit, field_name } => ProxyError::InvalidField {
            field: "form",
            reason: format!("field {:?} is larger than {limit} bytes", field_name.unwrap_or_default()),
        },
        multer::Error::StreamSizeExceeded { limit } => {
            ProxyError::BodyTooLarge { limit: usize::try_from(limit).unwrap_or(usize::MAX) }
        }
        multer::Error::StreamReadFailed(_) => ProxyError::BodyRead,
        other => ProxyError::InvalidField { field: "form", reason: format!("not a valid multipart form: {other}") },
    }
}

// === impl Spool ===

impl Spool {
    /// Writes `field` to a new temporary file.
    async fn fill(mut field: multer::Field<'static>) -> Result<Spool, ProxyError> {
        let path = std::env::temp_dir().join(format!("gw-video-upload-{:032x}", rand::random::<u128>()));
        let mut spool = Spool { path, len: 0 };
        let mut file = tokio::fs::File::create(&spool.path).await.map_err(spool_error)?;
        while let Some(chunk) = field.chunk().await.map_err(client_error)? {
            file.write_all(&chunk).await.map_err(spool_error)?;
            spool.len += chunk.len() as u64;
        }
        file.flush().await.map_err(spool_error)?;
        Ok(spool)
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn spool_error(error: std::io::Error) -> ProxyError {
    tracing::error!(%error, "cannot spool a video reference file");
    ProxyError::Internal
}

// === impl Outgoing ===

impl Outgoing {
    /// The body to send upstream under `boundary`, produced by a spawned task
    /// as the client's bytes arrive, and the slot where that task leaves the
    /// client's error if the client's upload breaks (the body then fails,
    /// and so does the upstream request).
    pub fn into_body(self, boundary: String) -> (Payload, ClientFault) {
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
        let fault: ClientFault = Arc::default();
        let slot = fault.clone();
        tokio::spawn(async move {
            if let Err(Stop::Client(error)) = self.pump(&boundary, &tx).await {
                let message = error.to_string();
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
                let _ = tx.send(Err(std::io::Error::other(message))).await;
            }
        });
        (Payload::stream(ReceiverStream::new(rx)), fault)
    }

    async fn pump(self, boundary: &str, tx: &mpsc::Sender<Result<Bytes, std::io::Error>>) -> Result<(), Stop> {
        let send = |bytes: Bytes| async move { tx.send(Ok(bytes)).await.map_err(|_| Stop::Upstream) };
        for (name, value) in &self.text {
            send(text_part(boundary, name, value)).await?;
        }
        if let Some(file) = self.file {
            send(file_head(boundary, FILE_FIELD, &file.filename, &file.content_type)).await?;
            match file.body {
                FileBody::Live(mut field) => {
                    while let Some(chunk) = field.chunk().await.map_err(|e| Stop::Client(client_error(e)))? {
                        send(chunk).await?;
                    }
                }
                FileBody::Spooled(spool) => {
                    let opened = tokio::fs::File::open(&spool.path).await.map_err(|e| Stop::Client(spool_error(e)))?;
                    let mut chunks = tokio_util_reader(opened);
                    let mut sent = 0;
                    while let Some(chunk) = chunks.next().await {
                        let chunk = chunk.map_err(|e| Stop::Client(spool_error(e)))?;
                        sent += chunk.len() as u64;
                        send(chunk).await?;
                    }
                    if sent != spool.len {
                        return Err(Stop::Client(spool_error(std::io::Error::other("spool file changed size"))));
                    }
                }
                FileBody::Memory(bytes) => send(bytes).await?,
            }
            send(Bytes::from_static(b"\r\n")).await?;
        }
        if let Some(mut rest) = self.rest {
            let mut count = self.text.len();
            while let Some(field) = rest.next_field().await.map_err(|e| Stop::Client(client_error(e)))? {
                let name = field.name().unwrap_or_default().to_owned();
                if field.file_name().is_some() {
                    let reason = format!("only one file, named {FILE_FIELD:?}, may be sent");
                    return Err(Stop::Client(ProxyError::InvalidField { field: FILE_FIELD, reason }));
                }
                let value = field.text().await.map_err(|e| Stop::Client(client_error(e)))?;
                count += 1;
                if count > MAX_FIELDS {
                    let reason = format!("more than {MAX_FIELDS} fields");
                    return Err(Stop::Client(ProxyError::InvalidField { field: "form", reason }));
                }
                if !OWN_FIELDS.contains(&name.as_str()) {
                    send(text_part(boundary, &name, &value)).await?;
                }
            }
        }
        send(Bytes::from(format!("--{boundary}--\r\n"))).await
    }
}

/// Why the body producer stopped early.
enum Stop {
    /// The upstream request is gone; nothing to report.
    Upstream,
    /// The client's upload failed.
    Client(ProxyError),
}

/// A file read in chunks of 64 KiB.
fn tokio_util_reader(
    file: tokio::fs::File,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static {
    use tokio::io::AsyncReadExt as _;
    Box::pin(futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; 64 << 10];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), Some(file)))
            }
            Err(error) => Some((Err(error), None)),
        }
    }))
}

/// A new boundary for a form the gateway writes.
pub fn new_boundary() -> String {
    format!("gw-video-{:032x}", rand::random::<u128>())
}

fn text_part(boundary: &str, name: &str, value: &str) -> Bytes {
    Bytes::from(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"\r\n\r\n{value}\r\n", quoted(name)))
}

fn file_head(boundary: &str, name: &str, filename: &str, content_type: &str) -> Bytes {
    let content_type: String = content_type.chars().filter(|c| !c.is_control()).collect();
    Bytes::from(format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"; filename=\"{}\"\r\nContent-Type: {content_type}\r\n\r\n",
        quoted(name),
        quoted(filename)
    ))
}

/// A header parameter value with quotes and line breaks percent-encoded, as
/// browsers send them.
fn quoted(value: &str) -> String {
    value.replace('"', "%22").replace('\r', "%0D").replace('\n', "%0A")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn form(parts: &[(&str, Option<&str>, &[u8])]) -> (Body, String) {
        let boundary = "test-boundary".to_owned();
        let mut body = Vec::new();
        for (name, filename, value) in parts {
            body.extend_from_slice(
                format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"").as_bytes(),
            );
            if let Some(filename) = filename {
                body.extend_from_slice(format!("; filename=\"{filename}\"\r\nContent-Type: image/png").as_bytes());
            }
            body.extend_from_slice(b"\r\n\r\n");
            body.extend_from_slice(value);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        (Body::from(body), boundary)
    }

    /// Reads a form the way `read` would, then writes it back out.
    async fn round_trip(parts: &[(&str, Option<&str>, &[u8])]) -> (bool, Vec<(String, String)>, Vec<u8>) {
        let (body, boundary) = form(parts);
        let received = read(body, boundary).await.unwrap();
        let live = matches!(received.file.as_ref().map(|f| &f.body), Some(FileBody::Live(_)));
        let text = received.text.clone();
        let outgoing = Outgoing { text: received.text, file: received.file, rest: received.rest };
        let (body, _) = outgoing.into_body("out".into());
        let bytes = http_body_util_collect(body).await;
        (live, text, bytes)
    }

    async fn http_body_util_collect(body: Payload) -> Vec<u8> {
        let mut stream = axum::body::Body::new(body.into_body()).into_data_stream();
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    }

    /// Parses a form the gateway wrote, with multer: (name, filename, bytes).
    async fn parse(bytes: Vec<u8>, boundary: &str) -> Vec<(String, Option<String>, Vec<u8>)> {
        let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(bytes)) });
        let mut multipart = Multipart::new(stream, boundary);
        let mut out = Vec::new();
        while let Some(field) = multipart.next_field().await.unwrap() {
            let name = field.name().unwrap().to_owned();
            let filename = field.file_name().map(str::to_owned);
            out.push((name, filename, field.bytes().await.unwrap().to_vec()));
        }
        out
    }

    #[tokio::test]
    async fn a_file_after_model_and_seconds_streams_and_later_fields_follow() {
        let image: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (live, text, bytes) = round_trip(&[
            ("model", None, b"sora-2"),
            ("seconds", None, b"4"),
            ("input_reference", Some("ref.png"), &image),
            ("extra", None, b"kept"),
            ("model", None, b"ignored-repeat"),
        ])
        .await;
        assert!(live, "the file streams");
        assert_eq!(text, [("model".into(), "sora-2".into()), ("seconds".into(), "4".into())]);
        let parts = parse(bytes, "out").await;
        let names: Vec<&str> = parts.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(names, ["model", "seconds", "input_reference", "extra"]);
        assert_eq!(parts[2].1.as_deref(), Some("ref.png"));
        assert_eq!(parts[2].2, image, "the file arrives intact");
        assert_eq!(parts[3].2, b"kept");
    }

    #[tokio::test]
    async fn a_file_before_the_fields_is_spooled_and_removed_afterwards() {
        let image = vec![7u8; 100_000];
        let (body, boundary) = form(&[("input_reference", Some("a.png"), &image), ("model", None, b"m")]);
        let received = read(body, boundary).await.unwrap();
        let Some(FilePart { body: FileBody::Spooled(spool), .. }) = &received.file else { panic!("not spooled") };
        let path = spool.path.clone();
        assert_eq!(std::fs::read(&path).unwrap(), image);
        assert_eq!(received.text, [("model".to_owned(), "m".to_owned())]);
        let outgoing = Outgoing { text: received.text, file: received.file, rest: None };
        let parts = parse(http_body_util_collect(outgoing.into_body("b".into()).0).await, "b").await;
        assert_eq!(parts[1].2, image);
        assert!(!path.exists(), "the spool file is removed");
    }

    #[tokio::test]
    async fn bad_forms_are_the_clients_fault() {
        let (body, boundary) = form(&[("other", Some("x.bin"), b"x")]);
        assert!(matches!(read(body, boundary).await, Err(ProxyError::InvalidField { .. })));
        let big = vec![b'a'; MAX_TEXT_BYTES as usize + 1];
        let (body, boundary) = form(&[("prompt", None, &big)]);
        assert!(matches!(read(body, boundary).await, Err(ProxyError::InvalidField { field: "form", .. })));
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        assert!(boundary_of(&headers).is_err());
        headers.insert("content-type", "multipart/form-data; boundary=abc".parse().unwrap());
        assert_eq!(boundary_of(&headers).unwrap(), "abc");
    }

    fn boundary_of(headers: &HeaderMap) -> Result<String, ProxyError> {
        boundary(headers)
    }

    #[test]
    fn names_are_escaped_and_types_guessed() {
        assert_eq!(quoted("a\"b\r\nc"), "a%22b%0D%0Ac");
        assert_eq!(guess_type("x.JPG"), "image/jpeg");
        assert_eq!(guess_type("noext"), "application/octet-stream");
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_form_is_read_or_refused_with_a_4xx(form in crate::fuzz::form()) {
            let read = crate::fuzz::block_on(read(Body::from(form), crate::fuzz::BOUNDARY.to_owned()));
            if let Err(error) = read {
                crate::fuzz::assert_client_error(&error)?;
            }
        }
    }
}
