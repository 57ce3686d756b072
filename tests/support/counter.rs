//! The stress tests' shared counter: a plain read-then-write, so that two holders
//! of a lock at once would lose an update and the total would come out short.

use std::thread;

/// One increment of `counter` with a plain `GET` then `SET`. The yield widens the
/// window between the read and the write.
pub fn increment(con: &mut redis::Connection) {
    let n: Option<u64> = redis::cmd("GET").arg("counter").query(con).unwrap();
    thread::yield_now();
    let () = redis::cmd("SET")
        .arg("counter")
        .arg(n.unwrap_or(0) + 1)
        .query(con)
        .unwrap();
}
