//! What a node's connections may use of the server's conditional commands
//! (`DELIFEQ`, `SET … IFEQ`: Valkey 9.0 and later), which the token lock then
//! runs instead of scripts (see `Conn::conditional`).

use std::collections::HashMap;
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

/// A `HELLO` reply's fields as text (a RESP3 map or a RESP2 flat array; fields
/// whose value is no string or number, such as `modules`, left out).
pub(crate) fn hello_fields(reply: Value) -> HashMap<String, String> {
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut it = items.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        _ => Vec::new(),
    };
    let text = |v: Value| match v {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    pairs
        .into_iter()
        .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
        .collect()
}

/// Whether a `HELLO` reply names a server with `DELIFEQ` and `SET … IFEQ`:
/// Valkey 9.0 or later.
pub(crate) fn offers_delifeq(reply: Value) -> bool {
    let fields = hello_fields(reply);
    let major = fields
        .get("version")
        .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
        .unwrap_or(0);
    fields.get("server").map(String::as_str) == Some("valkey") && major >= 9
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
