//! `redlease leader NAME`: who leads the election NAME, its term and the time
//! left on its lease, from the library's `Election::leader`.

use redlease::{Leader, Owner};
use serde_json::{Value, json};

use crate::args::LeaderArgs;
use crate::exit::{Failure, NOT_ACQUIRED};

/// Prints the leader; 0 when there is one, [`NOT_ACQUIRED`] (75) when nobody
/// leads.
pub(crate) fn leader(args: &LeaderArgs) -> Result<u8, Failure> {
    let (client, server) = args.server.client(|b| b)?;
    let leader = client
        .election(&args.name)
        .and_then(|e| e.leader())
        .map_err(|e| Failure::from_lib(&e, &server))?;
    let key = args.server.full_key(&args.name);
    if args.json {
        println!("{}", to_json(&args.name, leader.as_ref()));
    } else {
        match &leader {
            Some(l) => println!("{}", text(&key, l)),
            None => println!("{key}: no leader"),
        }
    }
    Ok(if leader.is_some() { 0 } else { NOT_ACQUIRED })
}

/// One line: the key, term, time left and owner.
fn text(key: &str, l: &Leader) -> String {
    let ms = l.ttl().as_millis();
    let owner = match l.owner() {
        Owner::Alive(s) => format!(
            "pid {} on {} ({}), client {}, alive",
            s.pid(),
            s.host(),
            s.program(),
            s.client_id()
        ),
        Owner::Gone(t) => format!("client tag {}, gone (no session record)", t.as_str()),
        Owner::Unknown(t) => format!("client tag {}, unknown session record", t.as_str()),
        _ => "an owner that names no redlease client".to_owned(),
    };
    format!("{key}: term {}, {ms} ms left, led by {owner}", l.term())
}

/// `{"name", "term", "ttl_ms", "leader"}`; `leader` is the owner's session
/// (its fields null when the record is gone or unreadable), and everything but
/// the name is null when nobody leads.
fn to_json(name: &str, leader: Option<&Leader>) -> Value {
    let Some(l) = leader else {
        return json!({"name": name, "term": null, "ttl_ms": null, "leader": null});
    };
    let owner = match l.owner().session() {
        Some(s) => json!({
            "host": s.host(),
            "pid": s.pid(),
            "program": s.program(),
            "client_id": s.client_id(),
            "alive": true,
        }),
        None => json!({
            "host": null,
            "pid": null,
            "program": null,
            "client_id": null,
            "alive": false,
        }),
    };
    json!({
        "name": name,
        "term": l.term(),
        "ttl_ms": u64::try_from(l.ttl().as_millis()).unwrap_or(u64::MAX),
        "leader": owner,
    })
}
