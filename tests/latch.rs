mod support;

// The fan-in latch against a real `redis-server`: waiters return promptly after
// the last count down, and with `ParticipantDied` when a participant leaves
// without counting down; Redisson's `RCountDownLatch` format in both directions
// (its `await` replayed with raw SUBSCRIBE + GET, its `countDown` script sent
// with raw EVAL); the keys' expiry; bad input.

use std::thread;
use std::time::{Duration, Instant};

use redlease::{Error, LATCH_ABANDONED_TTL, LATCH_DONE_TTL, Latch, LockClient, Owner};
use support::{RedisServer, eventually};

/// The count's key, its record and Redisson's channel for the latch "merge".
const KEY: &str = "merge";
const RECORD: &str = "{merge}:latch";
const CHANNEL: &str = "redisson_countdownlatch__channel__{merge}";
/// Redisson's `countDownAsync` script, as `RedissonCountDownLatch` sends it.
const REDISSON_COUNT_DOWN: &str = "local v = redis.call('decr', KEYS[1]);\
    if v <= 0 then redis.call('del', KEYS[1]) end;\
    if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;";
/// Room for a 200 ms stall of a loaded 2-core machine on top of a wake-up.
const PROMPT: Duration = Duration::from_millis(300);

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .liveness(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// Waits on `latch` in a thread of its own: when it returned, and what.
fn waiter(latch: Latch) -> thread::JoinHandle<(Instant, Result<bool, Error>)> {
    thread::spawn(move || {
        let done = latch.wait_for(Duration::from_secs(20));
        (Instant::now(), done)
    })
}

/// Whether someone listens on Redisson's channel (our waiter has subscribed).
fn subscribed(server: &RedisServer) -> bool {
    let reply: (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(CHANNEL));
    reply.1 > 0
}

#[test]
fn a_waiter_returns_promptly_after_the_last_count_down() {
    let server = RedisServer::start();
    let workers = client(&server);
    let merger = client(&server);
    let mut delays = Vec::new();
    for round in 0..9 {
        let name = format!("merge-{round}");
        let latch = workers.latch(&name, 8).unwrap();
        let mut joined: Vec<_> = (0..8).map(|_| latch.join().unwrap()).collect();
        let last = joined.pop().unwrap();
        let wait = waiter(merger.latch(&name, 8).unwrap());
        let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
        assert!(eventually(Duration::from_secs(5), || {
            let r: (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel));
            r.1 > 0
        }));
        for p in joined {
            assert!(p.count_down().unwrap() > 0);
        }
        let before_last = Instant::now();
        assert_eq!(last.count_down().unwrap(), 0);
        let (returned, done) = wait.join().unwrap();
        assert!(done.unwrap());
        delays.push(returned.saturating_duration_since(before_last));
    }
    delays.sort();
    let median = delays[delays.len() / 2];
    eprintln!("waiter returned after the last count down: median {median:?}, all {delays:?}");
    assert!(median < PROMPT, "{delays:?}");
}

#[test]
fn a_participant_that_leaves_without_counting_down_fails_the_waiter_at_once() {
    let server = RedisServer::start();
    let workers = client(&server);
    let latch = workers.latch(KEY, 2).unwrap();
    let done = latch.join().unwrap();
    let failed = latch.join().unwrap();
    let wait = waiter(client(&server).latch(KEY, 2).unwrap());
    assert!(eventually(Duration::from_secs(5), || subscribed(&server)));
    assert_eq!(done.count_down().unwrap(), 1);
    let left = Instant::now();
    failed.leave().unwrap();
    let (returned, result) = wait.join().unwrap();
    let took = returned.saturating_duration_since(left);
    let Err(Error::ParticipantDied { key, who }) = result else {
        panic!("{result:?}");
    };
    assert_eq!(&*key, KEY);
    // Its client lives on: the error names its session record.
    let Owner::Alive(session) = *who else {
        panic!("{who:?}");
    };
    assert_eq!(session.pid(), std::process::id());
    // Woken by the leave's message, not the 1 s liveness.
    eprintln!("waiter returned {took:?} after the leave");
    assert!(took < PROMPT, "{took:?}");
}

#[test]
fn wait_for_gives_up_at_its_deadline_while_participants_live() {
    let server = RedisServer::start();
    let c = client(&server);
    let latch = c.latch(KEY, 2).unwrap();
    let _p = latch.join().unwrap();
    let start = Instant::now();
    assert!(!latch.wait_for(Duration::from_millis(1500)).unwrap());
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[test]
fn a_redisson_waiter_sees_our_count_and_we_see_redissons_count_down() {
    let server = RedisServer::start();
    // Redisson's await(): subscribe, then GET the count; a message re-reads it.
    let mut redisson = server.conn();
    let mut pubsub = server.client().get_connection().unwrap();
    let mut pubsub = pubsub.as_pubsub();
    pubsub.subscribe(CHANNEL).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let c = client(&server);
    let latch = c.latch(KEY, 3).unwrap();
    let new_count: i64 = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(new_count, 1, "Redisson's NEW_COUNT_MESSAGE");
    let count: Option<i64> = redis::cmd("GET").arg(KEY).query(&mut redisson).unwrap();
    assert_eq!(count, Some(3));
    let a = latch.join().unwrap();
    let b = latch.join().unwrap();
    assert_eq!(a.count_down().unwrap(), 2);
    // Redisson's countDown() on our latch counts too.
    let () = redis::cmd("EVAL")
        .arg(REDISSON_COUNT_DOWN)
        .arg(2)
        .arg(KEY)
        .arg(CHANNEL)
        .arg(0)
        .arg("publish")
        .query(&mut redisson)
        .unwrap();
    assert_eq!(latch.count().unwrap(), 1);
    assert_eq!(b.count_down().unwrap(), 0);
    let zero: i64 = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(zero, 0, "Redisson's ZERO_COUNT_MESSAGE");
    let count: Option<i64> = redis::cmd("GET").arg(KEY).query(&mut redisson).unwrap();
    assert_eq!(count, None, "Redisson's getCount reads 0");
    assert!(latch.wait_for(Duration::ZERO).unwrap());
    // The record stays, marked done, for a late waiter; then goes.
    let ttl: i64 = server.query(redis::cmd("PTTL").arg(RECORD));
    let done = i64::try_from(LATCH_DONE_TTL.as_millis()).unwrap();
    assert!(ttl > 0 && ttl <= done, "{ttl}");
    assert!(c.open_latch(KEY).unwrap().wait_for(Duration::ZERO).unwrap());
}

#[test]
fn an_open_latch_expires_if_abandoned_and_a_waiter_keeps_it() {
    let server = RedisServer::start();
    let c = client(&server);
    let latch = c.latch(KEY, 2).unwrap();
    let _p = latch.join().unwrap();
    let abandoned = i64::try_from(LATCH_ABANDONED_TTL.as_millis()).unwrap();
    let ttls = || [KEY, RECORD].map(|key| server.query::<i64>(redis::cmd("PTTL").arg(key)));
    for ttl in ttls() {
        assert!(ttl > abandoned - 60_000 && ttl <= abandoned, "{ttl}");
    }
    // A waiter's look keeps an open latch from expiring.
    for key in [KEY, RECORD] {
        let () = server.query(redis::cmd("PEXPIRE").arg(key).arg(10_000));
    }
    assert!(!latch.wait_for(Duration::ZERO).unwrap());
    for ttl in ttls() {
        assert!(ttl > abandoned - 60_000, "{ttl}");
    }
}

#[test]
fn bad_input_is_refused_with_clear_errors() {
    let server = RedisServer::start();
    let c = client(&server);
    let invalid = |r: Result<Latch, Error>| match r {
        Err(Error::Invalid { what, reason }) => format!("{what}: {reason}"),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        invalid(c.latch(KEY, 0)),
        "latch count: a latch counts down from at least 1"
    );
    assert_eq!(invalid(c.latch("", 2)), "latch name: the name is empty");
    assert!(invalid(c.open_latch(KEY)).contains("no latch of this name"));
    let latch = c.latch(KEY, 1).unwrap();
    assert!(invalid(c.latch(KEY, 2)).contains("another count"));
    let _p = latch.join().unwrap();
    let Err(Error::Invalid { reason, .. }) = latch.join() else {
        panic!("a second participant joined a latch of 1");
    };
    assert!(reason.contains("full"), "{reason}");
    // A Redisson latch made without participants is not taken over.
    let () = server.query(redis::cmd("SET").arg("theirs").arg(4));
    assert!(invalid(c.latch("theirs", 4)).contains("Redisson"));
    let Err(Error::Config { .. }) = latch.clone().liveness(Duration::from_millis(10)).join() else {
        panic!("a 10 ms liveness was taken");
    };
}
