mod support;

// Issue 23, item 1: after a network outage (a proxy that blackholes every byte both ways)
// heals, the next call works, whatever the pool did while the network was dark.

use std::thread;
use std::time::{Duration, Instant};

use redlease::{LockClient, LockOptions, Release};
use support::proxy::Proxy;
use support::{RedisServer, eventually};

/// Read and write timeout of the client (the issue's setting); connect timeout default.
const READ: Duration = Duration::from_secs(1);
/// TTL of the lease held across each outage.
const TTL: Duration = Duration::from_millis(1500);
/// Outages in a row, each with calls made into it.
const OUTAGES: usize = 4;

#[test]
fn issue_23_the_first_call_after_a_healed_outage_succeeds() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = LockClient::builder(proxy.url())
        .key_prefix("lock:")
        .read_timeout(READ)
        .write_timeout(READ)
        .build()
        .unwrap();
    let opts = LockOptions::new().ttl(TTL).wait(Duration::from_secs(5));
    let mut figures = Vec::new();
    for round in 0..OUTAGES {
        let guard = client.lock_with("bk", &opts).unwrap().expect("free");
        proxy.discard(true);
        let dark = Instant::now();
        // Calls into the dark: each times out, its connection is thrown away, and the
        // pool opens new ones whose handshake is never answered.
        thread::scope(|s| {
            for t in 0..3 {
                let client = &client;
                s.spawn(move || {
                    for i in 0..2 {
                        let t0 = Instant::now();
                        let r = client.try_lock(&format!("dark:{round}:{t}:{i}"));
                        eprintln!("dark call {t} {i}: {:?} {r:?}", t0.elapsed());
                        assert!(r.is_err(), "a call in the dark returned {r:?}");
                    }
                });
            }
        });
        assert!(eventually(Duration::from_secs(5), || !guard.is_held()));
        // Long enough that the handshakes begun in the dark have timed out and the
        // pool is retrying them.
        let left = Duration::from_millis(2500).saturating_sub(dark.elapsed());
        thread::sleep(left);
        proxy.discard(false);
        let healed = Instant::now();
        eprintln!("HEAL");
        let released = guard.unlock();
        let unlock_took = healed.elapsed();
        let again = client.try_lock("bk");
        let first = healed.elapsed();
        eprintln!(
            "outage {round}: dark for {:?}; after the heal unlock {released:?} in {unlock_took:?}, try_lock ok={} at {first:?}",
            healed - dark,
            matches!(again, Ok(Some(_)))
        );
        figures.push((released.is_ok(), unlock_took, matches!(again, Ok(Some(_))), first));
        drop(again);
    }
    eprintln!("heal -> first calls: {figures:?}");
    for (unlocked, _, locked, _) in &figures {
        assert!(*unlocked && *locked, "{figures:?}");
    }
    let _ = Release::Released;
}
