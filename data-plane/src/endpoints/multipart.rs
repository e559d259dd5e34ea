//! Multipart request bodies (`/v1/images/edits`, `/v1/audio/transcriptions`,
//! `/v1/audio/translations`). The body is held in memory, up to the proxy's
//! body limit, so that a failed attempt can be retried on another channel;
//! it is parsed once to read its text fields and the size of its files, and
//! goes upstream byte for byte unless the channel maps the model, in which
//! case the parts are re-framed with the client's boundary and headers and
//! only the `model` field's value changes.

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::{BufMut as _, Bytes, BytesMut};

use crate::error::ProxyError;

/// Largest text field read (files are only measured).
const MAX_TEXT_BYTES: usize = 64 << 10;

/// A parsed `multipart/form-data` body.
#[derive(Debug)]
pub struct Form {
    raw: Bytes,
    boundary: String,
    content_type: HeaderValue,
    /// Text fields in arrival order.
    pub text: Vec<(String, String)>,
    /// File fields: (field name, size in bytes).
    pub files: Vec<(String, u64)>,
}

/// Whether `headers` announce a multipart form.
pub fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"))
}

fn invalid(reason: impl ToString) -> ProxyError {
    ProxyError::InvalidField { field: "body", reason: reason.to_string() }
}

fn stream(raw: Bytes) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    futures_util::stream::once(async move { Ok(raw) })
}

// === impl Form ===

impl Form {
    /// Parses `raw`, the body announced by `headers` as a multipart form.
    pub async fn parse(raw: Bytes, headers: &HeaderMap) -> Result<Form, ProxyError> {
        let content_type = headers.get(header::CONTENT_TYPE).cloned().ok_or_else(|| invalid("no content type"))?;
        let boundary = multer::parse_boundary(content_type.to_str().map_err(invalid)?)
            .map_err(|e| invalid(format!("bad multipart content type: {e}")))?;
        let mut multipart = multer::Multipart::new(stream(raw.clone()), boundary.clone());
        let (mut text, mut files) = (Vec::new(), Vec::new());
        while let Some(mut field) =
            multipart.next_field().await.map_err(|e| invalid(format!("bad multipart form: {e}")))?
        {
            let name = field.name().unwrap_or_default().to_owned();
            if field.file_name().is_some() {
                let mut size = 0u64;
                while let Some(chunk) = field.chunk().await.map_err(invalid)? {
                    size += chunk.len() as u64;
                }
                files.push((name, size));
            } else {
                let bytes = field.bytes().await.map_err(invalid)?;
                if bytes.len() > MAX_TEXT_BYTES {
                    return Err(invalid(format!("text field {name:?} is over {MAX_TEXT_BYTES} bytes")));
                }
                text.push((name, String::from_utf8_lossy(&bytes).into_owned()));
            }
        }
        Ok(Form { raw, boundary, content_type, text, files })
    }

    /// Size of the client's body in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// The client's `Content-Type` (with its boundary), also the upstream's.
    pub fn content_type(&self) -> HeaderValue {
        self.content_type.clone()
    }

    /// Text field `name` (the last one if repeated).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.text.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The body to send upstream: the client's bytes, or with every `model`
    /// field set to `model` (then re-framed, files copied once).
    pub async fn upstream_body(&self, model: Option<&str>) -> Result<Bytes, ProxyError> {
        let Some(model) = model else {
            return Ok(self.raw.clone());
        };
        let mut multipart = multer::Multipart::new(stream(self.raw.clone()), self.boundary.clone());
        let mut out = BytesMut::with_capacity(self.raw.len() + model.len());
        while let Some(field) = multipart.next_field().await.map_err(invalid)? {
            out.put_slice(b"--");
            out.put_slice(self.boundary.as_bytes());
            out.put_slice(b"\r\n");
            for (name, value) in field.headers() {
                out.put_slice(name.as_str().as_bytes());
                out.put_slice(b": ");
                out.put_slice(value.as_bytes());
                out.put_slice(b"\r\n");
            }
            out.put_slice(b"\r\n");
            let is_model = field.name() == Some("model") && field.file_name().is_none();
            let bytes = field.bytes().await.map_err(invalid)?;
            out.put_slice(if is_model { model.as_bytes() } else { &bytes });
            out.put_slice(b"\r\n");
        }
        out.put_slice(b"--");
        out.put_slice(self.boundary.as_bytes());
        out.put_slice(b"--\r\n");
        Ok(out.freeze())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    const BODY: &str = "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--XyZ\r\n\
        Content-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\nContent-Type: audio/mpeg\r\n\r\n\
        \x01\x02--Xy\r\n\r\n--XyZ\r\nContent-Disposition: form-data; name=\"language\"\r\n\r\nen\r\n--XyZ--\r\n";

    fn headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("multipart/form-data; boundary=XyZ"));
        headers
    }

    #[tokio::test]
    async fn fields_are_read_and_files_measured() {
        assert!(is_multipart(&headers()));
        let form = Form::parse(Bytes::from_static(BODY.as_bytes()), &headers()).await.unwrap();
        assert_eq!(form.field("model"), Some("whisper-1"));
        assert_eq!(form.field("language"), Some("en"));
        assert_eq!(form.files, [("file".to_owned(), 8)]);
        assert_eq!(form.upstream_body(None).await.unwrap(), BODY.as_bytes());
    }

    #[tokio::test]
    async fn a_mapped_model_changes_only_that_field() {
        let form = Form::parse(Bytes::from_static(BODY.as_bytes()), &headers()).await.unwrap();
        let body = form.upstream_body(Some("whisper-large")).await.unwrap();
        let want = BODY.replace("\r\n\r\nwhisper-1\r\n", "\r\n\r\nwhisper-large\r\n");
        assert_eq!(String::from_utf8_lossy(&body).to_lowercase(), want.to_lowercase());
        let again = Form::parse(body, &headers()).await.unwrap();
        assert_eq!(again.field("model"), Some("whisper-large"));
        assert_eq!(again.files, [("file".to_owned(), 8)]);
    }

    #[tokio::test]
    async fn broken_forms_are_400() {
        let err = Form::parse(Bytes::from_static(b"--XyZ\r\nnope"), &headers()).await.unwrap_err();
        assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST);
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_form_is_parsed_or_refused_with_a_4xx(form in crate::fuzz::form(), model in proptest::option::of(".{0,8}")) {
            let mut headers = HeaderMap::new();
            let content_type = format!("multipart/form-data; boundary={}", crate::fuzz::BOUNDARY);
            headers.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
            match crate::fuzz::block_on(Form::parse(Bytes::from(form), &headers)) {
                Ok(form) => {
                    let _ = (form.len(), form.field("model"));
                    if let Err(error) = crate::fuzz::block_on(form.upstream_body(model.as_deref())) {
                        crate::fuzz::assert_client_error(&error)?;
                    }
                }
                Err(error) => crate::fuzz::assert_client_error(&error)?,
            }
        }
    }
}
