#![cfg(feature = "sentinel")]
mod support;

// Sentinel deployments: a client built from sentinel addresses finds the
// master, follows a failover (new locks land on the new master, the waiter's pub/sub
// connection comes back), and a lease whose key did not survive the failover is
// reported lost, never silently kept. Every wait is bounded.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlease::{LockClient, LockGuard};
use support::eventually;
use support::sentinel::{Deployment, MASTER_NAME, role, try_query};

/// Whether `key` is on `server`; `false` when the query fails.
fn exists(server: &support::RedisServer, key: &str) -> bool {
    try_query(server, redis::cmd("EXISTS").arg(key)) == Some(1)
}

#[test]
fn follows_a_failover_and_reports_the_leases_it_lost() {
    let d = Deployment::start();
    let urls = d.sentinel_urls();
    let fast = Duration::from_secs(1);

    let err = LockClient::sentinel(urls.clone(), "no-such-master")
        .connect_timeout(fast)
        .read_timeout(fast)
        .build()
        .unwrap_err();
    assert!(!format!("{err:?}").is_empty());

    let builder = LockClient::sentinel(urls.clone(), MASTER_NAME)
        .ttl(Duration::from_secs(3))
        .connect_timeout(fast)
        .read_timeout(fast)
        .write_timeout(fast);
    let shown = format!("{builder:?}");
    assert!(
        shown.contains(MASTER_NAME) && shown.contains(&urls[2]),
        "{shown}"
    );
    let client = builder.build().unwrap();
    // A second client, whose waiter must follow the failover: it polls only every
    // 2 s, so a wake-up within that comes from a release message on the new master.
    let other = LockClient::sentinel(urls.clone(), MASTER_NAME)
        .connect_timeout(fast)
        .read_timeout(fast)
        .backoff(Duration::from_secs(2), Duration::from_secs(2))
        .build()
        .unwrap();

    // Found the master: the locks are stored there.
    let old = d.server(d.master_port().unwrap());
    let kept = client.try_lock("kept").unwrap().expect("free key");
    let dropped = client.try_lock("dropped").unwrap().expect("free key");
    assert!(exists(old, "kept") && exists(old, "dropped"));
    // Both reach the replica before the failover (its acknowledged offset reaches
    // the master's), so what happens to them after it is up to the test, not to
    // replication timing.
    assert!(
        old.replicated(1, Duration::from_secs(5)),
        "the replica did not acknowledge the locks"
    );

    let new = d.failover();
    assert_ne!(new.port(), old.port());

    // New acquisitions reach the new master within a bounded time. Until Sentinel
    // has demoted the old master, a pooled connection may still reach it: such a
    // lock is given back and the attempt repeated.
    let mut fresh: Option<LockGuard> = None;
    let moved = eventually(Duration::from_secs(30), || match client.try_lock("fresh") {
        Ok(Some(g)) if exists(new, "fresh") => fresh.replace(g).is_none(),
        _ => false,
    });
    assert!(
        moved,
        "no lock reached the new master: {:?}",
        client.metrics()
    );
    let fresh = fresh.unwrap();

    // What asynchronous replication can do: a lock missing on the new master. Its
    // holder must find out at its next renewal.
    let deleted = eventually(Duration::from_secs(5), || {
        // 0 when it already expired there (renewals failed through the failover).
        try_query::<i64>(new, redis::cmd("DEL").arg("dropped")).is_some()
    });
    assert!(deleted);
    let lost = dropped.lost().recv_timeout(Duration::from_secs(15));
    assert!(
        lost.is_ok(),
        "a lease missing on the new master was not reported lost"
    );
    assert!(!dropped.is_held());

    // A lease that survived is renewed on the new master, or reported lost (if the
    // failover outlasted its validity): never believed held without its key.
    let base = client.metrics().renewals;
    let settled = eventually(Duration::from_secs(20), || {
        kept.lost().try_recv().is_ok()
            || (kept.is_held() && client.metrics().renewals >= base + 3 && exists(new, "kept"))
    });
    assert!(
        settled,
        "lease neither renewed on the new master nor reported lost"
    );
    if kept.is_held() {
        assert!(kept.unlock().unwrap().was_held());
    }

    // A pooled connection to the old master was closed by Sentinel: a call that
    // finds it dead fails (one retry on a fresh connection per call). Once they
    // are gone, calls succeed.
    let recovered = eventually(Duration::from_secs(10), || other.try_lock("warm").is_ok());
    assert!(recovered);
    // Both clients' waiter threads have reconnected, to the new master: each holds
    // a `redlease:waiter:<id>` channel there (they retry at most 1 s apart).
    let resubscribed = eventually(Duration::from_secs(10), || {
        let cmd = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("redlease:waiter:*")
            .clone();
        try_query::<Vec<String>>(new, &cmd).is_some_and(|c| c.len() >= 2)
    });
    assert!(
        resubscribed,
        "the waiter threads did not reconnect to the new master"
    );

    woken_on_the_new_master(&client, &other, fresh, new);
}

/// Waiting works after the failover: `other`'s caller queued on `fresh`'s key is
/// woken by the release message, published and heard on the new master (rounds
/// after the first take the key again).
fn woken_on_the_new_master(
    client: &LockClient,
    other: &LockClient,
    fresh: LockGuard,
    new: &support::RedisServer,
) {
    let mut fresh = Some(fresh);
    support::assert_woken(|| {
        let held = fresh.take().unwrap_or_else(|| {
            let again = client.try_lock("fresh").unwrap();
            again.expect("released by the waiter")
        });
        let (before, woken) = (other.metrics().attempts, other.metrics().wakeups);
        let ready = Barrier::new(2);
        thread::scope(|s| {
            let waiter = s.spawn(|| {
                ready.wait();
                let got = other
                    .try_lock_for("fresh", Duration::from_secs(20))
                    .unwrap()
                    .expect("the waiter did not get the lock");
                let m = other.metrics();
                drop(got);
                (m.attempts, m.wakeups)
            });
            ready.wait();
            // Queued, its key's release channel subscribed on the new master, and
            // the attempt the subscription's confirmation makes sent.
            let numsub = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("{fresh}:released")
                .clone();
            let queued = support::wait_for(Duration::from_secs(5), || {
                let attempts = other.metrics().attempts;
                (attempts >= before + 2
                    && try_query::<(String, i64)>(new, &numsub).is_some_and(|(_, n)| n >= 1))
                .then_some(attempts)
            });
            let queued = queued.expect("the waiter did not queue");
            assert!(held.unlock().unwrap().was_held());
            let (acquired, wakeups) = waiter.join().unwrap();
            support::WakeRound {
                queued,
                acquired,
                wakeups: wakeups - woken,
            }
        })
    });
}

// ---- fences across a failover ----

/// The lock names of the fenced workers below.
const FENCED_KEYS: [&str; 2] = ["fenced:a", "fenced:b"];

/// What fenced workers saw: per key, every fence in the order its holders held
/// it (each pushed while the lock is held), and how often two held a key at once.
#[derive(Default)]
struct Ledger {
    fences: [Mutex<Vec<u64>>; 2],
    held: [AtomicBool; 2],
    overlaps: AtomicUsize,
}

impl Ledger {
    fn count(&self, key: usize) -> usize {
        self.fences[key].lock().len()
    }

    fn total(&self) -> usize {
        self.count(0) + self.count(1)
    }

    fn max(&self) -> u64 {
        let max = |k: usize| self.fences[k].lock().iter().copied().max().unwrap_or(0);
        max(0).max(max(1))
    }

    /// Takes the keys in turn until `stop`; every call bounded (500 ms wait, 1 s
    /// timeouts). An error (the master gone) is paced, not counted on.
    fn work(&self, client: &LockClient, stop: &AtomicBool) {
        let mut n = 0;
        while !stop.load(Ordering::SeqCst) {
            let k = n % 2;
            n += 1;
            match client.try_lock_for(FENCED_KEYS[k], Duration::from_millis(500)) {
                Ok(Some(guard)) => {
                    if self.held[k].swap(true, Ordering::SeqCst) {
                        self.overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    self.fences[k]
                        .lock()
                        .push(guard.fence().expect("fencing is on"));
                    self.held[k].store(false, Ordering::SeqCst);
                    // The master may be gone with the lock: the outcome does not matter.
                    let _ = guard.unlock();
                }
                Ok(None) => {}
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// Pairs of consecutive fences of one key where the later is not higher.
fn regressions(fences: &[u64]) -> Vec<(u64, u64)> {
    fences
        .windows(2)
        .filter(|w| w[0] >= w[1])
        .map(|w| (w[0], w[1]))
        .collect()
}

#[test]
fn fences_keep_rising_when_a_failover_loses_increments_the_replica_never_got() {
    let d = Deployment::start_through_proxy();
    let link = d
        .link
        .as_ref()
        .expect("the replica replicates through a proxy");
    let old = d.server(d.master_port().unwrap());
    let new = d.servers.iter().find(|s| s.port() != old.port()).unwrap();
    let clients: Vec<LockClient> = (0..5)
        .map(|_| {
            let fast = Duration::from_secs(1);
            LockClient::sentinel(d.sentinel_urls(), MASTER_NAME)
                .ttl(Duration::from_secs(2))
                .connect_timeout(fast)
                .read_timeout(fast)
                .write_timeout(fast)
                .fencing(true)
                .build()
                .unwrap()
        })
        .collect();
    let ledger = Ledger::default();
    let stop = AtomicBool::new(false);
    let (handed_out, replicated) = thread::scope(|s| {
        for client in &clients {
            s.spawn(|| ledger.work(client, &stop));
        }
        let stopped = || stop.store(true, Ordering::SeqCst);
        // Fenced load on both keys, replicated as it goes.
        let warm = eventually(Duration::from_secs(20), || {
            ledger.count(0) >= 10 && ledger.count(1) >= 10
        });
        assert!(warm, "no fenced load: {} fences", ledger.total());
        // From here the replica hears nothing: every fence the master hands out is
        // an increment it will not have.
        link.blackhole(true);
        let before = ledger.total();
        let unreplicated = eventually(Duration::from_secs(20), || ledger.total() >= before + 40);
        assert!(unreplicated, "no fences after the replica was cut off");
        // The master fails with them.
        old.kill();
        let handed_out = ledger.max();
        let replicated: Option<u64> = new.query(redis::cmd("GET").arg("redlease:fence"));
        promote(&d, new);
        // Fenced load on both keys again, on the new master.
        let counts = [ledger.count(0), ledger.count(1)];
        let resumed = eventually(Duration::from_secs(30), || {
            ledger.count(0) >= counts[0] + 10 && ledger.count(1) >= counts[1] + 10
        });
        stopped();
        assert!(resumed, "no fenced load on the new master");
        (handed_out, replicated.unwrap_or(0))
    });
    // The scenario happened: the new master's counter was behind the fences given out.
    assert!(
        replicated < handed_out,
        "the replica was not behind ({replicated} ≥ {handed_out}): nothing was lost"
    );
    let fences = ledger.fences.map(Mutex::into_inner);
    let regressed: Vec<Vec<(u64, u64)>> = fences.iter().map(|f| regressions(f)).collect();
    let mut all: Vec<u64> = fences.concat();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        (regressed[0].len(), regressed[1].len(), n - all.len()),
        (0, 0, 0),
        "fences went back ({regressed:?}) or were handed out twice; the new master's \
         counter was at {replicated}, the old master had given out up to {handed_out}"
    );
    assert_eq!(
        ledger.overlaps.load(Ordering::SeqCst),
        0,
        "two holders at once"
    );
}

/// Has a sentinel fail the group over to `new` (the master is dead: asked again
/// while refused, e.g. while the sentinels' own failover is under way), and waits
/// until it is master and every sentinel names it.
fn promote(d: &Deployment, new: &support::RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut asked: Option<Instant> = None;
    loop {
        if role(new) == "master" && d.sentinels.iter().all(|s| s.master_port_is(new.port())) {
            return;
        }
        assert!(Instant::now() < deadline, "the failover did not complete");
        if asked.is_none_or(|at| at.elapsed() > Duration::from_secs(1)) {
            let failover = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER_NAME)
                .clone();
            let _ = d.sentinels[0].try_query::<()>(&failover);
            asked = Some(Instant::now());
        }
        thread::sleep(Duration::from_millis(50));
    }
}

// ---- liveness across a failover ----

/// A liveness client's lock across a Sentinel failover, with replica
/// confirmation on: each write of its session record counts only once the
/// replica acknowledged it, so the new master's copy lives at least as long as
/// the holder counts on, and a waiter there breaks the lock only once the holder
/// knows: whenever the waiter holds, the holder's validity (what `is_held`
/// reads) ended before. (Without confirmation, extends the old master took in
/// the failover's last moments are lost, and the new master can end the session
/// first: the documented risk of asynchronous replication, at the liveness's
/// scale.)
#[test]
fn a_failover_breaks_no_confirmed_live_clients_lock_before_the_holder_knows() {
    let d = Deployment::start();
    let urls = d.sentinel_urls();
    let fast = Duration::from_secs(1);
    let build = |liveness: Option<Duration>| {
        let mut b = LockClient::sentinel(urls.clone(), MASTER_NAME)
            .ttl(Duration::from_secs(30))
            .connect_timeout(fast)
            .read_timeout(fast)
            .write_timeout(fast);
        if let Some(l) = liveness {
            b = b.liveness(l).replicas(1, Duration::from_millis(500));
        }
        b.build().unwrap()
    };
    let holder = build(Some(Duration::from_secs(3)));
    let waiter = build(None);
    let old = d.server(d.master_port().unwrap());
    let guard = holder.lock("kept").unwrap();
    assert!(
        old.replicated(1, Duration::from_secs(5)),
        "the replica did not acknowledge the lock and the session record"
    );
    let new = d.failover();
    assert_ne!(new.port(), old.port());
    // The waiter tries for twice the liveness; errors while the failover settles
    // are tried again.
    let until = Instant::now() + Duration::from_secs(6);
    let mut taken = None;
    while taken.is_none() && Instant::now() < until {
        if let Ok(Some(g)) = waiter.try_lock_for("kept", Duration::from_millis(500)) {
            taken = Some((g, Instant::now()));
        }
    }
    match taken {
        Some((_, at)) => {
            assert!(guard.valid_until() < at, "broken while the holder held");
            assert!(!guard.is_held());
        }
        None => assert!(
            guard.is_held() || guard.lost().try_recv().is_ok(),
            "neither held nor told lost"
        ),
    }
    assert_eq!(waiter.metrics().leases_lost, 0);
}
