//! Certificates for the TLS tests, generated with rcgen into the directory layout nbdkit, qemu
//! and libnbd use (`ca-cert.pem`, `server-cert.pem`, `server-key.pem`, `client-cert.pem`,
//! `client-key.pem`). Shared by `crates/nbd/tests` and `daemon/tests` (included by path).
#![allow(dead_code)] // each test file uses a different subset

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// A certificate authority: its certificate and key.
struct Ca {
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = p.self_signed(&key).expect("CA certificate");
        Self { cert, key }
    }

    /// A leaf certificate for `names` (DNS names or IP addresses) with one purpose.
    fn issue(
        &self,
        cn: &str,
        names: &[&str],
        purpose: ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let names = names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut p = CertificateParams::new(names).expect("params");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![purpose];
        let cert = p
            .signed_by(&key, &self.cert, &self.key)
            .expect("certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// A test PKI in a temporary directory.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// Generates everything:
    /// - `server/`: the server's certificate (for `localhost` and `127.0.0.1`) and key, and
    ///   the CA its clients must chain to (`--tls-certificates` of the server);
    /// - `client/`: the CA, a client certificate signed by it and its key;
    /// - `anonymous/`: the CA only (a client without a certificate);
    /// - `rogue-client/`: the right CA, but a client certificate from another CA;
    /// - `wrong-ca/`: another CA only (a client that cannot verify the server).
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("ftld test CA");
        let other = Ca::new("some other CA");
        let (server_cert, server_key) = ca.issue(
            "localhost",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) =
            ca.issue("client", &[], ExtendedKeyUsagePurpose::ClientAuth);
        let (rogue_cert, rogue_key) =
            other.issue("rogue", &[], ExtendedKeyUsagePurpose::ClientAuth);
        let ca_pem = ca.cert.pem();
        let files: &[(&str, &[(&str, &str)])] = &[
            (
                "server",
                &[
                    ("ca-cert.pem", &ca_pem),
                    ("server-cert.pem", &server_cert),
                    ("server-key.pem", &server_key),
                ],
            ),
            (
                "client",
                &[
                    ("ca-cert.pem", &ca_pem),
                    ("client-cert.pem", &client_cert),
                    ("client-key.pem", &client_key),
                ],
            ),
            ("anonymous", &[("ca-cert.pem", &ca_pem)]),
            (
                "rogue-client",
                &[
                    ("ca-cert.pem", &ca_pem),
                    ("client-cert.pem", &rogue_cert),
                    ("client-key.pem", &rogue_key),
                ],
            ),
            ("wrong-ca", &[("ca-cert.pem", &other.cert.pem())]),
        ];
        for (sub, contents) in files {
            let d = dir.path().join(sub);
            std::fs::create_dir(&d).expect("mkdir");
            for (name, text) in *contents {
                std::fs::write(d.join(name), text).expect("write");
            }
        }
        Self { dir }
    }

    /// The server's `--tls-certificates` directory.
    pub fn server(&self) -> PathBuf {
        self.path("server")
    }
    /// A client with a certificate from the server's CA.
    pub fn client(&self) -> PathBuf {
        self.path("client")
    }
    /// A client without a certificate.
    pub fn anonymous(&self) -> PathBuf {
        self.path("anonymous")
    }
    /// A client whose certificate is from another CA.
    pub fn rogue_client(&self) -> PathBuf {
        self.path("rogue-client")
    }
    /// A client that trusts another CA than the server's.
    pub fn wrong_ca(&self) -> PathBuf {
        self.path("wrong-ca")
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}
