//! A batch-worker fleet sharing 3 permits: "at most 3 imports run against the
//! warehouse at once". Six worker processes each run a few imports; each import
//! takes a permit of the semaphore `imports` (a lease, renewed while it runs,
//! given back when dropped or when its process dies), and the warehouse counts
//! the imports running at once.
//!
//! ```text
//! cargo run --example permit_fleet
//! ```
//!
//! The example starts six copies of itself as workers (`permit_fleet worker`),
//! waits for them, and checks the warehouse's count: never more than 3 at once.
//! Talks to `REDIS_URL` like `basic`, or starts a private `redis-server`. The same
//! semaphore is Redisson's `RPermitExpirableSemaphore` named `fleet:imports`: Java
//! workers on Redisson share the 3 permits too.

#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::time::Duration;

use fleet::run_copies;
use private_server::redis_url;
use redlease::LockClient;

const WORKERS: usize = 6;
const IMPORTS: usize = 3;
const PERMITS: u32 = 3;

/// The warehouse's side: counts the imports running, and the most ever at once.
/// KEYS[1] running, KEYS[2] peak, KEYS[3] total. ARGV[1] +1 starting, -1 ending.
const WAREHOUSE: &str = r"
local running = redis.call('INCRBY', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > 0 then
  redis.call('INCR', KEYS[3])
  if running > tonumber(redis.call('GET', KEYS[2]) or '0') then
    redis.call('SET', KEYS[2], running)
  end
end
return running
";

const KEYS: [&str; 3] = [
    "fleet:warehouse:running",
    "fleet:warehouse:peak",
    "fleet:warehouse:total",
];

fn main() -> Result<(), Box<dyn Error>> {
    if let Some((url, name)) = fleet::as_worker()? {
        return worker(&url, &name);
    }
    let (url, private) = redis_url()?;
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let () = redis::cmd("DEL")
        .arg(&KEYS[..])
        .arg("fleet:imports")
        .arg("{fleet:imports}:timeout")
        .query(&mut con)?;
    // The fleet's size is set once; a worker asking for another number is refused.
    let client = LockClient::builder(url.as_str())
        .key_prefix("fleet:")
        .build()?;
    client.semaphore("imports")?.ensure_permits(PERMITS)?;

    run_copies(WORKERS, "worker", |i| {
        vec!["worker".into(), url.clone(), format!("w{i}")]
    })?;
    let (peak, total, running): (u64, u64, u64) = redis::cmd("MGET")
        .arg(KEYS[1])
        .arg(KEYS[2])
        .arg(KEYS[0])
        .query(&mut con)?;
    let free = client.semaphore("imports")?.available_permits()?;
    println!(
        "{total} imports by {WORKERS} workers; at most {peak} ran at once \
         ({PERMITS} permits); {running} running now, {free} permits free"
    );
    if peak > u64::from(PERMITS) || peak == 0 {
        return Err(format!("{peak} imports ran at once with {PERMITS} permits").into());
    }
    if total != (WORKERS * IMPORTS) as u64 || running != 0 || free != i64::from(PERMITS) {
        return Err("an import was lost or a permit not given back".into());
    }
    drop(private);
    Ok(())
}

/// One worker process: runs its imports, each under a permit.
fn worker(url: &str, name: &str) -> Result<(), Box<dyn Error>> {
    let client = LockClient::builder(url)
        .key_prefix("fleet:")
        .ttl(Duration::from_secs(10))
        .build()?;
    let imports = client.semaphore("imports")?;
    let warehouse = redis::Script::new(WAREHOUSE);
    let mut con = redis::Client::open(url)?.get_connection()?;
    for i in 0..IMPORTS {
        let permit = imports.try_acquire_for(Duration::from_secs(30))?;
        let permit = permit.ok_or("no permit within 30 s")?;
        let running: i64 = warehouse.key(&KEYS[..]).arg(1).invoke(&mut con)?;
        println!(
            "{name}: import {i} under permit {} ({running} running)",
            permit.permit_id()
        );
        // The import itself.
        std::thread::sleep(Duration::from_millis(100 + 20 * fastrand::u64(0..5)));
        let _: i64 = warehouse.key(&KEYS[..]).arg(-1).invoke(&mut con)?;
        if !permit.unlock()?.was_held() {
            eprintln!("{name}: the permit's lease had ended before its release");
        }
    }
    Ok(())
}
