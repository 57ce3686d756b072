//! The fleet examples' processes: the example run again, as workers or hosts.
//! Shared by the examples through `#[path]`; not an example itself.

use std::error::Error;
use std::process::Command;

/// Runs this example again as `n` processes, the `i`th with the arguments
/// `args(i)`, and waits for them all: an error when one fails (`what` names
/// them: "worker", "host").
pub fn run_copies(
    n: usize,
    what: &str,
    args: impl Fn(usize) -> Vec<String>,
) -> Result<(), Box<dyn Error>> {
    let me = std::env::current_exe()?;
    let children: Vec<_> = (0..n)
        .map(|i| Command::new(&me).args(args(i)).spawn())
        .collect::<Result<_, _>>()?;
    for mut child in children {
        if !child.wait()?.success() {
            return Err(format!("a {what} failed").into());
        }
    }
    Ok(())
}

/// The URL and name given to a copy run as a worker (`None` in the process
/// that starts the copies).
#[allow(
    dead_code,
    reason = "cron_fleet's copies are hosts, with other arguments"
)]
pub fn as_worker() -> Result<Option<(String, String)>, Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("worker") {
        return Ok(None);
    }
    let url = args.next().ok_or("worker needs a url")?;
    let name = args.next().ok_or("worker needs a name")?;
    Ok(Some((url, name)))
}
