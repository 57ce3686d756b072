//! Release messages only for locks someone waits for, against a real `redis-server`:
//! a caller about to wait marks a redlease holder's token (`<token>+`), and only a
//! marked lock's release publishes. A release nobody waits for sends no `PUBLISH`;
//! a waiter of another client is still woken by a message; values other clients
//! wrote are never touched; a marked lock extends, renews, passes on and releases
//! as an unmarked one does.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlease::{LockClient, LockClientBuilder, LockOptions, Release};
use support::{RedisServer, eventually};

const KEY: &str = "job";
const LOCK_KEY: &str = "mark:job";
/// Long enough that neither a TTL running out nor a polling step explains a wait
/// that ends on a loaded machine.
const LONG: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_secs(10);
/// A Redlock node timeout that a scheduling stall of a loaded machine does not reach.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder(server.url()).key_prefix("mark:")
}

/// A client whose polling could never end a wait of this test: its waits end by a
/// release message or a hand-off.
fn never_polling(server: &RedisServer) -> LockClient {
    builder(server)
        .ttl(LONG)
        .backoff(LONG, LONG)
        .build()
        .unwrap()
}

fn value(server: &RedisServer) -> Option<String> {
    server.query(redis::cmd("GET").arg(LOCK_KEY))
}

fn marked(server: &RedisServer) -> bool {
    value(server).is_some_and(|v| v.ends_with('+'))
}

/// Whether `v` is an unmarked redlease token: `rl2:`, 16 hex digits, `:` and a
/// counter in base 36.
fn is_token(v: &str) -> bool {
    let Some((tag, counter)) = v.strip_prefix("rl2:").and_then(|r| r.split_once(':')) else {
        return false;
    };
    tag.len() == 16
        && tag
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && !counter.is_empty()
        && counter
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

#[test]
fn a_release_nobody_waits_for_publishes_nothing() {
    let server = RedisServer::start();
    let client = builder(&server).build().unwrap();
    let fenced = builder(&server).fencing(true).build().unwrap();
    server.reset_stats();
    for c in [&client, &fenced] {
        for _ in 0..50 {
            let guard = c.lock(KEY).unwrap();
            let v = value(&server).expect("the lock is stored");
            assert!(is_token(&v), "not a redlease token: {v:?}");
            assert_eq!(guard.unlock().unwrap(), Release::Released);
        }
    }
    assert_eq!(value(&server), None);
    assert_eq!(server.command_calls("publish"), 0);
    assert_eq!(server.deletes(), 100);
}

#[test]
fn a_waiter_of_another_client_marks_the_holder_and_its_release_wakes_it() {
    let server = RedisServer::start();
    let holder = builder(&server).ttl(LONG).build().unwrap();
    let waiter = never_polling(&server);
    // The release script names the channel itself: for plain keys, keys with a
    // hash tag and keys with a stray brace alike, it must be the one waited on.
    // A key per round, so each wait starts with its channel not yet subscribed.
    for (key, fence) in [
        ("job", false),
        ("fenced", true),
        ("job{7}", false),
        ("o}dd", false),
    ] {
        let stored = format!("mark:{key}");
        let value = || -> Option<String> { server.query(redis::cmd("GET").arg(&stored)) };
        let opts = LockOptions::new().fencing(fence).wait(BOUND);
        let guard = holder.lock(key).unwrap();
        let token = value().unwrap();
        assert!(is_token(&token), "not a redlease token: {token:?}");
        let (before, attempts) = (waiter.metrics().wakeups, waiter.metrics().attempts);
        thread::scope(|s| {
            let waiting = s.spawn(|| waiter.lock_with(key, &opts));
            // It tries once, then once more when subscribed (an unfenced caller
            // marks then; a fenced one marked at its first): then it waits for
            // the release message.
            let marked = Some(format!("{token}+"));
            assert!(eventually(BOUND, || {
                waiter.metrics().attempts >= attempts + 2 && value() == marked
            }));
            assert!(guard.is_held());
            assert_eq!(guard.unlock().unwrap(), Release::Released);
            let got = waiting.join().unwrap().unwrap().expect("acquired");
            assert_eq!(got.fence().is_some(), fence);
            assert_eq!(got.unlock().unwrap(), Release::Released);
        });
        // Woken by the release message, not by a poll (it polls every 30 s).
        assert_eq!(waiter.metrics().wakeups, before + 1, "key {key:?}");
    }
}

#[test]
fn a_waiter_marks_redlease_tokens_of_this_and_older_versions() {
    let server = RedisServer::start();
    let client = builder(&server).build().unwrap();
    let fenced = builder(&server).fencing(true).build().unwrap();
    // An older version's token (`rl1:` and 32 hex digits, written by a client
    // not yet upgraded) and this version's, each marked by an unfenced waiter
    // (`SET … NX GET` names the holder, then the mark script) and a fenced one
    // (the fenced acquire script marks).
    let tokens = [
        "rl1:0123456789abcdef0123456789abcdef",
        "rl2:0123456789abcdef:2s",
    ];
    for (c, v) in [&client, &fenced]
        .into_iter()
        .flat_map(|c| tokens.map(|v| (c, v)))
    {
        let _: () = server.query(redis::cmd("SET").arg(LOCK_KEY).arg(v).arg("PX").arg(60_000));
        thread::scope(|s| {
            let waiting = s.spawn(|| c.try_lock_for(KEY, BOUND));
            let marked = Some(format!("{v}+"));
            assert!(
                eventually(BOUND, || value(&server) == marked),
                "{v} not marked: {:?}",
                value(&server)
            );
            let ttl: i64 = server.query(redis::cmd("PTTL").arg(LOCK_KEY));
            assert!(ttl > 50_000, "TTL kept: {ttl} ms");
            // Its holder gone, the waiter takes the lock (by polling: nobody
            // publishes here).
            let _: () = server.query(redis::cmd("DEL").arg(LOCK_KEY));
            let guard = waiting
                .join()
                .unwrap()
                .unwrap()
                .expect("acquired once free");
            assert_eq!(guard.unlock().unwrap(), Release::Released);
        });
    }
}

#[test]
fn values_other_clients_wrote_are_never_marked() {
    let server = RedisServer::start();
    let client = builder(&server).build().unwrap();
    // redis-py's token, a hyphenated UUID (many hand-written locks), redsync's
    // base64, a value that only looks like ours, and an older redlease token.
    let foreign = [
        "1c6bd1d2a1b511ef8c0d0242ac120002",
        "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "kW3y0sZ2vX7l9QmHn4Rt1A==",
        "rl1:not-a-token",
        "rl1:0123456789abcdef0123456789abcdef-extra",
        "rl2:0123456789abcdef",
        "rl2:0123456789abcdef:1A",
        "rl2:0123456789abcdef:1:2",
        "rl2:0123456789abcdeg:12",
        "rl2:0123456789abcdef0:12",
    ];
    for v in foreign {
        let _: () = server.query(redis::cmd("SET").arg(LOCK_KEY).arg(v).arg("PX").arg(60_000));
        let got = client
            .try_lock_for(KEY, Duration::from_millis(300))
            .unwrap();
        assert!(got.is_none(), "took a lock held as {v:?}");
        assert_eq!(value(&server).as_deref(), Some(v));
    }
    let _: () = server.query(redis::cmd("DEL").arg(LOCK_KEY));
}

#[test]
fn a_marked_lock_extends_renews_and_releases_as_its_holder_s() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(1);
    let holder = builder(&server).ttl(ttl).build().unwrap();
    let waiter = never_polling(&server);
    let guard = holder.lock(KEY).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| waiter.try_lock_for(KEY, LONG));
        // Marked by its poll once subscribed.
        assert!(eventually(BOUND, || {
            waiter.metrics().attempts >= 2 && marked(&server)
        }));
        // The renewal thread renews every third of the TTL: after three TTLs
        // the lock is still ours, so renewals of the marked value went through.
        let renewed = holder.metrics().renewals;
        assert!(eventually(BOUND, || holder.metrics().renewals >= renewed + 6));
        assert!(guard.is_held());
        guard.check().unwrap();
        guard.extend(LONG).unwrap();
        let pttl: i64 = server.query(redis::cmd("PTTL").arg(LOCK_KEY));
        assert!(pttl > 20_000, "extend left a PTTL of {pttl} ms");
        assert!(marked(&server), "the extend dropped the mark");
        let released = Instant::now();
        assert_eq!(guard.unlock().unwrap(), Release::Released);
        let got = waiting.join().unwrap().unwrap().expect("acquired");
        // The holder's TTL was 30 s and the waiter polls every 30 s: taken well
        // before either, it was woken by the release of the marked value (on a
        // loaded machine the message may reach it while it is between two of its
        // own steps, so the count of wake-ups is not what is checked).
        let took = released.elapsed();
        assert!(
            took < BOUND,
            "the waiter took the lock {took:?} after the release"
        );
        assert_eq!(got.unlock().unwrap(), Release::Released);
    });
    assert_eq!(holder.metrics().leases_lost, 0);
}

#[test]
fn a_mark_survives_a_hand_off_to_a_caller_of_the_holder_s_client() {
    let server = RedisServer::start();
    let holder = never_polling(&server);
    let other = never_polling(&server);
    // A fence makes the hand-off a script that replaces the token, not the lease
    // passed on as it is.
    let fenced = LockOptions::new().fencing(true).wait(LONG);
    // A local caller not yet asleep on its offer when the holder releases (a
    // stalled machine) gets a real release instead: that round shows nothing, and
    // another is made.
    let handed = (0..10).any(|_| {
        let (handoffs, wakeups) = (holder.metrics().handoffs, other.metrics().wakeups);
        let first = holder.lock(KEY).unwrap();
        thread::scope(|s| {
            // Each waiter tries once, then once more when subscribed: then it waits.
            let before = holder.metrics().attempts;
            let local = s.spawn(|| holder.lock_with(KEY, &fenced).unwrap().expect("acquired"));
            assert!(eventually(BOUND, || holder.metrics().attempts >= before + 2));
            let before = other.metrics().attempts;
            let remote = s.spawn(|| {
                let guard = other.try_lock_for(KEY, LONG).unwrap().expect("acquired");
                assert_eq!(guard.unlock().unwrap(), Release::Released);
            });
            assert!(eventually(BOUND, || {
                other.metrics().attempts >= before + 2 && marked(&server)
            }));
            let token = value(&server).unwrap();
            assert_eq!(first.unlock().unwrap(), Release::Released);
            let second = local.join().unwrap();
            if holder.metrics().handoffs == handoffs {
                assert_eq!(second.unlock().unwrap(), Release::Released);
                remote.join().unwrap();
                return false;
            }
            assert!(second.fence().is_some());
            let after = value(&server).unwrap();
            assert_ne!(after, token, "the token was not replaced");
            assert!(
                after.ends_with('+'),
                "the hand-off dropped the mark: {after:?}"
            );
            // The other client's waiter is woken by the release message that the
            // mark asks for.
            assert_eq!(second.unlock().unwrap(), Release::Released);
            remote.join().unwrap();
            assert_eq!(other.metrics().wakeups, wakeups + 1);
            true
        })
    });
    assert!(
        handed,
        "no release was handed to the local caller in 10 rounds"
    );
}

#[test]
fn a_redlock_waiter_marks_the_holder_on_each_master_and_is_woken_by_its_release() {
    let masters = support::Masters::start(3);
    let urls = masters.urls();
    let redlock = || {
        LockClient::redlock(urls.iter().map(String::as_str))
            .key_prefix("mark:")
            .ttl(LONG)
            // A scheduling stall of a loaded machine outlasts the default 50 ms a
            // node has to answer (three such rounds end a wait with `NoQuorum`).
            .node_timeout(NODE_TIMEOUT)
            .build()
            .unwrap()
    };
    let (holder, waiter) = (redlock(), redlock());
    let values = || -> Vec<Option<String>> {
        masters
            .servers
            .iter()
            .map(|s| s.query(redis::cmd("GET").arg(LOCK_KEY)))
            .collect()
    };
    let marked_on = || {
        values()
            .into_iter()
            .filter(|v| v.as_ref().is_some_and(|v| v.ends_with('+')))
            .count()
    };
    // A Redlock waiter also polls, on the client's backoff as a single server's
    // waiter does (one `GET` a master, then a `SET` round only if a majority may
    // be free): over several rounds, most must end by the release message.
    let rounds = 5;
    for _ in 0..rounds {
        // The holder's `SET` on the master outside its majority lands after `lock`
        // returned, within the node timeout, or not at all (Redlock holds a
        // majority): only a lock on all three can be marked on all three.
        let on_every_master = || {
            let v = values();
            let tokens: Vec<Option<&str>> = v
                .iter()
                .map(|x| x.as_deref().map(|x| x.trim_end_matches('+')))
                .collect();
            tokens.iter().all(Option::is_some) && tokens.iter().all(|t| *t == tokens[0])
        };
        let guard = (0..3)
            .find_map(|_| {
                let guard = holder.lock(KEY).unwrap();
                if eventually(NODE_TIMEOUT * 2, on_every_master) {
                    return Some(guard);
                }
                assert_eq!(guard.unlock().unwrap(), Release::Released);
                assert!(eventually(BOUND, || values().iter().all(Option::is_none)));
                None
            })
            .unwrap_or_else(|| panic!("never on every master: {:?}", values()));
        let attempts = waiter.metrics().attempts;
        thread::scope(|s| {
            let waiting = s.spawn(|| waiter.try_lock_for(KEY, LONG));
            // Marked wherever the waiter's attempt found the holder: every master
            // (a reply after the majority's still lands), so the master its waiter
            // thread listens on publishes.
            let marked = eventually(BOUND, || {
                waiter.metrics().attempts >= attempts + 2 && marked_on() == 3
            });
            assert!(
                marked,
                "{} attempts since the lock was taken, values {:?}",
                waiter.metrics().attempts - attempts,
                values()
            );
            assert_eq!(guard.unlock().unwrap(), Release::Released);
            let got = waiting.join().unwrap().unwrap().expect("acquired");
            assert_eq!(got.unlock().unwrap(), Release::Released);
        });
        // An unlock returns once a majority released; the third release may land
        // after the next round's `SET` there, which would find it busy.
        assert!(
            eventually(BOUND, || values().iter().all(Option::is_none)),
            "not released on every master: {:?}",
            values()
        );
    }
    // A poll already under way when the holder releases can win before the
    // message is read: most waits, not all, end by the message.
    let woken = waiter.metrics().wakeups;
    assert!(
        woken > rounds / 2,
        "only {woken} of {rounds} waits ended by a message"
    );
}

/// The commands Redis runs, as `MONITOR` shows them, one line each.
struct Monitor(std::io::BufReader<std::net::TcpStream>);

impl Monitor {
    fn start(server: &RedisServer) -> Monitor {
        use std::io::{BufRead, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        stream.set_read_timeout(Some(BOUND)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut monitor = Monitor(std::io::BufReader::new(stream));
        let mut ok = String::new();
        monitor.0.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim_end(), "+OK");
        monitor
    }

    /// The next command line that sets the lock key (each read bounded).
    fn next_set(&mut self) -> String {
        use std::io::BufRead;
        loop {
            let mut line = String::new();
            assert!(self.0.read_line(&mut line).unwrap() > 0, "MONITOR ended");
            if line.contains(r#""SET" "mark:job""#) {
                return line;
            }
        }
    }
}

#[test]
fn a_lone_callers_first_attempt_is_the_floor_s_set_and_a_waiting_client_s_names_the_holder() {
    let server = RedisServer::start();
    let client = builder(&server).ttl(LONG).build().unwrap();
    let holder = builder(&server).ttl(LONG).build().unwrap();
    let mut monitor = Monitor::start(&server);
    // No channel subscribed, nobody else acquiring: the floor's own command.
    assert_eq!(
        client.lock(KEY).unwrap().unlock().unwrap(),
        Release::Released
    );
    let set = monitor.next_set();
    assert!(!set.contains(r#""GET""#), "{set}");
    // While a caller of the client waits (for another key), a caller that may
    // wait asks who holds the lock, so that a busy reply names the holder.
    let other = holder.lock("other").unwrap();
    thread::scope(|s| {
        let attempts = client.metrics().attempts;
        let waiting = s.spawn(|| client.try_lock_for("other", LONG));
        // Its try once subscribed: the subscription is counted by then.
        assert!(eventually(BOUND, || client.metrics().attempts >= attempts + 2));
        let got = client.lock(KEY).unwrap();
        let set = monitor.next_set();
        assert!(set.contains(r#""GET""#), "{set}");
        assert_eq!(got.unlock().unwrap(), Release::Released);
        assert_eq!(other.unlock().unwrap(), Release::Released);
        let took = waiting.join().unwrap().unwrap().expect("acquired");
        assert_eq!(took.unlock().unwrap(), Release::Released);
    });
}
