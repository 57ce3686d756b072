//! TLS for `rediss://` servers: the certificates a client trusts and presents
//! (feature `tls-rustls`), and the one place a `redis::Client` is made from a URL,
//! with or without them.

use std::fmt;

use redis::{ConnectionInfo, RedisResult};

/// Certificates for `rediss://` connections: a root CA to trust instead of the
/// system's, and a client certificate for servers that require one
/// (`tls-auth-clients yes`, mutual TLS). All in PEM.
///
/// Mirrors [`redis::TlsCertificates`]. `Debug` shows which parts are set, never
/// their bytes.
///
/// # Examples
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use redlease::{LockClient, TlsCertificates};
/// let certs = TlsCertificates::new()
///     .root_cert(std::fs::read("ca.crt")?)
///     .client_cert(std::fs::read("client.crt")?, std::fs::read("client.key")?);
/// let client = LockClient::builder("rediss://redis.internal:6380/")
///     .tls(certs)
///     .build()?;
/// # drop(client); Ok(()) }
/// ```
#[cfg(feature = "tls-rustls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
#[derive(Clone, Default)]
#[must_use]
pub struct TlsCertificates {
    root_cert: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(feature = "tls-rustls")]
impl TlsCertificates {
    /// No custom certificates: the system's trust store, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trust the CA certificate(s) in `pem` instead of the system's trust store.
    /// Defaults to the system's trust store.
    pub fn root_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_cert = Some(pem.into());
        self
    }

    /// Present this certificate and private key (both PEM) to the server.
    /// Defaults to none.
    pub fn client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    fn to_redis(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root_cert.clone(),
        }
    }
}

#[cfg(feature = "tls-rustls")]
impl fmt::Debug for TlsCertificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsCertificates")
            .field("root_cert", &self.root_cert.is_some())
            .field("client_cert", &self.client.is_some())
            .finish()
    }
}

/// The certificates a client's connections use, if any: empty (and zero-sized)
/// without the `tls-rustls` feature.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    #[cfg(feature = "tls-rustls")]
    pub(crate) certs: Option<TlsCertificates>,
}

impl Tls {
    /// A `redis::Client` for `info`, with the certificates when there are any.
    ///
    /// # Errors
    /// When certificates are set and `info` is not a `rediss://` URL, or a PEM
    /// does not parse.
    #[cfg_attr(
        not(feature = "tls-rustls"),
        expect(clippy::unused_self, reason = "no certificates without the feature")
    )]
    pub(crate) fn client(&self, info: ConnectionInfo) -> RedisResult<redis::Client> {
        let info = quiet(info);
        #[cfg(feature = "tls-rustls")]
        if let Some(certs) = &self.certs {
            return redis::Client::build_with_tls(info, certs.to_redis());
        }
        redis::Client::open(info)
    }

    /// Whether custom certificates are set.
    #[cfg_attr(
        not(feature = "tls-rustls"),
        expect(clippy::unused_self, reason = "no certificates without the feature")
    )]
    pub(crate) fn is_set(&self) -> bool {
        #[cfg(feature = "tls-rustls")]
        return self.certs.is_some();
        #[cfg(not(feature = "tls-rustls"))]
        false
    }
}

/// `info` without the `CLIENT SETINFO` calls the `redis` crate sends on connect
/// otherwise: Redis 7.2+ and Valkey log each as an ACL refusal for a user without
/// `+client|setinfo`, a rule Redis 7.0 rejects (no such subcommand), so one ACL
/// rule could not cover every server.
pub(crate) fn quiet(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[cfg(feature = "tls-rustls")]
        return fmt::Debug::fmt(&self.certs, f);
        #[cfg(not(feature = "tls-rustls"))]
        f.write_str("None")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_send_no_client_setinfo_on_connect() {
        let info = redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1/").unwrap();
        let client = Tls::default().client(info).unwrap();
        let settings = client.get_connection_info().redis_settings();
        assert!(settings.skip_set_lib_name());
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn debug_shows_which_parts_are_set_never_their_bytes() {
        let certs = TlsCertificates::new().client_cert("CERT-BYTES", "KEY-BYTES");
        let shown = format!("{:?}", Tls { certs: Some(certs) });
        assert!(!shown.contains("KEY-BYTES"), "{shown}");
        assert!(shown.contains("client_cert: true"), "{shown}");
        assert!(shown.contains("root_cert: false"), "{shown}");
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn certificates_need_a_rediss_url() {
        let certs = TlsCertificates::new().root_cert("x");
        let tls = Tls { certs: Some(certs) };
        let info = redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1/").unwrap();
        assert!(tls.client(info).is_err());
    }
}
