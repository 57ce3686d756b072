//! The exit-status table: every code `redlease` exits with, for which
//! subcommands, and what it means. Each subcommand's `--help` ends with its
//! rows, the man pages' EXIT STATUS sections are made of them, and
//! `tests/cli_man.rs` checks that guide/cli.md's table has every code.

use std::fmt::Write as _;

/// Which subcommands an exit status is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum For {
    /// Every subcommand.
    Every,
    /// Every subcommand that talks to Redis (those with `--url`).
    Connecting,
    /// These subcommands only.
    Only(&'static [&'static str]),
}

/// One line of the exit-status table: a code, whom it is for, what it means.
#[derive(Debug)]
pub(crate) struct Status {
    /// The code, or a rule for it (`N`, `128+N`).
    pub(crate) code: &'static str,
    /// The subcommands that exit with it.
    pub(crate) only: For,
    /// What it means, for them.
    pub(crate) meaning: &'static str,
}

const fn status(code: &'static str, only: For, meaning: &'static str) -> Status {
    Status {
        code,
        only,
        meaning,
    }
}

/// Every exit status: `--help` shows each subcommand its own rows, the man pages
/// their EXIT STATUS sections, and guide/cli.md has the same table (a test checks
/// that it has every code). A new subcommand adds its rows here; [`For::Every`]
/// and [`For::Connecting`] rows are its already. Rows of one code stay together.
pub(crate) const STATUSES: &[Status] = &[
    status(
        "N",
        For::Only(&["run"]),
        "the command's own exit status, when the lock was held throughout",
    ),
    status(
        "N",
        For::Only(&["elect"]),
        "the command's own exit status, when it led throughout",
    ),
    status(
        "N",
        For::Only(&["latch"]),
        "the command's own exit status when it failed: the participant left without \
         counting down",
    ),
    status(
        "128+N",
        For::Only(&["run", "elect"]),
        "the command was killed by signal N (130: SIGINT, 143: SIGTERM); also redlease's \
         own when signal N (SIGINT, SIGTERM) cancels the wait, or when the command \
         outlives that signal, forwarded, by --kill-grace",
    ),
    status(
        "128+N",
        For::Only(&["latch"]),
        "the command was killed by signal N: the participant left without counting down",
    ),
    status("0", For::Only(&["inspect", "list", "release"]), "done"),
    status(
        "0",
        For::Only(&["acquire"]),
        "acquired: the ticket was printed",
    ),
    status("0", For::Only(&["extend"]), "extended"),
    status("0", For::Only(&["wait"]), "KEY is free"),
    status("0", For::Only(&["leader"]), "someone leads"),
    status("0", For::Only(&["completions"]), "the script was printed"),
    status("0", For::Only(&["group"]), "the group was read"),
    status("0", For::Only(&["doctor"]), "no finding is critical"),
    status(
        "0",
        For::Only(&["latch"]),
        "the command exited 0 and the participant counted down",
    ),
    status(
        "0",
        For::Only(&["latch-wait"]),
        "the latch counted down to zero",
    ),
    status(
        "64",
        For::Every,
        "bad input: an unknown option, a malformed value (a duration, a scheme, a shell)",
    ),
    status("64", For::Only(&["run", "elect", "latch"]), "no command"),
    status(
        "64",
        For::Only(&["latch", "latch-wait"]),
        "--count 0, an empty NAME, a latch of another count; latch: the latch is full \
         or done; latch-wait: no latch NAME without --count",
    ),
    status(
        "64",
        For::Only(&["run"]),
        "--permits N for a semaphore that has another N; a key of another format",
    ),
    status("64", For::Only(&["release"]), "KEY without --force"),
    status(
        "64",
        For::Only(&["extend", "release"]),
        "--ticket that is not a ticket, or a file or stdin that cannot be read",
    ),
    status(
        "64",
        For::Only(&["acquire"]),
        "--liveness (the lease outlives the process); --permits N for a semaphore that \
         has another N, --weight K above N; a key of another format",
    ),
    status(
        "64",
        For::Only(&["inspect", "release"]),
        "more than one server (several --url, or --cluster)",
    ),
    status(
        "64",
        For::Only(&["elect", "leader", "list"]),
        "several --url without --cluster",
    ),
    status("69", For::Connecting, "Redis unreachable or failing"),
    status("70", For::Every, "internal error"),
    status(
        "71",
        For::Every,
        "local OS error (threads, signals, waiting for the command, writing the output)",
    ),
    status(
        "75",
        For::Only(&["run"]),
        "not acquired within --wait (with --and: any name still held); \
         -E/--conflict-exit-code N makes it N",
    ),
    status("75", For::Only(&["wait"]), "still held at --timeout"),
    status("75", For::Only(&["acquire"]), "not acquired within --wait"),
    status("75", For::Only(&["leader"]), "nobody leads"),
    status("75", For::Only(&["latch-wait"]), "not done at --wait"),
    status(
        "75",
        For::Only(&["group"]),
        "no live member and no --partitions to size the group",
    ),
    status(
        "78",
        For::Only(&["doctor"]),
        "a finding is critical: the server can lose or wrongly grant locks as configured",
    ),
    status(
        "79",
        For::Only(&["run"]),
        "the lock was lost while the command ran; the command was stopped (with \
         --partitions: the membership ended, every command was stopped)",
    ),
    status(
        "79",
        For::Only(&["elect"]),
        "leadership was lost while the command ran; the command was stopped",
    ),
    status(
        "79",
        For::Only(&["extend", "release"]),
        "the lock is no longer the ticket's (--ticket): it expired, or someone else \
         holds it (left as it is)",
    ),
    status(
        "79",
        For::Only(&["latch"]),
        "the participant's lease ran out before the count down (nothing was counted)",
    ),
    status(
        "80",
        For::Only(&["latch-wait"]),
        "a participant is gone without counting down: it died, or its command failed",
    ),
    status(
        "126",
        For::Only(&["run", "elect", "latch"]),
        "the command could not be executed",
    ),
    status(
        "127",
        For::Only(&["run", "elect", "latch"]),
        "the command was not found",
    ),
];

impl Status {
    /// Whether the subcommand `name` (`connects`: it has `--url`) exits with it.
    pub(crate) fn is_for(&self, name: &str, connects: bool) -> bool {
        match self.only {
            For::Every => true,
            For::Connecting => connects,
            For::Only(names) => names.contains(&name),
        }
    }
}

/// The exit statuses of the subcommand `name` (`connects`: it has `--url`), or
/// of every subcommand when `name` is `None`, each code once: `(code, meaning)`.
/// A meaning shared by only some subcommands names them (`wait: KEY is free`).
pub(crate) fn statuses(name: Option<&str>, connects: bool) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for row in STATUSES {
        let meaning = match (name, row.only) {
            (Some(name), _) if !row.is_for(name, connects) => continue,
            (None, For::Only(names)) => format!("{}: {}", names.join(", "), row.meaning),
            _ => row.meaning.to_owned(),
        };
        match out.last_mut() {
            Some((code, text)) if *code == row.code => {
                text.push_str("; ");
                text.push_str(&meaning);
            }
            _ => out.push((row.code, meaning)),
        }
    }
    out
}

/// Whether the subcommand `cmd` talks to Redis (it has `--url`).
pub(crate) fn connects(cmd: &clap::Command) -> bool {
    cmd.get_arguments().any(|a| a.get_long() == Some("url"))
}

/// The `Exit status:` list `--help` ends with, wrapped to 80 columns.
pub(crate) fn help(name: Option<&str>, connects: bool) -> String {
    const INDENT: usize = 9;
    let mut out = "Exit status:".to_owned();
    for (code, meaning) in statuses(name, connects) {
        let _ = write!(out, "\n  {code:<7}");
        let mut column = INDENT;
        for (i, word) in meaning.split(' ').enumerate() {
            if i > 0 && column + 1 + word.len() > 80 {
                out.push('\n');
                out.push_str(&" ".repeat(INDENT));
                column = INDENT;
            } else if i > 0 {
                out.push(' ');
                column += 1;
            }
            out.push_str(word);
            column += word.len();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{
        CANNOT_EXECUTE, DIED, LOST, NOT_ACQUIRED, NOT_FOUND, OS_ERROR, SOFTWARE, UNAVAILABLE, USAGE,
    };

    #[test]
    fn every_code_of_its_own_is_in_the_table() {
        let own = [
            USAGE,
            UNAVAILABLE,
            SOFTWARE,
            OS_ERROR,
            NOT_ACQUIRED,
            LOST,
            DIED,
            CANNOT_EXECUTE,
            NOT_FOUND,
        ];
        for code in own {
            let code = code.to_string();
            assert!(STATUSES.iter().any(|s| s.code == code), "{code}");
        }
    }

    #[test]
    fn help_gives_each_code_one_entry_and_wraps_at_80_columns() {
        let all = help(None, true);
        for line in all.lines() {
            assert!(line.len() <= 80, "{line:?}");
        }
        let codes: Vec<&str> = all
            .lines()
            .filter_map(|l| l.strip_prefix("  ")?.split(' ').next())
            .filter(|c| !c.is_empty())
            .collect();
        let mut unique = codes.clone();
        unique.dedup();
        assert_eq!(codes, unique, "{all}");
        // A subcommand sees its own rows, without its name before each.
        let wait = help(Some("wait"), true);
        assert!(
            wait.contains("\n  75     still held at --timeout"),
            "{wait}"
        );
        assert!(!wait.contains("126") && !wait.contains("wait:"), "{wait}");
        // One that never connects has no Redis row.
        assert!(!help(Some("completions"), false).contains("\n  69 "));
    }
}
