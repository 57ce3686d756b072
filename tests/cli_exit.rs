#![cfg(feature = "cli")]
//! How `redlease` ends when it cannot do its job: `run -E/--conflict-exit-code`
//! for a busy lock, and failures as JSON on stderr under `--json`, against real
//! `redis-server`s and unreachable ports.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::cli::{NOT_ACQUIRED, Scratch, USAGE, output, redlease, run_sh, stderr, stdout};
use support::{RedisServer, free_port};

/// Exit code of an unreachable Redis.
const UNAVAILABLE: i32 = 69;

/// A server whose `job` is held by someone else for a minute.
fn held_job() -> RedisServer {
    let server = RedisServer::start();
    server.set_for("job", "theirs", Duration::from_secs(60));
    server
}

#[test]
fn conflict_exit_code_is_the_status_of_a_busy_lock_and_zero_is_silent() {
    let server = held_job();
    let dir = Scratch::new("conflict");
    let ran = dir.file("ran");
    let touch = format!("touch {}", ran.display());
    for (opts, code) in [
        (vec!["--wait", "0"], NOT_ACQUIRED),
        (vec!["--wait", "0", "-E", "3"], 3),
        (vec!["--wait", "0", "--conflict-exit-code", "255"], 255),
        (vec!["--wait", "300ms", "--conflict-exit-code=1"], 1),
        (vec!["--wait", "0", "--and", "other", "-E", "9"], 9),
    ] {
        let out = output(run_sh(&server, &opts, "job", &touch));
        assert_eq!(out.status.code(), Some(code), "{opts:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{opts:?}: {err}");
        assert!(err.contains("`job`"), "{opts:?}: {err}");
    }
    // 0: a busy lock is a success that prints nothing (cron mails any output).
    let out = output(run_sh(&server, &["--wait", "0", "-E", "0"], "job", &touch));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out) + &stdout(&out), "");

    assert!(!ran.exists(), "the command never ran");
    assert_eq!(server.value("job").as_deref(), Some("theirs"));
    let keys: Vec<String> = server.query(redis::cmd("KEYS").arg("*"));
    assert_eq!(keys, ["job"], "--and took nothing");
}

#[test]
fn conflict_exit_code_leaves_an_acquired_commands_status_alone() {
    let server = RedisServer::start();
    for (script, code) in [("exit 0", 0), ("exit 75", 75), ("exit 4", 4)] {
        let out = output(run_sh(&server, &["-E", "0"], "job", script));
        assert_eq!(out.status.code(), Some(code), "{script}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{script}");
    }
}

#[test]
fn conflict_exit_code_outside_0_to_255_is_bad_input() {
    for bad in ["256", "-1", "x", ""] {
        let out = output(redlease([
            "run",
            "--url",
            "redis://127.0.0.1:1/",
            "-E",
            bad,
            "job",
            "--",
            "true",
        ]));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(USAGE), "{bad:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{bad:?}: {err}");
        assert!(err.contains("conflict-exit-code"), "{bad:?}: {err}");
    }
}

/// The failure `redlease ARGS` prints on stderr with `--json`, parsed, after
/// checking it is one line and that stdout is empty.
fn json_failure(args: &[&str], code: i32) -> Value {
    let out = output(redlease(args));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert_eq!(stdout(&out), "", "{args:?}");
    let value: Value =
        serde_json::from_str(&err).unwrap_or_else(|e| panic!("{args:?}: {e}: {err}"));
    assert_eq!(value["code"], code, "{args:?}: {value}");
    let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 2, "{value}");
    value
}

#[test]
fn json_failures_are_one_object_with_the_text_modes_message_and_no_password() {
    let secret = format!("redis://u:hunter2@127.0.0.1:{}/", free_port());
    let cases: &[(&[&str], i32)] = &[
        (&["inspect", "--url", &secret, "job"], UNAVAILABLE),
        (&["leader", "--url", &secret, "scheduler"], UNAVAILABLE),
        (&["list", "--url", &secret], UNAVAILABLE),
        (&["list", "--url", &secret, "--url", &secret], USAGE),
        (
            &["inspect", "--url", &secret, "--url", &secret, "job"],
            USAGE,
        ),
    ];
    for (args, code) in cases {
        let mut with_json = args.to_vec();
        with_json.insert(1, "--json");
        let value = json_failure(&with_json, *code);
        let message = value["error"].as_str().unwrap();
        assert!(!value.to_string().contains("hunter2"), "{args:?}");
        // The same words as without --json.
        let text = stderr(&output(redlease(*args)));
        assert_eq!(text.trim_end(), format!("redlease: {message}"), "{args:?}");
    }
    // A password from REDIS_URL stays hidden too.
    let mut cmd = redlease(["inspect", "--json", "job"]);
    cmd.env("REDIS_URL", &secret);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(UNAVAILABLE));
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
    assert!(serde_json::from_str::<Value>(&stderr(&out)).is_ok());
}

#[test]
fn json_also_covers_what_clap_refuses_on_subcommands_that_have_it() {
    // A missing KEY, an unknown option: still JSON, with the usage code.
    let value = json_failure(&["inspect", "--json"], USAGE);
    assert!(
        value["error"].as_str().unwrap().contains("<KEY>"),
        "{value}"
    );
    let value = json_failure(&["leader", "--json", "--ttl", "5s", "x"], USAGE);
    assert!(
        value["error"].as_str().unwrap().contains("--ttl"),
        "{value}"
    );
    // `run` has no --json: the refusal is the usual line of text.
    let out = output(redlease(["run", "--json", "job", "--", "true"]));
    assert_eq!(out.status.code(), Some(USAGE));
    assert!(stderr(&out).starts_with("redlease: "), "{}", stderr(&out));
    // After `--`, `--json` is the command's.
    let out = output(redlease([
        "inspect",
        "--url",
        "redis://127.0.0.1:1/",
        "--",
        "--json",
    ]));
    assert!(stderr(&out).starts_with("redlease: "), "{}", stderr(&out));
}

#[test]
fn json_success_prints_nothing_on_stderr() {
    let server = held_job();
    let out = output(redlease([
        "inspect",
        "--json",
        "--url",
        &server.url(),
        "job",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["format"], "token", "{value}");
}
