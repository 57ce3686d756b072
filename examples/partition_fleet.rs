//! A fleet of worker processes draining partitioned work: 16 queues of orders,
//! shared by whichever workers are alive through the partition group `orders`.
//! Workers are started and killed (`kill -9`) at random for a while; the group
//! hands the partitions of the dead to the living, and the assignment converges
//! once the churn stops.
//!
//! ```text
//! cargo run --example partition_fleet
//! ```
//!
//! Each worker (`partition_fleet worker`) joins the group and, for each partition
//! it holds, takes orders from that partition's queue through the "warehouse": a
//! script that pops one order and counts it only when the worker's fence is at
//! least the partition's highest fence seen, so a worker that lost a partition
//! (killed, paused, cut off) can never take from it again. The example checks
//! that every order was taken exactly once, and prints how the group converged.
//! Talks to `REDIS_URL` like `basic`, or starts a private `redis-server`.

#[path = "support/private_server.rs"]
mod private_server;

use std::collections::BTreeMap;
use std::error::Error;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use private_server::redis_url;
use redlease::{LockClient, PartitionEvent, PartitionGroup};

const PARTITIONS: u32 = 16;
const ORDERS: u32 = 150;
const CHURN: Duration = Duration::from_secs(8);

/// Takes one order of a partition under a fence. KEYS[1] the queue, KEYS[2] the
/// partition's highest fence seen, KEYS[3] orders taken, KEYS[4] refused takes.
/// ARGV[1] the fence. Returns the order, 0 when the queue is empty, -1 refused.
const WAREHOUSE: &str = r"
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < seen then redis.call('INCR', KEYS[4]) return -1 end
redis.call('SET', KEYS[2], ARGV[1])
local order = redis.call('LPOP', KEYS[1])
if not order then return 0 end
redis.call('INCR', KEYS[3])
return tonumber(order)
";

fn group(client: &LockClient) -> redlease::Result<PartitionGroup> {
    Ok(client
        .partitions("orders", PARTITIONS)?
        .ttl(Duration::from_secs(2))
        .round(Duration::from_millis(300))
        .stability(Duration::from_secs(2))
        .revoke_grace(Duration::from_secs(1)))
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("worker") {
        return worker(&args.next().ok_or("worker needs a url")?);
    }
    let (url, private) = redis_url()?;
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let () = redis::cmd("FLUSHDB").query(&mut con)?;
    for p in 0..PARTITIONS {
        let orders: Vec<u32> = (0..ORDERS).collect();
        let () = redis::cmd("RPUSH")
            .arg(format!("fleet:queue:{p}"))
            .arg(orders)
            .query(&mut con)?;
    }
    let client = LockClient::builder(url.as_str())
        .key_prefix("fleet:")
        .build()?;
    let me = std::env::current_exe()?;
    let spawn = || Command::new(&me).args(["worker", &url]).spawn();
    let mut workers = Workers((0..4).map(|_| spawn()).collect::<Result<_, _>>()?);
    let start = Instant::now();
    let (mut started, mut killed) = (4, 0);
    while start.elapsed() < CHURN {
        std::thread::sleep(Duration::from_millis(fastrand::u64(500..1500)));
        if workers.len() > 2 && fastrand::bool() {
            let at = fastrand::usize(..workers.len());
            let mut victim = workers.swap_remove(at);
            let killed_now = victim.kill(); // SIGKILL: no leave, no release
            victim.wait()?;
            killed_now?;
            killed += 1;
        } else if workers.len() < 6 {
            workers.push(spawn()?);
            started += 1;
        }
        let status = group(&client)?.status()?;
        println!(
            "{:>5.1}s: {} workers alive, {} members listed, balanced: {}",
            start.elapsed().as_secs_f64(),
            workers.len(),
            status.members.len(),
            status.is_balanced()
        );
    }
    let calm = Instant::now();
    while !group(&client)?.status()?.is_balanced() {
        if calm.elapsed() > Duration::from_secs(15) {
            return Err("the group did not converge within 15 s of the churn's end".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let converged = calm.elapsed();
    let status = group(&client)?.status()?;
    let counts: BTreeMap<&str, usize> = status
        .members
        .iter()
        .map(|m| (m.id.as_str(), m.partitions.len()))
        .collect();
    println!("converged {converged:.1?} after the churn: {counts:?}");
    // Let the survivors drain the rest, then stop them.
    let left = || -> redis::RedisResult<u64> {
        let mut c = redis::Client::open(url.as_str())?.get_connection()?;
        (0..PARTITIONS).try_fold(0, |n, p| {
            Ok(n + redis::cmd("LLEN")
                .arg(format!("fleet:queue:{p}"))
                .query::<u64>(&mut c)?)
        })
    };
    let drain = Instant::now();
    while left()? > 0 {
        if drain.elapsed() > Duration::from_secs(20) {
            return Err("the orders were not drained within 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let () = redis::cmd("SET").arg("fleet:stop").arg(1).query(&mut con)?;
    for mut w in workers.0.drain(..) {
        w.wait()?;
    }
    let (taken, refused): (Option<u64>, Option<u64>) = redis::cmd("MGET")
        .arg("fleet:taken")
        .arg("fleet:refused")
        .query(&mut con)?;
    let (taken, refused) = (taken.unwrap_or(0), refused.unwrap_or(0));
    println!(
        "{taken} orders taken by {started} workers ({killed} killed with SIGKILL); \
         {refused} takes refused by the fence"
    );
    if taken != u64::from(PARTITIONS * ORDERS) {
        return Err(format!("{taken} orders taken, {} expected", PARTITIONS * ORDERS).into());
    }
    drop(private);
    Ok(())
}

/// The worker processes; any still running when it is dropped (an error ended
/// the example early) are killed, so none outlives it.
struct Workers(Vec<Child>);

impl std::ops::Deref for Workers {
    type Target = Vec<Child>;
    fn deref(&self) -> &Vec<Child> {
        &self.0
    }
}

impl std::ops::DerefMut for Workers {
    fn deref_mut(&mut self) -> &mut Vec<Child> {
        &mut self.0
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// One worker: a member of the group, taking orders from the partitions it holds
/// until told to stop.
fn worker(url: &str) -> Result<(), Box<dyn Error>> {
    let client = LockClient::builder(url).key_prefix("fleet:").build()?;
    let member = group(&client)?.join()?;
    let warehouse = redis::Script::new(WAREHOUSE);
    let mut con = redis::Client::open(url)?.get_connection()?;
    let mut held: BTreeMap<u32, u64> = BTreeMap::new();
    loop {
        for event in member.events().try_iter() {
            match event {
                PartitionEvent::Assigned { partition, fence } => {
                    held.insert(partition, fence);
                }
                // Between two orders: nothing to checkpoint, hand it over now.
                PartitionEvent::Revoking { partition, .. } => {
                    held.remove(&partition);
                    member.release(partition)?;
                }
                PartitionEvent::Lost { partition, .. } => {
                    held.remove(&partition);
                }
                _ => {}
            }
        }
        let mut idle = true;
        for (p, fence) in &held {
            let keys = [
                format!("fleet:queue:{p}"),
                format!("fleet:seen:{p}"),
                "fleet:taken".into(),
                "fleet:refused".into(),
            ];
            let order: i64 = warehouse.key(&keys[..]).arg(fence).invoke(&mut con)?;
            idle &= order <= 0;
        }
        // The order's work.
        std::thread::sleep(Duration::from_millis(if idle { 50 } else { 5 }));
        if redis::cmd("EXISTS")
            .arg("fleet:stop")
            .query::<bool>(&mut con)?
        {
            return Ok(member.leave()?);
        }
    }
}
