#![cfg(feature = "cli")]
//! What `redlease` says about itself, no server needed: the man pages under
//! `man/` are what the binary generates now, each with its EXIT STATUS and
//! ENVIRONMENT sections; the guide's exit-status table has every code `--help`
//! lists; each shell's completion script knows every subcommand.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use support::cli::{Scratch, USAGE, output, redlease, stderr, stdout};

/// What regenerates `man/`, for the failure messages.
const REGENERATE: &str = "cargo run --features cli -- __man man";

/// The subcommands `redlease --help` lists (without `help`).
fn subcommands() -> Vec<String> {
    let out = output(redlease(["-h"]));
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect()
}

/// Every `.1` file of `dir`, by name.
fn pages(dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "1"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn the_committed_man_pages_are_what_the_binary_generates() {
    let dir = Scratch::new("man");
    let target = dir.file("man");
    let out = output(redlease(["__man".as_ref(), target.as_os_str()]));
    assert!(out.status.success(), "{}", stderr(&out));
    let fresh = pages(&target);
    let committed = pages(&Path::new(env!("CARGO_MANIFEST_DIR")).join("man"));
    let names = |p: &BTreeMap<String, String>| p.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&committed),
        names(&fresh),
        "man/ has other pages than the binary generates: regenerate with `{REGENERATE}`"
    );
    for (name, text) in &fresh {
        assert!(
            committed[name] == *text,
            "man/{name} is out of date: regenerate with `{REGENERATE}`"
        );
    }
}

#[test]
fn each_subcommand_has_a_page_with_exit_status_and_environment() {
    let man = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let all = pages(&man);
    let subcommands = subcommands();
    assert!(subcommands.len() >= 8, "{subcommands:?}");
    for name in std::iter::once("redlease".to_owned())
        .chain(subcommands.iter().map(|s| format!("redlease-{s}")))
    {
        let page = all
            .get(&format!("{name}.1"))
            .unwrap_or_else(|| panic!("no man/{name}.1: regenerate with `{REGENERATE}`"));
        assert!(page.contains(".SH \"EXIT STATUS\""), "{name}");
        assert!(
            !page.contains(".SH EXTRA"),
            "{name}: clap_mangen's default section"
        );
        assert!(page.contains(".SH \"SEE ALSO\""), "{name}");
        let connects = page.contains("\\-\\-url");
        assert_eq!(
            page.contains(".SH ENVIRONMENT") && page.contains("REDIS_URL"),
            connects,
            "{name}: REDIS_URL is in ENVIRONMENT exactly when it takes --url"
        );
    }
    // What the command gets, on the pages of the subcommands that run one.
    let run = &all["redlease-run.1"];
    for var in ["REDLEASE_KEY", "REDLEASE_FENCE", "REDLEASE_PERMIT_ID"] {
        assert!(run.contains(var), "{var}");
    }
    assert!(!run.contains("REDLEASE_TERM"));
    assert!(all["redlease-elect.1"].contains("REDLEASE_TERM"));
    assert!(run.contains("conflict\\-exit\\-code"));
    // The main page lists every subcommand's page.
    for name in &subcommands {
        assert!(
            // roff escapes every hyphen (`latch-wait`).
            all["redlease.1"].contains(&format!("redlease\\-{}", name.replace('-', "\\-"))),
            "{name}"
        );
    }
}

#[test]
fn the_guide_has_every_exit_status_that_help_lists() {
    let out = output(redlease(["--help"]));
    let help = stdout(&out);
    let codes: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Exit status:")
        .skip(1)
        .filter_map(|l| l.strip_prefix("  ")?.split(' ').next())
        .filter(|c| !c.is_empty())
        .collect();
    assert!(codes.len() >= 10, "{help}");
    let guide =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("guide/cli.md")).unwrap();
    for code in codes {
        // The guide writes `N` as "the command's", `128+N` as "128 + N".
        let row = match code {
            "N" => "| the command's |".to_owned(),
            _ => format!("| {} |", code.replace('+', " + ")),
        };
        assert!(
            guide.contains(&row),
            "guide/cli.md's exit-status table has no row {row}"
        );
    }
}

#[test]
fn each_shells_completion_script_knows_every_subcommand() {
    let subcommands = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = output(redlease(["completions", shell]));
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for name in &subcommands {
            assert!(script.contains(name.as_str()), "{shell}: no {name}");
        }
        assert!(script.contains("conflict-exit-code"), "{shell}");
        assert!(
            !script.contains("__man"),
            "{shell}: the generator is no subcommand"
        );
    }
    let out = output(redlease(["completions", "tcsh"]));
    assert_eq!(out.status.code(), Some(USAGE));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

/// Bash completes from the script: `redlease ru<TAB>` and `redlease run --con<TAB>`.
#[test]
fn the_bash_script_completes_subcommands_and_options() {
    let out = output(redlease(["completions", "bash"]));
    let dir = Scratch::new("completion");
    let script = dir.file("redlease.bash");
    fs::write(&script, stdout(&out)).unwrap();
    // `_redlease COMMAND CUR PREV`, as bash calls it for `complete -F`.
    let complete = |words: &[&str]| -> String {
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let probe = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{}'; \
             COMP_POINT=${{#COMP_LINE}}; \
             _redlease redlease \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            quoted.join(" "),
            words.len() - 1,
            words.join(" "),
        );
        let out = Command::new("bash").args(["-c", &probe]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(complete(&["redlease", "ru"]).trim(), "run");
    let options = complete(&["redlease", "run", "--con"]);
    assert!(
        options.lines().any(|l| l == "--conflict-exit-code"),
        "{options}"
    );
    let shells = complete(&["redlease", "completions", ""]);
    for shell in ["bash", "zsh", "fish"] {
        assert!(shells.lines().any(|l| l == shell), "{shells}");
    }
}
