//! How one node's share of a renewal tick goes on the wire: one pipeline, in which
//! the leases of a scheme with a bulk renewal script (`Backend::bulk_extend`)
//! share one script call per chunk (same scheme, same TTL, at most [`CHUNK`] keys,
//! and on a cluster node keys of one slot), and every other lease has its own
//! command. Redis then runs one script per chunk, not one per lease.
//!
//! A second round trip, only when needed, re-sends one command per lease: for the
//! leases whose command or chunk met `NOSCRIPT` (a restart, `SCRIPT FLUSH`: the
//! scripts are loaded again first), and for a chunk that met any other error (a
//! slot moving: `MOVED`, `ASK`, `TRYAGAIN`), so that each lease gets the answer it
//! would get alone, as before chunks existed. A user whose ACL refuses a bulk
//! script's commands gets one command per lease from then on.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use crate::metrics::{Counters, bump};
use crate::net::connection::Conn;
use crate::net::node::Node;
use crate::scheme::token::cond;
use crate::scheme::{Backend, bulk_extend_cmd, bulk_replies};
use crate::time::ttl_millis;

/// The most keys one bulk script call renews: about a millisecond of Redis's time,
/// so no call holds up other clients long.
pub(crate) const CHUNK: usize = 500;

/// What a node's I/O thread knows of its server: the hashes of the scripts it has
/// loaded there (each before its first use, so renewals do not meet `NOSCRIPT` in
/// the normal case), and whether the bulk scripts were refused (an ACL user
/// without `MGET`, `TIME`, `PEXPIREAT` or `EXISTS`): then it renews one command
/// per lease, as its user may.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    scripts: HashSet<&'static str>,
    no_bulk: bool,
}

/// One lease's renewal as the pipeline carries it. Its own command is built only
/// when it is sent alone (and again after a `NOSCRIPT`: a legacy value depends on
/// the time it is built).
pub(super) struct Item<'a> {
    pub(super) backend: &'a Arc<dyn Backend>,
    pub(super) key: &'a str,
    value: &'a str,
    maybe: &'a [String],
    ttl: Duration,
    cmd: Option<redis::Cmd>,
    /// Whether its own command is a conditional `SET … IFEQ` (no script): a nil
    /// reply is then settled by a second look.
    cond: bool,
    /// The value its own command leaves under the key; `None` while it has none, or
    /// when it went in a bulk call: the value stays as it is.
    pub(super) new_value: Option<String>,
}

impl<'a> Item<'a> {
    pub(super) fn new(
        backend: &'a Arc<dyn Backend>,
        key: &'a str,
        value: &'a str,
        maybe: &'a [String],
        ttl: Duration,
    ) -> Self {
        Self {
            backend,
            key,
            value,
            maybe,
            ttl,
            cmd: None,
            cond: false,
            new_value: None,
        }
    }

    /// Builds the lease's own command: a conditional `SET … IFEQ` where its scheme
    /// and the server (`cond`) have them, else its scheme's script call.
    fn build(&mut self, cond: bool) {
        self.cond = cond && self.backend.conditional() && self.maybe.is_empty();
        if self.cond {
            self.cmd = Some(cond::extend_cmd(self.key, self.value, ttl_millis(self.ttl)));
            self.new_value = Some(self.value.to_owned());
            return;
        }
        let (cmd, new_value) = self
            .backend
            .extend_cmd(self.key, self.value, self.maybe, self.ttl);
        self.cmd = Some(cmd);
        self.new_value = Some(new_value);
    }
}

/// One command of a pipeline: a lease's own, or a bulk call for a chunk of leases.
enum Unit {
    One(usize),
    Chunk(&'static LazyLock<Script>, Vec<usize>),
}

/// Whether leases on `node` may share a script call only within a slot (a
/// cluster node): the slot of a key, else 0 for all.
#[cfg_attr(not(feature = "cluster"), expect(unused_variables))]
pub(super) fn slot_rule(node: &Node) -> fn(&str) -> u16 {
    #[cfg(feature = "cluster")]
    if matches!(node.address(), crate::net::connection::Target::Shard(..)) {
        return |key| crate::net::slots::slot(key.as_bytes());
    }
    |_| 0
}

/// Sends the renewals of `items` (one pipeline, a second after a `NOSCRIPT` or a
/// chunk's error); one reply per lease, `None` where no reply came (the failure is
/// logged once).
pub(super) fn exchange(
    conn: &mut Conn,
    counters: &Counters,
    items: &mut [Item<'_>],
    loaded: &mut Loaded,
    slot: fn(&str) -> u16,
) -> Vec<Option<Value>> {
    let mut replies = vec![None; items.len()];
    let conditional = conn.conditional();
    let mut units = plan(items, slot, loaded.no_bulk, conditional);
    let mut load = load_scripts(conn, counters, scripted(items, &units), loaded, conditional);
    if conditional && !loaded.no_bulk && load.as_ref().is_err_and(|e| e.code() == Some("NOPERM")) {
        // A user without scripting, on a server with conditional commands: every
        // token lease alone, with no script.
        log::info!("renewing one conditional command per lease: scripts are refused");
        loaded.no_bulk = true;
        units = plan(items, slot, true, conditional);
        load = load_scripts(conn, counters, scripted(items, &units), loaded, conditional);
    }
    let first = load.and_then(|()| round_trip(conn, counters, items, &units));
    let answers = match first {
        Ok(answers) => answers,
        Err(e) => {
            log::warn!("renewal of {} leases failed: {e}", items.len());
            return replies;
        }
    };
    let mut again = Vec::new();
    let mut settle = Vec::new();
    let mut noscript = false;
    for (unit, reply) in units.into_iter().zip(answers) {
        match unit {
            Unit::One(i) if is_noscript(&reply) => {
                noscript = true;
                again.push(i);
            }
            Unit::One(i) if items[i].cond => match cond::extend_reply(&reply) {
                Some(n) => replies[i] = Some(Value::Int(n)),
                None => settle.push(i),
            },
            Unit::One(i) => replies[i] = Some(reply),
            Unit::Chunk(_, chunk) => match bulk_replies(reply, chunk.len()) {
                Ok(each) => {
                    for (i, reply) in chunk.into_iter().zip(each) {
                        replies[i] = Some(reply);
                    }
                }
                Err(reply) => {
                    noscript |= is_noscript(&reply);
                    if refused(&reply) && !loaded.no_bulk {
                        log::warn!("renewing one command per lease from now on: {reply:?}");
                        loaded.no_bulk = true;
                    }
                    log::debug!("a renewal chunk of {} leases: {reply:?}", chunk.len());
                    again.extend(chunk);
                }
            },
        }
    }
    for i in settle {
        // Not renewed as it was written: a waiter's mark, someone else's, gone.
        let item = &items[i];
        let settled = cond::settle_extend(conn, item.key, item.value, ttl_millis(item.ttl));
        bump(&counters.renewal_round_trips, 1);
        match settled {
            Ok(n) => replies[i] = Some(Value::Int(n)),
            Err(e) => log::warn!("renewal of `{}` failed: {e}", item.key),
        }
    }
    if again.is_empty() {
        return replies;
    }
    if noscript {
        loaded.scripts.clear();
    }
    let units: Vec<Unit> = again
        .iter()
        .map(|&i| {
            // The script call again: a chunk that failed, or a `NOSCRIPT`.
            items[i].build(false);
            Unit::One(i)
        })
        .collect();
    let backends = again.iter().map(|&i| items[i].backend);
    let retried = load_scripts(conn, counters, backends, loaded, false)
        .and_then(|()| round_trip(conn, counters, items, &units));
    match retried {
        Ok(retried) => {
            for (i, reply) in again.into_iter().zip(retried) {
                replies[i] = Some(reply);
            }
        }
        Err(e) => log::warn!("renewal of {} leases failed on re-send: {e}", again.len()),
    }
    replies
}

fn is_noscript(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// Whether a script's error says its user may not run one of its commands: Redis
/// 7.0 says "can't run this command", later ones and Valkey "ACL failure in
/// script" (`NOPERM … no permissions` when sent alone).
fn refused(reply: &Value) -> bool {
    let Value::ServerError(e) = reply else {
        return false;
    };
    let says = |d: &str| {
        [
            "NOPERM",
            "no permissions",
            "can't run this command",
            "ACL failure in script",
        ]
        .iter()
        .any(|s| d.contains(s))
    };
    e.code() == "NOPERM" || e.details().is_some_and(says)
}

/// The pipeline's commands: the leases of each (scheme, TTL, slot) with a bulk
/// script in chunks of at most [`CHUNK`], a chunk of one and every other lease
/// alone (its command built here); every lease alone when `no_bulk`.
fn plan(items: &mut [Item<'_>], slot: fn(&str) -> u16, no_bulk: bool, cond: bool) -> Vec<Unit> {
    type Group = (&'static LazyLock<Script>, Vec<usize>);
    let mut groups: HashMap<(*const (), u64, u16), Group> = HashMap::new();
    let mut units = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(script) = item.backend.bulk_extend().filter(|_| !no_bulk) {
            let scheme = Arc::as_ptr(item.backend).cast::<()>();
            let group = (scheme, ttl_millis(item.ttl), slot(item.key));
            groups
                .entry(group)
                .or_insert((script, Vec::new()))
                .1
                .push(i);
        } else {
            units.push(Unit::One(i));
        }
    }
    for (script, group) in groups.into_values() {
        for chunk in group.chunks(CHUNK) {
            if let [i] = *chunk {
                units.push(Unit::One(i));
            } else {
                units.push(Unit::Chunk(script, chunk.to_vec()));
            }
        }
    }
    for unit in &units {
        if let Unit::One(i) = *unit {
            items[i].build(cond);
        }
    }
    units
}

/// The schemes of `units` that call a script: those of bulk calls, and of leases
/// alone whose command is not conditional.
fn scripted<'i, 'b>(
    items: &'i [Item<'b>],
    units: &'i [Unit],
) -> impl Iterator<Item = &'b Arc<dyn Backend>> + 'i {
    units.iter().filter_map(|unit| match unit {
        Unit::One(i) if items[*i].cond => None,
        Unit::One(i) => Some(items[*i].backend),
        Unit::Chunk(_, chunk) => Some(items[chunk[0]].backend),
    })
}

/// Loads the scripts of each of `backends`' schemes that are not in `loaded` yet:
/// one round trip per script, once per server.
fn load_scripts<'b>(
    conn: &mut Conn,
    counters: &Counters,
    backends: impl Iterator<Item = &'b Arc<dyn Backend>>,
    loaded: &mut Loaded,
    conditional: bool,
) -> RedisResult<()> {
    let mut last: Option<&Arc<dyn Backend>> = None;
    for backend in backends {
        if last.is_some_and(|b| Arc::ptr_eq(b, backend)) {
            continue;
        }
        last = Some(backend);
        // With conditional commands a scheme that has them calls its bulk
        // script only: the others are loaded when first needed.
        let bulk = backend
            .bulk_extend()
            .filter(|_| conditional && backend.conditional());
        let scripts: &[&LazyLock<Script>] = match &bulk {
            Some(bulk) => std::slice::from_ref(bulk),
            None => backend.scripts(),
        };
        for script in scripts {
            if !loaded.scripts.contains(script.get_hash()) {
                bump(&counters.renewal_round_trips, 1);
                conn.run(|c| script.load(c))?;
                loaded.scripts.insert(script.get_hash());
            }
        }
    }
    Ok(())
}

/// One round trip carrying `units`: one reply per unit. A connection whose
/// pipeline failed is not reused.
fn round_trip(
    conn: &mut Conn,
    counters: &Counters,
    items: &mut [Item<'_>],
    units: &[Unit],
) -> RedisResult<Vec<Value>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut leases = 0;
    for unit in units {
        match unit {
            Unit::One(i) => {
                leases += 1;
                pipe.add_command(items[*i].cmd.take().unwrap_or_default());
            }
            Unit::Chunk(script, chunk) => {
                leases += chunk.len();
                let ttl = items[chunk[0]].ttl;
                let each = chunk.iter().map(|&i| (items[i].key, items[i].value));
                pipe.add_command(bulk_extend_cmd(script, ttl, each));
            }
        }
    }
    bump(&counters.renewals, leases as u64);
    bump(&counters.renewal_round_trips, 1);
    // Replies read one at a time, stopping at the first that fails: `redis` would
    // wait out every reply of a pipeline after one had timed out.
    let replies = conn.pipeline(&pipe, units.len());
    // With errors kept as replies, any error left means the reply stream is unknown.
    conn.broken |= replies.is_err();
    for reply in replies.iter().flatten() {
        conn.note_reply(reply);
    }
    replies
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{LegacyBackend, LegacyTimestamp, TokenBackend};

    fn sizes(units: &[Unit]) -> Vec<usize> {
        let mut sizes: Vec<usize> = units
            .iter()
            .map(|u| match u {
                Unit::One(_) => 1,
                Unit::Chunk(_, c) => c.len(),
            })
            .collect();
        sizes.sort_unstable();
        sizes
    }

    #[test]
    fn leases_share_a_call_by_scheme_ttl_and_slot_in_bounded_chunks() {
        let token: Arc<dyn Backend> =
            Arc::new(TokenBackend::new(crate::owner::ClientId::new().tag()));
        let legacy: Arc<dyn Backend> = Arc::new(LegacyBackend::new(LegacyTimestamp::new()));
        let keys: Vec<String> = (0..1203).map(|i| format!("k{i}")).collect();
        let (short, long) = (Duration::from_secs(3), Duration::from_secs(9));
        let mut items: Vec<Item<'_>> = keys[..1201]
            .iter()
            .map(|k| Item::new(&token, k, "v", &[], short))
            .collect();
        items.push(Item::new(&token, &keys[1201], "v", &[], long));
        items.push(Item::new(&legacy, &keys[1202], "1", &[], short));
        let units = plan(&mut items, |_| 0, false, false);
        assert_eq!(sizes(&units), [1, 1, 201, 500, 500]);
        // Alone: a lease with a TTL of its own, and a legacy one (built here).
        assert!(items[1201].cmd.is_some() && items[1202].cmd.is_some());
        assert!(items[..1201].iter().all(|i| i.cmd.is_none()));
        // On a cluster node, one call per slot; refused bulk scripts: all alone.
        let units = plan(&mut items[..4], |k| u16::from(k == "k0"), false, false);
        assert_eq!(sizes(&units), [1, 3]);
        assert_eq!(plan(&mut items[..4], |_| 0, true, false).len(), 4);
    }
}
