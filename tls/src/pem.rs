//! PEM files into rustls types: certificate chains, private keys (PKCS#8,
//! PKCS#1 or SEC1) and CA bundles.

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};

use crate::TlsError;

/// Every certificate in the PEM file at `path`, in order (leaf first for a
/// chain). Fails when the file is unreadable or holds none.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem { path: path.display().to_string(), source })?;
    if certs.is_empty() {
        return Err(TlsError::Missing { path: path.display().to_string(), what: "certificate" });
    }
    Ok(certs)
}

/// The first private key in the PEM file at `path`.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|source| match source {
        rustls_pki_types::pem::Error::NoItemsFound => {
            TlsError::Missing { path: path.display().to_string(), what: "private key" }
        }
        source => TlsError::Pem { path: path.display().to_string(), source },
    })
}

/// A trust store holding every certificate in the PEM file at `path`.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(TlsError::Rustls)?;
    }
    Ok(roots)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })
}
