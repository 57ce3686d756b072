mod support;

// `redlease run --min-hold`: the cron line of a fleet. A run inside another's
// minimum hold exits 75 and says how long the lock is still held and by whom; a
// fleet started at once runs the command once; the hold does not depend on the
// host's wall clock (libfaketime moves it 30 s either way).

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::cli::{
    NOT_ACQUIRED, STARTUP, Scratch, USAGE, exit_within, finish, has_line, hold_until, output,
    run_sh, stderr,
};
use support::{RedisServer, eventually};

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.query(redis::cmd("PTTL").arg(key))
}

/// Runs `echo ran` under `run --wait 0 --min-hold 20s job`, which must exit
/// 75 without running it: what it said on stderr.
fn refused(server: &RedisServer) -> String {
    let out = output(run_sh(
        server,
        &["--wait", "0", "--min-hold", "20s"],
        "job",
        "echo ran",
    ));
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{text}");
    assert!(out.stdout.is_empty(), "the command ran: {text}");
    text
}

/// The seconds in `… for another 12.3s …`.
fn seconds_left(text: &str) -> f64 {
    let rest = text
        .split("for another ")
        .nth(1)
        .unwrap_or_else(|| panic!("no time left in: {text}"));
    rest.split('s').next().unwrap().parse().unwrap()
}

#[test]
fn a_run_inside_an_alive_holders_min_hold_exits_75_naming_the_holder_and_the_time_left() {
    let server = RedisServer::start();
    let dir = Scratch::new("minhold-alive");
    let (started, go) = (dir.file("started"), dir.file("go"));
    let script = hold_until(&started, &go, "REDLEASE_KEY");
    let first = run_sh(
        &server,
        &["--wait", "0", "--min-hold", "20s"],
        "job",
        &script,
    )
    .spawn()
    .unwrap();
    let holder = first.id();
    assert!(eventually(STARTUP, || has_line(&started)));
    let text = refused(&server);
    assert!(text.contains(&format!("by pid {holder} on ")), "{text}");
    let left = seconds_left(&text);
    assert!(left > 10.0 && left <= 30.0, "{text}");
    fs::write(&go, "").unwrap();
    assert!(finish(first).status.success());
}

#[test]
fn a_run_after_the_holder_finished_inside_its_min_hold_exits_75_saying_the_lock_is_kept() {
    let server = RedisServer::start();
    let began = Instant::now();
    let out = output(run_sh(
        &server,
        &["--wait", "0", "--min-hold", "20s"],
        "job",
        "true",
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = refused(&server);
    assert!(text.contains("kept for its minimum hold"), "{text}");
    let left = seconds_left(&text);
    let most = 20.0;
    let least = most - began.elapsed().as_secs_f64() - 0.1;
    assert!(
        left <= most && left >= least,
        "{left} not in [{least}, {most}]: {text}"
    );
    // `inspect` says so too.
    let out = output(support::cli::redlease([
        "inspect",
        "--url",
        &server.url(),
        "job",
    ]));
    assert!(
        support::cli::stdout(&out).contains("kept for its minimum hold"),
        "{}",
        support::cli::stdout(&out)
    );
    assert_eq!(support::cli::inspect_json(&server, "job")["kept"], true);
}

#[test]
fn a_fleet_of_runs_started_at_once_runs_the_command_exactly_once() {
    let server = RedisServer::start();
    let dir = Scratch::new("minhold-fleet");
    let record = dir.file("runs");
    let script = format!("echo \"$$\" >> {}", record.display());
    let fleet = |n: usize| -> Vec<Child> {
        (0..n)
            .map(|_| {
                run_sh(
                    &server,
                    &["--wait", "0", "--min-hold", "30s"],
                    "job",
                    &script,
                )
                .spawn()
                .unwrap()
            })
            .collect()
    };
    // Two cron ticks of a fleet of five: the second comes once the first tick's
    // run has finished, well inside the period.
    let mut codes = Vec::new();
    for _tick in 0..2 {
        for child in fleet(5) {
            let out = finish(child);
            codes.push(out.status.code());
            if out.status.code() == Some(NOT_ACQUIRED) {
                assert!(stderr(&out).contains("for another"), "{}", stderr(&out));
            }
        }
    }
    let runs = fs::read_to_string(&record).unwrap();
    assert_eq!(
        runs.lines().count(),
        1,
        "runs: {runs:?}, exit codes {codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(0)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(NOT_ACQUIRED)).count(),
        9,
        "{codes:?}"
    );
}

#[test]
fn the_min_hold_is_the_same_on_a_host_whose_clock_is_30_s_off() {
    let server = RedisServer::start();
    let dir = Scratch::new("minhold-clock");
    let hold = Duration::from_secs(3);
    for (i, offset) in [30i64, -30].into_iter().enumerate() {
        let key = format!("job{i}");
        let clock = dir.file(&format!("clock{i}"));
        // The command prints the faked clock, to show the skew took effect.
        let script = format!("date +%s > {}", clock.display());
        let run = run_sh(&server, &["--wait", "0", "--min-hold", "3s"], &key, &script);
        let began = Instant::now();
        let out = output(faked(&run, offset));
        assert!(out.status.success(), "{}", stderr(&out));
        let ttl = pttl(&server, &key);
        let read_at = Instant::now();
        let real = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let faked: i64 = fs::read_to_string(&clock).unwrap().trim().parse().unwrap();
        let skew = faked - i64::try_from(real.as_secs()).unwrap();
        assert!(
            (skew - offset).abs() <= 5,
            "clock skewed by {skew} s, not {offset}"
        );
        // Kept for the hold counted from the acquisition, by the monotonic clock.
        let most = i64::try_from(hold.as_millis()).unwrap();
        let least = most - i64::try_from((read_at - began).as_millis()).unwrap();
        assert!(
            ttl <= most && ttl >= least - 2,
            "offset {offset} s: PTTL {ttl} ms not in [{least}, {most}]"
        );
        // And it ends when the hold does.
        assert!(eventually(hold + Duration::from_secs(2), || {
            pttl(&server, &key) == -2
        }));
        assert!(began.elapsed() + Duration::from_millis(5) >= hold);
    }
}

/// `cmd` run under libfaketime with the clock `offset` seconds off (its
/// children too: they inherit the preload).
fn faked(cmd: &Command, offset: i64) -> Command {
    let mut faked = Command::new("faketime");
    faked
        .arg("-f")
        .arg(format!("{offset:+}s"))
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    faked
}

#[test]
fn bad_min_holds_are_usage_errors() {
    let server = RedisServer::start();
    for opts in [
        &["--min-hold", "0s"][..],
        &["--min-hold", "1m", "--max-hold", "30s"],
        &["--min-hold", "1m", "--scheme", "reentrant"],
        &["--min-hold", "1m", "--scheme", "legacy-ms"],
        &["--min-hold", "1m", "--fair"],
    ] {
        let mut child = run_sh(&server, opts, "job", "echo ran").spawn().unwrap();
        exit_within(&mut child, support::cli::HUNG);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(USAGE), "{opts:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{opts:?}");
    }
    assert_eq!(pttl(&server, "job"), -2);
}
