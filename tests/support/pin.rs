//! Core pinning for the benchmarks, as a user's machine with a busy server sees
//! it: when `REDLEASE_BENCH_PIN` is set (and `taskset` is there), the given
//! `redis-server`s go to core 0 and this process to core 1 (to core 0 as well
//! when it is `same`). And the benchmarks'
//! 8-thread throughput driver.

use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::thread;
use std::time::Instant;

use super::RedisServer;

/// Pins `servers` to core 0 and this process to core 1 when `REDLEASE_BENCH_PIN`
/// is set; says what it did.
pub fn pin<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) {
    if std::env::var_os("REDLEASE_BENCH_PIN").is_none() {
        return;
    }
    let set = |core: &str, pid: u32| {
        Command::new("taskset")
            .args(["-apc", core, &pid.to_string()])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    // `same`: the benchmark shares core 0 with the servers, so every instruction
    // and wake-up of either side shows in the other's latency.
    let mine = if std::env::var("REDLEASE_BENCH_PIN").is_ok_and(|v| v == "same") {
        "0"
    } else {
        "1"
    };
    let servers = servers.into_iter().all(|s| set("0", s.pid()));
    let ok = servers && set(mine, std::process::id());
    println!("PIN redis-server on core 0, benchmark on core {mine}: {ok}");
}

/// Runs `work(thread)`'s closure on 8 threads, started together, `per_thread` times
/// each (passing the round number); returns calls per second.
pub fn eight_threads(
    per_thread: usize,
    work: impl Fn(usize) -> Box<dyn FnMut(usize) + Send> + Sync,
) -> f64 {
    let barrier = Barrier::new(9);
    let start = thread::scope(|s| {
        for t in 0..8 {
            let mut op = work(t);
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    op(i);
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    f64::from(u32::try_from(8 * per_thread).unwrap_or(u32::MAX)) / start.elapsed().as_secs_f64()
}

/// A floor client's lock token: 32 random hex digits, what redis-py and
/// node-redlock send (a counter would not be unique across processes, so no
/// correct client could send one).
pub fn floor_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
