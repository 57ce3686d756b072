#![cfg(feature = "cli")]
//! What `redlease inspect` (text and `--json`) and `list` print for every lock
//! format, pinned against `tests/data/cli_inspect.golden`: the CLI renders the
//! library's reading of a key, and its output does not change when that reading
//! moves. Times that move with the clock are masked; everything else is exact.
//!
//! `REDLEASE_BLESS=1` rewrites the golden file from the current output.

mod support;

use std::fmt::Write as _;

use redis::Value as Reply;
use serde_json::Value;
use support::RedisServer;
use support::cli::{output, redlease, stdout};

const GOLDEN: &str = include_str!("data/cli_inspect.golden");
/// A legacy expiry in 2100, far enough that it never passes during a run.
const EXPIRY_MS: u64 = 4_102_444_800_000;

/// Every format under the prefix `p:`, none but `p:tok` with a TTL.
fn fill(server: &RedisServer) {
    macro_rules! run {
        ($cmd:expr $(, $arg:expr)*) => {{
            let _: Reply = server.query(redis::cmd($cmd)$(.arg($arg))*);
        }};
    }
    run!("SET", &"p:redlease:fence", &7);
    run!(
        "SET",
        &"p:tok",
        &"9b2f6a1e-2c7d-4e0b-8d6f-3a1c5e7b9d20",
        &"PX",
        &600_000
    );
    run!("SET", &"p:rl", &"rl1:0123456789abcdef0123456789abcdef+");
    run!("SET", &"p:ms", &EXPIRY_MS);
    run!("SET", &"p:s", &(EXPIRY_MS / 1000));
    run!("SET", &"p:neg", &"-5000000000");
    run!("SET", &"p:big", &"123456789012345678");
    let field = "0f8e4c2a-6b1d-4f3e-9a7c-5d2b8e1f0a36";
    run!("HSET", &"p:re", &format!("{field}:1"), &2);
    run!(
        "HSET",
        &"p:rd",
        &"mode",
        &"read",
        &format!("{field}:1"),
        &1,
        &"1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f:7",
        &2
    );
    run!(
        "HSET",
        &"p:wr",
        &"mode",
        &"write",
        &format!("{field}:3:write"),
        &1
    );
    run!("HSET", &"p:hash", &"a", &"b");
    run!("RPUSH", &"p:list", &"x");
    // A semaphore of 5: 2 free, 3 held, one of them past its lease (score 1).
    run!("SET", &"p:sem", &2);
    let id = |hex: &str| uuid::Uuid::try_parse(hex).unwrap().as_bytes().to_vec();
    let far = EXPIRY_MS;
    run!(
        "ZADD",
        &"{p:sem}:timeout",
        &far,
        &id("aaaaaaaaaaaaaaaa1111111111111111"),
        &far,
        &id("bbbbbbbbbbbbbbbb2222222222222222"),
        &1,
        &id("cccccccccccccccc3333333333333333")
    );
    run!("SET", &"p:semfree", &5);
    // A fair lock held, with two callers queued, and a free one with one queued.
    run!("HSET", &"p:fair", &format!("{field}:1"), &1);
    let waiter = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f:9";
    let later = "2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a:4";
    run!("RPUSH", &"redisson_lock_queue:{p:fair}", &waiter, &later);
    run!(
        "ZADD",
        &"redisson_lock_timeout:{p:fair}",
        &far,
        &waiter,
        &(far + 5000),
        &later
    );
    run!("RPUSH", &"redisson_lock_queue:{p:fairfree}", &waiter);
    run!("ZADD", &"redisson_lock_timeout:{p:fairfree}", &far, &waiter);
}

/// `12.3s` → `N.Ns` wherever a time in seconds is printed.
fn mask_text(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        let at_start = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        if digits > 0 && at_start && b[i + digits..].starts_with(b".") {
            let tail = &b[i + digits + 1..];
            if tail.len() >= 2 && tail[0].is_ascii_digit() && tail[1] == b's' {
                out.push_str("N.Ns");
                i += digits + 3;
                continue;
            }
        }
        let c = text[i..].chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The JSON with its clock-dependent numbers checked and masked.
fn mask_json(text: &str) -> String {
    let mut v: Value = serde_json::from_str(text).unwrap();
    if let Some(ms) = v["pttl_ms"].as_u64() {
        assert!((1..=600_000).contains(&ms), "{v}");
        v["pttl_ms"] = "masked".into();
    }
    if let Some(ms) = v["expires_in_ms"].as_i64() {
        assert!(ms > 0, "{v}");
        v["expires_in_ms"] = "masked".into();
    }
    v.to_string()
}

fn cli(server: &RedisServer, args: &[&str]) -> String {
    let url = server.url();
    let mut all = vec!["--url", &url, "--prefix", "p:"];
    all.splice(0..0, args.iter().copied());
    stdout(&output(redlease(all)))
}

fn everything(server: &RedisServer) -> String {
    let mut out = String::new();
    let names = [
        "tok", "rl", "ms", "s", "neg", "big", "re", "rd", "wr", "hash", "list", "sem", "semfree",
        "fair", "fairfree", "nothing",
    ];
    for name in names {
        let _ = writeln!(out, "== inspect {name}");
        out.push_str(&mask_text(&cli(server, &["inspect", name])));
        let _ = writeln!(out, "== inspect --json {name}");
        out.push_str(&mask_json(&cli(server, &["inspect", "--json", name])));
        out.push('\n');
    }
    out.push_str("== list\n");
    out.push_str(&mask_text(&cli(server, &["list"])));
    out.push_str("== list --json\n");
    for line in cli(server, &["list", "--json"]).lines() {
        out.push_str(&mask_json(line));
        out.push('\n');
    }
    out
}

#[test]
fn inspect_and_list_print_every_format_as_pinned() {
    let server = RedisServer::start();
    fill(&server);
    let got = everything(&server);
    if std::env::var_os("REDLEASE_BLESS").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cli_inspect.golden");
        std::fs::write(path, &got).unwrap();
        return;
    }
    for (n, (want, got)) in GOLDEN.lines().zip(got.lines()).enumerate() {
        assert_eq!(got, want, "line {} differs", n + 1);
    }
    assert_eq!(got.lines().count(), GOLDEN.lines().count(), "{got}");
}
