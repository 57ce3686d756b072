//! A TCP proxy in front of one server that can go silent, delay, drop or refuse traffic.
//!
//! Plain std threads: one acceptor polling a non-blocking listener, two pumps per
//! connection reading with a 20 ms timeout so they notice the flags. `Drop` stops and joins
//! them all within tens of milliseconds (plus at most one pending `delay` slice).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Read timeout of the pumps and sleep of idle loops: how fast threads notice flags.
const TICK: Duration = Duration::from_millis(20);
/// Sleep of the acceptor between empty `accept` polls.
const ACCEPT_POLL: Duration = Duration::from_millis(2);
/// Sleep slice while holding data (blackhole, delay).
const HOLD_SLICE: Duration = Duration::from_millis(2);
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A TCP proxy from `127.0.0.1:<port()>` to `127.0.0.1:<upstream>`.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    upstream_port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    shutdown: AtomicBool,
    blackhole: AtomicBool,
    discard: AtomicBool,
    /// Bytes thrown away by `discard`.
    discarded: AtomicU64,
    refuse: AtomicBool,
    delay_micros: AtomicU64,
    /// Bumped by `drop_connections`; a pump whose connection is older exits.
    generation: AtomicU64,
    next_id: AtomicU64,
    /// `(id, client side, upstream side)` of every open connection.
    conns: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
}

impl Proxy {
    /// Listens on a free port of `127.0.0.1` and forwards to `127.0.0.1:upstream_port`.
    /// Each accepted connection opens its own upstream connection; if that fails (server
    /// killed), the client connection is closed.
    ///
    /// # Panics
    /// If the listener cannot be bound or the thread not spawned.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let upstream = SocketAddr::from(([127, 0, 0, 1], upstream_port));
        let acceptor = thread::Builder::new()
            .name(format!("proxy-{port}-accept"))
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept_loop(&listener, upstream, &shared)
            })
            .unwrap();
        Proxy {
            port,
            upstream_port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn upstream_port(&self) -> u16 {
        self.upstream_port
    }

    /// `redis://127.0.0.1:P/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// While on, nothing is forwarded in either direction: connections stay open and the
    /// client sees a silent server. Bytes already read are held, and forwarded in order
    /// once turned off. Takes effect for every byte not yet being written when it returns.
    pub fn blackhole(&self, on: bool) {
        self.shared.blackhole.store(on, Ordering::SeqCst);
    }

    /// While on, every byte is read and thrown away in both directions, as on a network
    /// that loses every packet: connections stay open, the client sees a silent server,
    /// and nothing sent meanwhile ever arrives (a handshake begun then is never answered).
    pub fn discard(&self, on: bool) {
        self.shared.discard.store(on, Ordering::SeqCst);
    }

    /// Bytes thrown away by [`discard`](Self::discard) since the start, both ways.
    pub fn discarded(&self) -> u64 {
        self.shared.discarded.load(Ordering::SeqCst)
    }

    /// Holds each forwarded chunk for `delay` before writing it, in both directions, so a
    /// round trip takes at least `2 × delay`. `Duration::ZERO` turns it off.
    pub fn delay(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_micros.store(micros, Ordering::SeqCst);
    }

    /// Closes (shuts down both ways) every current connection before returning; new
    /// connections are still accepted.
    pub fn drop_connections(&self) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        for (_, client, upstream) in self.shared.conns.lock().iter() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        }
    }

    /// While on, new connections are accepted and closed at once (the client reads EOF).
    pub fn refuse(&self, on: bool) {
        self.shared.refuse.store(on, Ordering::SeqCst);
    }

    /// Number of connections forwarded since the start, closed ones included.
    pub fn accepted(&self) -> u64 {
        self.shared.next_id.load(Ordering::SeqCst)
    }

    /// Number of connections currently being forwarded.
    pub fn connections(&self) -> usize {
        self.shared.conns.lock().len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.drop_connections();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

impl Shared {
    fn stopping(&self, generation: u64) -> bool {
        self.shutdown.load(Ordering::SeqCst) || self.generation.load(Ordering::SeqCst) != generation
    }

    fn forget(&self, id: u64) {
        self.conns.lock().retain(|(conn_id, _, _)| *conn_id != id);
    }
}

/// Accepts until shutdown; owns the pump threads and joins them before returning.
fn accept_loop(listener: &TcpListener, upstream: SocketAddr, shared: &Arc<Shared>) {
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    while !shared.shutdown.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(ACCEPT_POLL);
                continue;
            }
            Err(_) => {
                thread::sleep(TICK);
                continue;
            }
        };
        if shared.refuse.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        let Ok(server) = TcpStream::connect_timeout(&upstream, UPSTREAM_CONNECT_TIMEOUT) else {
            drop(client);
            continue;
        };
        match spawn_pumps(client, server, shared) {
            Ok(handles) => pumps.extend(handles),
            Err(e) => eprintln!("proxy: cannot forward a connection: {e}"),
        }
        pumps.retain(|pump| !pump.is_finished());
    }
    for pump in pumps {
        let _ = pump.join();
    }
}

fn spawn_pumps(
    client: TcpStream,
    server: TcpStream,
    shared: &Arc<Shared>,
) -> io::Result<[JoinHandle<()>; 2]> {
    // Accepted sockets may inherit the listener's non-blocking mode on some platforms.
    client.set_nonblocking(false)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    client.set_read_timeout(Some(TICK))?;
    server.set_read_timeout(Some(TICK))?;
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let generation = shared.generation.load(Ordering::SeqCst);
    shared
        .conns
        .lock()
        .push((id, client.try_clone()?, server.try_clone()?));
    let spawn = |from: TcpStream, to: TcpStream, dir: &str| {
        let shared = Arc::clone(shared);
        thread::Builder::new()
            .name(format!("proxy-{id}-{dir}"))
            .spawn(move || pump(from, to, &shared, id, generation))
    };
    let up = spawn(client.try_clone()?, server.try_clone()?, "up")?;
    let down = spawn(server, client, "down")?;
    Ok([up, down])
}

/// Copies `from` → `to` until EOF, an error, `drop_connections` or shutdown; then closes
/// both sockets so the opposite pump ends too.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, id: u64, generation: u64) {
    let mut buf = vec![0u8; 16 * 1024];
    while !shared.stopping(generation) {
        if shared.blackhole.load(Ordering::SeqCst) {
            thread::sleep(TICK);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if is_tick(&e) => continue,
            Err(_) => break,
        };
        if shared.discard.load(Ordering::SeqCst) {
            shared.discarded.fetch_add(n as u64, Ordering::SeqCst);
            continue;
        }
        if !hold(shared, generation) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    shared.forget(id);
}

/// Waits out the delay, then any blackhole that started meanwhile (a read may have been in
/// flight when it was turned on). Returns `false` if the connection must close instead.
fn hold(shared: &Shared, generation: u64) -> bool {
    let delay = Duration::from_micros(shared.delay_micros.load(Ordering::SeqCst));
    let until = Instant::now() + delay;
    loop {
        if shared.stopping(generation) {
            return false;
        }
        let now = Instant::now();
        if now < until {
            thread::sleep((until - now).min(HOLD_SLICE));
        } else if shared.blackhole.load(Ordering::SeqCst) {
            thread::sleep(HOLD_SLICE);
        } else {
            return true;
        }
    }
}

fn is_tick(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}
