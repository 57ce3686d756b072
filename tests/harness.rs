mod support;

use std::time::{Duration, Instant};

use support::proxy::Proxy;
use support::{Masters, RedisServer, connect, eventually, wait_for};

fn ping(con: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(con)
}

#[test]
fn a_server_starts_and_answers_ping() {
    let server = RedisServer::start();
    assert!(server.is_running());
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
    let mut con = server.client().get_connection().unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
}

#[test]
fn start_with_passes_extra_arguments() {
    let server = RedisServer::start_with(&["--maxmemory", "12345678"]);
    let (_, value): (String, u64) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(value, 12_345_678);
}

#[test]
fn two_servers_get_different_ports() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("a")
        .query(&mut a.conn())
        .unwrap();
    let value: Option<String> = redis::cmd("GET").arg("k").query(&mut b.conn()).unwrap();
    assert_eq!(value, None);
}

#[test]
fn masters_are_distinct_servers() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    assert_eq!(urls.len(), 3);
    assert!(urls[0] != urls[1] && urls[1] != urls[2] && urls[0] != urls[2]);
    for server in &masters.servers {
        assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
    }
}

#[test]
fn kill_makes_connecting_fail_and_restart_brings_it_back_on_the_same_port() {
    let server = RedisServer::start();
    let (port, pid) = (server.port(), server.pid());
    let mut con = server.conn();
    server.kill();
    assert!(!server.is_running());
    assert!(ping(&mut con).is_err());
    assert!(server.try_conn().is_err());

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
}

#[test]
fn drop_kills_the_server() {
    let server = RedisServer::start();
    let url = server.url();
    drop(server);
    assert!(connect(&url, Duration::from_millis(200)).is_err());
}

#[test]
fn pause_makes_a_command_time_out_and_resume_makes_it_answer_again() {
    let server = RedisServer::start();
    let mut con = server.conn();
    con.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    server.pause();
    assert!(server.is_running());

    let started = Instant::now();
    let err = ping(&mut con).unwrap_err();
    let took = started.elapsed();
    assert!(err.is_timeout(), "{err:?}");
    assert!(took >= Duration::from_millis(190), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");

    server.resume();
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
}

#[test]
fn dropping_a_paused_server_kills_it() {
    let server = RedisServer::start();
    let url = server.url();
    server.pause();
    let started = Instant::now();
    drop(server);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(connect(&url, Duration::from_millis(200)).is_err());
}

#[test]
fn the_proxy_forwards() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    assert_ne!(proxy.port(), server.port());
    let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let value: String = redis::cmd("GET")
        .arg("k")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(value, "v");
    assert_eq!(proxy.connections(), 1);
}

#[test]
fn a_blackholed_proxy_makes_a_command_time_out_and_recovers_when_turned_off() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut con = connect(&proxy.url(), Duration::from_millis(200)).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");

    proxy.blackhole(true);
    let err = ping(&mut con).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(proxy.connections(), 1, "blackhole keeps connections open");

    proxy.blackhole(false);
    let mut fresh = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    assert_eq!(ping(&mut fresh).unwrap(), "PONG");
}

#[test]
fn dropping_a_blackholed_or_delaying_proxy_returns_promptly() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut held = connect(&proxy.url(), Duration::from_millis(100)).unwrap();
    let mut delayed = connect(&proxy.url(), Duration::from_millis(100)).unwrap();
    proxy.delay(Duration::from_secs(30));
    assert!(ping(&mut delayed).unwrap_err().is_timeout());
    proxy.blackhole(true);
    assert!(ping(&mut held).unwrap_err().is_timeout());
    let started = Instant::now();
    drop(proxy);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(ping(&mut held).is_err());
}

#[test]
fn delay_adds_at_least_the_delay_to_a_round_trip() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    let delay = Duration::from_millis(100);
    proxy.delay(delay);
    let started = Instant::now();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    assert!(started.elapsed() >= delay, "{:?}", started.elapsed());

    proxy.delay(Duration::ZERO);
    let started = Instant::now();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    assert!(started.elapsed() < delay, "{:?}", started.elapsed());
}

#[test]
fn drop_connections_makes_the_existing_connection_fail() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");

    proxy.drop_connections();
    let err = ping(&mut con).unwrap_err();
    assert!(!err.is_timeout(), "closed, not silent: {err:?}");
    assert!(eventually(Duration::from_secs(1), || proxy.connections() == 0));

    let mut fresh = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    assert_eq!(ping(&mut fresh).unwrap(), "PONG");
}

#[test]
fn a_refusing_proxy_closes_new_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.refuse(true);
    assert!(connect(&proxy.url(), Duration::from_secs(2)).is_err());
    proxy.refuse(false);
    let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
}

#[test]
fn the_proxy_closes_clients_when_the_server_dies() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    server.kill();
    assert!(ping(&mut con).is_err());
    assert!(connect(&proxy.url(), Duration::from_secs(2)).is_err());
    server.restart();
    let mut con = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
}

#[test]
fn command_calls_counts_set_calls_exactly() {
    let server = RedisServer::start();
    let mut con = server.conn();
    server.reset_stats();
    assert_eq!(server.command_calls("set"), 0);
    for i in 0..7 {
        let _: () = redis::cmd("SET").arg("k").arg(i).query(&mut con).unwrap();
    }
    let _: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(server.command_calls("set"), 7);
    assert_eq!(server.command_calls("SET"), 7);
    assert_eq!(server.command_calls("get"), 1);
    assert_eq!(server.command_calls("no-such-command"), 0);
    assert!(server.total_commands() >= 8);

    server.reset_stats();
    assert_eq!(server.command_calls("set"), 0);
}

#[test]
fn eventually_returns_false_on_a_never_true_condition_within_its_bound() {
    let started = Instant::now();
    let mut polls = 0;
    assert!(!eventually(Duration::from_millis(50), || {
        polls += 1;
        false
    }));
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(50), "{took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(polls > 1);
}

#[test]
fn eventually_and_wait_for_return_as_soon_as_the_condition_holds() {
    let started = Instant::now();
    let mut n = 0;
    assert!(eventually(Duration::from_secs(5), || {
        n += 1;
        n == 3
    }));
    assert_eq!(
        wait_for(Duration::from_secs(5), || (n >= 3).then_some(n)),
        Some(3)
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn stress_factor_is_at_least_one() {
    assert!(support::stress_factor() >= 1);
}
