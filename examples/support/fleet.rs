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
