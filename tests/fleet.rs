mod support;

// The fleet features together, against real `redis-server` processes: leader
// election, the minimum hold, several names (`lock_all`), `wait_free` and the
// client's shutdown, each meeting the others on the same names.

use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use redlease::{
    Error, LockClient, LockClientBuilder, LockOptions, LossReason, OBSERVE_POLL, Release,
    ShutdownReport,
};
use support::cluster::Cluster;
use support::fleet::{
    LONG, ROUNDING, STILL, all_released, answer_after, assert_at_end, assert_kept, held, hold,
    listening, released, spawned,
};
use support::{RedisServer, eventually};

/// The leases' TTL: far longer than any hand-over a test waits for, so a
/// prompt one was woken, not waited out.
const TTL: Duration = Duration::from_secs(30);
/// A woken caller answers within this (a release message and a round trip,
/// plus room for a 200 ms stall of a loaded 2-core machine, several times over).
const PROMPT: Duration = Duration::from_secs(2);
/// The minimum hold of the tests that wait for one to end.
const HOLD: Duration = Duration::from_secs(3);
/// How long after a kept key expires a waiter may take to see it free: one
/// look, capped by the key's `PTTL`, plus stalls.
const AFTER: Duration = Duration::from_millis(1500);

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

/// Waits until some client listens for the release of the lock `name`.
fn listening_for(server: &RedisServer, name: &str) {
    listening(server, &released(&format!("lock:{name}")));
}

/// Options of an acquire that waits [`LONG`] at most.
fn patient() -> LockOptions {
    LockOptions::new().wait(LONG)
}

#[test]
fn shutdown_resigns_a_leadership_and_a_candidate_of_another_client_leads_at_once() {
    let server = RedisServer::start();
    let (leader, candidate, watcher) = (client(&server), slow(&server), client(&server));
    let leadership = leader.election("sched").unwrap().campaign().unwrap();
    let first = leadership.term();
    let ours = server.value("lock:sched").unwrap();
    let observer = watcher.election("sched").unwrap().observe().unwrap();
    assert_eq!(
        observer.recv_timeout(PROMPT).unwrap().unwrap().term(),
        first
    );

    let election = candidate.election("sched").unwrap();
    let won = spawned(move || election.campaign());
    listening_for(&server, "sched");
    let (next, took) = answer_after(&won, "led beside the leader", || {
        assert_eq!(leader.shutdown(in_secs(10)), report(1, 0, 0));
        assert!(!leadership.is_held());
        assert!(leadership.check().is_err());
        assert_eq!(
            leadership.lost().try_recv().map(|m| m.reason),
            Ok(LossReason::Released)
        );
    });

    // Woken by the release message: the candidate polls every 10 s at best.
    let next = next.unwrap();
    assert!(took < PROMPT, "led {took:?} after the shutdown");
    assert!(next.term() > first);
    assert_ne!(server.value("lock:sched").unwrap(), ours);
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
    server.del("lock:taken");
    let next = other.election("taken").unwrap().campaign().unwrap();
    let theirs = server.value("lock:taken").unwrap();

    assert_eq!(leader.shutdown(in_secs(10)), report(0, 1, 0));
    assert!(!leadership.is_held());
    assert_eq!(server.value("lock:taken").unwrap(), theirs);
    assert!(next.is_held());
    assert!(next.term() > leadership.term());
}

#[test]
fn shutdown_inside_a_minimum_hold_keeps_the_key_until_the_hold_ends() {
    let server = RedisServer::start();
    let (holder, other) = (client(&server), client(&server));
    let (guard, began) = hold(&holder, "job", HOLD);

    // Released as the guard would release it: kept, and counted released.
    assert_eq!(holder.shutdown(in_secs(10)), report(1, 0, 0));
    assert!(!guard.is_held());
    assert_kept(&server, "lock:job", HOLD, began);
    assert!(matches!(guard.unlock(), Err(Error::Shutdown)));
    assert!(other.try_lock("job").unwrap().is_none());
    assert!(!other.wait_free("job", Duration::ZERO).unwrap());

    // Taken once the hold has ended, not before.
    let (got, at) = spawned(move || other.lock_with("job", &patient()))
        .recv_timeout(LONG)
        .unwrap();
    let got = got.unwrap().expect("never taken");
    assert!(got.is_held());
    assert_at_end("taken", at, began + HOLD, AFTER);
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
        let left = server.pttl(&format!("lock:{name}"));
        assert!(left > 1000, "{name} stored for {left} ms only");
    }
    // A caller of the same client waits for one of the names.
    let waiter = client.clone();
    let handed = spawned(move || waiter.lock_with("m2", &patient()));
    listening_for(&server, "m2");
    assert!(handed.recv_timeout(STILL).is_err());

    let released = all.unlock();
    assert!(all_released(&released), "{released:?}");
    for name in names {
        assert_kept(&server, &format!("lock:{name}"), HOLD, began);
    }
    let (got, at) = handed.recv_timeout(LONG).unwrap();
    let got = got.unwrap().expect("never handed");
    assert_at_end("handed", at, began + HOLD, AFTER);
    assert!(got.is_held());
    assert!(!server.value("lock:m2").unwrap().ends_with('~'));
    // The other names expire with the hold, and nobody holds them.
    for name in ["m1", "m3"] {
        assert!(
            eventually(AFTER, || !server.exists(&format!("lock:{name}"))),
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
    let opts = held(HOLD);
    let all = client.lock_all_with(&names, &opts).unwrap().unwrap();
    // Nobody waits: where the keys share a node, one script would release all.
    let released = all.unlock();
    assert!(all_released(&released), "{released:?}");
    for name in names {
        assert_kept(&server, &format!("lock:{name}"), HOLD, began);
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
        assert!(!server.exists(&format!("lock:s{i}")), "s{i} left in Redis");
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
    let (guard, began) = hold(&holder, "kept", HOLD);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert_kept(&server, "lock:kept", HOLD, began);

    let (free, at) = spawned(move || other.wait_free("kept", LONG))
        .recv_timeout(LONG)
        .unwrap();
    assert!(free.unwrap());
    // The kept key publishes nothing when it expires: its `PTTL` bounds the step.
    assert_at_end("free", at, began + HOLD, AFTER);
}

#[test]
fn wait_free_is_woken_when_a_multi_guard_unlocks() {
    let server = RedisServer::start();
    let (holder, watcher) = (client(&server), slow(&server));
    let all = holder.lock_all(&["w1", "w2"]).unwrap();
    let free = spawned(move || watcher.wait_free("w2", LONG));
    listening_for(&server, "w2");
    let (free, took) = answer_after(&free, "free while held", || {
        assert!(all_released(&all.unlock()));
    });
    assert!(free.unwrap());
    assert!(took < PROMPT, "free {took:?} after the unlock");
}

#[test]
fn wait_free_on_an_election_is_false_while_led_and_woken_by_the_resign() {
    let server = RedisServer::start();
    let (leader, watcher) = (client(&server), slow(&server));
    let leadership = leader.election("led").unwrap().campaign().unwrap();
    assert!(!watcher.wait_free("led", STILL).unwrap());

    let free = spawned(move || watcher.wait_free("led", LONG));
    listening_for(&server, "led");
    let (free, took) = answer_after(&free, "free while led", || {
        assert_eq!(leadership.resign().unwrap(), Release::Released);
    });
    assert!(free.unwrap());
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
    listening_for(&server, "shared");
    let (leadership, took) = answer_after(&won, "led beside a plain lock", || {
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    });
    let leadership = leadership.unwrap();
    assert!(leadership.is_held());
    assert!(took < PROMPT, "led {took:?} after");
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
    assert!(!server.exists("lock:free"));
    // The same client's callers find it busy too.
    assert!(leader.try_lock_all(&["elected", "free"]).unwrap().is_none());
    assert!(leadership.is_held());

    // Free once resigned, and the names are then taken together.
    let waiting = other.clone();
    let got = spawned(move || waiting.try_lock_all_for(&["free", "elected"], LONG));
    listening_for(&server, "elected");
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
    assert!(!server.exists("lock:held"));
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
    let opts = held(HOLD);
    let all = leader
        .lock_all_with(&["{c}a", "{c}b"], &opts)
        .unwrap()
        .unwrap();
    let election = candidate.election("c-sched").unwrap();
    let won = spawned(move || election.campaign());
    let (next, took) = answer_after(&won, "led beside the leader", || {
        assert_eq!(leader.shutdown(in_secs(10)), report(3, 0, 0));
        assert!(!leadership.is_held() && !all.is_held());
    });
    assert!(next.unwrap().term() > leadership.term());
    assert!(took < PROMPT, "led {took:?} after the shutdown");
    // The names are kept for their hold, then free.
    assert!(candidate.try_lock_all(&["{c}a", "{c}b"]).unwrap().is_none());
    let (got, at) = spawned(move || candidate.lock_all_with(&["{c}b", "{c}a"], &patient()))
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
    listening_for(&server, "o1");
    let (free, took) = answer_after(&free, "free while held", || {
        assert!(all_released(&all.unlock()));
    });
    assert!(free.unwrap());
    assert!(took < PROMPT, "free {took:?} after the unlock");
}

#[test]
fn lock_all_and_a_campaign_waiting_for_a_kept_name_take_it_at_the_holds_end() {
    let server = RedisServer::start();
    let (holder, waiter) = (client(&server), slow(&server));
    let began = Instant::now();
    let opts = held(HOLD);
    let job = holder.lock_with("k-job", &opts).unwrap().unwrap();
    let lead = holder.lock_with("k-lead", &opts).unwrap().unwrap();
    assert_eq!(job.unlock().unwrap(), Release::Released);
    assert_eq!(lead.unlock().unwrap(), Release::Released);
    assert_kept(&server, "lock:k-job", HOLD, began);

    // Neither is woken by a message (a kept key publishes nothing when it
    // expires), and both poll every 10 s at best: the key's `PTTL` bounds
    // their wait.
    let campaigner = waiter.clone();
    let all = spawned(move || waiter.lock_all_with(&["k-other", "k-job"], &patient()));
    let won = spawned(move || campaigner.election("k-lead").unwrap().campaign());
    let (all, at) = all.recv_timeout(LONG).unwrap();
    assert!(all.unwrap().expect("never taken").is_held());
    assert_at_end("taken", at, began + HOLD, AFTER);
    let (won, at) = won.recv_timeout(LONG).unwrap();
    let won = won.unwrap();
    assert_at_end("led", at, began + HOLD, AFTER);
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
    let opts = held(HOLD);
    let guard = holder.lock_with("early", &opts).unwrap().unwrap();
    let ours = holder.lock_with("early-local", &opts).unwrap().unwrap();
    let several = holder.lock_with("early-all", &opts).unwrap().unwrap();
    let waiting = other.clone();
    let all = spawned(move || {
        waiting
            .lock_all_with(&["early-x", "early-all"], &patient())
            .map(|g| g.is_some())
    });
    let watcher = other.clone();
    let free = spawned(move || watcher.wait_free("early", LONG));
    let taken = spawned(move || other.lock_with("early", &patient()).map(|g| g.is_some()));
    let local = holder.clone();
    let handed = spawned(move || {
        local
            .lock_with("early-local", &patient())
            .map(|g| g.is_some())
    });
    listening_for(&server, "early");
    listening_for(&server, "early-local");
    listening_for(&server, "early-all");
    assert!(free.recv_timeout(STILL).is_err(), "free while held");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert_eq!(ours.unlock().unwrap(), Release::Released);
    assert_eq!(several.unlock().unwrap(), Release::Released);
    assert_kept(&server, "lock:early", HOLD, began);

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
        assert_at_end(what, at, end, AFTER);
    }
}
