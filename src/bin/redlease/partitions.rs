//! `redlease run --partitions M --group G -- COMMAND`: a member of a partition
//! group that runs one COMMAND per partition it holds. A partition asked for by
//! another member has its command stopped (SIGTERM, SIGKILL after --kill-grace)
//! before it is released; a lost one has its command stopped at once; a command
//! that exits on its own gives its partition back (the member takes it again at
//! a later round and starts a new command under a new fence).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select};
use nix::sys::signal::Signal;
use redlease::{CancelToken, LockClient, Member, PartitionEvent};

use crate::args::RunArgs;
use crate::child::Running;
use crate::exit::{Failure, LOST, SIGNAL_BASE};
use crate::supervise::watch_signals;

/// Why a partition's command is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Asked for by another member: released once the command has exited.
    Revoked,
    /// The lease was lost: nothing to release.
    Lost,
    /// redlease itself is stopping.
    Leaving,
}

/// One partition's command.
struct Task {
    child: Running,
    fence: u64,
    /// Why and when it was asked to stop, and when SIGKILL follows.
    stopping: Option<(Stop, Instant)>,
}

/// Runs the member until a signal stops it or its membership ends; returns
/// 128 + the signal, or the failure that ended it.
pub(crate) fn run(args: &RunArgs) -> Result<u8, Failure> {
    let Some(group) = args.group.as_deref() else {
        return Err(Failure::usage("--partitions needs --group"));
    };
    // No KEY with --partitions: the first positional word is the command's.
    let command: Vec<OsString> = args
        .key
        .iter()
        .map(OsString::from)
        .chain(args.command.iter().cloned())
        .collect();
    if command.is_empty() {
        return Err(Failure::usage("no command given"));
    }
    let signals = watch_signals(CancelToken::new())?;
    // The member does not keep its client alive: `_client` lives until the end.
    let (_client, member) = join(args, group)?;
    let mut tasks: BTreeMap<u32, Task> = BTreeMap::new();
    let grace = args.kill_grace;
    let env = |p: u32, fence: u64| {
        vec![
            ("REDLEASE_GROUP", group.to_owned()),
            ("REDLEASE_PARTITION", p.to_string()),
            ("REDLEASE_FENCE", fence.to_string()),
        ]
    };
    let mut signal: Option<i32> = None;
    let mut gone = false;
    // Each set to `never()` once disconnected, so a closed channel does not spin.
    let mut events = member.events().clone();
    let mut signals = signals;
    while !(gone || signal.is_some()) || !tasks.is_empty() {
        select! {
            recv(events) -> event => match event {
                Ok(PartitionEvent::Assigned { partition, fence }) if signal.is_none() => {
                    match Running::spawn(&command, &env(partition, fence), grace, false, None) {
                        Ok(child) => {
                            tasks.insert(partition, Task { child, fence, stopping: None });
                        }
                        Err(failure) => {
                            let _ = member.release(partition);
                            stop_all(&mut tasks, grace);
                            let _ = wait_all(&mut tasks, &member, Duration::MAX);
                            return Err(failure);
                        }
                    }
                }
                Ok(PartitionEvent::Revoking { partition, .. }) => {
                    stop(&mut tasks, partition, Stop::Revoked, grace);
                }
                Ok(PartitionEvent::Lost { partition, fence }) => {
                    if tasks.get(&partition).is_some_and(|t| t.fence == fence) {
                        eprintln!("redlease: partition {partition} of `{group}` lost; its command is stopped");
                        stop(&mut tasks, partition, Stop::Lost, grace);
                    }
                }
                Ok(_) => {}
                Err(_) => {
                    gone = true;
                    events = never();
                    stop_all(&mut tasks, grace);
                }
            },
            recv(signals) -> got => match got {
                Ok(n) => {
                    signal.get_or_insert(n);
                    stop_all(&mut tasks, grace);
                }
                Err(_) => signals = never(),
            },
            recv(after(Duration::from_millis(50))) -> _ => {}
        }
        reap(&mut tasks, &member);
    }
    // Every command has exited: leave (releasing what is left).
    let left = member.leave();
    if let Some(n) = signal {
        return Ok(SIGNAL_BASE.saturating_add(u8::try_from(n).unwrap_or(0)));
    }
    match left {
        Ok(()) => Ok(0),
        Err(_) => Err(Failure::new(
            LOST,
            format!(
                "membership of `{group}` ended (the client shut down or lost Redis); every command was stopped"
            ),
        )),
    }
}

/// Builds the client and joins the group as the options say.
fn join(args: &RunArgs, group: &str) -> Result<(LockClient, Member), Failure> {
    let (client, server) = args
        .server
        .client(|b| crate::server::with_liveness(b, args.liveness))?;
    if !args.no_doctor {
        crate::doctor::print_build_findings(&client);
    }
    let mut handle = client
        .partitions(group, args.partitions.unwrap_or(1))
        .map_err(|e| Failure::from_lib(&e, &server))?;
    if let Some(ttl) = args.ttl {
        // With liveness, a stopped member is gone after the liveness.
        let window = args.liveness.map_or(ttl, |live| live.min(ttl));
        handle = handle
            .ttl(ttl)
            .round(window / 3)
            .stability(window)
            .revoke_grace(ttl);
    }
    if let Some(k) = args.max_moves {
        handle = handle.max_moves(k);
    }
    if let Some(id) = &args.member_id {
        handle = handle.member_id(id);
    }
    let member = handle.join().map_err(|e| Failure::from_lib(&e, &server))?;
    Ok((client, member))
}

/// Asks partition `p`'s command to stop (SIGTERM); SIGKILL follows `grace` later.
fn stop(tasks: &mut BTreeMap<u32, Task>, p: u32, why: Stop, grace: Duration) {
    if let Some(task) = tasks.get_mut(&p) {
        task.child.signal(Signal::SIGTERM);
        let kill_at = Instant::now().checked_add(grace).unwrap_or_else(far);
        match &mut task.stopping {
            // A loss overrides a revoke (nothing to release), not the grace.
            Some((w, _)) if why == Stop::Lost => *w = Stop::Lost,
            Some(_) => {}
            None => task.stopping = Some((why, kill_at)),
        }
    }
}

fn stop_all(tasks: &mut BTreeMap<u32, Task>, grace: Duration) {
    let all: Vec<u32> = tasks.keys().copied().collect();
    for p in all {
        stop(tasks, p, Stop::Leaving, grace);
    }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Kills the commands past their grace; reaps those that exited and gives
/// their partitions back (a revoked one, or one whose command ended).
fn reap(tasks: &mut BTreeMap<u32, Task>, member: &Member) {
    let now = Instant::now();
    let mut done = Vec::new();
    for (p, task) in tasks.iter_mut() {
        if let Some((_, kill_at)) = task.stopping
            && now >= kill_at
        {
            task.child.signal(Signal::SIGKILL);
        }
        if task.child.exited().try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected) {
            done.push(*p);
        }
    }
    for p in done {
        let Some(task) = tasks.remove(&p) else {
            continue;
        };
        let why = task.stopping.map(|(w, _)| w);
        // Anything left in its group must not work on without the partition.
        task.child.signal(Signal::SIGKILL);
        let _ = task.child.wait();
        if why != Some(Stop::Lost) {
            let _ = member.release(p);
        }
    }
}

/// Waits (at most `limit`) for every command to exit, reaping them.
fn wait_all(tasks: &mut BTreeMap<u32, Task>, member: &Member, limit: Duration) -> bool {
    let until = Instant::now().checked_add(limit).unwrap_or_else(far);
    while !tasks.is_empty() && Instant::now() < until {
        reap(tasks, member);
        std::thread::sleep(Duration::from_millis(20));
    }
    tasks.is_empty()
}
