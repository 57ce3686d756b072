//! Which processes are the keeper's to end, read from `/proc`.

use std::collections::{HashMap, HashSet};
use std::fs;

use nix::unistd::Pid;

/// Every live (not zombie) process in `keeper`'s group or below it, the
/// keeper excepted.
pub(super) fn doomed(keeper: Pid) -> Vec<Pid> {
    let me = keeper.as_raw();
    let mut found: Vec<i32> = Vec::new();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    let mut live = HashSet::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some((state, parent, group)) = stat(pid) else {
            continue;
        };
        children.entry(parent).or_default().push(pid);
        if state != 'Z' && pid != me {
            live.insert(pid);
            if group == me {
                found.push(pid);
            }
        }
    }
    let mut stack = vec![me];
    while let Some(pid) = stack.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if live.contains(&child) && !found.contains(&child) {
                found.push(child);
            }
            stack.push(child);
        }
    }
    found.into_iter().map(Pid::from_raw).collect()
}

/// Whether the process `pid` is gone or going: no longer in `/proc`, or its
/// main thread ended (a zombie, `Z`, or dead, `X`). A process killed with
/// SIGKILL ends thread by thread: while its other threads still run, its
/// children are handed to one of them (their parent's pid stays the same) and
/// its main thread is a zombie already.
pub(super) fn ending(pid: Pid) -> bool {
    stat(pid.as_raw()).is_none_or(|(state, _, _)| matches!(state, 'Z' | 'X'))
}

/// State, parent and process group of `pid`, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(char, i32, i32)> {
    parse(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// State, parent and process group from a `/proc/PID/stat` line: after the
/// command name in parentheses (which may hold anything), fields 3 to 5.
fn parse(text: &str) -> Option<(char, i32, i32)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, parent, group))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_name_with_parentheses_and_spaces_is_skipped_whole() {
        let line = "42 (a) S 1 2 (b) R 7 8 9 0 -1 4194304";
        assert_eq!(parse(line), Some(('R', 7, 8)));
        assert_eq!(parse("42 (sh) Z 1 42 42 0"), Some(('Z', 1, 42)));
        assert_eq!(parse("42 (sh"), None);
    }

    #[test]
    fn a_child_is_doomed_and_the_keeper_is_not() {
        let me = nix::unistd::getpid();
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        let found = doomed(me);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&pid), "{found:?} lacks {pid}");
        assert!(!found.contains(&me));
    }

    #[test]
    fn a_process_is_ending_once_its_main_thread_ended_or_it_is_gone() {
        assert!(!ending(nix::unistd::getpid()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        // Exited and not reaped yet: a zombie, bounded by `true`'s run.
        let zombie = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            stat(pid.as_raw()).is_some_and(|(state, _, _)| state == 'Z')
        });
        assert!(zombie && ending(pid), "never a zombie");
        child.wait().unwrap();
        assert!(ending(pid), "reaped: gone");
    }
}
