mod support;

// The fleet features together, against real `redis-server` processes: leader
// election, the minimum hold, several names (`lock_all`), `wait_free` and the
// client's shutdown, each meeting the others on the same names.

use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, bounded};
use redlease::{
    Error, LockClient, LockClientBuilder, LockOptions, LossReason, OBSERVE_POLL, Release,
    ShutdownReport,
};
use support::cluster::Cluster;
use support::{RedisServer, eventually};

/// The leases' TTL: far longer than any hand-over a test waits for, so a
/// prompt one was woken, not waited out.
const TTL: Duration = Duration::from_secs(30);
/// A woken caller answers within this (a release message and a round trip,
/// plus room for a 200 ms stall of a loaded 2-core machine, several times over).
const PROMPT: Duration = Duration::from_secs(2);
/// How long a caller must stay waiting to show that it waits.
const STILL: Duration = Duration::from_millis(400);
/// The minimum hold of the tests that wait for one to end.
const HOLD: Duration = Duration::from_secs(3);
/// A key's expiry seen this early is the server's rounding of a `PX` to the
/// millisecond, not an early release.
const ROUNDING: Duration = Duration::from_millis(5);
/// How long after a kept key expires a waiter may take to see it free: one
/// look, capped by the key's `PTTL`, plus stalls.
const AFTER: Duration = Duration::from_millis(1500);
/// A wait that never runs out within a test.
const LONG: Duration = Duration::from_secs(60);

fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .ttl(TTL)
}

fn client(server: &RedisServer) -> LockClient {
    builder(server).build().unwrap()
}

/// A client that polls so rarely that only a release message wakes it in time.
fn slow(server: &RedisServer) -> LockClient {
    builder(server)
        .backoff(Duration::from_secs(10), Duration::from_secs(20))
        .build()
        .unwrap()
}

fn in_secs(n: u64) -> Instant {
    Instant::now() + Duration::from_secs(n)
}

fn report(released: usize, already_gone: usize, failed: usize) -> ShutdownReport {
    let mut r = ShutdownReport::default();
    r.released = released;
    r.already_gone = already_gone;
    r.failed = failed;
    r
}

fn value(server: &RedisServer, key: &str) -> Option<String> {
    server.query(redis::cmd("GET").arg(key))
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.query::<i64>(redis::cmd("EXISTS").arg(key)) == 1
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.query(redis::cmd("PTTL").arg(key))
}

/// Clients subscribed to the release channel of the lock `name`.
fn listeners(server: &RedisServer, name: &str) -> i64 {
    let (_, n): (String, i64) = server.query(
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(format!("{{lock:{name}}}:released")),
    );
    n
}

/// Waits until some client listens for the release of `name`.
fn listening(server: &RedisServer, name: &str) {
    assert!(
        eventually(Duration::from_secs(10), || listeners(server, name) > 0),
        "nobody listens for the release of {name}"
    );
}

/// Asserts that `key`, read now, is kept (marked `~`) until a hold of `d` that
/// began at `began` (before the acquire was sent) ends: its `PTTL` is at most
/// `d`, and no less than what was left of the hold when the read was sent.
fn assert_kept_until(server: &RedisServer, key: &str, d: Duration, began: Instant) {
    let v = value(server, key).unwrap_or_else(|| panic!("{key} was deleted inside its hold"));
    assert!(v.ends_with('~'), "{key} holds {v}, not a kept token");
    let left = pttl(server, key);
    let longest = i64::try_from(d.as_millis()).unwrap();
    let shortest = longest - i64::try_from(began.elapsed().as_millis()).unwrap();
    assert!(
        left <= longest && left >= shortest - 2,
        "PTTL of {key} is {left} ms, outside [{shortest}, {longest}]"
    );
}

/// Runs `f` on a thread of its own: its answer and when it came.
fn spawned<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Receiver<(T, Instant)> {
    let (tx, rx) = bounded(1);
    thread::spawn(move || {
        let answer = f();
        let _ = tx.send((answer, Instant::now()));
    });
    rx
}

#[test]
fn shutdown_resigns_a_leadership_and_a_candidate_of_another_client_leads_at_once() {
    let server = RedisServer::start();
    let (leader, candidate, watcher) = (client(&server), slow(&server), client(&server));
    let leadership = leader.election("sched").unwrap().campaign().unwrap();
    let first = leadership.term();
    let ours = value(&server, "lock:sched").unwrap();
    let observer = watcher.election("sched").unwrap().observe().unwrap();
    assert_eq!(
        observer.recv_timeout(PROMPT).unwrap().unwrap().term(),
        first
    );

    let election = candidate.election("sched").unwrap();
    let won = spawned(move || election.campaign());
    listening(&server, "sched");
    assert!(won.recv_timeout(STILL).is_err(), "led beside the leader");

    let stopped = Instant::now();
    assert_eq!(leader.shutdown(in_secs(10)), report(1, 0, 0));
    assert!(!leadership.is_held());
    assert!(leadership.check().is_err());
    assert_eq!(
        leadership.lost().try_recv().map(|m| m.reason),
        Ok(LossReason::Released)
    );

    // Woken by the release message: the candidate polls every 10 s at best.
    let (next, at) = won.recv_timeout(TTL).expect("no candidate led");
    let next = next.unwrap();
    let took = at - stopped;
    println!("led {took:?} after the shutdown");
    assert!(took < PROMPT, "led {took:?} after the shutdown");
    assert!(next.term() > first);
    assert_ne!(value(&server, "lock:sched").unwrap(), ours);
    let seen = eventually(
        PROMPT * 3,
        || matches!(observer.recv_timeout(PROMPT), Ok(Some(l)) if l.term() == next.term()),
    );
    assert!(seen, "the observer never saw the new leader");
    assert!(next.is_held());

    // The old leadership sends nothing and does not disturb the new one.
    assert!(matches!(leadership.resign(), Err(Error::Shutdown)));
    assert!(next.is_held());
    let now = watcher
        .election("sched")
        .unwrap()
        .leader()
        .unwrap()
        .unwrap();
    assert_eq!(now.term(), next.term());
}

#[test]
fn shutdown_leaves_a_leadership_taken_over_meanwhile_alone() {
    let server = RedisServer::start();
    let (leader, other) = (client(&server), client(&server));
    let leadership = leader.election("taken").unwrap().campaign().unwrap();
    // Its lease ends behind its back, and another client leads.
    let _: () = server.query(redis::cmd("DEL").arg("lock:taken"));
    let next = other.election("taken").unwrap().campaign().unwrap();
    let theirs = value(&server, "lock:taken").unwrap();

    assert_eq!(leader.shutdown(in_secs(10)), report(0, 1, 0));
    assert!(!leadership.is_held());
    assert_eq!(value(&server, "lock:taken").unwrap(), theirs);
    assert!(next.is_held());
    assert!(next.term() > leadership.term());
}

#[test]
fn shutdown_inside_a_minimum_hold_keeps_the_key_until_the_hold_ends() {
    let server = RedisServer::start();
    let (holder, other) = (client(&server), client(&server));
    let began = Instant::now();
    let opts = LockOptions::new().wait(Duration::ZERO).min_hold(HOLD);
    let guard = holder.lock_with("job", &opts).unwrap().unwrap();

    // Released as the guard would release it: kept, and counted released.
    assert_eq!(holder.shutdown(in_secs(10)), report(1, 0, 0));
    assert!(!guard.is_held());
    assert_kept_until(&server, "lock:job", HOLD, began);
    assert!(matches!(guard.unlock(), Err(Error::Shutdown)));
    assert!(other.try_lock("job").unwrap().is_none());
    assert!(!other.wait_free("job", Duration::ZERO).unwrap());

    // Taken once the hold has ended, not before.
    let (got, at) = spawned(move || other.lock_with("job", &LockOptions::new().wait(LONG)))
        .recv_timeout(LONG)
        .unwrap();
    let got = got.unwrap().expect("never taken");
    assert!(got.is_held());
    assert!(
        at + ROUNDING >= began + HOLD,
        "taken {:?} early",
        began + HOLD - at
    );
    assert!(
        at < began + HOLD + AFTER,
        "taken {:?} late",
        at.saturating_duration_since(began + HOLD)
    );
}

#[test]
fn unlocking_a_lock_all_inside_its_min_hold_keeps_every_name_and_hands_none_on() {
    let server = RedisServer::start();
    let client = client(&server);
    let names = ["m1", "m2", "m3"];
    let began = Instant::now();
    // A TTL shorter than the hold: every key is stored for the hold at least.
    let opts = LockOptions::new()
        .wait(Duration::ZERO)
        .ttl(Duration::from_secs(1))
        .min_hold(HOLD);
    let all = client.lock_all_with(&names, &opts).unwrap().unwrap();
    for name in names {
        let left = pttl(&server, &format!("lock:{name}"));
        assert!(left > 1000, "{name} stored for {left} ms only");
    }
    // A caller of the same client waits for one of the names.
    let waiter = client.clone();
    let handed = spawned(move || waiter.lock_with("m2", &LockOptions::new().wait(LONG)));
    listening(&server, "m2");
    assert!(handed.recv_timeout(STILL).is_err());

    let released = all.unlock();
    assert!(
        released.iter().all(|r| matches!(r, Ok(Release::Released))),
        "{released:?}"
    );
    for name in names {
        assert_kept_until(&server, &format!("lock:{name}"), HOLD, began);
    }
    let (got, at) = handed.recv_timeout(LONG).unwrap();
    let got = got.unwrap().expect("never handed");
    assert!(
        at + ROUNDING >= began + HOLD,
        "handed {:?} before the hold's end",
        began + HOLD - at
    );
    assert!(
        at < began + HOLD + AFTER,
        "handed {:?} late",
        at.saturating_duration_since(began + HOLD)
    );
    assert!(got.is_held());
    assert!(!value(&server, "lock:m2").unwrap().ends_with('~'));
    // The other names expire with the hold, and nobody holds them.
    for name in ["m1", "m3"] {
        assert!(
            eventually(AFTER, || !exists(&server, &format!("lock:{name}"))),
            "{name} outlived its hold"
        );
    }
    assert!(client.try_lock_all(&["m1", "m3"]).unwrap().is_some());
}

#[test]
fn unlocking_a_lock_all_nobody_waits_for_inside_its_min_hold_keeps_every_name() {
    let server = RedisServer::start();
    let (client, other) = (client(&server), client(&server));
    let names = ["q1", "q2", "q3"];
    let began = Instant::now();
    let opts = LockOptions::new().wait(Duration::ZERO).min_hold(HOLD);
    let all = client.lock_all_with(&names, &opts).unwrap().unwrap();
    // Nobody waits: where the keys share a node, one script would release all.
    let released = all.unlock();
    assert!(
        released.iter().all(|r| matches!(r, Ok(Release::Released))),
        "{released:?}"
    );
    for name in names {
        assert_kept_until(&server, &format!("lock:{name}"), HOLD, began);
    }
    assert!(other.try_lock_all(&names).unwrap().is_none());
    assert!(client.try_lock("q2").unwrap().is_none());
}

#[test]
fn a_multi_guard_after_shutdown_is_not_held_and_its_unlock_sends_nothing() {
    let server = RedisServer::start();
    let client = client(&server);
    let all = client.lock_all(&["s1", "s2", "s3"]).unwrap();
    let dropped = client.lock_all(&["s4", "s5"]).unwrap();
    assert!(all.is_held());

    assert_eq!(client.shutdown(in_secs(10)), report(5, 0, 0));
    assert!(!all.is_held());
    assert!(all.check().is_err());
    let told: Vec<_> = all.lost().try_iter().map(|m| m.reason).collect();
    assert_eq!(told, [LossReason::Released; 3]);
    assert!(!dropped.is_held());
    for i in 1..=5 {
        assert!(
            !exists(&server, &format!("lock:s{i}")),
            "s{i} left in Redis"
        );
    }
    server.reset_stats();
    let released = all.unlock();
    assert_eq!(released.len(), 3);
    assert!(
        released.iter().all(|r| matches!(r, Err(Error::Shutdown))),
        "{released:?}"
    );
    drop(dropped);
    client.flush();
    for cmd in ["evalsha", "eval", "del", "set", "publish"] {
        assert_eq!(server.command_calls(cmd), 0, "`{cmd}` sent after shutdown");
    }
    // The shutdown released them: no release failed.
    let metrics = client.metrics();
    assert_eq!(metrics.release_errors, 0, "{metrics:?}");
    assert_eq!(metrics.released, 5, "{metrics:?}");
}

#[test]
fn wait_free_on_a_key_kept_by_a_minimum_hold_answers_at_the_holds_end() {
    let server = RedisServer::start();
    // It polls every 10 s at best: the key's `PTTL` bounds its step.
    let (holder, other) = (client(&server), slow(&server));
    let began = Instant::now();
    let opts = LockOptions::new().wait(Duration::ZERO).min_hold(HOLD);
    let guard = holder.lock_with("kept", &opts).unwrap().unwrap();
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert_kept_until(&server, "lock:kept", HOLD, began);

    let (free, at) = spawned(move || other.wait_free("kept", LONG))
        .recv_timeout(LONG)
        .unwrap();
    assert!(free.unwrap());
    let late = at.saturating_duration_since(began + HOLD);
    println!("free {late:?} after the hold's end");
    assert!(
        at + ROUNDING >= began + HOLD,
        "free {:?} early",
        began + HOLD - at
    );
    // The kept key publishes nothing when it expires: its `PTTL` bounds the step.
    assert!(late < AFTER, "free {late:?} after the hold's end");
}

#[test]
fn wait_free_is_woken_when_a_multi_guard_unlocks() {
    let server = RedisServer::start();
    let (holder, watcher) = (client(&server), slow(&server));
    let all = holder.lock_all(&["w1", "w2"]).unwrap();
    let free = spawned(move || watcher.wait_free("w2", LONG));
    listening(&server, "w2");
    assert!(free.recv_timeout(STILL).is_err(), "free while held");

    let unlocked = Instant::now();
    assert!(
        all.unlock()
            .iter()
            .all(|r| matches!(r, Ok(Release::Released)))
    );
    let (free, at) = free.recv_timeout(LONG).unwrap();
    assert!(free.unwrap());
    let took = at - unlocked;
    println!("free {took:?} after the unlock");
    assert!(took < PROMPT, "free {took:?} after the unlock");
}

#[test]
fn wait_free_on_an_election_is_false_while_led_and_woken_by_the_resign() {
    let server = RedisServer::start();
    let (leader, watcher) = (client(&server), slow(&server));
    let leadership = leader.election("led").unwrap().campaign().unwrap();
    assert!(!watcher.wait_free("led", STILL).unwrap());

    let free = spawned(move || watcher.wait_free("led", LONG));
    listening(&server, "led");
    assert!(free.recv_timeout(STILL).is_err(), "free while led");
    let resigned = Instant::now();
    assert_eq!(leadership.resign().unwrap(), Release::Released);
    let (free, at) = free.recv_timeout(LONG).unwrap();
    assert!(free.unwrap());
    let took = at - resigned;
    println!("free {took:?} after the resign");
    assert!(took < PROMPT, "free {took:?} after the resign");
}

#[test]
fn a_campaign_waits_for_a_plain_lock_of_the_name_and_leads_once_it_is_released() {
    let server = RedisServer::start();
    let (plain, candidate) = (client(&server), slow(&server));
    let guard = plain.lock("shared").unwrap();
    let election = candidate.election("shared").unwrap();
    assert!(matches!(election.leader(), Err(Error::WrongFormat { .. })));
    assert!(election.try_campaign().unwrap().is_none());

    let won = spawned(move || election.campaign());
    listening(&server, "shared");
    assert!(won.recv_timeout(STILL).is_err(), "led beside a plain lock");
    let released = Instant::now();
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    let (leadership, at) = won.recv_timeout(LONG).unwrap();
    let leadership = leadership.unwrap();
    assert!(leadership.is_held());
    assert!(at - released < PROMPT, "led {:?} after", at - released);
    assert_eq!(
        candidate
            .election("shared")
            .unwrap()
            .leader()
            .unwrap()
            .unwrap()
            .term(),
        leadership.term()
    );
}

#[test]
fn lock_all_naming_an_elections_name_finds_it_busy_and_takes_nothing() {
    let server = RedisServer::start();
    let (leader, other) = (client(&server), client(&server));
    let leadership = leader.election("elected").unwrap().campaign().unwrap();

    assert!(other.try_lock_all(&["free", "elected"]).unwrap().is_none());
    let waited = other.try_lock_all_for(&["elected", "free"], STILL).unwrap();
    assert!(waited.is_none());
    assert!(!exists(&server, "lock:free"));
    // The same client's callers find it busy too.
    assert!(leader.try_lock_all(&["elected", "free"]).unwrap().is_none());
    assert!(leadership.is_held());

    // Free once resigned, and the names are then taken together.
    let waiting = other.clone();
    let got = spawned(move || waiting.try_lock_all_for(&["free", "elected"], LONG));
    listening(&server, "elected");
    assert_eq!(leadership.resign().unwrap(), Release::Released);
    let (all, _) = got.recv_timeout(LONG).unwrap();
    let all = all.unwrap().expect("never taken");
    assert!(all.is_held());
    // The election sees a plain lock now, and waits for it.
    let election = leader.election("elected").unwrap();
    assert!(election.try_campaign().unwrap().is_none());
}

#[test]
fn a_minimum_hold_is_refused_for_an_election() {
    let server = RedisServer::start();
    let client = client(&server);
    let election = client.election("held").unwrap();
    let opts = LockOptions::new().min_hold(HOLD);
    assert!(
        matches!(
            election.campaign_with(&opts),
            Err(Error::Unsupported { .. })
        ),
        "an election took a minimum hold"
    );
    assert!(!exists(&server, "lock:held"));
    // Without it the campaign leads.
    assert!(election.try_campaign().unwrap().is_some());
}

#[test]
fn on_a_cluster_shutdown_hands_a_leadership_on_and_keeps_a_held_lock_all() {
    let cluster = Cluster::start(3, 0);
    let build = |backoff: Duration| {
        LockClient::cluster(cluster.urls())
            .key_prefix("lock:")
            .ttl(TTL)
            .backoff(backoff, backoff * 2)
            .build()
            .unwrap()
    };
    let (leader, candidate) = (
        build(Duration::from_millis(4)),
        build(Duration::from_secs(10)),
    );
    let leadership = leader.election("c-sched").unwrap().campaign().unwrap();
    let began = Instant::now();
    let opts = LockOptions::new().wait(Duration::ZERO).min_hold(HOLD);
    let all = leader
        .lock_all_with(&["{c}a", "{c}b"], &opts)
        .unwrap()
        .unwrap();
    let election = candidate.election("c-sched").unwrap();
    let won = spawned(move || election.campaign());
    assert!(won.recv_timeout(STILL).is_err(), "led beside the leader");

    let stopped = Instant::now();
    assert_eq!(leader.shutdown(in_secs(10)), report(3, 0, 0));
    assert!(!leadership.is_held() && !all.is_held());
    let (next, at) = won.recv_timeout(TTL).expect("no candidate led");
    assert!(next.unwrap().term() > leadership.term());
    println!("led {:?} after the shutdown", at - stopped);
    assert!(
        at - stopped < PROMPT,
        "led {:?} after the shutdown",
        at - stopped
    );
    // The names are kept for their hold, then free.
    assert!(candidate.try_lock_all(&["{c}a", "{c}b"]).unwrap().is_none());
    let (got, at) =
        spawned(move || candidate.lock_all_with(&["{c}b", "{c}a"], &LockOptions::new().wait(LONG)))
            .recv_timeout(LONG)
            .unwrap();
    assert!(got.unwrap().is_some());
    assert!(
        at + ROUNDING >= began + HOLD,
        "taken {:?} early",
        began + HOLD - at
    );
}

#[test]
fn wait_free_of_the_holders_own_client_is_woken_when_its_multi_guard_unlocks() {
    let server = RedisServer::start();
    let client = slow(&server);
    let all = client.lock_all(&["o1", "o2"]).unwrap();
    let watcher = client.clone();
    let free = spawned(move || watcher.wait_free("o1", LONG));
    listening(&server, "o1");
    assert!(free.recv_timeout(STILL).is_err(), "free while held");

    let unlocked = Instant::now();
    assert!(
        all.unlock()
            .iter()
            .all(|r| matches!(r, Ok(Release::Released)))
    );
    let (free, at) = free.recv_timeout(LONG).unwrap();
    assert!(free.unwrap());
    let took = at - unlocked;
    println!("free {took:?} after the unlock");
    assert!(took < PROMPT, "free {took:?} after the unlock");
}

#[test]
fn lock_all_and_a_campaign_waiting_for_a_kept_name_take_it_at_the_holds_end() {
    let server = RedisServer::start();
    let (holder, waiter) = (client(&server), slow(&server));
    let began = Instant::now();
    let opts = LockOptions::new().wait(Duration::ZERO).min_hold(HOLD);
    let job = holder.lock_with("k-job", &opts).unwrap().unwrap();
    let lead = holder.lock_with("k-lead", &opts).unwrap().unwrap();
    assert_eq!(job.unlock().unwrap(), Release::Released);
    assert_eq!(lead.unlock().unwrap(), Release::Released);
    assert_kept_until(&server, "lock:k-job", HOLD, began);

    // Neither is woken by a message (a kept key publishes nothing when it
    // expires), and both poll every 10 s at best: the key's `PTTL` bounds
    // their wait.
    let campaigner = waiter.clone();
    let all = spawned(move || {
        waiter.lock_all_with(&["k-other", "k-job"], &LockOptions::new().wait(LONG))
    });
    let won = spawned(move || campaigner.election("k-lead").unwrap().campaign());
    let (all, at) = all.recv_timeout(LONG).unwrap();
    assert!(all.unwrap().expect("never taken").is_held());
    assert!(
        at + ROUNDING >= began + HOLD,
        "taken {:?} early",
        began + HOLD - at
    );
    assert!(
        at < began + HOLD + AFTER,
        "taken {:?} late",
        at.saturating_duration_since(began + HOLD)
    );
    let (won, at) = won.recv_timeout(LONG).unwrap();
    let won = won.unwrap();
    assert!(
        at + ROUNDING >= began + HOLD,
        "led {:?} early",
        began + HOLD - at
    );
    assert!(
        at < began + HOLD + AFTER,
        "led {:?} late",
        at.saturating_duration_since(began + HOLD)
    );
    assert!(won.is_held());
}

#[test]
fn an_observer_of_a_client_that_shuts_down_disconnects() {
    let server = RedisServer::start();
    let client = client(&server);
    let leadership = client.election("obs").unwrap().campaign().unwrap();
    let observer = client.election("obs").unwrap().observe().unwrap();
    assert_eq!(
        observer.recv_timeout(PROMPT).unwrap().unwrap().term(),
        leadership.term()
    );
    assert_eq!(client.shutdown(in_secs(10)), report(1, 0, 0));
    // At most the change it saw last, then disconnected within a poll.
    let end = Instant::now() + OBSERVE_POLL * 4 + PROMPT;
    loop {
        match observer.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(leader) => assert!(leader.is_none(), "a leader after the shutdown: {leader:?}"),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("the observer outlived the shutdown"),
        }
    }
}

#[test]
fn callers_waiting_before_a_release_inside_the_min_hold_see_the_key_free_at_the_holds_end() {
    let server = RedisServer::start();
    // Both poll every 10 s at best, and read a TTL of 30 s before the release:
    // only the release tells them that the key now ends with the hold.
    let (holder, other) = (slow(&server), slow(&server));
    let began = Instant::now();
    let opts = LockOptions::new().wait(Duration::ZERO).min_hold(HOLD);
    let guard = holder.lock_with("early", &opts).unwrap().unwrap();
    let ours = holder.lock_with("early-local", &opts).unwrap().unwrap();
    let several = holder.lock_with("early-all", &opts).unwrap().unwrap();
    let waiting = other.clone();
    let all = spawned(move || {
        waiting
            .lock_all_with(&["early-x", "early-all"], &LockOptions::new().wait(LONG))
            .map(|g| g.is_some())
    });
    let watcher = other.clone();
    let free = spawned(move || watcher.wait_free("early", LONG));
    let taken = spawned(move || {
        other
            .lock_with("early", &LockOptions::new().wait(LONG))
            .map(|g| g.is_some())
    });
    let local = holder.clone();
    let handed = spawned(move || {
        local
            .lock_with("early-local", &LockOptions::new().wait(LONG))
            .map(|g| g.is_some())
    });
    listening(&server, "early");
    listening(&server, "early-local");
    listening(&server, "early-all");
    assert!(free.recv_timeout(STILL).is_err(), "free while held");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert_eq!(ours.unlock().unwrap(), Release::Released);
    assert_eq!(several.unlock().unwrap(), Release::Released);
    assert_kept_until(&server, "lock:early", HOLD, began);

    let end = began + HOLD;
    let answers = [
        ("wait_free", free),
        ("lock", taken),
        ("local lock", handed),
        ("lock_all", all),
    ];
    for (what, answer) in answers {
        let (ok, at) = answer.recv_timeout(LONG).unwrap();
        assert!(ok.unwrap(), "{what}");
        let late = at.saturating_duration_since(end);
        println!("{what}: {late:?} after the hold's end");
        assert!(at + ROUNDING >= end, "{what}: {:?} early", end - at);
        assert!(late < AFTER, "{what}: {late:?} after the hold's end");
    }
}
