//! Owners: a lock's holder resolves to its client's session record —
//! host, process id, program — across processes; a killed holder's owner shows
//! gone within the record's 10 s TTL while the lock itself lives on; a garbled or
//! foreign record is an unknown owner, never a wrong one.
//!
//! The holder runs in another process: this test binary, re-executed to run one
//! test (`support::alone::spawn_self`) with the server's URL in its environment.

mod support;

use std::process::Child;
use std::time::{Duration, Instant};

use redlease::{ClientTag, LockClient, LockFormat, LockOptions, Owner, Scheme};
use support::alone::spawn_self;
use support::{RedisServer, eventually, wait_for};

/// Set in a holder process: the server's URL.
const HOLDER_ENV: &str = "REDLEASE_TEST_OWNER_HOLDER";
/// The key prefix of every client here.
const PREFIX: &str = "app:";
/// The holder's locks' TTL: far longer than the session record's 10 s.
const LOCK_TTL: Duration = Duration::from_secs(30);

/// In a holder process: takes `tok` (token), `re` (reentrant, twice), a read
/// hold of `rd` and a write hold of `wr` (read-write locks), a permit of `sem`, says
/// `ready`, and holds them until `done` exists (or a minute passes). Returns
/// whether this is a holder process.
fn hold_if_holder() -> bool {
    let Ok(url) = std::env::var(HOLDER_ENV) else {
        return false;
    };
    let client = LockClient::builder(url.as_str())
        .key_prefix(PREFIX)
        .build()
        .unwrap();
    let opts = LockOptions::new().ttl(LOCK_TTL);
    let tok = client.lock_with("tok", &opts).unwrap().unwrap();
    let re = opts.clone().scheme(Scheme::Reentrant);
    let re = [
        client.lock_with("re", &re).unwrap().unwrap(),
        client.lock_with("re", &re).unwrap().unwrap(),
    ];
    let rw = LockOptions::new().ttl(LOCK_TTL);
    let rd = client
        .read_write_lock("rd")
        .unwrap()
        .read_with(&rw)
        .unwrap()
        .unwrap();
    let wr = client
        .read_write_lock("wr")
        .unwrap()
        .write_with(&rw)
        .unwrap()
        .unwrap();
    let sem = client.semaphore("sem").unwrap();
    sem.ensure_permits(2).unwrap();
    let permit = sem.acquire().unwrap();
    let fa = client
        .fair_lock("fa")
        .unwrap()
        .lock_with(&opts)
        .unwrap()
        .unwrap();
    let held: Vec<String> = client.held().iter().map(|h| h.name().to_owned()).collect();
    assert!(held.len() >= 3, "{held:?}");
    let mut con = support::connect(&url, Duration::from_secs(2)).unwrap();
    let _: () = redis::cmd("SET")
        .arg("ready")
        .arg(1)
        .query(&mut con)
        .unwrap();
    let done = eventually(Duration::from_secs(60), || {
        redis::cmd("EXISTS")
            .arg("done")
            .query::<bool>(&mut con)
            .unwrap()
    });
    assert!(done, "nobody said done");
    drop((tok, re, rd, wr, permit, fa));
    true
}

/// Starts a holder process of `test` on `server` and waits until it holds.
fn holder(test: &str, server: &RedisServer) -> Child {
    let child = spawn_self(test, &[(HOLDER_ENV, server.url())]);
    let ready = eventually(Duration::from_secs(20), || {
        server.query::<bool>(redis::cmd("EXISTS").arg("ready"))
    });
    assert!(ready, "the holder process did not take its locks");
    child
}

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix(PREFIX)
        .build()
        .unwrap()
}

/// The name a process of this test binary runs under.
fn this_program() -> String {
    let exe = std::env::current_exe().unwrap();
    exe.file_name().unwrap().to_string_lossy().into_owned()
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// A read-write lock's reader and writer fields, and a permit id, held by the
/// holder process, name its session.
fn read_write_and_permit_holders_name(reader: &LockClient, session: &redlease::Session) {
    // A read-write lock's reader and writer fields, and a permit id, name the
    // same client.
    for (name, mode, writer) in [("rd", "read", false), ("wr", "write", true)] {
        let rw = reader.inspect(name).unwrap();
        assert_eq!(
            (rw.format(), rw.mode()),
            (LockFormat::ReadWrite, Some(mode))
        );
        let [holder] = rw.holders() else {
            panic!("one {mode} holder, no `mode` field: {rw:?}")
        };
        assert_eq!(holder.value().ends_with(":write"), writer, "{rw:?}");
        assert_eq!(holder.holds(), 1);
        assert_eq!(holder.owner().session(), Some(session), "{rw:?}");
    }
    let sem = reader.inspect("sem").unwrap();
    assert_eq!(sem.format(), LockFormat::Semaphore);
    assert_eq!(sem.free_permits(), Some(1));
    let [holder] = sem.holders() else {
        panic!("one permit holder: {sem:?}")
    };
    assert_eq!(holder.value().len(), 32);
    assert_eq!(holder.owner().session(), Some(session), "{sem:?}");
}

#[test]
fn the_owners_of_every_formats_holders_show_across_processes() {
    const TEST: &str = "the_owners_of_every_formats_holders_show_across_processes";
    if hold_if_holder() {
        return;
    }
    let server = RedisServer::start();
    let child = holder(TEST, &server);
    let pid = child.id();
    let reader = client(&server);
    let tok = reader.inspect("tok").unwrap();
    assert_eq!(tok.format(), LockFormat::Token);
    assert!(tok.ttl().is_some_and(|t| t > Duration::from_secs(10)));
    let [holder] = tok.holders() else {
        panic!("one token holder: {tok:?}")
    };
    let session = holder.owner().session().expect("an owner that lives");
    assert_eq!(session.pid(), pid);
    assert_eq!(session.host(), this_host());
    assert_eq!(session.program(), this_program());
    assert_eq!(ClientTag::of_token(holder.value()), Some(session.tag()));
    assert!(
        session
            .client_id()
            .starts_with(&session.tag().as_str()[..8])
    );

    let re = reader.inspect("re").unwrap();
    assert_eq!(re.format(), LockFormat::Reentrant);
    let [holder] = re.holders() else {
        panic!("one reentrant owner: {re:?}")
    };
    assert_eq!(holder.holds(), 2);
    let owner = holder.owner().session().expect("an owner that lives");
    assert_eq!(owner, session, "one client, one session");
    read_write_and_permit_holders_name(&reader, session);
    // A fair lock's holder is a Redisson field in the lock's hash, as a reentrant
    // lock's: it names the same client.
    let fa = reader.inspect("fa").unwrap();
    let [holder] = fa.holders() else {
        panic!("one fair lock holder: {fa:?}")
    };
    assert_eq!(holder.owner().session(), Some(session), "{fa:?}");
    #[cfg(feature = "cli")]
    for key in ["tok", "re", "rd", "wr", "sem", "fa"] {
        let json = cli::inspect_json(&server, key);
        let holders = json["holders"].as_array().unwrap();
        assert_eq!(holders.len(), 1, "{json}");
        let h = &holders[0];
        assert_eq!(h["pid"].as_u64(), Some(u64::from(pid)), "{json}");
        assert_eq!(h["host"].as_str(), Some(this_host().as_str()));
        assert_eq!(h["program"].as_str(), Some(this_program().as_str()));
        assert_eq!(h["client_id"].as_str(), Some(session.client_id()));
        assert_eq!(h["alive"].as_bool(), Some(true));
    }
    #[cfg(feature = "cli")]
    cli::list_names_owners(&server, pid);

    // A semaphore's permit id (16 raw bytes in Redisson's timeout set) names
    // the same client: any scheme's value resolves through `Owner::lookup`.
    let ids: Vec<Vec<u8>> =
        server.query(redis::cmd("ZRANGE").arg("{app:sem}:timeout").arg(0).arg(-1));
    let [id] = ids.as_slice() else {
        panic!("one permit: {ids:?}")
    };
    let hex = uuid::Uuid::from_slice(id).unwrap().simple().to_string();
    let tag = ClientTag::of_permit(&hex).expect("a redlease permit id");
    let mut con = server.conn();
    let owner = Owner::lookup(&mut con, PREFIX, tag).unwrap();
    assert_eq!(owner.session(), Some(session));

    // The reader's own locks name the reader, and it lists them.
    let mine = reader.lock("mine").unwrap();
    let own = reader.inspect("mine").unwrap();
    let own = own.holders()[0].owner().session().unwrap().clone();
    assert_eq!(own.pid(), std::process::id());
    assert_ne!(own.client_id(), session.client_id());
    let held = reader.held();
    assert_eq!(held.len(), 1);
    assert_eq!((held[0].name(), held[0].key()), ("mine", "app:mine"));
    drop(mine);
    assert!(reader.held().is_empty());

    server.query::<()>(redis::cmd("SET").arg("done").arg(1));
    support::alone::finish(child, Duration::from_secs(30));
}

#[test]
fn a_killed_holders_owner_shows_gone_within_10s_while_its_lock_lives_on() {
    const TEST: &str = "a_killed_holders_owner_shows_gone_within_10s_while_its_lock_lives_on";
    if hold_if_holder() {
        return;
    }
    let server = RedisServer::start();
    let mut child = holder(TEST, &server);
    let reader = client(&server);
    let before = reader.inspect("tok").unwrap();
    assert!(before.holders()[0].owner().is_alive(), "{before:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    // The record expires 10 s after its last refresh at most; 15 s leaves room
    // for a loaded machine.
    let gone = wait_for(Duration::from_secs(15), || {
        let info = reader.inspect("tok").unwrap();
        matches!(info.holders()[0].owner(), Owner::Gone(_)).then_some(info)
    });
    let took = killed.elapsed();
    let info = gone.unwrap_or_else(|| panic!("the owner still shows alive after {took:?}"));
    assert_eq!(info.holders()[0].value(), before.holders()[0].value());
    assert!(
        info.ttl().is_some_and(|t| t > Duration::from_secs(5)),
        "the lock lives on: {info:?}"
    );
    for name in ["re", "rd", "wr", "sem", "fa"] {
        let info = reader.inspect(name).unwrap();
        assert!(
            matches!(info.holders()[0].owner(), Owner::Gone(_)),
            "{info:?}"
        );
    }
    #[cfg(feature = "cli")]
    for key in ["tok", "wr", "sem"] {
        let json = cli::inspect_json(&server, key);
        assert_eq!(json["holders"][0]["alive"].as_bool(), Some(false), "{json}");
        assert!(json["holders"][0]["pid"].is_null(), "{json}");
    }
    #[cfg(feature = "cli")]
    {
        let text = cli::stdout(&["inspect", "--prefix", PREFIX, "tok"], &server);
        assert!(text.contains("gone"), "{text}");
    }
}

#[test]
fn owners_are_read_from_tokens_of_this_and_older_versions() {
    let server = RedisServer::start();
    let holder = client(&server);
    let reader = client(&server);
    let _guard = holder.lock("new").unwrap();
    let info = reader.inspect("new").unwrap();
    let [held] = info.holders() else {
        panic!("one token holder: {info:?}")
    };
    let session = held.owner().session().expect("an owner that lives").clone();
    assert_eq!(session.pid(), std::process::id());
    // This version's token: `rl2:<tag>:<counter in base 36>`, shorter than
    // redis-py's 32 hex digits.
    let tag = session.tag();
    let value = held.value();
    let counter = value
        .strip_prefix(&format!("rl2:{tag}:"))
        .unwrap_or_else(|| panic!("not rl2:<tag>:<counter>: {value}"));
    assert!(!counter.is_empty(), "{value}");
    assert!(
        counter
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()),
        "{value}"
    );
    assert!(value.len() < 32, "{value}");
    assert_eq!(ClientTag::of_token(value), Some(tag));
    // The same client's tokens as an older version wrote them (`rl1:<tag><16 hex
    // random>`), and this version's, each unmarked and marked by a waiter.
    let values = [
        format!("rl1:{tag}0123456789abcdef"),
        format!("rl1:{tag}0123456789abcdef+"),
        format!("rl2:{tag}:zz"),
        format!("rl2:{tag}:zz+"),
    ];
    for v in values {
        server.query::<()>(
            redis::cmd("SET")
                .arg(format!("{PREFIX}old"))
                .arg(&v)
                .arg("PX")
                .arg(30_000),
        );
        let info = reader.inspect("old").unwrap();
        assert_eq!(info.format(), LockFormat::Token, "{v}");
        assert_eq!(info.waited(), v.ends_with('+'), "{v}");
        let [held] = info.holders() else {
            panic!("one token holder: {info:?}")
        };
        assert_eq!(held.value(), v);
        assert_eq!(held.owner().session(), Some(&session), "{v}");
    }
}

#[test]
fn garbled_or_foreign_records_are_unknown_owners_and_foreign_values_have_none() {
    let server = RedisServer::start();
    let reader = client(&server);
    let set = |key: &str, value: &str| {
        server.query::<()>(redis::cmd("SET").arg(key).arg(value).arg("PX").arg(30_000));
    };
    let tags = ["0123456789abcdef", "1111222233334444", "5555666677778888"];
    let full = |tag: &str| format!("{tag}-0000-4000-8000-000000000000");
    // A record of another format version, whole otherwise.
    let id = format!(
        "{}-{}-{}-8000-000000000000",
        &tags[0][..8],
        &tags[0][8..12],
        &tags[0][12..]
    );
    let other_version = [
        ("host", "h"),
        ("pid", "1"),
        ("program", "p"),
        ("started", "1"),
        ("version", "rl2/9.0.0"),
        ("client_id", id.as_str()),
    ];
    let mut hset = redis::cmd("HSET");
    hset.arg(format!("{PREFIX}redlease:session:{}", tags[0]));
    for (k, v) in other_version {
        hset.arg(k).arg(v);
    }
    server.query::<()>(&hset);
    // A garbled record (a pid that is no number, fields missing).
    server.query::<()>(
        redis::cmd("HSET")
            .arg(format!("{PREFIX}redlease:session:{}", tags[1]))
            .arg("pid")
            .arg("twelve")
            .arg("client_id")
            .arg(full(tags[1])),
    );
    // A record of another type.
    set(&format!("{PREFIX}redlease:session:{}", tags[2]), "junk");
    for (i, tag) in tags.iter().enumerate() {
        set(
            &format!("{PREFIX}g{i}"),
            &format!("rl1:{tag}0123456789abcdef"),
        );
        let info = reader.inspect(&format!("g{i}")).unwrap();
        let want = ClientTag::of_token(&format!("rl1:{tag}0123456789abcdef")).unwrap();
        assert_eq!(info.holders()[0].owner(), &Owner::Unknown(want), "{info:?}");
    }
    // redis-py's token and a timestamp name no redlease client.
    set(&format!("{PREFIX}py"), "0123456789abcdef0123456789abcdef");
    set(&format!("{PREFIX}ts"), "1700000000000");
    let py = reader.inspect("py").unwrap();
    assert_eq!(py.format(), LockFormat::Token);
    assert_eq!(py.holders()[0].owner(), &Owner::None);
    let ts = reader.inspect("ts").unwrap();
    assert_eq!(ts.format(), LockFormat::LegacyTimestamp);
    assert_eq!(ts.holders()[0].owner(), &Owner::None);
    let free = reader.inspect("free").unwrap();
    assert_eq!((free.format(), free.holders().len()), (LockFormat::Free, 0));

    // Redisson's own (Java) read-write fields and permit ids keep no session
    // record: gone, never another client's owner; a field of no UUID names none.
    let java = uuid::Uuid::new_v4();
    server.query::<()>(
        redis::cmd("HSET")
            .arg(format!("{PREFIX}jrw"))
            .arg("mode")
            .arg("write")
            .arg(format!("{java}:1:write"))
            .arg(1)
            .arg("zz-not-a-uuid:1")
            .arg(2),
    );
    let jrw = reader.inspect("jrw").unwrap();
    assert_eq!(
        (jrw.format(), jrw.mode()),
        (LockFormat::ReadWrite, Some("write"))
    );
    assert!(!jrw.waited(), "{jrw:?}");
    let mark = format!("{{{PREFIX}jrw}}:redlease:write_wait");
    set(&mark, &format!("{java}:2:write"));
    assert!(reader.inspect("jrw").unwrap().waited(), "a writer's mark");
    let owners: Vec<&Owner> = jrw.holders().iter().map(redlease::Holder::owner).collect();
    let java_tag = ClientTag::of_field(&format!("{java}:1")).unwrap();
    assert_eq!(owners, [&Owner::Gone(java_tag), &Owner::None], "{jrw:?}");
    set(&format!("{PREFIX}jsem"), "3");
    server.query::<()>(
        redis::cmd("ZADD")
            .arg(format!("{{{PREFIX}jsem}}:timeout"))
            .arg(922_337_203_685_477_u64)
            .arg(java.as_bytes().as_slice()),
    );
    let jsem = reader.inspect("jsem").unwrap();
    assert_eq!(
        (jsem.format(), jsem.free_permits()),
        (LockFormat::Semaphore, Some(3))
    );
    assert_eq!(jsem.holders()[0].value(), java.simple().to_string());
    assert_eq!(
        jsem.holders()[0].owner(),
        &Owner::Gone(java_tag),
        "{jsem:?}"
    );
}

#[cfg(feature = "cli")]
mod cli {
    use std::process::{Command, Stdio};

    use serde_json::Value;

    use super::PREFIX;
    use super::support::RedisServer;

    /// `redlease ARGS --url <server>`'s standard output; it must exit 0.
    pub(super) fn stdout(args: &[&str], server: &RedisServer) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args(args)
            .args(["--url", &server.url()])
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {}\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    pub(super) fn inspect_json(server: &RedisServer, key: &str) -> Value {
        let text = stdout(&["inspect", "--json", "--prefix", PREFIX, key], server);
        serde_json::from_str(&text).unwrap()
    }

    /// `list` shows the owners of the holder process's read and write holds and
    /// permit, one row per lock.
    pub(super) fn list_names_owners(server: &RedisServer, pid: u32) {
        // `list` shows the same owners, one row per lock.
        let rows = listed(server, PREFIX);
        for (key, format) in [
            ("rd", "read-write"),
            ("wr", "read-write"),
            ("sem", "semaphore"),
        ] {
            let key = format!("{PREFIX}{key}");
            let row = rows.iter().find(|r| r["key"] == key.as_str());
            let row = row.unwrap_or_else(|| panic!("{key} listed: {rows:?}"));
            assert_eq!(row["format"].as_str(), Some(format), "{row}");
            let found = row["holders"][0]["pid"].as_u64();
            assert_eq!(found, Some(u64::from(pid)), "{row}");
        }
        let text = stdout(&["list", "--prefix", PREFIX], server);
        let line = text.lines().find(|l| l.starts_with("app:sem "));
        let line = line.unwrap_or_else(|| panic!("app:sem listed: {text}"));
        assert!(line.contains(&format!("pid {pid}")), "{text}");
    }

    pub(super) fn listed(server: &RedisServer, prefix: &str) -> Vec<Value> {
        let text = stdout(&["list", "--json", "--prefix", prefix], server);
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn list_takes_the_prefix_literally_and_marks_gone_owners() {
        let server = RedisServer::start();
        let locker = redlease::LockClient::builder(server.url())
            .key_prefix("a*b:")
            .build()
            .unwrap();
        let alive = locker.lock("1").unwrap();
        let set = |key: &str, value: &str| {
            server.query::<()>(redis::cmd("SET").arg(key).arg(value).arg("PX").arg(30_000));
        };
        // A redlease token whose client has no session record: gone.
        set("a*b:2", "rl1:0123456789abcdef0123456789abcdef");
        set("a*b:3", "0123456789abcdef0123456789abcdef"); // redis-py
        for key in ["axb:4", "a?b:5", "ab:6", "a[*]b:7", "a\\b:8"] {
            set(key, "x");
        }
        let keys = |rows: &[Value]| -> Vec<String> {
            rows.iter()
                .map(|r| r["key"].as_str().unwrap().to_owned())
                .collect()
        };
        let rows = listed(&server, "a*b:");
        assert_eq!(keys(&rows), ["a*b:1", "a*b:2", "a*b:3"], "{rows:?}");
        assert_eq!(rows[0]["holders"][0]["alive"].as_bool(), Some(true));
        assert_eq!(
            rows[0]["holders"][0]["pid"].as_u64(),
            Some(u64::from(std::process::id()))
        );
        assert_eq!(rows[1]["holders"][0]["alive"].as_bool(), Some(false));
        assert_eq!(rows[2]["holders"].as_array().map(Vec::len), Some(0));
        for (prefix, only) in [("a[*]b:", "a[*]b:7"), ("a?b:", "a?b:5"), ("a\\b", "a\\b:8")] {
            assert_eq!(keys(&listed(&server, prefix)), [only], "{prefix}");
        }
        let text = stdout(&["list", "--prefix", "a*b:"], &server);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(lines[1].contains("GONE"), "{text}");
        drop(alive);
    }
}

#[cfg(feature = "cluster")]
#[test]
fn in_a_cluster_owners_are_read_from_the_session_records_own_master() {
    use support::cluster::Cluster;
    let cluster = Cluster::start(3, 0);
    let client = LockClient::cluster(cluster.urls())
        .key_prefix(PREFIX)
        .build()
        .unwrap();
    // Locks on every master; the session record is on one of them only.
    let guards: Vec<_> = (0..12)
        .map(|i| client.lock(&format!("k{i}")).unwrap())
        .collect();
    let owners: std::collections::HashSet<usize> = (0..12)
        .map(|i| cluster.owner(cluster.slot(&format!("{PREFIX}k{i}"))))
        .collect();
    assert_eq!(owners.len(), 3, "the keys span every master");
    for i in 0..12 {
        let info = client.inspect(&format!("k{i}")).unwrap();
        let session = info.holders()[0].owner().session().expect("alive");
        assert_eq!(session.pid(), std::process::id());
    }
    drop(guards);
}

/// `LockInfo::read` on a plain connection reads what `LockClient::inspect` reads,
/// owners resolved, and shows a fair lock's queued waiters with their timeouts and
/// a semaphore's permits with their expiries, an expired one included.
#[test]
fn read_on_a_plain_connection_matches_inspect_and_shows_the_queue_and_expired_permits() {
    use std::time::{SystemTime, UNIX_EPOCH};

    use redlease::LockInfo;

    let server = RedisServer::start();
    let locker = client(&server);
    let guard = locker.lock("tok").unwrap();
    let mut conn = server.conn();
    let read = LockInfo::read(&mut conn, PREFIX, "tok").unwrap();
    let inspected = locker.inspect("tok").unwrap();
    assert_eq!(read.format(), LockFormat::Token);
    assert_eq!(read.holders(), inspected.holders());
    assert_eq!(
        (read.key(), read.fence_key(), read.value()),
        (inspected.key(), inspected.fence_key(), inspected.value())
    );
    let session = read.holders()[0].owner().session().expect("an alive owner");
    assert_eq!(session.pid(), std::process::id());
    drop(guard);
    let free = LockInfo::read(&mut conn, PREFIX, "tok").unwrap();
    assert_eq!((free.format(), free.holders()), (LockFormat::Free, &[][..]));

    let ms =
        |t: SystemTime| u64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap();
    let later = ms(SystemTime::now()) + 600_000;
    let waiter = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f:9";
    let unscored = "2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a:4";
    let field = "0f8e4c2a-6b1d-4f3e-9a7c-5d2b8e1f0a36:1";
    let _: () = server.query(redis::cmd("HSET").arg("app:fair").arg(field).arg(1));
    let _: () = server.query(
        redis::cmd("RPUSH")
            .arg("redisson_lock_queue:{app:fair}")
            .arg(waiter)
            .arg(unscored),
    );
    let timeouts = "redisson_lock_timeout:{app:fair}";
    let _: () = server.query(redis::cmd("ZADD").arg(timeouts).arg(later).arg(waiter));
    let fair = LockInfo::read(&mut conn, PREFIX, "fair").unwrap();
    assert_eq!(fair.format(), LockFormat::Reentrant);
    assert_eq!(fair.queued(), 2);
    let queue: Vec<_> = fair
        .queue()
        .iter()
        .map(|w| (w.id(), w.timeout().map(ms)))
        .collect();
    assert_eq!(queue, [(waiter, Some(later)), (unscored, None)]);

    let id = |hex: &str| uuid::Uuid::try_parse(hex).unwrap().as_bytes().to_vec();
    let _: () = server.query(redis::cmd("SET").arg("app:sem").arg(2));
    let _: () = server.query(
        redis::cmd("ZADD")
            .arg("{app:sem}:timeout")
            .arg(later)
            .arg(id("aaaaaaaaaaaaaaaa1111111111111111"))
            .arg(1)
            .arg(id("cccccccccccccccc3333333333333333")),
    );
    let sem = LockInfo::read(&mut conn, PREFIX, "sem").unwrap();
    assert_eq!(sem.format(), LockFormat::Semaphore);
    assert_eq!(
        (
            sem.free_permits(),
            sem.permits_held(),
            sem.permits_expired()
        ),
        (Some(2), 2, 1)
    );
    let permits: Vec<_> = sem
        .holders()
        .iter()
        .map(|h| (h.value(), h.is_expired(), h.expires_at().map(ms)))
        .collect();
    assert_eq!(
        permits,
        [
            ("cccccccccccccccc3333333333333333", true, Some(1)),
            ("aaaaaaaaaaaaaaaa1111111111111111", false, Some(later)),
        ]
    );

    let empty = LockInfo::read(&mut conn, PREFIX, "");
    assert!(
        matches!(empty, Err(redlease::Error::Invalid { .. })),
        "{empty:?}"
    );
}
