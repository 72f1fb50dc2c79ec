//! The NBD server: tarn's volumes for qemu, libnbd, nbd-client and fio.
//!
//! Fixed newstyle handshake only (`OPT_GO`, `OPT_INFO`, `OPT_LIST`,
//! `OPT_EXPORT_NAME`, structured replies, `base:allocation` meta
//! context); transmission with READ, WRITE (FUA), FLUSH, TRIM,
//! WRITE_ZEROES (NO_HOLE, FAST_ZERO), CACHE and BLOCK_STATUS; many
//! requests in flight per connection, answered in completion order, and
//! multi-conn (a FLUSH on one connection commits the writes completed on
//! every connection: the volume's whole intent log). Written by hand
//! (`shared/CRATES.md`: the protocol is small and the Rust crates are a
//! sketch or GPL).
//!
//! Threads: an accept thread; per connection one thread that does the
//! handshake and then reads requests; a shared pool of [`WORKERS`] threads
//! that run them against tarn-vol (which blocks on I/O and the log) and
//! write each reply whole under the connection's write lock.
//!
//! Memory bound per connection: at most [`IN_FLIGHT`] requests and
//! [`IN_FLIGHT_BYTES`] of payload (reads and writes alike) read and not
//! yet answered, plus one request of up to [`MAX_PAYLOAD`].
//!
//! Invariants: bad input from a client (a malformed handshake, an unknown
//! option or command, a request past the end, garbage) gets the
//! protocol's error or a closed connection, never a panic, and never
//! affects another connection; a request that panics anyway is answered
//! EIO and the server keeps running.

mod handshake;
pub mod proto;
mod transmission;

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tarn_share::nfs::HostList;
use tarn_vol::Volume;

/// Threads running requests, over all connections.
pub const WORKERS: usize = 16;
/// Requests read and not yet answered, per connection.
pub const IN_FLIGHT: usize = 64;
/// Payload bytes read (or to be read) and not yet answered, per connection.
pub const IN_FLIGHT_BYTES: u64 = 64 << 20;
/// Largest READ or WRITE (as the protocol's default maximum).
pub const MAX_PAYLOAD: u32 = 32 << 20;
/// Longest option a client may send (names and queries are short).
pub const MAX_OPTION: u32 = 64 << 10;

/// One volume (or snapshot of one) served under `name`.
#[derive(Clone)]
pub struct Export {
    /// The dataset's name (`pool/vol`, `pool/vol@snap`).
    pub name: String,
    pub volume: Arc<Volume>,
    /// Writes refused with EPERM (a snapshot, `readonly=on`).
    pub readonly: bool,
    pub description: String,
}

struct Conn {
    export: String,
    volume: Arc<Volume>,
    stream: TcpStream,
}

pub(crate) struct Shared {
    exports: RwLock<BTreeMap<String, Export>>,
    allow: RwLock<HostList>,
    conns: Mutex<BTreeMap<u64, Conn>>,
    next_conn: AtomicU64,
    stop: AtomicBool,
    pub(crate) jobs: tarn_share::workers::Workers,
    /// Busy polling for a client's next request (`[nbd] busy_poll_us`).
    pub(crate) poller: tarn_share::poll::Poller,
}

impl Shared {
    pub(crate) fn export(&self, name: &str) -> Option<Export> {
        self.exports.read().get(name).cloned()
    }
    pub(crate) fn names(&self) -> Vec<(String, String)> {
        self.exports.read().values().map(|e| (e.name.clone(), e.description.clone())).collect()
    }
    pub(crate) fn allowed(&self, client: IpAddr) -> bool {
        self.allow.read().0.iter().any(|h| h.matches(client))
    }
    /// Registers a connection in transmission (so a withdrawn export can
    /// close it); its id.
    pub(crate) fn register(&self, export: &Export, stream: &TcpStream) -> Option<u64> {
        let stream = stream.try_clone().ok()?;
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        self.conns.lock().insert(id, Conn { export: export.name.clone(), volume: export.volume.clone(), stream });
        Some(id)
    }
    pub(crate) fn unregister(&self, id: u64) {
        self.conns.lock().remove(&id);
    }
}

pub struct NbdServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl NbdServer {
    /// Listens on `listen` and serves the exports [`NbdServer::set_exports`]
    /// gives to the clients `allow` lets in.
    pub fn start(listen: SocketAddr, allow: HostList) -> io::Result<NbdServer> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let jobs = tarn_share::workers::Workers::start("nbd-worker-", WORKERS)?;
        let shared = Arc::new(Shared {
            exports: RwLock::new(BTreeMap::new()),
            allow: RwLock::new(allow),
            conns: Mutex::new(BTreeMap::new()),
            next_conn: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            jobs,
            poller: tarn_share::poll::Poller::default(),
        });
        let s = shared.clone();
        thread::Builder::new().name("nbd-accept".into()).spawn(move || accept_loop(listener, s))?;
        Ok(NbdServer { shared, addr })
    }

    /// How long a connection with one request at a time polls for its
    /// next request before it sleeps (`[nbd] busy_poll_us`; 0: never).
    pub fn set_busy_poll_us(&self, us: u64) {
        self.shared.poller.set_limit_us(us);
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The exports from now on. A connection whose export went away, or
    /// now names another volume (a pool exported and imported again, a
    /// dataset destroyed and created), is closed.
    pub fn set_exports(&self, exports: Vec<Export>) {
        let map: BTreeMap<String, Export> = exports.into_iter().map(|e| (e.name.clone(), e)).collect();
        let mut conns = self.shared.conns.lock();
        for conn in conns.values() {
            let same = map.get(&conn.export).is_some_and(|e| Arc::ptr_eq(&e.volume, &conn.volume));
            if !same {
                let _ = conn.stream.shutdown(Shutdown::Both);
            }
        }
        conns.retain(|_, c| map.get(&c.export).is_some_and(|e| Arc::ptr_eq(&e.volume, &c.volume)));
        *self.shared.exports.write() = map;
    }

    pub fn set_allow(&self, allow: HostList) {
        *self.shared.allow.write() = allow;
    }

    /// Export names served now.
    pub fn export_names(&self) -> Vec<String> {
        self.shared.exports.read().keys().cloned().collect()
    }

    /// Connections in transmission now (for status and tests).
    pub fn connections(&self) -> usize {
        self.shared.conns.lock().len()
    }

    /// Stops accepting and closes every connection.
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the accept thread.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        for conn in self.shared.conns.lock().values() {
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
        self.shared.exports.write().clear();
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        match stream {
            Ok(stream) => {
                let s = shared.clone();
                let spawned = thread::Builder::new().name("nbd-conn".into()).spawn(move || serve(stream, s));
                if spawned.is_err() {
                    thread::sleep(Duration::from_millis(50));
                }
            }
            // Out of descriptors and the like: wait a little, keep serving.
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let Ok(peer) = stream.peer_addr() else { return };
    let client = peer.ip().to_canonical();
    // A client that stops talking in the handshake is dropped.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let chosen = match handshake::negotiate(&stream, &shared, client) {
        Ok(Some(c)) => c,
        Ok(None) | Err(_) => {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    };
    let _ = stream.set_read_timeout(None);
    let Some(id) = shared.register(&chosen.export, &stream) else { return };
    transmission::run(stream, &shared, chosen);
    shared.unregister(id);
}
