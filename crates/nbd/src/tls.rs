//! TLS for NBD (`NBD_OPT_STARTTLS`, the spec's "TLS support" section) with rustls.
//!
//! [`TlsPolicy`] says how a server treats TLS; it is fixed for the server's lifetime, so every
//! connection sees one mode, as the spec requires:
//! - [`TlsMode::Off`] is the spec's NOTLS: `STARTTLS` gets `NBD_REP_ERR_POLICY`.
//! - [`TlsMode::On`] is SELECTIVETLS with no TLS-only export: a client may upgrade (it should,
//!   first thing) or go on in the clear.
//! - [`TlsMode::Require`] is FORCEDTLS: before the upgrade every option but `STARTTLS` and
//!   `ABORT` gets `NBD_REP_ERR_TLS_REQD`, and `NBD_OPT_EXPORT_NAME` closes the connection.
//!
//! Certificates come from one directory in the layout nbdkit and qemu use
//! (`--tls-certificates DIR`): `server-cert.pem` (the server's certificate, then any
//! intermediates), `server-key.pem` (PKCS#8, PKCS#1 or SEC1), and `ca-cert.pem`, the CA that
//! client certificates must chain to when peer verification is on (qemu's `verify-peer`,
//! nbdkit's `--tls-verify-peer`). Every failure names the file.
//!
//! Only TLS 1.2 and 1.3 are offered (the spec: implementations MUST support 1.2 and SHOULD NOT
//! offer older versions by default); the cipher suites are rustls's defaults for the `ring`
//! provider.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// How the server treats TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS (the spec's NOTLS mode).
    #[default]
    Off,
    /// TLS offered, not required (SELECTIVETLS without TLS-only exports).
    On,
    /// TLS required before anything but `STARTTLS` and `ABORT` (FORCEDTLS).
    Require,
}

impl TlsMode {
    /// The name used on the command line and in the configuration file.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Require => "require",
        }
    }
}

impl std::str::FromStr for TlsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "require" => Ok(Self::Require),
            _ => Err(format!("unknown TLS mode {s:?} (off, on or require)")),
        }
    }
}

/// The server certificate file in a certificates directory.
pub const SERVER_CERT_FILE: &str = "server-cert.pem";
/// The server key file in a certificates directory.
pub const SERVER_KEY_FILE: &str = "server-key.pem";
/// The CA certificate that client certificates must chain to.
pub const CA_CERT_FILE: &str = "ca-cert.pem";

/// Why TLS cannot be set up; every variant names the file or directory at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file held no usable PEM object of the expected kind.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// rustls refused the certificates or key (for example a key that does not match the
    /// certificate, or a key type it does not support).
    #[error("{dir}: {source}")]
    Rustls {
        /// The certificates directory.
        dir: PathBuf,
        /// The error.
        #[source]
        source: rustls::Error,
    },
    /// The CA certificates could not be used to verify clients.
    #[error("{path}: cannot verify clients with it: {what}")]
    ClientVerifier {
        /// The CA file.
        path: PathBuf,
        /// The error.
        what: String,
    },
    /// A mode other than `off` without a certificates directory.
    #[error("TLS mode {0} needs a certificates directory (--tls-certificates)")]
    NoCertificates(&'static str),
}

/// A server's TLS mode and, unless the mode is `off`, what it answers `STARTTLS` with.
#[derive(Clone, Default)]
pub struct TlsPolicy {
    mode: TlsMode,
    acceptor: Option<TlsAcceptor>,
    verify_peer: bool,
}

impl std::fmt::Debug for TlsPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPolicy")
            .field("mode", &self.mode)
            .field("verify_peer", &self.verify_peer)
            .finish_non_exhaustive()
    }
}

impl TlsPolicy {
    /// No TLS.
    pub fn off() -> Self {
        Self::default()
    }

    /// `mode` with the certificates in `dir` (see the module doc); `verify_peer` requires every
    /// client to present a certificate that chains to `dir/ca-cert.pem`. `dir` may be `None`
    /// only for [`TlsMode::Off`].
    pub fn new(mode: TlsMode, dir: Option<&Path>, verify_peer: bool) -> Result<Self, TlsError> {
        if mode == TlsMode::Off {
            return Ok(Self::off());
        }
        let dir = dir.ok_or(TlsError::NoCertificates(mode.name()))?;
        let config = server_config(dir, verify_peer)?;
        Ok(Self {
            mode,
            acceptor: Some(TlsAcceptor::from(Arc::new(config))),
            verify_peer,
        })
    }

    /// The mode.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Whether clients must present a certificate.
    pub fn verify_peer(&self) -> bool {
        self.verify_peer
    }

    /// The acceptor, unless TLS is off.
    pub(crate) fn acceptor(&self) -> Option<&TlsAcceptor> {
        self.acceptor.as_ref()
    }
}

/// Reads the certificates directory into a rustls server configuration.
fn server_config(dir: &Path, verify_peer: bool) -> Result<rustls::ServerConfig, TlsError> {
    let cert_path = dir.join(SERVER_CERT_FILE);
    let key_path = dir.join(SERVER_KEY_FILE);
    let chain = certificates(&cert_path)?;
    let key = private_key(&key_path)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let rustls_err = |source| TlsError::Rustls {
        dir: dir.to_path_buf(),
        source,
    };
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(rustls_err)?;
    let builder = if verify_peer {
        let ca_path = dir.join(CA_CERT_FILE);
        let mut roots = rustls::RootCertStore::empty();
        for cert in certificates(&ca_path)? {
            roots.add(cert).map_err(|e| TlsError::ClientVerifier {
                path: ca_path.clone(),
                what: e.to_string(),
            })?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| TlsError::ClientVerifier {
                path: ca_path.clone(),
                what: e.to_string(),
            })?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    builder.with_single_cert(chain, key).map_err(rustls_err)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate in a PEM file; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: format!("not a PEM certificate file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "no CERTIFICATE in the file".into(),
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        path: path.to_path_buf(),
        what: format!("no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for m in [TlsMode::Off, TlsMode::On, TlsMode::Require] {
            assert_eq!(m.name().parse::<TlsMode>(), Ok(m));
        }
        assert!("yes".parse::<TlsMode>().is_err());
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = TlsPolicy::new(TlsMode::On, Some(dir.path()), false).expect_err("no files");
        assert!(e.to_string().contains(SERVER_CERT_FILE), "{e}");
        std::fs::write(dir.path().join(SERVER_CERT_FILE), "not pem").expect("write");
        let e = TlsPolicy::new(TlsMode::On, Some(dir.path()), false).expect_err("bad cert");
        assert!(e.to_string().contains(SERVER_CERT_FILE), "{e}");
        let e = TlsPolicy::new(TlsMode::Require, None, false).expect_err("no dir");
        assert!(e.to_string().contains("--tls-certificates"), "{e}");
        assert!(TlsPolicy::new(TlsMode::Off, None, false).is_ok());
    }

    #[test]
    fn a_generated_certificate_loads_with_and_without_peer_verification() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).expect("ca");
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        let cert = params.signed_by(&key, &ca, &ca_key).expect("cert");
        std::fs::write(dir.path().join(SERVER_CERT_FILE), cert.pem()).expect("write");
        std::fs::write(dir.path().join(SERVER_KEY_FILE), key.serialize_pem()).expect("write");
        let p = TlsPolicy::new(TlsMode::On, Some(dir.path()), false).expect("no client auth");
        assert!(p.acceptor().is_some() && !p.verify_peer());
        // Peer verification needs the CA file.
        let e = TlsPolicy::new(TlsMode::On, Some(dir.path()), true).expect_err("no CA");
        assert!(e.to_string().contains(CA_CERT_FILE), "{e}");
        std::fs::write(dir.path().join(CA_CERT_FILE), ca.pem()).expect("write");
        let p = TlsPolicy::new(TlsMode::Require, Some(dir.path()), true).expect("with CA");
        assert_eq!(p.mode(), TlsMode::Require);
        // A key that does not belong to the certificate is refused.
        let other = rcgen::KeyPair::generate().expect("key");
        std::fs::write(dir.path().join(SERVER_KEY_FILE), other.serialize_pem()).expect("write");
        let e = TlsPolicy::new(TlsMode::On, Some(dir.path()), false).expect_err("mismatch");
        assert!(
            e.to_string().contains(&dir.path().display().to_string()),
            "{e}"
        );
    }
}
