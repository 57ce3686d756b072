//! What `run` holds while the command runs: a lock, several locks taken together
//! (`--and`), one lock of several (`--slots N`), or one permit of a semaphore (`--permits N`); what `elect` holds: a
//! leadership. All are leases renewed by the library.

use crossbeam_channel::Receiver;
use redlease::{
    AnyGuard, Error, Leadership, LeaseLost, LockClient, LockGuard, LockOptions, MultiGuard,
    PermitGuard, PermitsGuard, ReadGuard, Release, Result, Ticket, WriteGuard,
};

use crate::exit::Failure;

/// What the command finds in its environment, for the man pages' ENVIRONMENT
/// sections: `(variable, the subcommands that set it, what it holds)`. A variable
/// that [`Held::env`] sets gets a row here.
pub(crate) const COMMAND_ENV: &[(&str, &[&str], &str)] = &[
    (
        "REDLEASE_KEY",
        &["run", "elect"],
        "the full key (PREFIX, then KEY or NAME)",
    ),
    (
        "REDLEASE_FENCE",
        &["run"],
        "with --fence, the fencing token: strictly increasing per key; pass it with each \
         write so that a late write of an earlier holder can be refused. With --and, one \
         fence per name, comma-separated, KEY's first; with --slots, the fence of the \
         lock taken; with --partitions, the partition's fence (it rises with each owner)",
    ),
    (
        "REDLEASE_SLOT",
        &["run"],
        "with --slots N, the number (0 to N-1) of the lock KEY:n taken",
    ),
    (
        "REDLEASE_PARTITION",
        &["run"],
        "with --partitions, the partition this command runs for (one command per partition held)",
    ),
    (
        "REDLEASE_GROUP",
        &["run"],
        "with --partitions, the group's name",
    ),
    (
        "REDLEASE_PERMIT_ID",
        &["run"],
        "with --permits, the id of the permit held (with --weight K, the K ids, comma-separated)",
    ),
    (
        "REDLEASE_TERM",
        &["elect"],
        "the term: strictly increasing per election over every leader; pass it with each \
         write so that a deposed leader's late write can be refused",
    ),
    (
        "REDLEASE_LATCH",
        &["latch"],
        "the latch's full key (PREFIX, then NAME)",
    ),
];

/// A held lock or permit.
pub(crate) enum Held {
    Lock(LockGuard),
    /// KEY and the `--and` names, in the order given.
    All(MultiGuard),
    /// One of KEY:0 … KEY:N-1 (`--slots N`).
    Any(AnyGuard),
    Permit(PermitGuard),
    /// K permits at once (`--weight K`).
    Permits(PermitsGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Leader(Leadership),
}

impl Held {
    /// One permit of the semaphore `name` (created with `permits` in all when
    /// absent), or `weight` at once, as `opts` says. `Ok(None)` when none came
    /// free in time; a semaphore with another total, or a weight above it, is
    /// bad input, whose message says both numbers.
    pub(crate) fn permit(
        client: &LockClient,
        name: &str,
        (permits, weight): (u32, Option<u32>),
        opts: &LockOptions,
    ) -> std::result::Result<Result<Option<Held>>, Failure> {
        let sem = match client.semaphore(name) {
            Ok(sem) => sem,
            Err(e) => return Ok(Err(e)),
        };
        match sem.ensure_permits(permits) {
            Ok(_) => {}
            Err(Error::PermitsMismatch {
                key,
                existing,
                requested,
            }) => {
                return Err(Failure::usage(format!(
                    "semaphore `{key}` has {existing} permits, not the {requested} of \
                     --permits {requested}; use --permits {existing}, or change it on purpose"
                )));
            }
            Err(e) => return Ok(Err(e)),
        }
        match weight {
            Some(k) if k > permits => Err(Failure::usage(format!(
                "--weight {k} is more than the {permits} permits of `{}`",
                sem.key()
            ))),
            Some(k) if k > 1 => Ok(sem.acquire_many_with(k, opts).map(|p| p.map(Held::Permits))),
            _ => Ok(sem.acquire_with(opts).map(|p| p.map(Held::Permit))),
        }
    }

    /// The read (`write` false) or write lock of the read-write lock `name`, as
    /// `opts` says; `Ok(None)` when not taken in time.
    pub(crate) fn read_write(
        client: &LockClient,
        name: &str,
        write: bool,
        opts: &LockOptions,
    ) -> Result<Option<Held>> {
        let lock = client.read_write_lock(name)?;
        if write {
            Ok(lock.write_with(opts)?.map(Held::Write))
        } else {
            Ok(lock.read_with(opts)?.map(Held::Read))
        }
    }

    /// What is held, for messages: ``lock on `k` `` or ``permit of `k` ``.
    pub(crate) fn what(&self) -> String {
        match self {
            Held::Lock(g) => format!("lock on `{}`", g.key()),
            Held::All(g) => format!("locks on `{}`", g.keys().join("`, `")),
            Held::Any(g) => format!("lock on `{}`", g.key()),
            Held::Permit(p) => format!("permit of `{}`", p.key()),
            Held::Permits(p) => format!("{} permits of `{}`", p.permits(), p.key()),
            Held::Read(g) => format!("read lock on `{}`", g.key()),
            Held::Write(g) => format!("write lock on `{}`", g.key()),
            Held::Leader(l) => format!("leadership of `{}`", l.key()),
        }
    }

    /// The environment the command gets: the key, and the fence or permit id.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Held::Lock(g) => {
                let mut env = vec![("REDLEASE_KEY", g.key().to_owned())];
                if let Some(fence) = g.fence() {
                    env.push(("REDLEASE_FENCE", fence.to_string()));
                }
                env
            }
            Held::All(g) => {
                let mut env = vec![("REDLEASE_KEY", g.keys()[0].to_owned())];
                if let Some(fences) = g.fences() {
                    let list: Vec<String> = fences.iter().map(u64::to_string).collect();
                    env.push(("REDLEASE_FENCE", list.join(",")));
                }
                env
            }
            Held::Any(g) => {
                let mut env = vec![
                    ("REDLEASE_KEY", g.key().to_owned()),
                    ("REDLEASE_SLOT", g.index().to_string()),
                ];
                if let Some(fence) = g.fence() {
                    env.push(("REDLEASE_FENCE", fence.to_string()));
                }
                env
            }
            Held::Permit(p) => vec![
                ("REDLEASE_KEY", p.key().to_owned()),
                ("REDLEASE_PERMIT_ID", p.permit_id().to_owned()),
            ],
            Held::Permits(p) => vec![
                ("REDLEASE_KEY", p.key().to_owned()),
                ("REDLEASE_PERMIT_ID", p.permit_ids().to_owned()),
            ],
            Held::Read(g) => vec![("REDLEASE_KEY", g.key().to_owned())],
            Held::Write(g) => vec![("REDLEASE_KEY", g.key().to_owned())],
            Held::Leader(l) => vec![
                ("REDLEASE_KEY", l.key().to_owned()),
                ("REDLEASE_TERM", l.term().to_string()),
            ],
        }
    }

    /// The ticket a keeper releases if redlease dies: a lock's (token and
    /// reentrant schemes), a leadership's, or permits'. `None` for the rest,
    /// left to their TTL: several locks, a read-write or fair lock, a legacy
    /// timestamp (its value changes with every renewal), a minimum hold.
    pub(crate) fn ticket(&self) -> Option<Ticket> {
        match self {
            Held::Lock(g) => g.ticket(),
            Held::Leader(l) => l.ticket(),
            Held::Permit(p) => p.ticket(),
            Held::Permits(p) => p.ticket(),
            _ => None,
        }
    }

    /// Lets go of a lock or permits without releasing them, for `acquire`:
    /// their ticket. `None` for what `acquire` never takes.
    pub(crate) fn into_ticket(self) -> Option<Result<Ticket>> {
        match self {
            Held::Lock(g) => Some(g.into_ticket()),
            Held::Permit(p) => Some(p.into_ticket()),
            Held::Permits(p) => Some(p.into_ticket()),
            _ => None,
        }
    }

    pub(crate) fn lost(&self) -> &Receiver<LeaseLost> {
        match self {
            Held::Lock(g) => g.lost(),
            Held::All(g) => g.lost(),
            Held::Any(g) => g.lost(),
            Held::Permit(p) => p.lost(),
            Held::Permits(p) => p.lost(),
            Held::Read(g) => g.lost(),
            Held::Write(g) => g.lost(),
            Held::Leader(l) => l.lost(),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        match self {
            Held::Lock(g) => g.is_held(),
            Held::All(g) => g.is_held(),
            Held::Any(g) => g.is_held(),
            Held::Permit(p) => p.is_held(),
            Held::Permits(p) => p.is_held(),
            Held::Read(g) => g.is_held(),
            Held::Write(g) => g.is_held(),
            Held::Leader(l) => l.is_held(),
        }
    }

    pub(crate) fn unlock(self) -> Result<Release> {
        match self {
            Held::Lock(g) => g.unlock(),
            // Every name is released; the first that was not held, else the first
            // error, speaks for the set.
            Held::All(g) => {
                let mut first_err = None;
                for r in g.unlock() {
                    match r {
                        Ok(released) if !released.was_held() => return Ok(released),
                        Ok(_) => {}
                        Err(e) => {
                            first_err.get_or_insert(e);
                        }
                    }
                }
                first_err.map_or(Ok(Release::Released), Err)
            }
            Held::Any(g) => g.unlock(),
            Held::Permit(p) => p.unlock(),
            Held::Permits(p) => p.unlock(),
            Held::Read(g) => g.unlock(),
            Held::Write(g) => g.unlock(),
            Held::Leader(l) => l.resign(),
        }
    }
}
