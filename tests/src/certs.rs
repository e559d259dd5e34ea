//! Certificates made at test time (rcgen): one CA per test, server
//! certificates for `localhost` and 127.0.0.1, client certificates naming a
//! node. Every file is PEM, written into the test's own directory.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// A certificate authority of one test.
pub struct TestCa {
    params: CertificateParams,
    key: KeyPair,
    dir: PathBuf,
    /// The CA's certificate (PEM); what clients and servers trust.
    pub cert_file: PathBuf,
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

// === impl TestCa ===

impl TestCa {
    /// A new CA whose files go into `dir` (created if missing).
    pub fn new(dir: &Path) -> anyhow::Result<TestCa> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let key = KeyPair::generate().context("a CA key")?;
        let mut params = CertificateParams::new(Vec::<String>::new()).context("CA parameters")?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "gateway test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).context("signing the CA")?;
        let cert_file = dir.join("ca.crt");
        std::fs::write(&cert_file, cert.pem()).context("writing the CA")?;
        Ok(TestCa { params, key, dir: dir.to_owned(), cert_file })
    }

    /// A server certificate for `localhost` and 127.0.0.1 with common name
    /// `name`, written as `<file>.crt` / `<file>.key`.
    pub fn server(&self, file: &str, name: &str) -> anyhow::Result<Issued> {
        self.issue(file, name, &["localhost", "127.0.0.1"], &[ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// `server`, also good as a client certificate: for Redis Cluster
    /// nodes, whose bus connections prove both ends.
    pub fn peer(&self, file: &str, name: &str) -> anyhow::Result<Issued> {
        let usages = [ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(file, name, &["localhost", "127.0.0.1"], &usages)
    }

    /// A client certificate naming node `name` (its common name).
    pub fn client(&self, file: &str, name: &str) -> anyhow::Result<Issued> {
        self.issue(file, name, &[], &[ExtendedKeyUsagePurpose::ClientAuth])
    }

    fn issue(
        &self,
        file: &str,
        name: &str,
        sans: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> anyhow::Result<Issued> {
        let key = KeyPair::generate().context("a key")?;
        let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(sans).context("certificate parameters")?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = usages.to_vec();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).context("signing")?;
        let issued =
            Issued { cert_file: self.dir.join(format!("{file}.crt")), key_file: self.dir.join(format!("{file}.key")) };
        std::fs::write(&issued.cert_file, cert.pem()).context("writing a certificate")?;
        std::fs::write(&issued.key_file, key.serialize_pem()).context("writing a key")?;
        Ok(issued)
    }
}
