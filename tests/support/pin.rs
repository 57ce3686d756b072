//! Core pinning for the benchmarks, as a user's machine with a busy server sees
//! it: when `REDLEASE_BENCH_PIN` is set (and `taskset` is there), the given
//! `redis-server`s go to core 0 and this process to core 1.

use std::process::{Command, Stdio};

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
    let servers = servers.into_iter().all(|s| set("0", s.pid()));
    let ok = servers && set("1", std::process::id());
    println!("PIN redis-server on core 0, benchmark on core 1: {ok}");
}
