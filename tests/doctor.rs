//! The doctor against real servers, each configured to trip one check, and one
//! configured well: what `Report::read`, `LockClient::doctor` and the check at
//! `build()` find.

mod support;

use std::time::Duration;

use redlease::{Checkup, Error, LockClient, Report, ServerCheck, Severity};
use support::info::master_and_replica;
use support::{RedisServer, acl, eventually};

const PASSWORD: &str = "doctor-pw";
const SETTLE: Duration = Duration::from_secs(10);

/// The severity of `check`'s finding on the server at `url` (the first server
/// with that URL's port), `None` when it found nothing.
fn severity(report: &Report, port: u16, check: &str) -> Option<Severity> {
    let server = report
        .servers()
        .iter()
        .find(|s| s.server().contains(&format!(":{port}/")))
        .unwrap_or_else(|| panic!("no server on port {port} in {report:#?}"));
    server
        .findings()
        .iter()
        .find(|f| f.check() == check)
        .map(redlease::Finding::severity)
}

/// The severity of `check`'s finding in a fresh report on `server`.
fn found(server: &RedisServer, check: &str) -> Option<Severity> {
    severity(&read(&server.url()), server.port(), check)
}

/// The first finding of `check` in `report`.
fn finding<'r>(report: &'r Report, check: &str) -> &'r redlease::Finding {
    report.findings().find(|f| f.check() == check).unwrap()
}

fn read(url: &str) -> Report {
    Report::read([url], &Checkup::new()).unwrap()
}

/// A report as a client with keys under `lock:` sees it.
fn read_prefixed(url: &str) -> Report {
    Report::read([url], &Checkup::new().key_prefix("lock:")).unwrap()
}

fn user_url(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{}/", server.port())
}

#[test]
fn eviction_with_allkeys_or_volatile_policies_is_critical() {
    for policy in ["allkeys-lru", "volatile-lru", "volatile-ttl"] {
        let server =
            RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", policy]);
        let report = read(&server.url());
        assert_eq!(
            severity(&report, server.port(), "eviction"),
            Some(Severity::Critical),
            "{policy}"
        );
        let finding = finding(&report, "eviction");
        assert!(finding.detail().contains(policy), "{finding:?}");
        assert!(finding.fix().contains("noeviction"), "{finding:?}");
        assert!(report.has_critical());
    }
}

#[test]
fn build_logs_a_critical_finding_keeps_it_and_refuses_on_request() {
    let server =
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"]);
    let client = LockClient::builder(server.url()).build().unwrap();
    let found: Vec<_> = client
        .build_findings()
        .iter()
        .map(redlease::Finding::check)
        .collect();
    assert_eq!(found, ["eviction"]);
    // The client works anyway.
    drop(client.try_lock("k").unwrap().unwrap());

    let off = LockClient::builder(server.url())
        .server_check(ServerCheck::Off)
        .build()
        .unwrap();
    assert!(off.build_findings().is_empty());

    let err = LockClient::builder(server.url())
        .server_check(ServerCheck::Refuse)
        .build()
        .unwrap_err();
    let Error::UnsafeServer { check, finding } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*check, "eviction");
    assert_eq!(finding.severity(), Severity::Critical);
    assert!(
        err.to_string().contains("unsafe for locks: eviction"),
        "{err}"
    );
}

#[test]
fn a_well_configured_server_has_nothing_critical_and_no_persistence_or_eviction_warning() {
    let server = RedisServer::start_with(&[
        "--maxmemory",
        "64mb",
        "--maxmemory-policy",
        "noeviction",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    let report = read(&server.url());
    assert!(!report.has_critical(), "{report:#?}");
    for check in [
        "eviction",
        "persistence",
        "scripting",
        "pubsub",
        "misconf",
        "clock-skew",
        "busy-threshold",
        "async-replication",
        "error-stats",
        "evicted-keys",
    ] {
        assert_eq!(
            severity(&report, server.port(), check),
            None,
            "{check}: {report:#?}"
        );
    }
    let client = LockClient::builder(server.url())
        .server_check(ServerCheck::Refuse)
        .build()
        .unwrap();
    assert!(client.build_findings().is_empty());
    let doctor = client.doctor();
    assert!(!doctor.has_critical(), "{doctor:#?}");
}

#[test]
fn no_aof_or_everysec_is_a_persistence_warning() {
    let server = RedisServer::start(); // --appendonly no
    assert_eq!(found(&server, "persistence"), Some(Severity::Warning));
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let report = read(&server.url());
    let finding = finding(&report, "persistence");
    assert_eq!(finding.severity(), Severity::Warning);
    assert!(finding.detail().contains("everysec"), "{finding:?}");
}

#[test]
fn a_writable_replica_the_master_lists_is_critical() {
    let (master, replica) = master_and_replica(&["--replica-read-only", "no"]);
    let report = read(&master.url());
    assert_eq!(report.servers().len(), 2, "{report:#?}");
    assert_eq!(
        severity(&report, replica.port(), "writable-replica"),
        Some(Severity::Critical)
    );
    assert_eq!(severity(&report, master.port(), "writable-replica"), None);
    // Reached as a replica of its master, it is not "a replica asked directly".
    assert_eq!(severity(&report, replica.port(), "replica"), None);
}

#[test]
fn a_replica_asked_directly_is_critical() {
    let (_master, replica) = master_and_replica(&[]);
    let report = read(&replica.url());
    assert_eq!(
        severity(&report, replica.port(), "replica"),
        Some(Severity::Critical)
    );
    assert_eq!(severity(&report, replica.port(), "writable-replica"), None);
}

#[test]
fn async_replicas_without_min_replicas_to_write_warn_unless_acquisitions_wait() {
    let (master, _replica) = master_and_replica(&[]);
    let report = read(&master.url());
    let finding = finding(&report, "async-replication");
    assert_eq!(finding.severity(), Severity::Warning);
    assert!(
        finding.fix().contains("LockClientBuilder::replicas"),
        "{finding:?}"
    );
    // The client that waits for a replica is told nothing.
    let waits = Report::read([master.url()], &Checkup::new().replicas(true)).unwrap();
    assert_eq!(severity(&waits, master.port(), "async-replication"), None);
    let client = LockClient::builder(master.url())
        .replicas(1, Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(
        severity(&client.doctor(), master.port(), "async-replication"),
        None
    );
    master.config_set("min-replicas-to-write", 1);
    let report = read(&master.url());
    assert_eq!(severity(&report, master.port(), "async-replication"), None);
}

#[test]
fn a_user_without_scripting_is_critical_and_build_refuses_it_anyway() {
    let server = RedisServer::start();
    acl::set_user(&server, "noscript", PASSWORD, &["~* &* +@all -@scripting"]);
    let url = user_url(&server, "noscript");
    let report = read(&url);
    let finding = finding(&report, "scripting");
    assert!(finding.detail().contains("NOPERM"), "{finding:?}");
    if server.has_conditional_commands() {
        // Valkey 9: unfenced token locks need no script; the rest is named.
        assert_eq!(finding.severity(), Severity::Warning, "{finding:?}");
        assert!(
            finding.detail().contains("unfenced token locks"),
            "{finding:?}"
        );
        assert!(finding.detail().contains("fenced"), "{finding:?}");
        let client = LockClient::builder(url).build().unwrap();
        assert!(client.lock("k").unwrap().unlock().unwrap().was_held());
        return;
    }
    assert_eq!(finding.severity(), Severity::Critical);
    assert!(matches!(
        LockClient::builder(url).build(),
        Err(Error::Permission { .. })
    ));
}

#[test]
fn renamed_eval_and_evalsha_are_critical_but_evalsha_alone_is_enough() {
    let server = RedisServer::start_with(&["--rename-command", "EVAL", "eval-elsewhere"]);
    let report = read(&server.url());
    assert_eq!(
        severity(&report, server.port(), "scripting"),
        None,
        "{report:#?}"
    );
    let server = RedisServer::start_with(&[
        "--rename-command",
        "EVAL",
        "eval-elsewhere",
        "--rename-command",
        "EVALSHA",
        "evalsha-elsewhere",
    ]);
    // On Valkey 9 an unfenced token lock needs no script: a warning there.
    let expected = if server.has_conditional_commands() {
        Severity::Warning
    } else {
        Severity::Critical
    };
    assert_eq!(found(&server, "scripting"), Some(expected));
}

#[test]
fn a_user_who_may_not_read_info_or_config_gets_unknown_findings_not_fine_ones() {
    let server =
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]);
    acl::set_user(&server, "plain", PASSWORD, &["~* &* +@all -@dangerous"]);
    let report = read(&user_url(&server, "plain"));
    for check in [
        "eviction",
        "persistence",
        "uptime",
        "misconf",
        "busy-threshold",
    ] {
        assert_eq!(
            severity(&report, server.port(), check),
            Some(Severity::Unknown),
            "{check}: {report:#?}"
        );
    }
    let finding = finding(&report, "eviction");
    assert!(finding.detail().contains("NOPERM"), "{finding:?}");
    // What it may do is still checked.
    assert_eq!(severity(&report, server.port(), "scripting"), None);
}

#[test]
fn a_user_without_channels_gets_a_pubsub_warning() {
    let server = RedisServer::start();
    acl::set_user(&server, "nochan", PASSWORD, &["~* resetchannels +@all"]);
    let report = read_prefixed(&user_url(&server, "nochan"));
    assert_eq!(
        severity(&report, server.port(), "pubsub"),
        Some(Severity::Warning)
    );
    // The lock prefix's channels allowed: no warning.
    acl::set_user(
        &server,
        "lockchan",
        PASSWORD,
        &["~* resetchannels &{lock:* +@all"],
    );
    let report = read_prefixed(&user_url(&server, "lockchan"));
    assert_eq!(
        severity(&report, server.port(), "pubsub"),
        None,
        "{report:#?}"
    );
}

#[test]
fn a_server_restarted_inside_the_ttl_warns_and_one_up_longer_does_not() {
    let server = RedisServer::start();
    server.restart();
    assert_eq!(found(&server, "uptime"), Some(Severity::Warning));
    let up = eventually(SETTLE, || {
        let info: String = server.query(redis::cmd("INFO").arg("server"));
        !info.contains("uptime_in_seconds:0\r")
    });
    assert!(up);
    let short = Report::read([server.url()], &Checkup::new().ttl(Duration::from_secs(1))).unwrap();
    assert_eq!(severity(&short, server.port(), "uptime"), None);
}

#[test]
fn a_failed_save_that_stops_writes_is_critical() {
    let server =
        RedisServer::start_with(&["--save", "3600 1", "--enable-protected-configs", "yes"]);
    server.config_set("dir", "/proc");
    let _: String = server.query(&redis::cmd("BGSAVE"));
    let failed = eventually(SETTLE, || {
        let info: String = server.query(redis::cmd("INFO").arg("persistence"));
        info.contains("rdb_last_bgsave_status:err") && info.contains("rdb_bgsave_in_progress:0")
    });
    assert!(failed);
    let refused = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut server.conn());
    assert_eq!(refused.unwrap_err().code(), Some("MISCONF"));
    let report = read(&server.url());
    assert_eq!(
        severity(&report, server.port(), "misconf"),
        Some(Severity::Critical)
    );
    assert_eq!(
        severity(&report, server.port(), "error-stats"),
        Some(Severity::Warning)
    );
    // With no save point, the same failure stops no write.
    server.config_set("save", "");
    assert_eq!(found(&server, "misconf"), Some(Severity::Warning));
}

#[test]
fn evictions_and_oom_errors_already_seen_are_warnings() {
    let server = RedisServer::start();
    let mut con = server.conn();
    server.config_set("maxmemory", 1);
    let oom = redis::cmd("SET").arg("k").arg("v").query::<()>(&mut con);
    assert_eq!(oom.unwrap_err().code(), Some("OOM"));
    server.config_set("maxmemory", 0);
    let report = read(&server.url());
    let finding = finding(&report, "error-stats");
    assert!(finding.detail().contains("errorstat_OOM"), "{finding:?}");
    assert_eq!(severity(&report, server.port(), "evicted-keys"), None);

    let value = "x".repeat(10_000);
    for i in 0..20 {
        let () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(&value)
            .query(&mut con)
            .unwrap();
    }
    server.config_set("maxmemory-policy", "allkeys-random");
    server.config_set("maxmemory", 1);
    let _ = redis::cmd("SET")
        .arg("one-more")
        .arg("v")
        .query::<()>(&mut con);
    server.config_set("maxmemory", 0);
    assert_eq!(found(&server, "evicted-keys"), Some(Severity::Warning));
}

#[test]
fn a_busy_threshold_past_the_renewal_slack_warns() {
    let server = RedisServer::start_with(&["--busy-reply-threshold", "25000"]);
    assert_eq!(found(&server, "busy-threshold"), Some(Severity::Warning));
    let long = Report::read([server.url()], &Checkup::new().ttl(Duration::from_secs(60))).unwrap();
    assert_eq!(severity(&long, server.port(), "busy-threshold"), None);
}

#[test]
fn a_server_on_this_machine_shows_no_clock_skew_and_its_conditional_commands() {
    let server = RedisServer::start();
    let report = read(&server.url());
    assert_eq!(severity(&report, server.port(), "clock-skew"), None);
    let s = &report.servers()[0];
    let major: u32 = s
        .version()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let offers = match s.software() {
        Some("valkey") => major >= 9,
        Some("redis") => false, // Redis 7 here; DELEX came with 8.4
        other => panic!("{other:?}"),
    };
    let found = severity(&report, server.port(), "conditional-commands");
    assert_eq!(found, offers.then_some(Severity::Info), "{report:#?}");
}

#[test]
fn redlock_reports_each_master() {
    let good = RedisServer::start();
    let bad =
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]);
    let third = RedisServer::start();
    let client = LockClient::redlock([good.url(), bad.url(), third.url()])
        .build()
        .unwrap();
    let found: Vec<_> = client
        .build_findings()
        .iter()
        .map(|f| f.server().to_owned())
        .collect();
    assert_eq!(found, [format!("redis://127.0.0.1:{}/0", bad.port())]);
    let report = client.doctor();
    assert_eq!(report.servers().len(), 3);
    assert_eq!(
        severity(&report, bad.port(), "eviction"),
        Some(Severity::Critical)
    );
    assert_eq!(severity(&report, good.port(), "eviction"), None);
}

#[cfg(feature = "cluster")]
#[test]
fn a_cluster_master_with_the_bad_policy_is_named() {
    let cluster = support::cluster::Cluster::start(3, 0);
    let bad = &cluster.nodes[1];
    bad.evict("allkeys-lru");
    let report = Report::read_cluster([cluster.urls()[0].clone()], &Checkup::new()).unwrap();
    assert_eq!(report.servers().len(), 3, "{report:#?}");
    let critical: Vec<_> = report
        .findings()
        .filter(|f| f.severity() == Severity::Critical)
        .map(|f| (f.check(), f.server().to_owned()))
        .collect();
    assert_eq!(
        critical,
        [("eviction", format!("redis://127.0.0.1:{}/0", bad.port()))]
    );
    let client = LockClient::cluster(cluster.urls()).build().unwrap();
    assert_eq!(client.build_findings().len(), 1);
    assert_eq!(client.doctor().servers().len(), 3);
}

#[cfg(feature = "sentinel")]
#[test]
fn sentinel_reports_the_master_its_replica_and_the_quorum() {
    let deployment = support::sentinel::Deployment::start();
    // The sentinels find each other after they start.
    let quorum = eventually(Duration::from_secs(20), || {
        deployment.sentinels[0]
            .try_query::<String>(
                redis::cmd("SENTINEL")
                    .arg("CKQUORUM")
                    .arg(support::sentinel::MASTER_NAME),
            )
            .is_some()
    });
    assert!(quorum, "the sentinels never saw each other");
    let client = LockClient::sentinel(deployment.sentinel_urls(), support::sentinel::MASTER_NAME)
        .build()
        .unwrap();
    let report = client.doctor();
    let roles: Vec<_> = report.servers().iter().map(|s| s.role()).collect();
    assert_eq!(
        roles,
        [Some("master"), Some("replica"), Some("sentinel")],
        "{report:#?}"
    );
    assert!(
        report.findings().all(|f| f.check() != "sentinel-quorum"),
        "{report:#?}"
    );
}

#[test]
fn the_free_function_reads_any_connection() {
    let server =
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut con = server.conn();
    let report = redlease::ServerReport::read(&mut con, &Checkup::new()).unwrap();
    assert!(
        report.server().ends_with(&format!(":{}/", server.port())),
        "{}",
        report.server()
    );
    assert!(report.findings().iter().any(|f| f.check() == "eviction"));
    // The connection is usable afterwards (the pub/sub probe unsubscribed).
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn no_server_answering_is_an_error_and_a_bad_url_a_config_error() {
    let port = support::free_port();
    let err = Report::read([format!("redis://127.0.0.1:{port}/")], &Checkup::new()).unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    let err = Report::read(["nonsense://x"], &Checkup::new()).unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
    // One of two answering: a report, the other one unreachable.
    let server = RedisServer::start();
    let report = Report::read(
        [server.url(), format!("redis://127.0.0.1:{port}/")],
        &Checkup::new(),
    )
    .unwrap();
    assert_eq!(
        severity(&report, port, "reachable"),
        Some(Severity::Unknown)
    );
}
