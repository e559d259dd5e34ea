//! SigV4 signing of Bedrock requests with the AWS signer (`aws-sigv4`):
//! service `bedrock`, the channel's `region`, the channel's key as
//! `ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]`. The signed request is
//! the one sent: method, the encoded URI (the signer encodes its path once
//! more, as SigV4 wants for every service but S3), the headers present now
//! (headers added later, such as trace context, are sent unsigned) and the
//! SHA-256 of the whole body.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::{
    http_request::{SignableBody, SignableRequest, SigningSettings, sign as sigv4},
    sign::v4,
};
use axum::http::{HeaderName, HeaderValue};

use super::SERVICE;
use crate::{error::ProxyError, policy::domain::Channel, provider::Outgoing};

/// Signs `request` for `channel` as of `now`, adding `authorization`,
/// `x-amz-date` and, with a session token, `x-amz-security-token`. Fails
/// (logged without the key) on a key that is not `ID:SECRET[:TOKEN]`, a
/// missing `region` setting or a request the signer refuses.
pub(super) fn sign(channel: &Channel, request: Outgoing<'_>, now: SystemTime) -> Result<(), ProxyError> {
    let refuse = |why: &str| {
        tracing::error!(channel = %channel.id, why, "cannot sign the bedrock request");
        ProxyError::UpstreamConnect
    };
    let Some(credentials) = credentials(&channel.api_key) else {
        return Err(refuse("key is not ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]"));
    };
    let Some(region) = channel.settings.get("region").filter(|r| !r.is_empty()) else {
        return Err(refuse("channel has no region setting"));
    };
    let identity = credentials.into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .map_err(|_| refuse("signing parameters incomplete"))?
        .into();
    let headers = request.headers.iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
    let body = match request.body {
        Some(body) => SignableBody::Bytes(body),
        None => SignableBody::UnsignedPayload,
    };
    let uri = request.uri.to_string();
    let signable = SignableRequest::new(request.method.as_str(), uri, headers, body)
        .map_err(|_| refuse("request cannot be signed"))?;
    let (instructions, _signature) =
        sigv4(signable, &params).map_err(|_| refuse("request cannot be signed"))?.into_parts();
    let (headers, _query) = instructions.into_parts();
    for header in headers {
        let mut value = HeaderValue::from_str(header.value()).map_err(|_| refuse("signature is not a header value"))?;
        value.set_sensitive(header.sensitive() || header.name() == "authorization");
        request.headers.insert(HeaderName::from_static(header.name()), value);
    }
    Ok(())
}

/// The credentials in a channel key `ID:SECRET` or `ID:SECRET:TOKEN`
/// (secrets and tokens never hold `:`).
fn credentials(key: &str) -> Option<Credentials> {
    let mut parts = key.trim().splitn(3, ':');
    let id = parts.next().filter(|s| !s.is_empty())?;
    let secret = parts.next().filter(|s| !s.is_empty())?;
    let token = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
    Some(Credentials::new(id, secret, token, None, "bedrock-channel"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::{collections::BTreeMap, sync::Arc, time::Duration};

    use axum::http::{HeaderMap, Method, Uri, header};
    use bytes::Bytes;

    use super::*;

    fn channel(key: &str) -> Channel {
        let mut channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        channel.kind = crate::policy::domain::ChannelKind::Bedrock;
        channel.api_key = key.into();
        channel.settings = Arc::new(BTreeMap::from([("region".to_owned(), "us-east-1".to_owned())]));
        channel
    }

    /// Signs a converse call of an ARN model at 2026-01-02T03:04:05Z.
    fn signed(key: &str) -> HeaderMap {
        let uri: Uri = "https://bedrock-runtime.us-east-1.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.amazon.nova-pro-v1%3A0/converse".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        let body = Bytes::from_static(br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        let outgoing = Outgoing { method: &Method::POST, uri: &uri, headers: &mut headers, body: Some(&body) };
        sign(&channel(key), outgoing, now).unwrap();
        headers
    }

    // The expected values were computed by botocore 1.44.5's `SigV4Auth`
    // (canonical_request / string_to_sign / signature) for the same request,
    // an implementation independent of the one under test.
    #[test]
    fn a_signature_matches_botocores_for_an_arn_path() {
        let headers = signed("AKIDEXAMPLE:wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
        assert_eq!(headers["x-amz-date"], "20260102T030405Z");
        assert!(headers.get("x-amz-security-token").is_none());
        assert_eq!(headers[header::AUTHORIZATION], BOTOCORE_NO_TOKEN);
    }

    #[test]
    fn a_session_token_is_sent_and_signed() {
        let headers = signed("AKIDEXAMPLE:wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY:FwoGZXIvYXdzEXAMPLETOKEN");
        assert_eq!(headers["x-amz-security-token"], "FwoGZXIvYXdzEXAMPLETOKEN");
        assert_eq!(headers[header::AUTHORIZATION], BOTOCORE_WITH_TOKEN);
    }

    #[test]
    fn a_key_without_a_secret_or_a_channel_without_a_region_is_refused() {
        let uri: Uri = "https://example.com/model/m/converse".parse().unwrap();
        let mut headers = HeaderMap::new();
        let outgoing = Outgoing { method: &Method::POST, uri: &uri, headers: &mut headers, body: None };
        assert!(sign(&channel("AKIDONLY"), outgoing, SystemTime::now()).is_err());
        let mut no_region = channel("A:B");
        no_region.settings = Arc::default();
        let outgoing = Outgoing { method: &Method::POST, uri: &uri, headers: &mut headers, body: None };
        assert!(sign(&no_region, outgoing, SystemTime::now()).is_err());
        assert!(headers.is_empty());
    }

    const BOTOCORE_NO_TOKEN: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260102/us-east-1/bedrock/aws4_request, \
        SignedHeaders=content-type;host;x-amz-date, \
        Signature=814e44ad352e05461b6c2f497a9b19c471c84841fb9b6f4af526439535c89990";
    const BOTOCORE_WITH_TOKEN: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260102/us-east-1/bedrock/aws4_request, \
        SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, \
        Signature=4c69d3fa2393b5ce2d5ab498b6a783e0b5677ef694de9324b63267af2e6f691f";
}
