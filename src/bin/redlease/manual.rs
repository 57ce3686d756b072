//! What the tool says about itself beyond `--help`: shell completion scripts
//! (`completions SHELL`) and the man pages committed under `man/` (`__man DIR`,
//! read before clap as the keeper's `__keep` is, so that it is in no help and
//! no completion script). Both are generated from the clap definition, so a new subcommand
//! or option is in them at the next generation; the EXIT STATUS and ENVIRONMENT
//! sections come from `exit_status::STATUSES`, the options' `env` and
//! `held::COMMAND_ENV`. `tests/cli_man.rs` fails when `man/` is out of date.

use std::fs;
use std::io::{self, Write as _};
use std::path::Path;

use clap::Command;
use clap_complete::Shell;
use clap_mangen::Man;
use roff::{Roff, bold, italic, roman};

use crate::exit::{Failure, OS_ERROR};
use crate::exit_status::{connects, statuses};
use crate::held::COMMAND_ENV;

/// The first argument that makes `redlease` write the man pages: `redlease
/// __man DIR`; from a checkout, `cargo run --features cli -- __man man`.
pub(crate) const MAN: &str = "__man";

/// Writes the man pages of `command()` when the arguments are `__man DIR`.
pub(crate) fn dispatch(command: fn() -> Command) -> Option<Result<u8, Failure>> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != MAN {
        return None;
    }
    Some(match (args.next(), args.next()) {
        (Some(dir), None) => man_pages(Path::new(&dir), command()),
        _ => Err(Failure::usage(format!(
            "{MAN} writes the man pages: `{MAN} DIR`"
        ))),
    })
}

/// `completions --help`'s description.
pub(crate) const COMPLETIONS_ABOUT: &str = "\
Print the completion script for SHELL on stdout, to be saved where the shell
looks for it:

bash: redlease completions bash > ~/.local/share/bash-completion/completions/redlease

zsh: redlease completions zsh > ~/.zfunc/_redlease, with fpath+=(~/.zfunc) before
compinit in ~/.zshrc

fish: redlease completions fish > ~/.config/fish/completions/redlease.fish

elvish: redlease completions elvish >> ~/.config/elvish/rc.elv

powershell: redlease completions powershell >> $PROFILE";

/// Prints the completion script for `shell` on stdout.
pub(crate) fn completions(shell: Shell, mut cmd: Command) -> Result<u8, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "redlease", &mut script);
    io::stdout()
        .write_all(&script)
        .map_err(|e| Failure::new(OS_ERROR, format!("writing the {shell} script: {e}")))?;
    Ok(0)
}

/// Writes `redlease.1` and a `redlease-SUBCOMMAND.1` per visible subcommand
/// into `dir` (created if missing).
pub(crate) fn man_pages(dir: &Path, cmd: Command) -> Result<u8, Failure> {
    let failed = |e: io::Error| {
        Failure::new(
            OS_ERROR,
            format!("writing the man pages to {}: {e}", dir.display()),
        )
    };
    fs::create_dir_all(dir).map_err(failed)?;
    // `redlease help` is `--help`: no page of its own.
    let mut root = cmd.disable_help_subcommand(true);
    root.build();
    let version = format!("redlease {}", root.get_version().unwrap_or_default());
    let subcommands: Vec<&Command> = root
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .collect();
    let pages = std::iter::once((&root, false)).chain(subcommands.iter().map(|&c| (c, true)));
    for (cmd, sub) in pages {
        let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
        let page = render(cmd, sub, &subcommands, &version).map_err(failed)?;
        fs::write(dir.join(format!("{name}.1")), page).map_err(failed)?;
    }
    Ok(0)
}

/// One page: `clap_mangen`'s sections, then EXIT STATUS, ENVIRONMENT and SEE ALSO
/// in place of its EXTRA (the `--help` text after the options).
fn render(
    cmd: &Command,
    sub: bool,
    subcommands: &[&Command],
    version: &str,
) -> io::Result<Vec<u8>> {
    let man = Man::new(cmd.clone()).source(version);
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::new();
    let name = sub.then(|| cmd.get_name());
    exit_status(&mut roff, name, connects(cmd));
    let own = [cmd];
    environment(&mut roff, if sub { &own } else { subcommands }, name);
    see_also(&mut roff, sub, subcommands);
    roff.to_writer(&mut out)?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// The codes `name` exits with (every code on the main page).
fn exit_status(roff: &mut Roff, name: Option<&str>, connects: bool) {
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in statuses(name, connects) {
        roff.control("TP", []);
        roff.text([bold(code)]);
        roff.text([roman(meaning)]);
    }
    roff.control("PP", []);
    roff.text([roman(
        "Codes 64 to 79 follow sysexits(3). A command may exit with one of them itself; \
         whenever the code is redlease's own, it prints one line on stderr saying why.",
    )]);
}

/// The variables `cmds` read (the options' `env`), then those the command run
/// by `name` gets (on the main page: every subcommand's, each naming its own).
fn environment(roff: &mut Roff, cmds: &[&Command], name: Option<&str>) {
    let mut read: Vec<(&str, String)> = Vec::new();
    for arg in cmds.iter().flat_map(|c| c.get_arguments()) {
        let (Some(var), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let var = var.to_str().unwrap_or_default();
        if !read.iter().any(|(v, _)| *v == var) {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            read.push((
                var,
                format!("--{long} when the option is not given ({help})"),
            ));
        }
    }
    let passed: Vec<(&str, String)> = COMMAND_ENV
        .iter()
        .filter(|(_, names, _)| name.is_none_or(|n| names.contains(&n)))
        .map(|(var, names, text)| match name {
            Some(_) => (*var, (*text).to_owned()),
            None => (*var, format!("{}: {text}", names.join(", "))),
        })
        .collect();
    if read.is_empty() && passed.is_empty() {
        return;
    }
    roff.control("SH", ["ENVIRONMENT"]);
    for (var, text) in read {
        roff.control("TP", []);
        roff.text([bold(var)]);
        roff.text([roman(text)]);
    }
    if !passed.is_empty() {
        roff.control("PP", []);
        roff.text([roman(
            "The command run gets, besides redlease's own environment:",
        )]);
    }
    for (var, text) in passed {
        roff.control("TP", []);
        roff.text([bold(var)]);
        roff.text([roman(text)]);
    }
}

/// The main page names each subcommand's; a subcommand's names the main page.
fn see_also(roff: &mut Roff, sub: bool, subcommands: &[&Command]) {
    roff.control("SH", ["SEE ALSO"]);
    let mut pages: Vec<String> = if sub {
        vec!["redlease".to_owned()]
    } else {
        let name = |c: &&Command| {
            c.get_display_name()
                .unwrap_or_else(|| c.get_name())
                .to_owned()
        };
        subcommands.iter().map(name).collect()
    };
    pages.push("flock".to_owned());
    let mut line = Vec::new();
    for (i, page) in pages.into_iter().enumerate() {
        if i > 0 {
            line.push(roman(", "));
        }
        line.push(bold(page));
        line.push(roman("(1)"));
    }
    roff.text(line);
    roff.control("PP", []);
    roff.text([
        roman("The guide's chapter on the command-line tool: "),
        italic("https://docs.rs/redlease/latest/redlease/guide/cli/"),
    ]);
}
