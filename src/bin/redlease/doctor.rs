//! `redlease doctor [--url …] [--json]`: is this Redis configured so that locks
//! hold? The library's `Report::read` (or `Report::read_cluster`) on the servers
//! `--url` names and the replicas they list, as text (one line a finding, grouped
//! by server) or one JSON object. It reads, never writes, and builds no client: a
//! user the client would refuse (no scripting) is still checked.

use std::fmt::Write as _;

use redlease::{Checkup, Report, ServerReport, Severity};
use serde_json::{Value, json};

use crate::args::DoctorArgs;
use crate::exit::{Failure, UNSAFE};
use crate::server::{Servers, server_name};

/// `doctor --help`'s description.
pub(crate) const DOCTOR_ABOUT: &str = "\
Check that the servers are configured so that locks hold; exit 0, or 78 when a
finding is critical.

Reads, never writes: HELLO, INFO, CONFIG GET where the user may, a scripting probe
(EVAL \"return 1\" 0), a pub/sub probe, TIME. Each --url is a server (several: the
masters of a Redlock quorum; with --cluster, seeds of a cluster, whose every master
is checked), followed by the replicas it lists. A finding is critical (locks can be
lost or wrongly granted as configured), warning (a risk under a named fault), info,
or unknown (the user may not read it: never taken as fine).";

/// Runs `doctor`: 0 when nothing is critical, [`UNSAFE`] when something is.
pub(crate) fn doctor(args: &DoctorArgs) -> Result<u8, Failure> {
    let mut checkup = Checkup::new().key_prefix(args.server.prefix.as_str());
    if let Some(ttl) = args.ttl {
        checkup = checkup.ttl(ttl);
    }
    let (read, first) = match args.server.servers() {
        Servers::One(url) => (Report::read([url.as_str()], &checkup), url),
        Servers::Quorum(urls) => (
            Report::read(urls.iter().map(String::as_str), &checkup),
            urls[0].clone(),
        ),
        Servers::Cluster(urls) => {
            let first = urls.first().cloned().unwrap_or_default();
            (
                Report::read_cluster(urls.iter().map(String::as_str), &checkup),
                first,
            )
        }
    };
    let report = read.map_err(|e| {
        let mut failure = Failure::from_lib(&e, &server_name(&first));
        // A parse error of a port that is not Redis spans lines: keep one.
        failure.message = failure
            .message
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        failure
    })?;
    if args.json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", to_text(&report));
    }
    Ok(if report.has_critical() { UNSAFE } else { 0 })
}

/// One heading per server, one line per finding, and a count.
fn to_text(report: &Report) -> String {
    let mut out = String::new();
    for server in report.servers() {
        let _ = writeln!(out, "{}{}", server.server(), about(server));
        if server.findings().is_empty() {
            out.push_str("  ok        every check passed\n");
        }
        for f in server.findings() {
            let _ = writeln!(
                out,
                "  {:<9} {}: {}; fix: {}",
                f.severity().as_str(),
                f.check(),
                f.detail(),
                f.fix()
            );
        }
    }
    let count = |s| report.findings().filter(|f| f.severity() == s).count();
    let _ = writeln!(
        out,
        "{} critical, {} warning, {} unknown on {} server(s)",
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Unknown),
        report.servers().len()
    );
    out
}

/// ` (redis 7.0.15, master)`: what the server said of itself.
fn about(server: &ServerReport) -> String {
    let parts: Vec<&str> = [server.software(), server.version()]
        .into_iter()
        .flatten()
        .collect();
    let mut said = parts.join(" ");
    if let Some(role) = server.role() {
        if !said.is_empty() {
            said.push_str(", ");
        }
        said.push_str(role);
    }
    if said.is_empty() {
        String::new()
    } else {
        format!(" ({said})")
    }
}

/// `{"servers": [{"url", "version", "role", "findings": [{"check", "severity",
/// "detail", "why", "fix"}]}]}`.
fn to_json(report: &Report) -> Value {
    let servers: Vec<Value> = report
        .servers()
        .iter()
        .map(|s| {
            let findings: Vec<Value> = s
                .findings()
                .iter()
                .map(|f| {
                    json!({
                        "check": f.check(),
                        "severity": f.severity().as_str(),
                        "detail": f.detail(),
                        "why": f.why(),
                        "fix": f.fix(),
                    })
                })
                .collect();
            json!({
                "url": s.server(),
                "software": s.software(),
                "version": s.version(),
                "role": s.role(),
                "findings": findings,
            })
        })
        .collect();
    json!({ "servers": servers })
}

/// Prints on stderr, once, the critical findings `build()` made of the client's
/// servers (no second read of them): what `run` shows unless `--no-doctor`.
pub(crate) fn print_build_findings(client: &redlease::LockClient) {
    for f in client.build_findings() {
        eprintln!(
            "redlease: warning: {} {}: {}; fix: {} (redlease doctor for more, --no-doctor to silence)",
            f.server(),
            f.check(),
            f.detail(),
            f.fix()
        );
    }
}
