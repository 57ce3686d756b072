//! What a process spends, read from `/proc`: CPU time (`schedstat`, in ns) and
//! context switches (voluntary and not), summed over its threads. The uncontended
//! group reads it for this process and for `redis-server` around blocks of cycles,
//! so ours and the floor's per-cycle costs come from the same run, interleaved.

use std::fs;

/// CPU nanoseconds and context switches of process `pid`, all threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cost {
    pub cpu_ns: u64,
    pub switches: u64,
}

impl std::ops::Sub for Cost {
    type Output = Cost;
    fn sub(self, o: Cost) -> Cost {
        Cost {
            cpu_ns: self.cpu_ns.saturating_sub(o.cpu_ns),
            switches: self.switches.saturating_sub(o.switches),
        }
    }
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        self.cpu_ns += o.cpu_ns;
        self.switches += o.switches;
    }
}

/// The cost so far of process `pid` (`None`: this process).
pub fn cost(pid: Option<u32>) -> Cost {
    let dir = pid.map_or_else(
        || "/proc/self/task".to_owned(),
        |p| format!("/proc/{p}/task"),
    );
    let mut total = Cost::default();
    let Ok(tasks) = fs::read_dir(dir) else {
        return total;
    };
    for task in tasks.flatten() {
        let path = task.path();
        // A thread may end between the listing and the reads.
        if let Ok(s) = fs::read_to_string(path.join("schedstat")) {
            total.cpu_ns += s
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
        if let Ok(s) = fs::read_to_string(path.join("status")) {
            for line in s.lines() {
                if line.contains("ctxt_switches:") {
                    total.switches += line
                        .split_whitespace()
                        .nth(1)
                        .and_then(|n| n.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
    }
    total
}

/// CPU nanoseconds this process has spent, threads that ended included
/// (`/proc/self/stat`'s user and system time, in clock ticks of 10 ms).
pub fn process_cpu_ns() -> u64 {
    let Ok(stat) = fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|n| n.parse::<u64>().ok())
        .sum();
    ticks * 10_000_000
}
