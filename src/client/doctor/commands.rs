//! What the server offers beside Lua: its conditional commands (`SET … IFEQ`,
//! `DELIFEQ`, `DELEX`), by server and version, and whether redlease's token
//! lock uses them there.

use super::read::Readings;
use super::{Finding, Severity};

/// Whether the server has `DELIFEQ` (Valkey 9.0 and later): redlease's token
/// lock then runs its release, renewal and mark without scripts.
pub(super) fn has_delifeq(r: &Readings) -> bool {
    let (server, version) = r.server();
    server == Some("valkey") && version.map(version_of).unwrap_or_default() >= (9, 0)
}

/// The `conditional-commands` finding: what the server offers, and whether
/// redlease uses it there.
pub(super) fn offered(r: &Readings) -> Vec<Finding> {
    const WHY: &str = "a compare-and-delete without Lua: a lock is released and renewed \
                       where scripting is denied, at a fraction of a script's cost";
    let (server, version) = r.server();
    let v = version.map(version_of).unwrap_or_default();
    let offered = match server {
        Some("valkey") if v >= (9, 0) => "SET ... IFEQ and DELIFEQ",
        Some("valkey") if v >= (8, 1) => "SET ... IFEQ",
        Some("redis") if v >= (8, 4) => "SET ... IFEQ and DELEX",
        _ => return Vec::new(),
    };
    let detail = format!(
        "{} {} offers {offered}",
        server.unwrap_or_default(),
        version.unwrap_or_default()
    );
    let fix = if has_delifeq(r) {
        "nothing to change: redlease's token lock uses them (release, renewal, a waiter's mark)"
    } else {
        "nothing to change: redlease uses them from Valkey 9.0 (DELIFEQ); scripts here"
    };
    vec![Finding::new(
        "conditional-commands",
        Severity::Info,
        detail,
        WHY,
        fix,
    )]
}

/// `major.minor` of a version string.
fn version_of(text: &str) -> (u32, u32) {
    let mut parts = text.split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}
