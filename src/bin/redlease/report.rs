//! How a failure is printed on stderr: one line, `redlease: MESSAGE`, or, when
//! the subcommand was given `--json` (any subcommand that has it), one JSON
//! object, `{"error": MESSAGE, "code": CODE}`, with the same message.

use std::process::ExitCode;

use clap::{ArgMatches, Command};

use crate::exit::Failure;

/// Whether the subcommand was given `--json` (any that has it): its failures
/// are then JSON too.
pub(crate) fn wants_json(matches: &ArgMatches) -> bool {
    matches
        .subcommand()
        .is_some_and(|(_, sub)| matches!(sub.try_get_one::<bool>("json"), Ok(Some(true))))
}

/// Prints a failure on stderr, one line: `redlease: MESSAGE`, or with `--json`
/// `{"error": MESSAGE, "code": CODE}`; returns its code.
pub(crate) fn report(failure: &Failure, json: bool) -> ExitCode {
    if json {
        // Not json!: its map would sort "code" before "error".
        let error = serde_json::Value::from(failure.message.as_str());
        eprintln!("{{\"error\":{error},\"code\":{}}}", failure.code);
    } else {
        eprintln!("redlease: {}", failure.message);
    }
    ExitCode::from(failure.code)
}

/// Whether the command line, which clap refused, asks a subcommand that has
/// `--json` for it (before any `--`).
pub(crate) fn json_requested(command: fn() -> Command) -> bool {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .take_while(|a| a != "--")
        .collect();
    let cmd = command();
    let has_json = |name: &str| {
        cmd.find_subcommand(name)
            .is_some_and(|c| c.get_arguments().any(|a| a.get_id() == "json"))
    };
    args.iter().any(|a| a == "--json")
        && args
            .iter()
            .find(|a| !a.starts_with('-'))
            .is_some_and(|name| has_json(name))
}
