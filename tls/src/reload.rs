//! A server certificate read from two PEM files and read again when they
//! change: every few seconds the files are compared with what was loaded,
//! and on SIGHUP at once. New handshakes use the new pair; connections
//! already open keep theirs. A new pair that does not load (unreadable,
//! malformed, key not matching the certificate) is logged and the old one
//! kept.

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use arc_swap::ArcSwap;
use rustls::{
    RootCertStore, ServerConfig,
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier},
    sign::CertifiedKey,
};
use tokio::{sync::watch, task::JoinHandle};

use crate::{TlsError, load_certs, load_key};

/// The certificate a TLS listener presents, swapped when its files change.
pub struct ReloadingCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: ArcSwap<CertifiedKey>,
    /// The files' bytes when they were last loaded (or found bad), so an
    /// unchanged pair is not parsed again and a bad one is logged once.
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

// === impl ReloadingCert ===

impl ReloadingCert {
    /// Loads the pair; fails when it cannot be used.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<ReloadingCert>, TlsError> {
        let (cert_bytes, key_bytes) = (read(cert_file)?, read(key_file)?);
        let certified = certified(cert_file, key_file)?;
        Ok(Arc::new(ReloadingCert {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            current: ArcSwap::from_pointee(certified),
            seen: Mutex::new((cert_bytes, key_bytes)),
        }))
    }

    /// Reads the files again and, when they changed, uses the new pair for
    /// new handshakes. Returns whether the certificate changed; fails (and
    /// keeps the old pair) when the new one cannot be used.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (cert_bytes, key_bytes) = (read(&self.cert_file)?, read(&self.key_file)?);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if seen.0 == cert_bytes && seen.1 == key_bytes {
                return Ok(false);
            }
            // Remembered before parsing: a bad pair is reported once, not
            // every poll.
            *seen = (cert_bytes, key_bytes);
        }
        let certified = certified(&self.cert_file, &self.key_file)?;
        self.current.store(Arc::new(certified));
        Ok(true)
    }

    /// Spawns the task that reloads the pair every `interval` and on SIGHUP,
    /// until `shutdown` turns true. Must be called within a tokio runtime.
    pub fn watch(self: Arc<Self>, interval: Duration, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
        // Registered before returning, so a SIGHUP sent right after start
        // reloads rather than ends the process.
        #[cfg(unix)]
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                #[cfg(unix)]
                let hung_up = async {
                    match hangup.as_mut() {
                        Some(signal) => signal.recv().await,
                        None => std::future::pending().await,
                    }
                };
                #[cfg(not(unix))]
                let hung_up = std::future::pending::<Option<()>>();
                tokio::select! {
                    _ = shutdown.wait_for(|stop| *stop) => return,
                    _ = ticks.tick() => {}
                    _ = hung_up => {}
                }
                match self.reload() {
                    Ok(true) => tracing::info!(cert = %self.cert_file.display(), "loaded a new TLS certificate"),
                    Ok(false) => {}
                    Err(error) => tracing::warn!(
                        error = %error_chain(&error),
                        cert = %self.cert_file.display(),
                        "the new TLS certificate cannot be used; keeping the old one"
                    ),
                }
            }
        })
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert").field("cert_file", &self.cert_file).finish_non_exhaustive()
    }
}

/// A server configuration presenting `cert`, offering HTTP/2 and HTTP/1.1,
/// and, when `client_roots` is given, asking for (but not requiring) a
/// client certificate signed by one of them.
pub fn server_config(cert: Arc<ReloadingCert>, client_roots: Option<RootCertStore>) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder();
    let builder = match client_roots {
        Some(roots) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder(Arc::new(roots))
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn certified(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let certs = load_certs(cert_file)?;
    let key = load_key(key_file)?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    CertifiedKey::from_der(certs, key, &provider).map_err(TlsError::Rustls)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file)
    }

    fn presented(cert: &ReloadingCert) -> Option<String> {
        crate::peer_name(&cert.current.load().cert[0])
    }

    #[test]
    fn a_changed_pair_replaces_the_old_and_a_bad_one_is_refused() {
        crate::install_provider();
        let dir = tempfile::tempdir().unwrap();
        let (cert_file, key_file) = write_pair(dir.path(), "first");
        let cert = ReloadingCert::load(&cert_file, &key_file).unwrap();
        assert!(!cert.reload().unwrap(), "nothing changed");
        write_pair(dir.path(), "second");
        assert!(cert.reload().unwrap());
        assert_eq!(presented(&cert).as_deref(), Some("second"));

        // A key that is not the certificate's: refused, the old pair stays.
        let stray = rcgen::KeyPair::generate().unwrap();
        std::fs::write(&key_file, stray.serialize_pem()).unwrap();
        assert!(cert.reload().is_err());
        assert_eq!(presented(&cert).as_deref(), Some("second"));
        std::fs::write(&cert_file, "not pem").unwrap();
        assert!(cert.reload().is_err());
        assert_eq!(presented(&cert).as_deref(), Some("second"));
    }
}
