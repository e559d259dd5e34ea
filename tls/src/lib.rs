//! TLS for both planes, written once: rustls with the aws-lc-rs provider
//! (installed process-wide by `install_provider`, so every rustls user in
//! the process agrees), PEM files read into rustls types, a server
//! certificate that is reloaded when its files change, and the name a peer's
//! client certificate carries.

mod pem;
mod reload;

pub use pem::{load_certs, load_key, load_roots};
pub use reload::{ReloadingCert, server_config};

use rustls_pki_types::CertificateDer;

/// Why TLS material could not be used. Messages name the file, never its
/// contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no {what} in PEM form")]
    Missing { path: String, what: &'static str },
    #[error("{path} is not valid PEM")]
    Pem {
        path: String,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("the certificate and key cannot be used together")]
    Rustls(#[source] rustls::Error),
}

/// Makes aws-lc-rs the process's rustls provider. Cheap and idempotent:
/// later calls (and a provider installed by someone else first) are fine.
pub fn install_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// The node name a client certificate carries: its subject's common name,
/// else its first DNS subject alternative name; `None` when it has neither
/// or does not parse.
pub fn peer_name(cert: &CertificateDer<'_>) -> Option<String> {
    use x509_parser::prelude::{FromDer as _, GeneralName, X509Certificate};
    let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let common_name = parsed.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()).map(str::to_owned);
    common_name.filter(|cn| !cn.is_empty()).or_else(|| {
        let san = parsed.subject_alternative_name().ok().flatten()?;
        san.value.general_names.iter().find_map(|name| match name {
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            _ => None,
        })
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_is_named_by_its_common_name_else_its_dns_name() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["dp-by-san".to_owned()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let by_san = params.self_signed(&key).unwrap();
        assert_eq!(peer_name(by_san.der()).as_deref(), Some("dp-by-san"));
        params.distinguished_name.push(rcgen::DnType::CommonName, "dp-7");
        let by_cn = params.self_signed(&key).unwrap();
        assert_eq!(peer_name(by_cn.der()).as_deref(), Some("dp-7"));
        assert_eq!(peer_name(&CertificateDer::from(vec![1u8, 2, 3])), None);
    }
}
