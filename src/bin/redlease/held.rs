//! What `run` holds while the command runs: a lock, or one permit of a
//! semaphore (`--permits N`). Both are leases renewed by the library.

use crossbeam_channel::Receiver;
use redlease::{
    Error, LeaseLost, LockClient, LockGuard, LockOptions, PermitGuard, Release, Result,
};

use crate::exit::Failure;

/// A held lock or permit.
pub(crate) enum Held {
    Lock(LockGuard),
    Permit(PermitGuard),
}

impl Held {
    /// One permit of the semaphore `name` (created with `permits` in all when
    /// absent), as `opts` says. `Ok(None)` when none came free in time; a
    /// semaphore with another total is bad input, whose message says both numbers.
    pub(crate) fn permit(
        client: &LockClient,
        name: &str,
        permits: u32,
        opts: &LockOptions,
    ) -> std::result::Result<Result<Option<Held>>, Failure> {
        let sem = match client.semaphore(name) {
            Ok(sem) => sem,
            Err(e) => return Ok(Err(e)),
        };
        match sem.ensure_permits(permits) {
            Ok(_) => {}
            Err(Error::PermitsMismatch {
                name,
                existing,
                requested,
            }) => {
                return Err(Failure::usage(format!(
                    "semaphore `{name}` has {existing} permits, not the {requested} of \
                     --permits {requested}; use --permits {existing}, or change it on purpose"
                )));
            }
            Err(e) => return Ok(Err(e)),
        }
        Ok(sem.acquire_with(opts).map(|p| p.map(Held::Permit)))
    }

    /// What is held, for messages: ``lock on `k` `` or ``permit of `k` ``.
    pub(crate) fn what(&self) -> String {
        match self {
            Held::Lock(g) => format!("lock on `{}`", g.key()),
            Held::Permit(p) => format!("permit of `{}`", p.semaphore()),
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
            Held::Permit(p) => vec![
                ("REDLEASE_KEY", p.semaphore().to_owned()),
                ("REDLEASE_PERMIT_ID", p.permit_id().to_owned()),
            ],
        }
    }

    pub(crate) fn lost(&self) -> &Receiver<LeaseLost> {
        match self {
            Held::Lock(g) => g.lost(),
            Held::Permit(p) => p.lost(),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        match self {
            Held::Lock(g) => g.is_held(),
            Held::Permit(p) => p.is_held(),
        }
    }

    pub(crate) fn unlock(self) -> Result<Release> {
        match self {
            Held::Lock(g) => g.unlock(),
            Held::Permit(p) => p.release(),
        }
    }
}
