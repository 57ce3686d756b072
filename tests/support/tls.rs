//! TLS servers for the tests: a private CA made with `rcgen` (pure Rust, nothing to
//! install), certificates it signs, and a `redis-server` with a TLS port beside the
//! plain one the harness uses for its readiness `PING`.

use std::fs;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

use super::{RedisServer, TempDir, free_port};

/// A certificate authority of its own, made fresh for a test.
pub struct Ca {
    cert: Certificate,
    key: KeyPair,
}

/// A certificate and its private key, both PEM.
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// The CA certificate, PEM: what a client or server trusts.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A server certificate for `127.0.0.1` and `localhost`.
    pub fn server(&self) -> Issued {
        let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        self.issue(names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate, for mutual TLS.
    pub fn client(&self) -> Issued {
        self.issue(
            vec!["redlease-test-client".to_owned()],
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    fn issue(&self, names: Vec<String>, usage: ExtendedKeyUsagePurpose) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// A `redis-server` that speaks TLS on [`TlsServer::tls_port`] with a certificate
/// of [`TlsServer::ca`] (its plain port serves the harness only).
pub struct TlsServer {
    pub ca: Ca,
    pub tls_port: u16,
    pub server: RedisServer,
    _dir: TempDir,
}

impl TlsServer {
    /// Starts the server; with `auth_clients`, it refuses clients without a
    /// certificate of its CA (`--tls-auth-clients yes`). `extra` follows.
    pub fn start(auth_clients: bool, extra: &[&str]) -> TlsServer {
        let ca = Ca::new("redlease test CA");
        let issued = ca.server();
        let dir = TempDir::new(0);
        let path = |name: &str, text: &str| {
            let p = dir.0.join(name);
            fs::write(&p, text).unwrap();
            p.to_str().unwrap().to_owned()
        };
        let (cert, key, ca_file) = (
            path("server.crt", &issued.cert),
            path("server.key", &issued.key),
            path("ca.crt", &ca.pem()),
        );
        let tls_port = free_port().to_string();
        let auth = if auth_clients { "yes" } else { "no" };
        let mut args = vec![
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca_file,
            "--tls-auth-clients",
            auth,
        ];
        args.extend_from_slice(extra);
        let server = RedisServer::start_with(&args);
        TlsServer {
            ca,
            tls_port: tls_port.parse().unwrap(),
            server,
            _dir: dir,
        }
    }

    /// `rediss://[auth@]127.0.0.1:<tls port>/`.
    pub fn url(&self, auth: &str) -> String {
        format!("rediss://{auth}127.0.0.1:{}/", self.tls_port)
    }
}
