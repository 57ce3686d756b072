//! `redlease group G`: a partition group's members (host, pid,
//! program, time left on their record), each partition's owner, fence, client
//! tag and TTL, and whether the group is balanced, from the library's
//! `PartitionGroup::status`.

use std::fmt::Write;

use redlease::GroupStatus;
use serde_json::{Value, json};

use crate::args::GroupArgs;
use crate::exit::{Failure, NOT_ACQUIRED};

/// Prints the group: 0 once read, [`NOT_ACQUIRED`] (75) when it has no live
/// member and no `--partitions` says its size.
pub(crate) fn group(args: &GroupArgs) -> Result<u8, Failure> {
    let (client, server) = args.server.client(|b| b)?;
    let found = match args.partitions {
        Some(m) => client.partitions(&args.name, m).map(Some),
        None => client.find_partitions(&args.name),
    };
    let Some(handle) = found.map_err(|e| Failure::from_lib(&e, &server))? else {
        if args.json {
            println!(
                "{}",
                json!({"group": args.name, "balanced": false, "members": [], "partitions": []})
            );
        } else {
            println!(
                "group {}: no live members (--partitions M shows its partitions)",
                args.name
            );
        }
        return Ok(NOT_ACQUIRED);
    };
    let status = handle
        .status()
        .map_err(|e| Failure::from_lib(&e, &server))?;
    if args.json {
        println!("{}", to_json(&args.name, &status));
    } else {
        print!("{}", text(&args.name, &status));
    }
    Ok(0)
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn text(name: &str, s: &GroupStatus) -> String {
    let mut out = format!(
        "group {name}: {} members, {} partitions, {}\n",
        s.members.len(),
        s.partitions.len(),
        if s.is_balanced() {
            "balanced"
        } else {
            "not balanced"
        }
    );
    for m in &s.members {
        let _ = writeln!(
            out,
            "  member {}: pid {} on {} ({}), alive, {} ms left, {} partitions",
            m.id,
            m.pid,
            m.host,
            m.program,
            ms(m.ttl),
            m.partitions.len()
        );
    }
    for p in &s.partitions {
        let Some(t) = p.ttl else {
            let _ = writeln!(out, "  partition {}: free", p.partition);
            continue;
        };
        let fence = p.fence.map_or_else(
            || "fence not yet recorded".to_owned(),
            |f| format!("fence {f}"),
        );
        let _ = match (&p.owner, p.client) {
            (Some(o), _) => writeln!(
                out,
                "  partition {}: {o}, {fence}, {} ms left",
                p.partition,
                ms(t)
            ),
            (None, Some(c)) => writeln!(
                out,
                "  partition {}: held by client {c}, no live member, {} ms left",
                p.partition,
                ms(t)
            ),
            (None, None) => writeln!(
                out,
                "  partition {}: held by no redlease client, {} ms left",
                p.partition,
                ms(t)
            ),
        };
    }
    out
}

/// `{"group", "balanced", "members": [{id, host, pid, program, alive, ttl_ms,
/// partitions}], "partitions": [{partition, owner, fence, client, ttl_ms}]}`:
/// `owner` the live member whose client holds the partition's lock, `client`
/// that client's tag (both `null` when free).
fn to_json(name: &str, s: &GroupStatus) -> Value {
    let members: Vec<Value> = s
        .members
        .iter()
        .map(|m| {
            json!({
                "id": m.id, "host": m.host, "pid": m.pid, "program": m.program,
                "alive": true, "ttl_ms": ms(m.ttl), "partitions": m.partitions,
            })
        })
        .collect();
    let partitions: Vec<Value> = s
        .partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.partition, "owner": p.owner, "fence": p.fence,
                "client": p.client.map(|c| c.to_string()), "ttl_ms": p.ttl.map(ms),
            })
        })
        .collect();
    json!({"group": name, "balanced": s.is_balanced(), "members": members, "partitions": partitions})
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redlease::{ClientTag, MemberInfo, PartitionInfo};

    use super::*;

    #[test]
    fn a_partition_shows_its_owner_without_a_fence_or_its_client_without_a_member() {
        let tag = ClientTag::of_token("rl2:0123456789abcdef:1").unwrap();
        let partition = |p, owner: Option<&str>, fence| PartitionInfo {
            partition: p,
            owner: owner.map(Into::into),
            fence,
            client: Some(tag),
            ttl: Some(Duration::from_millis(1968)),
        };
        let status = GroupStatus {
            members: vec![MemberInfo {
                id: "a".into(),
                host: "h".into(),
                pid: 7,
                program: "w".into(),
                ttl: Duration::from_secs(2),
                partitions: vec![0, 1],
            }],
            partitions: vec![
                partition(0, Some("a"), Some(5)),
                partition(1, Some("a"), None),
                partition(2, None, None),
            ],
        };
        let text = text("g", &status);
        assert!(
            text.contains("partition 0: a, fence 5, 1968 ms left"),
            "{text}"
        );
        assert!(
            text.contains("partition 1: a, fence not yet recorded"),
            "{text}"
        );
        assert!(
            text.contains("partition 2: held by client 0123456789abcdef, no live member"),
            "{text}"
        );
        let json = to_json("g", &status);
        assert_eq!(json["partitions"][1]["owner"], "a");
        assert!(json["partitions"][1]["fence"].is_null());
        assert_eq!(json["partitions"][2]["client"], "0123456789abcdef");
        assert_eq!(json["balanced"], false);
    }
}
