//! `redlease run KEY -- COMMAND`: acquire, run the command while the library's
//! renewal thread keeps the lease alive, stop the command if the lease is lost,
//! release when it exits.

use std::time::Duration;

use redlease::{CancelToken, Error, LockClient, LockOptions, Owner};

use crate::args::RunArgs;
use crate::exit::Failure;
use crate::held::Held;
use crate::server::server_name;
use crate::status::Status;
use crate::supervise::{cancelled, run_command, watch_signals};

/// Runs `run`; returns the exit code (the command's, or 128 + a signal that
/// cancelled the wait) or the failure to report (a busy lock's code is
/// `--conflict-exit-code`, 75 by default).
pub(crate) fn run(args: &RunArgs) -> Result<u8, Failure> {
    if args.partitions.is_some() {
        return crate::partitions::run(args);
    }
    let name = args.key.clone().unwrap_or_default();
    // Bad input is reported before anything connects.
    let scheme = args.scheme.scheme();
    let (builder, url) = args.server.builder();
    let server = server_name(&url);
    let cancel = CancelToken::new();
    let signals = watch_signals(cancel.clone())?;
    let client = crate::server::with_liveness(builder, args.liveness)
        .key_prefix(args.server.prefix.as_str())
        .scheme(scheme)
        .build()
        .map_err(|e| Failure::from_lib(&e, &server))?;
    if !args.no_doctor {
        crate::doctor::print_build_findings(&client);
    }
    let key = args.server.full_key(&name);

    let opts = options(args, cancel);
    let status = (args.wait != Some(Duration::ZERO))
        .then(|| Status::start(&url, &args.server.prefix, &name))
        .flatten();
    let acquired = match args.permits {
        Some(n) => Held::permit(&client, &name, (n, args.weight), &opts)?,
        None if args.shared || args.exclusive => {
            Held::read_write(&client, &name, args.exclusive, &opts)
        }
        None if args.slots.is_some() => {
            let n = args.slots.unwrap_or(1);
            let names: Vec<String> = (0..n).map(|i| format!("{name}:{i}")).collect();
            client
                .lock_any_with(&names, &opts)
                .map(|g| g.map(Held::Any))
        }
        None if !args.and.is_empty() => {
            let names: Vec<&str> = std::iter::once(&name)
                .chain(&args.and)
                .map(String::as_str)
                .collect();
            client
                .lock_all_with(&names, &opts)
                .map(|g| g.map(Held::All))
        }
        None if args.fair => client
            .fair_lock(&name)
            .and_then(|l| l.lock_with(&opts))
            .map(|g| g.map(Held::Lock)),
        None => client.lock_with(&name, &opts).map(|g| g.map(Held::Lock)),
    };
    if let Some(status) = status {
        status.stop();
    }
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        // With -E 0 a busy lock is a success, and says nothing (cron mails any
        // output).
        Ok(None) if args.conflict_exit_code == 0 => return Ok(0),
        Ok(None) => {
            let waited = match args.wait {
                Some(Duration::ZERO) => " (--wait 0: one attempt)".to_owned(),
                Some(w) => format!(" within {}", humantime::format_duration(w)),
                None => String::new(),
            };
            let busy = match args.permits {
                Some(n) => match args.weight.filter(|k| *k > 1) {
                    Some(k) => format!("no {k} permits of `{key}` (of {n}) came free at once"),
                    None => format!("no permit of `{key}` (of {n}) came free"),
                },
                None if args.slots.is_some() => {
                    let n = args.slots.unwrap_or(1);
                    format!(
                        "all {n} slots `{key}:0` … `{key}:{}` are held; none acquired",
                        n - 1
                    )
                }
                None if !args.and.is_empty() => {
                    format!("`{key}` or an --and name is held by someone else; none acquired")
                }
                None if args.min_hold.is_some() => {
                    format!("`{key}` {}; not acquired", held_for(&client, &name))
                }
                None => format!("`{key}` is held by someone else; not acquired"),
            };
            return Err(Failure::new(
                args.conflict_exit_code,
                format!("{busy}{waited}"),
            ));
        }
        Err(Error::Cancelled { .. }) => return Ok(cancelled(&signals, &key)),
        Err(e) => return Err(Failure::from_lib(&e, &server)),
    };
    let servers = args.server.servers();
    run_command(
        guard,
        &servers,
        &args.command,
        &signals,
        args.kill_grace,
        &key,
    )
}

/// The lock call's options: `--fence`, `--ttl`, `--wait`, `--max-hold` and
/// `--min-hold`, and `cancel` (a signal stops the wait).
fn options(args: &RunArgs, cancel: CancelToken) -> LockOptions {
    let mut opts = LockOptions::new().fencing(args.fence).cancel(cancel);
    if let Some(ttl) = args.ttl {
        opts = opts.ttl(ttl);
    }
    if let Some(wait) = args.wait {
        opts = opts.wait(wait);
    }
    if let Some(max_hold) = args.max_hold {
        opts = opts.max_hold(max_hold);
    }
    if let Some(min_hold) = args.min_hold {
        opts = opts.min_hold(min_hold);
    }
    opts
}

/// How long the lock `name` is still held, and by whom when its holder lives:
/// what a run skipped inside another's minimum hold says (`is kept for its
/// minimum hold for another 12.3s, released by pid 42 on host (job)`).
fn held_for(client: &LockClient, name: &str) -> String {
    let Ok(info) = client.inspect(name) else {
        return "is held by someone else".to_owned();
    };
    let left = info.ttl().map_or_else(String::new, |t| {
        format!(" for another {:.1}s", t.as_secs_f64())
    });
    let alive = info.holders().iter().find_map(|h| match h.owner() {
        Owner::Alive(s) => Some(format!("pid {} on {} ({})", s.pid(), s.host(), s.program())),
        _ => None,
    });
    match (info.kept(), alive) {
        (true, Some(who)) => format!("is kept for its minimum hold{left}, released by {who}"),
        (true, None) => format!("is kept for its minimum hold{left} (its holder has exited)"),
        (false, Some(who)) => format!("is held{left} by {who}"),
        (false, None) => format!("is held by someone else{left}"),
    }
}
