#![cfg(feature = "tls-rustls")]
mod support;

// TLS deployments: `rediss://` URLs with a CA of the test's own, with and
// without client certificates. Locks, renewal and pub/sub wake-ups all run over TLS; a
// server whose certificate the client does not trust is refused at `build()`.

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use redlease::{Error, LockClient, LockClientBuilder, LockOptions, TlsCertificates};
use support::eventually;
use support::tls::{Ca, TlsServer};

const PASSWORD: &str = "tls-s3cret-pw";

/// Connect timeout (TCP and TLS handshake) of the clients here: a debug build's
/// handshake on a loaded machine can outlast the 2 s default, and a timeout must not
/// stand in for the certificate error a test expects.
const CONNECT: Duration = Duration::from_secs(10);

/// A client builder for `tls`'s server with [`CONNECT`].
fn builder(tls: &TlsServer) -> LockClientBuilder {
    LockClient::builder(tls.url("").as_str()).connect_timeout(CONNECT)
}

fn trusting(ca: &Ca) -> TlsCertificates {
    TlsCertificates::new().root_cert(ca.pem())
}

/// The error and its whole source chain, as text.
fn chain(err: &Error) -> String {
    let mut parts = vec![format!("{err} | {err:?}")];
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    parts.join(" | ")
}

#[test]
fn lock_renew_wait_and_unlock_over_tls() {
    let tls = TlsServer::start(false, &[]);
    let client = builder(&tls)
        .tls(trusting(&tls.ca))
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    // The TLS port speaks only TLS: a plain client gets nothing from it.
    let plain = format!("redis://127.0.0.1:{}/", tls.tls_port);
    let refused = support::connect(&plain, Duration::from_millis(500))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
    assert!(refused.is_err(), "the tls port answered a plain client");

    let guard = client
        .lock_with("job", &LockOptions::new().fencing(true))
        .unwrap()
        .unwrap();
    assert!(guard.fence().is_some());
    // Renewed over TLS: still held (and still in Redis) after several TTLs.
    let renewed = eventually(Duration::from_secs(10), || client.metrics().renewals >= 3);
    assert!(renewed, "{:?}", client.metrics());
    assert!(guard.is_held());
    let ttl: i64 = tls.server.query(redis::cmd("PTTL").arg("job"));
    assert!(ttl > 0, "pttl {ttl}");

    assert!(guard.unlock().unwrap().was_held());

    // A waiter on another client is woken by the release message, heard on its
    // TLS pub/sub connection: it polls only every 10 s, so the wake-up is the message.
    // The holder's lease is long: a waiter polls by a holder's TTL at the latest.
    let other = builder(&tls)
        .tls(trusting(&tls.ca))
        .backoff(Duration::from_secs(10), Duration::from_secs(10))
        .build()
        .unwrap();
    let long = LockOptions::new().ttl(Duration::from_secs(60));
    support::assert_woken(|| {
        let guard = client.lock_with("job", &long).unwrap().unwrap();
        let (before, woken) = (other.metrics().attempts, other.metrics().wakeups);
        let ready = Barrier::new(2);
        thread::scope(|s| {
            let waiter = s.spawn(|| {
                ready.wait();
                let got = other.try_lock_for("job", Duration::from_secs(20)).unwrap();
                let m = other.metrics();
                assert!(got.is_some(), "the waiter did not get the lock");
                (m.attempts, m.wakeups)
            });
            ready.wait();
            // Queued, the key's release channel subscribed, and the attempt the
            // subscription's confirmation makes sent.
            let numsub = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("{job}:released")
                .clone();
            // And the holder marked as waited for (`<token>+`): only a marked lock's
            // release publishes.
            let marked = || {
                let v: Option<String> = tls.server.query(redis::cmd("GET").arg("job"));
                v.is_some_and(|v| v.ends_with('+'))
            };
            let queued = support::wait_for(Duration::from_secs(5), || {
                let attempts = other.metrics().attempts;
                (attempts >= before + 2
                    && tls.server.query::<(String, i64)>(&numsub).1 >= 1
                    && marked())
                .then_some(attempts)
            });
            let queued = queued.expect("the waiter did not queue");
            assert!(guard.unlock().unwrap().was_held());
            let (acquired, wakeups) = waiter.join().unwrap();
            support::WakeRound {
                queued,
                acquired,
                wakeups: wakeups - woken,
            }
        })
    });
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let tls = TlsServer::start(true, &[]);
    let without = builder(&tls).tls(trusting(&tls.ca)).build();
    assert!(without.is_err(), "a client without a certificate got in");

    let issued = tls.ca.client();
    let client = builder(&tls)
        .tls(trusting(&tls.ca).client_cert(issued.cert, issued.key))
        .build()
        .unwrap();
    let guard = client.try_lock("mtls").unwrap().expect("free key");
    assert!(client.try_lock("mtls").unwrap().is_none(), "held twice");
    assert!(guard.unlock().unwrap().was_held());
    assert!(client.try_lock("mtls").unwrap().is_some());
}

#[test]
fn a_server_signed_by_another_ca_is_refused_at_build() {
    let tls = TlsServer::start(false, &[]);
    let stranger = Ca::new("some other CA");
    let err = builder(&tls).tls(trusting(&stranger)).build().unwrap_err();
    let text = chain(&err);
    assert!(
        err.is_connection_error() || text.contains("certificate"),
        "{text}"
    );
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    // Without any custom CA, the system's trust store does not know ours either.
    let err = builder(&tls).build().unwrap_err();
    assert!(
        chain(&err).to_lowercase().contains("certificate"),
        "{}",
        chain(&err)
    );
}

#[test]
fn certificates_with_a_plain_url_are_a_config_error() {
    let ca = Ca::new("unused CA");
    let err = LockClient::builder("redis://127.0.0.1:1/")
        .tls(trusting(&ca))
        .build()
        .unwrap_err();
    assert!(
        matches!(err, Error::Config { option: "tls", .. }),
        "{err:?}"
    );
}

#[test]
fn debug_shows_neither_password_nor_private_key() {
    let tls = TlsServer::start(false, &["--requirepass", PASSWORD]);
    let issued = tls.ca.client();
    let key_line = issued.key.lines().nth(1).unwrap().to_owned();
    let url = tls.url(&format!(":{PASSWORD}@"));
    let builder = LockClient::builder(url.as_str())
        .tls(trusting(&tls.ca).client_cert(issued.cert, issued.key));
    let shown = format!("{builder:?}");
    let client = builder.build().unwrap();
    let shown = format!("{shown} | {client:?} | {:?}", client.lock("k").unwrap());
    assert!(!shown.contains(PASSWORD), "password printed: {shown}");
    assert!(!shown.contains(&key_line), "private key printed: {shown}");
    assert!(shown.contains("rediss://127.0.0.1"), "{shown}");
}
