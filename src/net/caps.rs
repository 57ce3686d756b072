//! What a node's connections may use of the server's conditional commands
//! (`DELIFEQ`, `SET … IFEQ`: Valkey 9.0 and later), which the token lock then
//! runs instead of scripts (see `Conn::conditional`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::Value;

/// Whether a node's connections use the server's conditional commands (see
/// `Conn::conditional`); shared by them all.
#[derive(Debug, Default)]
pub(crate) struct Caps {
    /// Keep to scripts (`LockClientBuilder::conditional_commands(false)`).
    pub(crate) scripts_only: bool,
    /// The user's ACL refused `DELIFEQ`: scripts from then on, so that the
    /// refusal is made (and logged by the server) once per node.
    refused: AtomicBool,
}

impl Caps {
    /// The node's capabilities: scripts only, or what each connection finds.
    pub(crate) fn new(scripts_only: bool) -> Arc<Self> {
        Arc::new(Self {
            scripts_only,
            refused: AtomicBool::new(false),
        })
    }

    /// Whether the user was refused `DELIFEQ` on this node.
    pub(crate) fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// The user was refused `DELIFEQ`: scripts from now on.
    pub(crate) fn refuse(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }
}

/// Whether a `HELLO` reply names a server with `DELIFEQ` and `SET … IFEQ`:
/// Valkey 9.0 or later.
pub(crate) fn offers_delifeq(reply: Value) -> bool {
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut it = items.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        _ => return false,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some(name))
            .and_then(|(_, v)| text(v))
    };
    let major = field("version")
        .and_then(|v| v.split('.').next().and_then(|m| m.parse::<u32>().ok()))
        .unwrap_or(0);
    field("server").as_deref() == Some("valkey") && major >= 9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delifeq_is_offered_by_valkey_9_and_later_only() {
        let hello = |server: &str, version: &str| {
            Value::Array(
                ["server", server, "version", version, "proto", "2"]
                    .iter()
                    .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                    .collect(),
            )
        };
        assert!(offers_delifeq(hello("valkey", "9.1.2")));
        assert!(offers_delifeq(hello("valkey", "10.0.0")));
        assert!(!offers_delifeq(hello("valkey", "8.1.4")));
        assert!(!offers_delifeq(hello("redis", "9.0.0")));
        assert!(!offers_delifeq(Value::Nil));
    }
}
