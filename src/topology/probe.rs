//! What the Redis user may do, found out by `build()` before any lock is taken.
//!
//! A Redis ACL can allow taking a lock (`SET`) but not releasing it (`EVALSHA`),
//! which would leave every lock to its TTL. [`probe`] runs one lock cycle of the
//! client's scheme on a key of its own under the prefix — the release script on
//! the still absent key first, so that a user who cannot release never writes —
//! and turns an ACL refusal into [`Error::Permission`]. It then tries `SUBSCRIBE`
//! on the channels the waiter thread uses: a user without channel permissions
//! (Redis 7's default, `resetchannels`) gets waits that poll instead.

use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use crate::error::{Error, Result};
use crate::net::node::Node;
use crate::scheme::{Acquire, Announce, Backend, Keys, Request, Waiting, extend_on};

/// The TTL of the probe's own lock: far longer than the probe, and all that a
/// probe which could not delete it leaves behind.
const PROBE_TTL: Duration = Duration::from_secs(2);

/// What the user was found allowed to do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Access {
    /// Whether it may subscribe to the release and wake-up channels.
    pub(crate) subscribe: bool,
}

/// One step of the probe: the command it sends, and its script (if any) with the
/// commands that script runs, for the error when Redis does not name them.
struct Step {
    command: &'static str,
    script: &'static str,
}

const LOAD: Step = step("script|load", "");
const CLOCK: Step = step("time", "");
const ACQUIRE: Step = step("set", "acquire script (setnx, get, set, pexpire)");
const EXTEND: Step = step("evalsha", "extend script (get, set, pexpire)");
const RELEASE: Step = step("evalsha", "release script (get, del)");

const fn step(command: &'static str, script: &'static str) -> Step {
    Step { command, script }
}

/// Checks that the node's user may take, extend and release locks under `prefix`
/// with `backend`'s commands, and, when `kick` (the waiter thread's own channel)
/// is given, whether it may subscribe to it and to the release channels. In a
/// Redis Cluster, `fits` says which lock keys the node serves.
///
/// # Errors
/// [`Error::Permission`] for a command or key the ACL refuses, [`Error::Redis`]
/// when Redis fails otherwise.
pub(crate) fn probe(
    node: &Node,
    backend: &dyn Backend,
    prefix: &str,
    kick: Option<&str>,
    fits: Option<&dyn Fn(&str) -> bool>,
) -> Result<Access> {
    let base = format!("redlease:probe:{}", uuid::Uuid::new_v4());
    // In a cluster, a name whose lock key the node serves, of the same shape as a
    // user's (no hash tag), so that its channel is checked as theirs would be.
    let name = fits
        .and_then(|fits| {
            (0..100_000)
                .map(|n| format!("{base}:{n}"))
                .find(|name| fits(&format!("{prefix}{name}")))
        })
        .unwrap_or(base);
    let keys = Keys::new(prefix, &name, backend)?;
    let mut conn = node.get()?;
    // Loaded again whenever the server lost them (restart, `SCRIPT FLUSH`). A
    // server with conditional commands runs the token lock without them: none is
    // loaded until a call that needs one (a fence, a hand-off) loads it.
    if !(backend.conditional() && conn.conditional()) {
        for script in backend.scripts() {
            check(conn.run(|c| script.load(c)), &LOAD)?;
        }
    }
    let release = |conn: &mut _, value: &str, maybe: &[String]| {
        backend.release(
            conn,
            &keys.lock,
            Announce::always(&keys.channel),
            value,
            maybe,
        )
    };
    let _gone = check(release(&mut conn, "", &[]), &RELEASE)?;
    let value = check(backend.new_value(&mut conn, PROBE_TTL), &CLOCK)?;
    let req = Request {
        ttl: PROBE_TTL,
        fence: false,
        wait: Waiting::No,
        return_by: None,
        replicas: None,
        began: Instant::now(),
    };
    let acquired = check(backend.acquire(&mut conn, &keys, &value, req), &ACQUIRE)?;
    if let Acquire::Acquired { .. } = acquired {
        let (cmd, extended) = backend.extend_cmd(&keys.lock, &value, &[], PROBE_TTL);
        let extend = extend_on(
            backend,
            &mut conn,
            (&keys.lock, &value, &[]),
            PROBE_TTL,
            &cmd,
        );
        // Whatever the extend did, the release deletes either value.
        let released = if extended == value {
            release(&mut conn, &value, &[])
        } else {
            release(&mut conn, &extended, &[value])
        };
        check(extend, &EXTEND)?;
        let _released = check(released, &RELEASE)?;
    }
    let subscribe = match kick {
        Some(kick) => may_subscribe(node, &[kick, &keys.channel])?,
        None => false,
    };
    Ok(Access { subscribe })
}

/// Subscribes to `channels` on a connection of its own, dropped afterwards;
/// `false` if the ACL refuses. Sent as plain commands: `redis::PubSub` takes a
/// refusal for a confirmation.
fn may_subscribe(node: &Node, channels: &[&str]) -> Result<bool> {
    let mut con = node.connect_raw()?;
    for channel in channels {
        let reply = redis::cmd("SUBSCRIBE")
            .arg(*channel)
            .query::<Value>(&mut con);
        let refused = match reply {
            Ok(Value::ServerError(e)) => RedisError::from(e),
            Ok(_) => continue,
            Err(e) => e,
        };
        if refusal(&refused).is_none() {
            return Err(refused.into());
        }
        log::debug!("subscribe to `{channel}` refused: {refused}");
        return Ok(false);
    }
    Ok(true)
}

/// Passes a success on, and turns an ACL refusal into [`Error::Permission`].
fn check<T>(result: RedisResult<T>, step: &Step) -> Result<T> {
    result.map_err(|e| {
        let Some(refusal) = refusal(&e) else {
            return e.into();
        };
        let command = match refusal.named {
            Some(name) => name,
            None if refusal.in_script => format!("a command of the {}", step.script),
            None => step.command.to_owned(),
        };
        Error::Permission {
            command,
            on_keys: refusal.on_keys,
            source: Box::new(e),
        }
    })
}

/// An ACL refusal, as Redis words it.
#[derive(Debug, PartialEq, Eq)]
struct Refusal {
    /// The command, when Redis names it.
    named: Option<String>,
    /// Refused inside a script (Redis names no command then).
    in_script: bool,
    /// The keys were refused, not the command.
    on_keys: bool,
}

/// Reads an ACL refusal: `NOPERM …` for a command sent, and for one a script ran
/// `ERR The user executing the script can't …` (Redis 7.0) or `ERR ACL failure in
/// script: …` (Redis 7.2+, Valkey). `None` for any other error.
fn refusal(e: &RedisError) -> Option<Refusal> {
    let detail = e.detail().unwrap_or_default();
    let in_script = ["The user executing the script", "ACL failure in script"]
        .iter()
        .any(|start| detail.starts_with(start));
    if e.code() != Some("NOPERM") && !in_script {
        return None;
    }
    // "this user has no permissions to run the 'evalsha' command" (7.0), "User u has
    // no permissions to run the 'evalsha' command" (7.2+).
    let named = detail
        .split_once("to run the '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command.to_owned());
    // "one of the keys used as arguments", "at least one of the keys mentioned"
    // (7.0), "No permissions to access a key" (7.2+).
    let on_keys = named.is_none() && (detail.contains(" keys ") || detail.contains("a key"));
    Some(Refusal {
        // Inside a script, the refusal names the script's step on every server.
        named: named.filter(|_| !in_script),
        in_script,
        on_keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error Redis replies with `reply` (an `-ERR …` or `-NOPERM …` line).
    fn reply(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(Value::ServerError(e)) => e.into(),
            other => panic!("{other:?}"),
        }
    }

    fn permission(e: RedisError, step: &Step) -> (String, bool) {
        match check::<()>(Err(e), step) {
            Err(Error::Permission {
                command, on_keys, ..
            }) => (command, on_keys),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_refused_command_is_named_as_redis_names_it() {
        let e = reply("NOPERM this user has no permissions to run the 'evalsha' command");
        assert_eq!(permission(e, &RELEASE), ("evalsha".to_owned(), false));
    }

    #[test]
    fn refused_keys_name_the_command_sent() {
        let e = reply(
            "NOPERM this user has no permissions to access one of the keys used as arguments",
        );
        assert_eq!(permission(e, &ACQUIRE), ("set".to_owned(), true));
    }

    #[test]
    fn a_command_refused_inside_a_script_names_the_script() {
        let e = reply(
            "ERR The user executing the script can't run this command or subcommand \
             script: af82, on @user_script:1.",
        );
        let (command, on_keys) = permission(e, &RELEASE);
        assert_eq!(command, "a command of the release script (get, del)");
        assert!(!on_keys);
    }

    #[test]
    fn redis_7_2_and_valkey_words_read_as_redis_7_0_words() {
        let e = reply("NOPERM User locker has no permissions to run the 'evalsha' command");
        assert_eq!(permission(e, &RELEASE), ("evalsha".to_owned(), false));
        let e = reply("NOPERM No permissions to access a key");
        assert_eq!(permission(e, &ACQUIRE), ("set".to_owned(), true));
        let e = reply(
            "ERR ACL failure in script: User locker has no permissions to run the 'del' \
             command script: on @user_script:5.",
        );
        let release = "a command of the release script (get, del)".to_owned();
        assert_eq!(permission(e, &RELEASE), (release.clone(), false));
        let e = reply(
            "ERR ACL failure in script: No permissions to access a key script: on @user_script:1.",
        );
        assert_eq!(permission(e, &RELEASE), (release, true));
    }

    #[test]
    fn keys_refused_inside_a_redis_7_0_script_are_keys() {
        let e = reply(
            "ERR The user executing the script can't access at least one of the keys \
             mentioned in the command arguments script: 5b11, on @user_script:1.",
        );
        assert!(permission(e, &RELEASE).1);
    }

    #[test]
    fn a_refused_command_called_keys_is_not_a_refusal_of_keys() {
        let e = reply("NOPERM this user has no permissions to run the 'keys' command");
        assert_eq!(permission(e, &RELEASE), ("keys".to_owned(), false));
    }

    #[test]
    fn other_errors_are_not_refusals() {
        let e = reply("ERR wrong number of arguments for 'set' command");
        assert!(refusal(&e).is_none());
        assert!(matches!(
            check::<()>(Err(e), &ACQUIRE),
            Err(Error::Redis(_))
        ));
    }
}
