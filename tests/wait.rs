//! Waiting woken by pub/sub, against real `redis-server` processes: hand-off
//! latency, what many waiters cost Redis, TTL-bounded waits when the holder dies or never
//! publishes, a killed or restarted pub/sub connection, cancellation, close and drop,
//! fairness, and the polling mode.
//!
//! Timings are printed (`cargo test --test wait -- --nocapture` shows them).

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use parking_lot::Mutex;
use redlease::{CancelToken, Error, LockClient, LockClientBuilder, LockOptions};
use support::{RedisServer, eventually};

const KEY: &str = "job";
/// `KEY` with the prefix of [`builder`], and its wake-up channel.
const LOCK_KEY: &str = "wait:job";
const CHANNEL: &str = "{wait:job}:released";
/// Set in a re-executed copy of this test binary: the URL of the server on which
/// that child process holds the lock until it is killed.
const CHILD_ENV: &str = "REDLEASE_WAIT_TEST_HOLDER_URL";
/// A polling step far above any pub/sub hand-off: a waiter that gets the lock sooner
/// than this after a release was woken, not polling.
const SLOW_MIN: Duration = Duration::from_millis(500);
const SLOW_MAX: Duration = Duration::from_secs(1);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(250);
const MS: Duration = Duration::from_millis(1);

fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder(server.url()).key_prefix("wait:")
}

/// A client whose polling could never explain a fast hand-off.
fn slow_polling(server: &RedisServer) -> LockClientBuilder {
    builder(server).backoff(SLOW_MIN, SLOW_MAX)
}

/// Pub/sub connections the server has open (our waiter threads).
fn pubsub_connections(server: &RedisServer) -> usize {
    let list: String = server.query(redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub"));
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

/// Subscribers of the key's wake-up channel.
fn subscribers(server: &RedisServer) -> i64 {
    let (_, n): (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(CHANNEL));
    n
}

/// Waits until the server has answered more than `seen` `PTTL`s: a waiter found the
/// lock busy and asked how long the holder has left, so it is waiting now.
fn busy_reply_after(server: &RedisServer, seen: u64) -> u64 {
    let mut now = seen;
    let found = eventually(Duration::from_secs(10), || {
        now = server.command_calls("pttl");
        now > seen
    });
    assert!(found, "no waiter found the lock busy");
    now
}

/// `a / b` as a float, for reports.
#[expect(clippy::cast_precision_loss, reason = "counts in reports")]
fn ratio(a: impl TryInto<u64>, b: usize) -> f64 {
    a.try_into().unwrap_or(u64::MAX) as f64 / b as f64
}

/// `(p50, p99, max)`.
fn summary(samples: &[Duration]) -> (Duration, Duration, Duration) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let at = |p: usize| sorted[(sorted.len() - 1) * p / 100];
    (at(50), at(99), at(100))
}

/// One hand-off: the holder's release to the waiter's `lock()` returning.
#[derive(Debug, Clone, Copy)]
struct HandOff {
    /// From `unlock()` being called (the release's round trip included).
    from_unlock: Duration,
    /// From `unlock()` returning (zero when the waiter returned first).
    from_return: Duration,
}

/// `rounds` hand-offs of `KEY` from `holder` (this thread) to `waiter` (used on another
/// thread), each released only once the waiter has found the lock busy.
fn hand_offs(
    server: &RedisServer,
    holder: &LockClient,
    waiter: &LockClient,
    rounds: usize,
) -> Vec<HandOff> {
    thread::scope(|s| {
        let (go_tx, go_rx) = bounded::<()>(1);
        let (got_tx, got_rx) = bounded::<Instant>(1);
        let (done_tx, done_rx) = bounded::<()>(1);
        s.spawn(move || {
            for () in go_rx {
                let guard = waiter.lock(KEY).unwrap();
                got_tx.send(Instant::now()).unwrap();
                let _ = done_rx.recv();
                assert!(guard.unlock().unwrap().was_held());
            }
        });
        (0..rounds)
            .map(|_| {
                let guard = holder.lock(KEY).unwrap();
                let seen = server.command_calls("pttl");
                go_tx.send(()).unwrap();
                busy_reply_after(server, seen);
                let called = Instant::now();
                assert!(guard.unlock().unwrap().was_held());
                let returned = Instant::now();
                let acquired = got_rx
                    .recv_timeout(Duration::from_secs(40))
                    .expect("the waiter never got the lock");
                done_tx.send(()).unwrap();
                HandOff {
                    from_unlock: acquired - called,
                    from_return: acquired.saturating_duration_since(returned),
                }
            })
            .collect()
    })
}

/// Prints the hand-offs' latencies and checks that they were wake-ups: each far
/// faster than a polling step of [`slow_polling`].
fn assert_fast(what: &str, handoffs: &[HandOff]) {
    let from_unlock: Vec<Duration> = handoffs.iter().map(|h| h.from_unlock).collect();
    let from_return: Vec<Duration> = handoffs.iter().map(|h| h.from_return).collect();
    let (p50, p99, max) = summary(&from_unlock);
    let (r50, r99, rmax) = summary(&from_return);
    println!(
        "hand-off, {what}, {} rounds: from unlock() call p50 {p50:?} p99 {p99:?} max {max:?}; \
         from unlock() return p50 {r50:?} p99 {r99:?} max {rmax:?}",
        handoffs.len()
    );
    assert!(r50 < 20 * MS, "{what}: median hand-off {r50:?}");
    // Polling could not do any single one of them this fast.
    assert!(
        rmax < SLOW_MIN.saturating_sub(100 * MS),
        "{what}: slowest hand-off {rmax:?}"
    );
}

#[test]
fn a_waiter_gets_a_released_lock_within_milliseconds_not_a_polling_step() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(10);
    let one = slow_polling(&server).ttl(ttl).build().unwrap();
    let other = slow_polling(&server).ttl(ttl).build().unwrap();

    let same = hand_offs(&server, &one, &one, 100);
    assert_fast("one client, two threads", &same);
    let separate = hand_offs(&server, &one, &other, 100);
    assert_fast("two clients", &separate);

    // Within one client the releasing guard hands the lock straight to the waiting
    // thread, but for the real release after 8 hand-offs in a row (so callers of
    // other processes get a turn); across clients the waits end by release
    // messages. One per hand-off. A waiter posts its offer only once its busy reply
    // is read, so on a loaded machine the unlock sometimes runs first (one round in
    // ten in a CI run): that wait ends by the release message instead, which the
    // second count takes in. Without local hand-offs the first count is 0.
    let (m1, m2) = (one.metrics(), other.metrics());
    println!(
        "local hand-offs {} of 100, release messages {} + {}",
        m1.handoffs, m1.wakeups, m2.wakeups
    );
    assert!(
        m1.handoffs >= 40,
        "only {} local hand-offs of 100",
        m1.handoffs
    );
    let woken = m1.wakeups + m2.wakeups + m1.handoffs;
    assert!(
        woken >= 190,
        "only {woken} of 200 waits ended by a hand-off or release message"
    );
}

#[test]
fn sixty_four_waiters_cost_a_few_commands_each_and_enter_one_at_a_time() {
    const WAITERS: usize = 64;
    let server = RedisServer::start();
    let holder = builder(&server).build().unwrap();
    let client = builder(&server).build().unwrap();
    let guard = holder.lock(KEY).unwrap();
    // Both waiter threads are up (their own SUBSCRIBE is done) before counting.
    assert!(eventually(Duration::from_secs(5), || {
        pubsub_connections(&server) == 2
    }));
    let barrier = Barrier::new(WAITERS + 1);
    let inside = AtomicUsize::new(0);
    let most_inside = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    server.reset_stats();
    thread::scope(|s| {
        for _ in 0..WAITERS {
            s.spawn(|| {
                barrier.wait();
                let g = client.lock(KEY).unwrap();
                most_inside.fetch_max(inside.fetch_add(1, SeqCst) + 1, SeqCst);
                thread::sleep(Duration::from_micros(200)); // work
                inside.fetch_sub(1, SeqCst);
                finished.fetch_add(1, SeqCst);
                assert!(g.unlock().unwrap().was_held());
            });
        }
        barrier.wait();
        // One caller probes; the others queue behind it and send nothing.
        thread::sleep(Duration::from_secs(2));
        let waiting = server.client_commands();
        let subscribes = server.command_calls("subscribe");
        println!("{WAITERS} waiters for 2 s: {waiting} commands ({subscribes} subscribe)");
        assert!(subscribes <= 1, "{subscribes} subscribes for one key");
        // One prober ramping to a 200 ms step: about 20 polls in 2 s.
        assert!(
            waiting <= 40,
            "{waiting} commands while {WAITERS} waiters waited 2 s"
        );

        let attempts = client.metrics().attempts;
        server.reset_stats();
        let released = Instant::now();
        assert!(guard.unlock().unwrap().was_held());
        let all_in = eventually(Duration::from_secs(20), || finished.load(SeqCst) == WAITERS);
        let chain = released.elapsed();
        assert!(
            all_in,
            "only {} of {WAITERS} got the lock",
            finished.load(SeqCst)
        );
        let tries = client.metrics().attempts - attempts;
        let commands = server.client_commands();
        println!(
            "{WAITERS} releases in {chain:?}: {tries} acquire attempts, {commands} commands \
             ({:.2} per acquisition)",
            ratio(commands, WAITERS)
        );
        // One attempt per release at most, not one per waiter per release.
        assert!(
            tries <= WAITERS as u64 + 8,
            "{tries} attempts for {WAITERS} hand-offs"
        );
    });
    assert_eq!(
        most_inside.load(SeqCst),
        1,
        "two threads held the lock at once"
    );
}

#[test]
fn sixty_four_idle_waiters_cost_at_most_seventy_commands_in_ten_seconds() {
    const WAITERS: usize = 64;
    let wait = Duration::from_secs(10);
    let server = RedisServer::start();
    let client = builder(&server).build().unwrap();
    // A foreign token held for two minutes.
    let () = server.query(
        redis::cmd("SET")
            .arg(LOCK_KEY)
            .arg("foreign")
            .arg("PX")
            .arg(120_000),
    );
    assert!(eventually(Duration::from_secs(5), || {
        pubsub_connections(&server) == 1
    }));
    server.reset_stats();
    let barrier = Barrier::new(WAITERS);
    let early = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..WAITERS {
            s.spawn(|| {
                barrier.wait();
                let start = Instant::now();
                let got = client.try_lock_for(KEY, wait).unwrap();
                assert!(got.is_none());
                if start.elapsed() < wait {
                    early.fetch_add(1, SeqCst);
                }
            });
        }
    });
    let mut commands = server.client_command_stats();
    // The client's session record, `HSET` + `PEXPIRE` every 3 s
    // whether anyone waits or not, is no waiter's cost: counted apart.
    let session: u64 = commands
        .iter()
        .filter(|(c, _)| c == "hset" || c == "pexpire")
        .map(|(_, n)| n)
        .sum();
    commands.retain(|(c, _)| c != "hset" && c != "pexpire");
    let total: u64 = commands.iter().map(|(_, n)| n).sum();
    println!("{WAITERS} waiters for {wait:?}: {total} commands {commands:?}");
    assert_eq!(early.load(SeqCst), 0, "a waiter returned before its wait");
    assert!(total <= 70, "{total} commands: {commands:?}");
    assert!(session <= 10, "{session} session record commands");
}

/// A copy of this test binary, running one test in the holder role; killed on drop.
struct HolderProcess(Child);

impl HolderProcess {
    /// Runs `test` in a child with [`CHILD_ENV`] set, and waits until it holds the lock.
    fn spawn(server: &RedisServer, test: &str) -> HolderProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, server.url())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let holder = HolderProcess(child);
        let (held_tx, held_rx) = bounded(1);
        thread::spawn(move || {
            // Ends at the child's exit (end of file).
            for line in BufReader::new(stdout).lines() {
                if line.is_ok_and(|l| l.contains("HELD")) {
                    let _ = held_tx.send(());
                }
            }
        });
        held_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the child process never held the lock");
        holder
    }
}

impl Drop for HolderProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_holder_killed_with_sigkill_delays_waiters_by_at_most_its_ttl() {
    const TTL: Duration = Duration::from_secs(1);
    const BACKOFF_MAX: Duration = Duration::from_millis(100);
    if let Ok(url) = std::env::var(CHILD_ENV) {
        // The child: hold the lock (renewed) until killed; bounded all the same.
        let client = LockClient::builder(url.as_str())
            .key_prefix("wait:")
            .ttl(TTL)
            .build()
            .unwrap();
        let _guard = client.lock(KEY).unwrap();
        println!("HELD");
        std::io::stdout().flush().unwrap();
        thread::sleep(Duration::from_secs(60));
        return;
    }
    let server = RedisServer::start();
    let mut holder = HolderProcess::spawn(
        &server,
        "a_holder_killed_with_sigkill_delays_waiters_by_at_most_its_ttl",
    );
    let clients = [1, 2].map(|_| {
        builder(&server)
            .backoff(4 * MS, BACKOFF_MAX)
            .build()
            .unwrap()
    });
    let acquired = Mutex::new(Vec::new());
    let (killed_tx, killed_rx) = bounded::<Instant>(1);
    thread::scope(|s| {
        for client in clients.iter().chain(&clients) {
            let acquired = &acquired;
            s.spawn(move || {
                let guard = client.lock(KEY).unwrap();
                acquired.lock().push(Instant::now());
                assert!(guard.unlock().unwrap().was_held());
            });
        }
        let attempted = eventually(Duration::from_secs(10), || {
            clients.iter().map(|c| c.metrics().attempts).sum::<u64>() >= 4
        });
        assert!(attempted, "the waiters never tried the lock");
        let killed = Instant::now();
        holder.0.kill().unwrap();
        holder.0.wait().unwrap();
        let _ = killed_tx.send(killed);
        // The dead holder released nothing: its lock runs out with its TTL.
        let left: i64 = server.query(redis::cmd("PTTL").arg(LOCK_KEY));
        assert!(
            left > 0,
            "the lock was gone right after the kill (pttl {left})"
        );
    });
    let killed = killed_rx.recv().unwrap();
    let acquired = acquired.into_inner();
    assert_eq!(acquired.len(), 4);
    let first = acquired.iter().min().unwrap().duration_since(killed);
    let last = acquired.iter().max().unwrap().duration_since(killed);
    println!(
        "holder SIGKILLed (ttl {TTL:?}): first waiter in after {first:?}, last after {last:?}"
    );
    assert!(
        last <= TTL + BACKOFF_MAX + SLACK,
        "the last waiter got in {last:?} after the kill"
    );
}

#[test]
fn client_kill_of_the_pubsub_connection_while_waiting_loses_no_waiter() {
    const WAITERS: usize = 8;
    let server = RedisServer::start();
    let holder = builder(&server).build().unwrap();
    let client = slow_polling(&server).build().unwrap();
    let guard = holder.lock(KEY).unwrap();
    let inside = AtomicUsize::new(0);
    let most_inside = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..WAITERS {
            s.spawn(|| {
                let g = client.lock(KEY).unwrap();
                most_inside.fetch_max(inside.fetch_add(1, SeqCst) + 1, SeqCst);
                inside.fetch_sub(1, SeqCst);
                finished.fetch_add(1, SeqCst);
                assert!(g.unlock().unwrap().was_held());
            });
        }
        let waiting = eventually(Duration::from_secs(10), || {
            client.metrics().attempts >= WAITERS as u64 && subscribers(&server) == 1
        });
        assert!(waiting, "the waiters never subscribed");
        let killed: i64 = server.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"));
        assert!(killed >= 1, "no pub/sub connection to kill");
        // Released while the waiter thread reconnects: that message is lost.
        let released = Instant::now();
        assert!(guard.unlock().unwrap().was_held());
        let all_in = eventually(Duration::from_secs(15), || finished.load(SeqCst) == WAITERS);
        println!(
            "pub/sub connection killed: {} of {WAITERS} waiters in after {:?}",
            finished.load(SeqCst),
            released.elapsed()
        );
        assert!(all_in, "waiters hang after CLIENT KILL TYPE pubsub");
    });
    assert_eq!(
        most_inside.load(SeqCst),
        1,
        "two threads held the lock at once"
    );
    // Once both clients' waiter threads have reconnected, hand-offs are wake-ups
    // again (a hand-off measured while one still reconnects is a polling step).
    assert!(
        eventually(Duration::from_secs(10), || pubsub_connections(&server) == 2),
        "the waiter threads did not reconnect"
    );
    assert_fast(
        "after CLIENT KILL",
        &hand_offs(&server, &holder, &client, 5),
    );
}

#[test]
fn cancel_ends_a_blocked_wait_within_milliseconds() {
    let server = RedisServer::start();
    let holder = builder(&server).build().unwrap();
    let _guard = holder.lock(KEY).unwrap();
    let pubsub = builder(&server).build().unwrap();
    // Polling in steps of over a second: only the cancel itself can end the sleep.
    let polling = builder(&server)
        .pubsub(false)
        .backoff(Duration::from_secs(1), Duration::from_secs(2))
        .build()
        .unwrap();
    for (what, client) in [("pub/sub", &pubsub), ("polling", &polling)] {
        let token = CancelToken::new();
        let opts = LockOptions::new().cancel(token.clone());
        let (result, took) = thread::scope(|s| {
            let seen = server.command_calls("pttl");
            let waiting = s.spawn(|| {
                let result = client.lock_with(KEY, &opts);
                (result, Instant::now())
            });
            busy_reply_after(&server, seen);
            let cancelled = Instant::now();
            token.cancel();
            let (result, returned) = waiting.join().unwrap();
            (result, returned - cancelled)
        });
        println!("cancel, {what}: the wait returned {took:?} after cancel()");
        match result {
            Err(Error::Cancelled { key }) => assert_eq!(&*key, LOCK_KEY),
            other => panic!("{what}: expected Cancelled, got {other:?}"),
        }
        assert!(took < 100 * MS, "{what}: cancel took {took:?}");
        assert!(token.is_cancelled());
    }
}

#[test]
fn a_token_cancelled_before_the_call_returns_cancelled_without_trying() {
    let server = RedisServer::start();
    let client = builder(&server).build().unwrap();
    let token = CancelToken::new();
    token.cancel();
    let opts = LockOptions::new().cancel(token);
    let holder = builder(&server).build().unwrap();
    for held in [false, true] {
        let _guard = held.then(|| holder.lock(KEY).unwrap());
        let attempts = client.metrics().attempts;
        let start = Instant::now();
        let result = client.lock_with(KEY, &opts);
        let took = start.elapsed();
        assert!(
            matches!(result, Err(Error::Cancelled { .. })),
            "held {held}: {result:?}"
        );
        assert!(took < 20 * MS, "held {held}: took {took:?}");
        assert_eq!(client.metrics().attempts, attempts, "held {held}: it tried");
    }
}

#[test]
fn close_wakes_every_waiter_with_shutdown() {
    const WAITERS: usize = 8;
    let server = RedisServer::start();
    let holder = builder(&server).build().unwrap();
    let client = builder(&server).build().unwrap();
    let _guard = holder.lock(KEY).unwrap();
    let (returned, closed) = thread::scope(|s| {
        let threads: Vec<_> = (0..WAITERS)
            .map(|i| {
                let client = &client;
                s.spawn(move || {
                    let result = if i % 2 == 0 {
                        client.lock(KEY).map(Some)
                    } else {
                        client.try_lock_for(KEY, Duration::from_secs(60))
                    };
                    (result.map(|g| g.is_some()), Instant::now())
                })
            })
            .collect();
        let attempted = eventually(Duration::from_secs(10), || {
            client.metrics().attempts >= WAITERS as u64
        });
        assert!(attempted, "the waiters never tried the lock");
        let closed = Instant::now();
        client.close();
        let returned: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        (returned, closed)
    });
    let slowest = returned.iter().map(|(_, at)| *at - closed).max().unwrap();
    println!("close: {WAITERS} waiters returned within {slowest:?}");
    for (result, _) in &returned {
        assert!(matches!(result, Err(Error::Shutdown)), "{result:?}");
    }
    assert!(
        slowest < 200 * MS,
        "close took {slowest:?} to wake the waiters"
    );
    // Closed for good: new calls are refused at once, even on a free key.
    assert!(matches!(client.lock(KEY), Err(Error::Shutdown)));
    assert!(matches!(client.try_lock("free"), Err(Error::Shutdown)));
}

#[test]
fn dropping_the_last_client_joins_the_waiter_thread_promptly() {
    let server = RedisServer::start();
    let holder = builder(&server).pubsub(false).build().unwrap();
    let _guard = holder.lock(KEY).unwrap();
    let client = builder(&server).build().unwrap();
    // A wait that gives up leaves its channel subscribed, the thread busy with it.
    let none = client
        .try_lock_for(KEY, Duration::from_millis(100))
        .unwrap();
    assert!(none.is_none());
    assert_eq!(pubsub_connections(&server), 1);
    let clone = client.clone();
    drop(clone);
    assert_eq!(
        pubsub_connections(&server),
        1,
        "a clone's drop stopped the thread"
    );
    let start = Instant::now();
    drop(client);
    let took = start.elapsed();
    println!("drop of the last client took {took:?}");
    assert!(took < 300 * MS, "drop took {took:?}");
    // The thread ended, and with it its connection.
    assert!(eventually(Duration::from_secs(2), || pubsub_connections(
        &server
    ) == 0));
}

/// A client whose waiter thread listens on `KEY`'s channel: a wait that gave up
/// left it subscribed (for a few seconds), the thread reading its socket.
fn listening_client(server: &RedisServer) -> LockClient {
    let client = builder(server).build().unwrap();
    let none = client.try_lock_for(KEY, 20 * MS).unwrap();
    assert!(none.is_none());
    assert!(eventually(Duration::from_secs(2), || subscribers(server) == 1));
    client
}

#[test]
fn dropping_a_client_whose_waiter_listens_takes_no_socket_tick() {
    let server = RedisServer::start();
    let holder = builder(&server).pubsub(false).build().unwrap();
    let _guard = holder.lock(KEY).unwrap();
    // The waiter thread reads its socket 50 ms at a time: a drop that waited for
    // the read to time out would take 25 ms on average, and more than 10 ms in
    // four drops of five. Eleven drops; their median is robust to a stall or two.
    let mut took: Vec<Duration> = (0..11)
        .map(|_| {
            let client = listening_client(&server);
            let start = Instant::now();
            drop(client);
            let took = start.elapsed();
            // Its connection is gone, with its subscription.
            assert!(eventually(Duration::from_secs(2), || subscribers(&server) == 0));
            took
        })
        .collect();
    took.sort();
    println!("drops took {took:?}");
    assert!(took[5] < 10 * MS, "median drop {:?}", took[5]);
}

#[test]
fn dropping_a_client_whose_server_is_stopped_waits_one_read_timeout_at_most() {
    let server = RedisServer::start();
    let holder = builder(&server).pubsub(false).build().unwrap();
    let _guard = holder.lock(KEY).unwrap();
    let read_timeout = Duration::from_secs(1);
    let client = builder(&server).read_timeout(read_timeout).build().unwrap();
    assert!(client.try_lock_for(KEY, 20 * MS).unwrap().is_none());
    assert!(eventually(Duration::from_secs(2), || subscribers(&server) == 1));
    // SIGSTOP: nothing is answered. The drop's one network wait is the delete of
    // the client's session record (its I/O thread, one read timeout); the waiter
    // thread's wake-up is a write nobody reads, and the thread sees the shutdown
    // at its next socket tick (50 ms) meanwhile: nothing waits twice.
    server.pause();
    let start = Instant::now();
    drop(client);
    let took = start.elapsed();
    server.resume();
    println!("drop with the server stopped took {took:?}");
    assert!(took < read_timeout + 400 * MS, "drop took {took:?}");
}

#[test]
fn eight_contending_threads_take_turns() {
    const THREADS: usize = 8;
    const RUN: Duration = Duration::from_secs(5);
    let server = RedisServer::start();
    let client = builder(&server).build().unwrap();
    // (thread, unlock() called, next lock() returned) per acquisition.
    let log: Mutex<Vec<(usize, Instant, Instant)>> = Mutex::new(Vec::new());
    let inside = AtomicUsize::new(0);
    let most_inside = AtomicUsize::new(0);
    let barrier = Barrier::new(THREADS);
    server.reset_stats();
    let start = Instant::now();
    thread::scope(|s| {
        for id in 0..THREADS {
            let (log, inside, most_inside, barrier, client) =
                (&log, &inside, &most_inside, &barrier, &client);
            s.spawn(move || {
                barrier.wait();
                while start.elapsed() < RUN {
                    let guard = client.lock(KEY).unwrap();
                    let acquired = Instant::now();
                    most_inside.fetch_max(inside.fetch_add(1, SeqCst) + 1, SeqCst);
                    inside.fetch_sub(1, SeqCst);
                    let released = Instant::now();
                    assert!(guard.unlock().unwrap().was_held());
                    log.lock().push((id, acquired, released));
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let counts = server.client_command_stats();
    let commands: u64 = counts.iter().map(|(_, n)| n).sum();
    let mut log = log.into_inner();
    log.sort_by_key(|&(_, acquired, _)| acquired);
    let total = log.len();
    let mut per_thread = [0usize; THREADS];
    for &(id, _, _) in &log {
        per_thread[id] += 1;
    }
    let repeats = log.windows(2).filter(|w| w[0].0 == w[1].0).count();
    let gaps: Vec<Duration> = log.windows(2).map(|w| w[1].1 - w[0].2).collect();
    let (p50, p99, max) = summary(&gaps);
    let (min_n, max_n) = (
        per_thread.iter().min().unwrap(),
        per_thread.iter().max().unwrap(),
    );
    let share = ratio(repeats, total - 1);
    let per_acquisition = ratio(commands, total);
    println!(
        "{THREADS} threads for {elapsed:?}: {total} acquisitions ({:.0}/s), per thread min {min_n} \
         max {max_n}, same holder twice in a row {:.1}%, hand-off (unlock call to next lock \
         return) p50 {p50:?} p99 {p99:?} max {max:?}, {:.2} commands per acquisition",
        ratio(total, 1) / elapsed.as_secs_f64(),
        share * 100.0,
        per_acquisition
    );
    assert_eq!(
        most_inside.load(SeqCst),
        1,
        "two threads held the lock at once"
    );
    assert!(total >= 500, "only {total} acquisitions in {elapsed:?}");
    assert!(
        *min_n * THREADS * 4 >= total,
        "a thread starved: per thread {per_thread:?}"
    );
    assert!(
        share <= 0.2,
        "the releasing thread won again {repeats} of {total} times"
    );
    // SET + EVALSHA per acquisition, and the script's GET, DEL and PUBLISH.
    assert!(
        per_acquisition <= 6.0,
        "{commands} commands for {total} acquisitions: {counts:?}"
    );
    // Woken waiters try once: about one SET per acquisition, few busy replies.
    let calls = |name: &str| {
        counts
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, c)| *c)
    };
    let tries = calls("set") + calls("pttl");
    assert!(
        ratio(tries, total) <= 1.5,
        "{tries} SET + PTTL for {total} acquisitions"
    );
}

#[test]
fn with_pubsub_off_waiters_poll_and_nothing_subscribes() {
    let server = RedisServer::start();
    let holder = builder(&server).pubsub(false).build().unwrap();
    let backoff_max = Duration::from_millis(40);
    let client = builder(&server)
        .pubsub(false)
        .backoff(4 * MS, backoff_max)
        .build()
        .unwrap();
    let handoffs = hand_offs(&server, &holder, &client, 20);
    let gaps: Vec<Duration> = handoffs.iter().map(|h| h.from_return).collect();
    let (p50, p99, max) = summary(&gaps);
    println!(
        "hand-off by polling (backoff max {backoff_max:?}): p50 {p50:?} p99 {p99:?} max {max:?}"
    );
    assert!(max <= backoff_max + SLACK, "a polled hand-off took {max:?}");
    let m = client.metrics();
    assert_eq!(m.wakeups, 0, "woken by messages with pub/sub off");
    // Held for 500 ms, the lock is polled every 4-40 ms.
    let guard = holder.lock(KEY).unwrap();
    let attempts = m.attempts;
    thread::scope(|s| {
        s.spawn(|| assert!(client.lock(KEY).unwrap().unlock().unwrap().was_held()));
        thread::sleep(Duration::from_millis(500));
        assert!(guard.unlock().unwrap().was_held());
    });
    let polls = client.metrics().attempts - attempts;
    println!("a 500 ms hold polled {polls} times");
    assert!(polls >= 8, "{polls} attempts in 500 ms: it did not poll");
    assert_eq!(server.command_calls("subscribe"), 0);
    assert_eq!(pubsub_connections(&server), 0);
}

#[test]
fn a_redis_restart_while_waiting_is_survived_and_pubsub_comes_back() {
    const WAITERS: usize = 4;
    let server = RedisServer::start();
    let holder = builder(&server)
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let client = slow_polling(&server)
        .ttl(Duration::from_secs(5))
        .connect_timeout(Duration::from_millis(500))
        .read_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = holder.lock(KEY).unwrap();
    let errors = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let give_up = Instant::now() + Duration::from_secs(30);
    thread::scope(|s| {
        for _ in 0..WAITERS {
            s.spawn(|| {
                // Errors while Redis is down are reported, as documented; callers retry.
                loop {
                    match client.lock(KEY) {
                        Ok(g) => {
                            finished.fetch_add(1, SeqCst);
                            assert!(g.unlock().unwrap().was_held());
                            return;
                        }
                        Err(e) => {
                            assert!(e.is_connection_error(), "{e:?}");
                            errors.fetch_add(1, SeqCst);
                            assert!(Instant::now() < give_up, "no lock 30 s on: {e}");
                        }
                    }
                }
            });
        }
        let waiting = eventually(Duration::from_secs(10), || {
            client.metrics().attempts >= WAITERS as u64 && subscribers(&server) == 1
        });
        assert!(waiting, "the waiters never subscribed");
        server.kill();
        server.restart();
        let restarted = Instant::now();
        // The restart wiped the holder's lock; its release finds nothing.
        drop(guard);
        let all_in = eventually(Duration::from_secs(15), || finished.load(SeqCst) == WAITERS);
        println!(
            "redis restarted: {} of {WAITERS} waiters in after {:?}, {} errors returned meanwhile",
            finished.load(SeqCst),
            restarted.elapsed(),
            errors.load(SeqCst)
        );
        assert!(all_in, "waiters hang after a restart");
    });
    // The waiter thread reconnected and subscribes again: hand-offs are wake-ups.
    // (A fresh holder: the old one's idle pooled connections died with the server,
    // and each fails once when next used.)
    let holder = builder(&server).build().unwrap();
    let warm = eventually(Duration::from_secs(5), || {
        client.try_lock("warm").is_ok_and(|g| g.is_some())
    });
    assert!(warm, "the client cannot lock anything after the restart");
    assert_fast("after a restart", &hand_offs(&server, &holder, &client, 5));
    assert!(server.command_calls("subscribe") >= 1);
}

#[test]
fn a_holder_that_never_publishes_delays_a_waiter_by_at_most_its_ttl() {
    let server = RedisServer::start();
    let client = builder(&server).backoff(20 * MS, 50 * MS).build().unwrap();
    // A foreign holder: a plain SET with a TTL, released by nobody.
    let () = server.query(redis::cmd("SET").arg(LOCK_KEY).arg("x").arg("PX").arg(500));
    let set = Instant::now();
    let guard = client.lock(KEY).unwrap();
    let waited = set.elapsed();
    let attempts = client.metrics().attempts;
    println!(
        "a holder that never publishes (ttl 500ms): waited {waited:?} with {attempts} attempts"
    );
    assert!(waited >= 480 * MS, "got a held lock after {waited:?}");
    assert!(
        waited <= 550 * MS + SLACK,
        "waited {waited:?} for a 500 ms TTL"
    );
    // One prober, polling every 15-50 ms: at most one attempt per step.
    assert!(attempts <= 2 + 500 / 15, "{attempts} attempts");
    drop(guard);
}

#[test]
fn a_wake_up_taken_by_a_waiter_that_gives_up_goes_to_the_next() {
    const ROUNDS: usize = 20;
    let server = RedisServer::start();
    let holder = builder(&server)
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let client = builder(&server).backoff(4 * MS, 50 * MS).build().unwrap();
    for round in 0..ROUNDS {
        let guard = holder.lock(KEY).unwrap();
        let token = CancelToken::new();
        let opts = LockOptions::new().cancel(token.clone());
        thread::scope(|s| {
            let seen = server.command_calls("pttl");
            let first = s.spawn(|| client.lock_with(KEY, &opts));
            let seen = busy_reply_after(&server, seen);
            let second = s.spawn(|| {
                let guard = client.lock(KEY).unwrap();
                let at = Instant::now();
                assert!(guard.unlock().unwrap().was_held());
                at
            });
            busy_reply_after(&server, seen);
            // The release's wake-up goes to the first waiter, which is cancelled
            // about when it gets it: whether it used it or not, the second waiter
            // must not wait for the holder's TTL.
            assert!(guard.unlock().unwrap().was_held());
            let released = Instant::now();
            token.cancel();
            match first.join().unwrap() {
                Ok(got) => drop(got),
                Err(Error::Cancelled { .. }) => {}
                Err(e) => panic!("round {round}: {e:?}"),
            }
            let waited = second.join().unwrap().saturating_duration_since(released);
            assert!(
                waited < Duration::from_secs(1),
                "round {round}: the second waiter waited {waited:?}"
            );
        });
    }
}

/// A client polling every 4 ms up to `backoff_max`, and a foreign holder of the
/// key with a long TTL, which will release without publishing.
fn polling_behind_a_foreign_holder(server: &RedisServer, backoff_max: Duration) -> LockClient {
    let client = builder(server)
        .backoff(4 * MS, backoff_max)
        .build()
        .unwrap();
    let () = server.query(
        redis::cmd("SET")
            .arg(LOCK_KEY)
            .arg("x")
            .arg("PX")
            .arg(30_000),
    );
    client
}

#[test]
fn the_head_waiter_probes_a_lock_freed_without_a_release_message() {
    let server = RedisServer::start();
    let backoff_max = Duration::from_millis(100);
    let client = polling_behind_a_foreign_holder(&server, backoff_max);
    thread::scope(|s| {
        let head = s.spawn(|| {
            let g = client.try_lock_for(KEY, Duration::from_secs(20)).unwrap();
            (g, Instant::now())
        });
        let subscribed = eventually(Duration::from_secs(10), || subscribers(&server) == 1);
        assert!(subscribed, "the waiter never subscribed");
        let behind = s.spawn(|| {
            let g = client.try_lock_for(KEY, Duration::from_secs(20)).unwrap();
            (g, Instant::now())
        });
        // Both wait now; only the head polls, the one behind it sends nothing.
        let before = client.metrics().attempts;
        thread::sleep(Duration::from_secs(1));
        let polls = client.metrics().attempts - before;
        assert!(polls >= 5, "the head polled {polls} times in 1 s");
        assert!(polls <= 16, "{polls} attempts in 1 s: more than one prober");
        let () = server.query(redis::cmd("DEL").arg(LOCK_KEY));
        let freed = Instant::now();
        let (got, at) = head.join().unwrap();
        let took = at - freed;
        println!("the head waiter took a lock freed without a message after {took:?}");
        assert!(took <= backoff_max + SLACK, "took {took:?}");
        let got = got.expect("the head never got the free lock");
        // Its release goes to the caller behind it at once.
        drop(got);
        let released = Instant::now();
        let (next, at) = behind.join().unwrap();
        assert!(next.is_some());
        assert!(at - released < SLACK, "{:?}", at - released);
    });
}

#[test]
fn when_the_head_gives_up_the_next_waiter_probes() {
    let server = RedisServer::start();
    let backoff_max = Duration::from_millis(100);
    let client = polling_behind_a_foreign_holder(&server, backoff_max);
    thread::scope(|s| {
        let short = s.spawn(|| {
            client
                .try_lock_for(KEY, Duration::from_millis(300))
                .unwrap()
        });
        assert!(eventually(Duration::from_secs(10), || subscribers(&server) == 1));
        let long = s.spawn(|| {
            let g = client.try_lock_for(KEY, Duration::from_secs(20)).unwrap();
            (g, Instant::now())
        });
        assert!(short.join().unwrap().is_none());
        // The head gave up; the one behind it probes from now on.
        let before = client.metrics().attempts;
        assert!(
            eventually(Duration::from_secs(2), || client.metrics().attempts
                >= before + 3),
            "nobody polls after the head gave up"
        );
        let () = server.query(redis::cmd("DEL").arg(LOCK_KEY));
        let freed = Instant::now();
        let (got, at) = long.join().unwrap();
        assert!(got.is_some());
        assert!(at - freed <= backoff_max + SLACK, "{:?}", at - freed);
    });
}

#[test]
fn a_foreign_poller_that_never_publishes_does_not_starve_a_waiter() {
    // A redis-py-style worker: SET NX PX, a short section, DEL, a 10 ms nap; it never
    // publishes. A redlease worker beside it must still get its turns.
    let server = RedisServer::start();
    let client = builder(&server).build().unwrap();
    let inside = AtomicUsize::new(0);
    let overlaps = AtomicUsize::new(0);
    let run_for = Duration::from_secs(3);
    let (ours, theirs) = thread::scope(|s| {
        let foreign = s.spawn(|| {
            let mut con = server.conn();
            let start = Instant::now();
            let mut n = 0;
            while start.elapsed() < run_for {
                let set: Option<String> = redis::cmd("SET")
                    .arg(LOCK_KEY)
                    .arg("py")
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query(&mut con)
                    .unwrap();
                if set.is_some() {
                    if inside.fetch_add(1, SeqCst) > 0 {
                        overlaps.fetch_add(1, SeqCst);
                    }
                    thread::sleep(2 * MS);
                    inside.fetch_sub(1, SeqCst);
                    let _: i64 = redis::cmd("DEL").arg(LOCK_KEY).query(&mut con).unwrap();
                    n += 1;
                }
                thread::sleep(10 * MS);
            }
            n
        });
        let start = Instant::now();
        let mut n = 0;
        while start.elapsed() < run_for {
            if let Some(g) = client.try_lock_for(KEY, Duration::from_secs(1)).unwrap() {
                if inside.fetch_add(1, SeqCst) > 0 {
                    overlaps.fetch_add(1, SeqCst);
                }
                thread::sleep(2 * MS);
                inside.fetch_sub(1, SeqCst);
                drop(g);
                n += 1;
            }
            thread::sleep(10 * MS);
        }
        (n, foreign.join().unwrap())
    });
    println!("3 s beside a foreign poller: redlease {ours} sections, foreign {theirs}");
    assert_eq!(overlaps.load(SeqCst), 0);
    // Waiting for the foreign TTL (10 s) would give one or two.
    assert!(
        ours >= 20,
        "redlease got {ours} sections, the foreign poller {theirs}"
    );
    assert!(theirs >= 20, "the foreign poller got {theirs}");
}
