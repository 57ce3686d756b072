#![cfg(feature = "cli")]
//! `redlease run --fair` and `inspect` of a fair lock's queue, run as processes
//! against a real `redis-server` (in the style of `tests/cli_rwlock.rs`). Every wait
//! is bounded.

mod support;

use std::time::Duration;

use redlease::LockClient;
use support::cli::*;
use support::{RedisServer, eventually};

#[test]
fn a_fair_run_queues_behind_the_holder_and_runs_after_it() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::builder(url.as_str()).build().unwrap();
    let held = client.fair_lock("job").unwrap().lock().unwrap();
    let at_once = finish(
        redlease([
            "run", "--url", &url, "--fair", "--wait", "0", "job", "--", "true",
        ])
        .spawn()
        .unwrap(),
    );
    assert_eq!(at_once.status.code(), Some(NOT_ACQUIRED));
    let waiting = redlease(["run", "--url", &url, "--fair", "job", "--", "echo", "ran"])
        .spawn()
        .unwrap();
    assert!(
        eventually(HUNG, || inspect_json(&server, "job")["queued"] == 1),
        "the command queued"
    );
    let text = finish(redlease(["inspect", "--url", &url, "job"]).spawn().unwrap());
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("queue:   1 waiting (a fair lock"), "{text}");
    assert!(held.unlock().unwrap().was_held());
    let out = finish(waiting);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    assert_eq!(inspect_json(&server, "job")["queued"], 0);
}

#[test]
fn a_queued_run_killed_with_sigkill_delays_the_next_waiter_by_under_6_s() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::builder(url.as_str()).build().unwrap();
    let lock = client.fair_lock("job").unwrap();
    let held = lock.lock().unwrap();
    let mut doomed = redlease(["run", "--url", &url, "--fair", "job", "--", "true"])
        .spawn()
        .unwrap();
    assert!(
        eventually(HUNG, || inspect_json(&server, "job")["queued"] == 1),
        "the command queued"
    );
    let next = std::thread::spawn(move || {
        let g = lock.try_lock_for(HUNG).unwrap().expect("its turn in time");
        let at = std::time::Instant::now();
        drop(g);
        at
    });
    assert!(
        eventually(HUNG, || inspect_json(&server, "job")["queued"] == 2),
        "the next waiter queued behind it"
    );
    doomed.kill().unwrap(); // SIGKILL: no cleanup runs
    doomed.wait().unwrap();
    let released = std::time::Instant::now();
    assert!(held.unlock().unwrap().was_held());
    let delay = next.join().unwrap() - released;
    assert!(delay <= Duration::from_secs(6), "held up {delay:?}");
    eprintln!("FIGURE next waiter took it {delay:?} after the release (killed run queued first)");
}

#[test]
fn after_a_killed_run_in_a_mixed_queue_every_later_waiter_is_woken_within_6_s() {
    use support::fair_queue::{
        Turns, Waits, await_queued, queue_len, queue_ours, queue_redisson_counted,
    };
    use support::redisson::fair::RedissonFair;
    const SECTION: Duration = Duration::from_millis(100);
    let server = RedisServer::start();
    let url = server.url();
    let ours = || {
        LockClient::builder(url.as_str())
            .build()
            .unwrap()
            .fair_lock("job")
            .unwrap()
    };
    let mut holder = RedissonFair::new(&server);
    assert_eq!(
        holder.attempt("job"),
        None,
        "free: the Redisson holder takes it"
    );
    let (turns, waits) = (Turns::default(), Waits::default());
    let queue_redisson =
        |id| queue_redisson_counted(&server, "job", id, SECTION, &turns, &waits, HUNG);
    // Ours and Redisson's in turn; the third, a `redlease run --fair`, dies queued.
    let mut waiters = vec![
        queue_ours(&server, "job", &ours(), 0, SECTION, &turns, HUNG),
        queue_redisson(1),
    ];
    let mut doomed = redlease(["run", "--url", &url, "--fair", "job", "--", "true"])
        .spawn()
        .unwrap();
    await_queued(&server, "job", 3, HUNG, "the run");
    waiters.push(queue_redisson(3));
    waiters.push(queue_ours(
        &server,
        "job",
        &ours(),
        4,
        SECTION,
        &turns,
        HUNG,
    ));
    waiters.push(queue_redisson(5));
    // The holder's section goes on past the first wait of the Redisson waiter
    // right behind ours (the wait its first attempt returned, about 4 s: when it
    // ends the waiter attempts again, then waits for its wake-up; the later
    // ones' first waits run for minutes, and only a wake-up ends them); the run
    // dies at its end, its entry as fresh as it gets.
    assert!(
        eventually(HUNG, || waits.of(1) >= 1),
        "the first Redisson waiter's first wait never ended"
    );
    doomed.kill().unwrap(); // SIGKILL: no cleanup runs
    doomed.wait().unwrap();
    let released = std::time::Instant::now();
    assert_eq!(holder.unlock("job"), Some(1));
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(turns.order(), vec![0, 1, 3, 4, 5], "arrival order");
    let (gap, who) = turns.worst_gap(released);
    eprintln!("FIGURE after a killed run: longest release-to-turn gap {gap:?} (waiter {who})");
    assert!(
        gap <= Duration::from_secs(6),
        "waiter {who} woken {gap:?} after its predecessor's release"
    );
    assert_eq!(queue_len(&server, "job"), 0);
}
