//! `LockClient::wait_free` against real `redis-server` processes: every lock format,
//! held by another client (Redisson's formats by its own scripts, replayed from
//! `support::redisson`) or by ours; woken by the holder's release where it publishes
//! (a waiter whose polling step is seconds long returns within a fraction of one),
//! polled where it does not; the timeout, the commands a long wait sends, a cluster,
//! `close`, and bad input.

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Receiver;
use redlease::{Error, LockClient, LockClientBuilder, LockFormat};
#[cfg(feature = "cluster")]
use support::cluster::Cluster;
use support::fleet::{LONG, STILL, answer_after, listening, spawned};
use support::format::wrong_format;
use support::redisson::fair::RedissonFair;
use support::redisson::rlock::Redisson;
use support::redisson::rwlock::RedissonRwLock;
use support::redisson::semaphore::RedissonSemaphore;
use support::{Masters, RedisServer, eventually};

/// The prefix of every client here.
const PREFIX: &str = "wf:";
/// A polling step no prompt return can be explained by: a waiter of such a
/// client that returns sooner than [`PROMPT`] after a release was woken.
const SLOW: (Duration, Duration) = (Duration::from_secs(3), Duration::from_secs(5));
/// How soon after a release a woken (or 200 ms-polling) waiter returns, with the
/// slack a loaded 2-core machine needs; far below the holders' 30 s TTLs.
const PROMPT: Duration = Duration::from_secs(1);
/// A token of a client that is not ours (it publishes nothing on release).
const FOREIGN: &str = "9b2f6a1e-2c7d-4e0b-8d6f-3a1c5e7b9d20";

fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder(server.url()).key_prefix(PREFIX)
}

fn client(server: &RedisServer) -> LockClient {
    builder(server).build().unwrap()
}

/// A client that polls so slowly that only a release message wakes it in time.
fn slow(server: &RedisServer) -> LockClient {
    slowed(builder(server))
}

/// The client `builder` builds, polling so slowly that only a release message
/// wakes it in time.
fn slowed(builder: LockClientBuilder) -> LockClient {
    builder.backoff(SLOW.0, SLOW.1).build().unwrap()
}

fn redlock(masters: &Masters) -> LockClientBuilder {
    LockClient::redlock(masters.urls()).key_prefix(PREFIX)
}

#[cfg(feature = "cluster")]
fn on(cluster: &Cluster) -> LockClientBuilder {
    LockClient::cluster(cluster.urls()).key_prefix(PREFIX)
}

/// `client.wait_free(name, LONG)` on a thread of its own: its answer and when
/// it came.
fn waiting(client: &LockClient, name: &str) -> Receiver<(redlease::Result<bool>, Instant)> {
    let (client, name) = (client.clone(), name.to_owned());
    spawned(move || client.wait_free(&name, LONG))
}

/// A slow client and its `wait_free(name, LONG)` on a thread of its own,
/// returned once some client listens on `channel`.
fn watching(
    server: &RedisServer,
    name: &str,
    channel: &str,
) -> (LockClient, Receiver<(redlease::Result<bool>, Instant)>) {
    let client = slow(server);
    let rx = waiting(&client, name);
    listening(server, channel);
    (client, rx)
}

/// Asserts that the waiter has not answered while the name is held, releases it
/// with `release`, and asserts the waiter answers `true` within [`PROMPT`].
fn answers_after<R>(rx: &Receiver<(redlease::Result<bool>, Instant)>, release: impl FnOnce() -> R) {
    let held = "wait_free returned while the name was held";
    let (answer, took) = answer_after(rx, held, || {
        release();
    });
    assert!(answer.unwrap(), "free after the release");
    assert!(took < PROMPT, "answered {took:?} after the release");
}

/// Asserts that a waiter on `job` polling on the client's usual step (its
/// holder publishes nothing) answers within [`PROMPT`] once `wf:job` is deleted.
fn polled_until_deleted(server: &RedisServer) {
    let client = client(server);
    let rx = waiting(&client, "job");
    answers_after(&rx, || server.del("wf:job"));
}

/// Sets `key` on `server` to [`FOREIGN`] for 30 s.
fn foreign(server: &RedisServer, key: &str) {
    let _: () = server.query(
        redis::cmd("SET")
            .arg(key)
            .arg(FOREIGN)
            .arg("PX")
            .arg(30_000),
    );
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

#[test]
fn a_free_name_is_free_at_once() {
    let server = RedisServer::start();
    let client = slow(&server);
    let start = Instant::now();
    assert!(client.wait_free("nobody", LONG).unwrap());
    assert!(client.wait_free("nobody", Duration::ZERO).unwrap());
    assert!(start.elapsed() < PROMPT, "{:?}", start.elapsed());
}

#[test]
fn a_token_lock_of_another_client_wakes_the_waiter_on_release() {
    let server = RedisServer::start();
    let holder = client(&server);
    let guard = holder.lock("job").unwrap();
    let (_client, rx) = watching(&server, "job", "{wf:job}:released");
    // The waiter marked the token, as a waiting caller does, so its release publishes.
    assert!(eventually(Duration::from_secs(10), || {
        server
            .query::<String>(redis::cmd("GET").arg("wf:job"))
            .ends_with('+')
    }));
    answers_after(&rx, || guard.unlock().unwrap());
}

#[test]
fn a_token_lock_of_our_own_client_wakes_the_waiter_on_release() {
    let server = RedisServer::start();
    let client = slow(&server);
    let guard = client.lock("job").unwrap();
    let rx = waiting(&client, "job");
    listening(&server, "{wf:job}:released");
    answers_after(&rx, || guard.unlock().unwrap());
}

#[test]
fn another_clients_token_that_never_publishes_is_polled() {
    let server = RedisServer::start();
    foreign(&server, "wf:job");
    polled_until_deleted(&server);
}

#[test]
fn a_legacy_timestamp_lock_is_polled_until_deleted() {
    let server = RedisServer::start();
    let set: bool = server.query(redis::cmd("SETNX").arg("wf:job").arg(now_ms() + 30_000));
    assert!(set);
    polled_until_deleted(&server);
}

#[test]
fn a_legacy_lock_whose_timestamp_passed_is_free() {
    let server = RedisServer::start();
    let client = slow(&server);
    let _: () = server.query(redis::cmd("SET").arg("wf:ms").arg(now_ms() - 1000));
    let _: () = server.query(redis::cmd("SET").arg("wf:s").arg(now_ms() / 1000 - 2));
    let start = Instant::now();
    assert!(client.wait_free("ms", LONG).unwrap());
    assert!(client.wait_free("s", LONG).unwrap());
    assert!(start.elapsed() < PROMPT);
    // One that passes during the wait is free when it passes.
    let _: () = server.query(redis::cmd("SET").arg("wf:soon").arg(now_ms() + 1500));
    let start = Instant::now();
    assert!(client.wait_free("soon", LONG).unwrap());
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1500) + PROMPT,
        "{took:?}"
    );
}

#[test]
fn a_redisson_lock_wakes_the_waiter_on_release() {
    let server = RedisServer::start();
    let mut redisson = Redisson::new(&server);
    assert_eq!(redisson.try_lock("wf:job"), None);
    let (_client, rx) = watching(&server, "job", "redisson_lock__channel:{wf:job}");
    answers_after(&rx, || assert_eq!(redisson.unlock("wf:job"), Some(1)));
}

#[test]
fn a_redisson_read_lock_wakes_the_waiter_when_the_last_reader_leaves() {
    let server = RedisServer::start();
    let mut first = RedissonRwLock::new(&server, "wf:rw", 1);
    let mut second = RedissonRwLock::new(&server, "wf:rw", 2);
    assert_eq!(first.read_lock(30_000), None);
    assert_eq!(second.read_lock(30_000), None);
    let (_client, rx) = watching(&server, "rw", "redisson_rwlock:{wf:rw}");
    assert_eq!(first.read_unlock(), Some(0));
    answers_after(&rx, || assert_eq!(second.read_unlock(), Some(1)));
}

#[test]
fn a_redisson_semaphore_wakes_the_waiter_when_a_permit_is_released() {
    let server = RedisServer::start();
    let mut semaphore = RedissonSemaphore::new(&server, "wf:sem");
    assert!(semaphore.try_set_permits(1));
    let permit = semaphore.try_acquire(Some(30_000)).unwrap();
    let (_client, rx) = watching(&server, "sem", "redisson_sc:{wf:sem}");
    answers_after(&rx, || assert!(semaphore.try_release(&permit)));
}

#[test]
fn a_semaphore_with_a_free_permit_is_free() {
    let server = RedisServer::start();
    let mut semaphore = RedissonSemaphore::new(&server, "wf:sem");
    assert!(semaphore.try_set_permits(2));
    semaphore.try_acquire(Some(30_000)).unwrap();
    let client = slow(&server);
    assert!(client.wait_free("sem", Duration::ZERO).unwrap());
    semaphore.try_acquire(Some(30_000)).unwrap();
    assert!(!client.wait_free("sem", Duration::ZERO).unwrap());
}

#[test]
fn a_redisson_fair_lock_is_free_once_released() {
    let server = RedisServer::start();
    let mut fair = RedissonFair::new(&server);
    assert_eq!(fair.attempt("wf:fair"), None);
    // A fair lock's release publishes only to its queue's head: with nobody
    // queued, the waiter polls on the client's usual step.
    let client = client(&server);
    let rx = waiting(&client, "fair");
    answers_after(&rx, || assert_eq!(fair.unlock("wf:fair"), Some(1)));
}

#[test]
fn a_fair_lock_with_waiters_wakes_the_watcher_on_its_queue_heads_channel() {
    let server = RedisServer::start();
    let mut holder = RedissonFair::new(&server);
    let mut queued = RedissonFair::new(&server);
    assert_eq!(holder.attempt("wf:fair"), None);
    assert!(
        queued.attempt("wf:fair").is_some(),
        "queued behind the holder"
    );
    // Redisson's fair unlock publishes on the next waiter's own channel only.
    let (_client, rx) = watching(&server, "fair", &queued.channel("wf:fair"));
    answers_after(&rx, || assert_eq!(holder.unlock("wf:fair"), Some(1)));
}

#[test]
fn a_semaphore_whose_permit_expires_is_free_when_it_expires() {
    let server = RedisServer::start();
    let mut semaphore = RedissonSemaphore::new(&server, "wf:sem");
    assert!(semaphore.try_set_permits(1));
    let lease = Duration::from_millis(1500);
    let start = Instant::now();
    semaphore
        .try_acquire(Some(u64::try_from(lease.as_millis()).unwrap()))
        .unwrap();
    let client = slow(&server);
    assert!(client.wait_free("sem", LONG).unwrap());
    let took = start.elapsed();
    // Nobody gave the permit back: it counts as free once past its lease.
    assert!(took + Duration::from_millis(100) >= lease, "{took:?}");
    assert!(took < lease + PROMPT, "{took:?}");
}

#[test]
fn the_wait_runs_out_while_the_name_is_held_and_not_before() {
    let server = RedisServer::start();
    let holder = client(&server);
    let _guard = holder.lock("job").unwrap();
    let client = client(&server);
    let timeout = Duration::from_millis(1500);
    let start = Instant::now();
    assert!(!client.wait_free("job", timeout).unwrap());
    let took = start.elapsed();
    assert!(took >= timeout, "returned early, after {took:?}");
    assert!(took < timeout + PROMPT, "returned late, after {took:?}");
    // Zero looks once.
    assert!(!client.wait_free("job", Duration::ZERO).unwrap());
}

/// The looks the server has answered since its stats were reset: `EVAL` and
/// `EVALSHA` calls (the snapshot script), or on Valkey 9, where a look at a token
/// runs no script, its `GET`s (a script's own `GET`s count too, so not both).
fn scripts_run(server: &RedisServer) -> u64 {
    if server.has_conditional_commands() {
        server.command_calls("get")
    } else {
        server.command_calls("evalsha") + server.command_calls("eval")
    }
}

#[test]
fn a_long_wait_on_a_lock_that_publishes_sends_almost_nothing() {
    let server = RedisServer::start();
    let holder = client(&server);
    let _guard = holder.lock("job").unwrap();
    let client = client(&server);
    server.reset_stats();
    let wait = Duration::from_secs(5);
    assert!(!client.wait_free("job", wait).unwrap());
    // The holder's renewals (every 10 s of its 30 s TTL) fall outside the wait.
    let looks = scripts_run(&server);
    println!("{looks} scripts in {wait:?}");
    // One look per ten longest steps (2 s), the first look, the mark, and the
    // look after the subscription (6 here), and a look per 200 ms the waiter
    // thread may take to subscribe on a loaded machine. Polling would be 25+.
    assert!(looks <= 10, "{looks} scripts in {wait:?}");
}

#[test]
fn a_long_wait_on_a_lock_that_never_publishes_polls_on_the_capped_step() {
    let server = RedisServer::start();
    foreign(&server, "wf:job");
    let step = Duration::from_millis(200);
    let client = builder(&server)
        .backoff(Duration::from_millis(50), step)
        .build()
        .unwrap();
    server.reset_stats();
    let wait = Duration::from_secs(3);
    assert!(!client.wait_free("job", wait).unwrap());
    let looks = scripts_run(&server);
    println!("{looks} scripts in {wait:?}");
    // Steps drawn from the top quarter of the cap (150-200 ms), after a ramp
    // from 50 ms (50, 100, 200) and the first look.
    let bound = u64::try_from(wait.as_millis() / (step.as_millis() * 3 / 4)).unwrap() + 4;
    assert!(looks <= bound, "{looks} scripts in {wait:?}, bound {bound}");
    assert!(looks >= 5, "it polls: {looks} scripts in {wait:?}");
}

#[test]
fn a_watcher_takes_no_release_message_from_the_callers_waiting_to_lock() {
    let server = RedisServer::start();
    let holder = client(&server);
    let guard = holder.lock("job").unwrap();
    let client = slow(&server);
    let _watch = waiting(&client, "job");
    let locker = client.clone();
    let acquired = spawned(move || locker.lock("job").map(|_| ()));
    listening(&server, "{wf:job}:released");
    let (got, took) = answer_after(&acquired, "locked while held", || {
        let _ = guard.unlock().unwrap();
    });
    got.unwrap();
    assert!(
        took < PROMPT,
        "the lock waiter woke {took:?} after the release"
    );
}

#[test]
fn close_wakes_a_waiter_with_shutdown() {
    let server = RedisServer::start();
    let holder = client(&server);
    let _guard = holder.lock("job").unwrap();
    let (client, rx) = watching(&server, "job", "{wf:job}:released");
    let (answer, took) = answer_after(&rx, "free while held", || client.close());
    assert!(matches!(answer, Err(Error::Shutdown)), "{answer:?}");
    assert!(took < PROMPT);
    assert!(matches!(
        client.wait_free("other", LONG),
        Err(Error::Shutdown)
    ));
}

#[test]
fn bad_input_gets_typed_errors() {
    let server = RedisServer::start();
    let client = client(&server);
    assert!(matches!(
        client.wait_free("", LONG),
        Err(Error::Invalid { .. })
    ));
    let _: () = server.query(redis::cmd("RPUSH").arg("wf:list").arg("x"));
    let _: () = server.query(redis::cmd("HSET").arg("wf:hash").arg("a").arg("b"));
    for (name, found) in [("list", "a list"), ("hash", "a hash of no lock format")] {
        let result = client.wait_free(name, LONG);
        let f = wrong_format(result, &format!("wf:{name}"), LockFormat::Any);
        assert_eq!(f, found);
    }
    let e = client.wait_free("list", LONG).unwrap_err();
    assert_eq!(e.to_string(), "`wf:list` holds a list, not a lock");
}

#[test]
fn a_redlock_name_is_free_when_free_on_a_majority() {
    let masters = Masters::start(3);
    let holder = redlock(&masters).build().unwrap();
    let guard = holder.lock("job").unwrap();
    let client = slowed(redlock(&masters));
    assert!(!client.wait_free("job", Duration::ZERO).unwrap());
    let rx = waiting(&client, "job");
    answers_after(&rx, || guard.unlock().unwrap());
    // Held on one master of three: free.
    foreign(&masters.servers[0], "wf:one");
    assert!(client.wait_free("one", Duration::ZERO).unwrap());
}

#[test]
fn a_redlock_release_heard_from_one_master_is_followed_to_the_others() {
    let masters = Masters::start(3);
    let holder = redlock(&masters).build().unwrap();
    let _guard = holder.lock("job").unwrap();
    let client = slowed(redlock(&masters));
    let rx = waiting(&client, "job");
    // Its waiter thread listens on one master.
    assert!(eventually(Duration::from_secs(10), || {
        masters
            .servers
            .iter()
            .any(|m| m.subscribers("{wf:job}:released") > 0)
    }));
    assert!(rx.recv_timeout(STILL).is_err());
    // The release lands on one master first, and its message wakes the
    // watcher while the others still hold the name.
    let behind = &masters.servers[1];
    behind.reset_stats();
    masters.servers[0].del("wf:job");
    for m in &masters.servers {
        let _: () = m.query(redis::cmd("PUBLISH").arg("{wf:job}:released").arg("x"));
    }
    assert!(
        eventually(Duration::from_secs(10), || scripts_run(behind) > 0),
        "the watcher looked again"
    );
    assert!(rx.try_recv().is_err(), "still held on two masters of three");
    // The other masters' releases send nothing it hears.
    answers_after(&rx, || {
        for m in &masters.servers[1..] {
            m.del("wf:job");
        }
    });
}

#[cfg(feature = "cluster")]
#[test]
fn in_a_cluster_a_release_on_any_master_wakes_the_waiter() {
    let cluster = Cluster::start(3, 0);
    let holder = on(&cluster).build().unwrap();
    let client = slowed(on(&cluster));
    // One name on each master.
    let mut names: Vec<(usize, String)> = Vec::new();
    for i in 0.. {
        let name = format!("job{i}");
        let owner = cluster.owner(cluster.slot(&format!("{PREFIX}{name}")));
        if !names.iter().any(|(o, _)| *o == owner) {
            names.push((owner, name));
        }
        if names.len() == 3 {
            break;
        }
    }
    for (_, name) in &names {
        let guard = holder.lock(name).unwrap();
        let rx = waiting(&client, name);
        answers_after(&rx, || guard.unlock().unwrap());
    }
    // Redisson's formats publish by `SPUBLISH` on their own channels there.
    let rw = holder.read_write_lock(&names[1].1).unwrap();
    let write = rw.write().unwrap();
    let rx = waiting(&client, rw.name());
    answers_after(&rx, || write.unlock().unwrap());
    let semaphore = holder.semaphore(&names[2].1).unwrap();
    semaphore.ensure_permits(1).unwrap();
    let permit = semaphore.acquire().unwrap();
    let rx = waiting(&client, semaphore.name());
    answers_after(&rx, || permit.unlock().unwrap());
}

#[cfg(feature = "cluster")]
#[test]
fn in_a_cluster_a_look_that_meets_a_moved_slot_follows_it() {
    let cluster = Cluster::start(3, 0);
    let (holder, client) = (on(&cluster).build().unwrap(), on(&cluster).build().unwrap());
    let name = "moving";
    let slot = cluster.slot(&format!("{PREFIX}{name}"));
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    // The client's map names `from` for the slot, and has used it.
    assert!(client.wait_free(name, Duration::ZERO).unwrap());
    let guard = holder.lock(name).unwrap();
    assert!(cluster.migrate(slot, from, to) > 0, "the lock did not move");
    // `from` answers MOVED now: the look goes where it says, within the call.
    assert!(
        !client.wait_free(name, Duration::ZERO).unwrap(),
        "held on `to`"
    );
    let rx = waiting(&client, name);
    answers_after(&rx, || guard.unlock().unwrap());
}
