//! Connections: tokio tasks for the network, a fixed set of threads for
//! tarn-fs.
//!
//! Why tokio: an idle or slow client costs a parked task, not a thread,
//! and a connection's reader, its calls and its replies run independently,
//! so replies go out in completion order (clients match them by xid) and
//! a client that stops reading its replies stalls only its own calls.
//! tarn-fs is synchronous and blocks on I/O and on durable log writes
//! (COMMIT, stable WRITE, namespace changes), so calls run on `WORKERS`
//! threads of their own (tarn-share `workers.rs`), fed by one queue: handing a call over
//! is one queue push and, when a thread is idle, one wake-up. (Calls ran
//! under `block_in_place` until 2026-11-29; that hands the runtime's core
//! to another thread on every call, and the wake-ups it took cost more
//! CPU than the call at 4 KiB, docs/benchmarks.md.) The thread that ran a
//! call also writes its reply when the socket takes it at once
//! (`Replies::send`): no further hand-off on a call's way; a reply the
//! socket cannot take now is written by a task, so no call ever waits on
//! a client.
//!
//! Calls that memory alone answers (a GETATTR, ACCESS or READ whose
//! inode and blocks are cached and whose inode no change holds:
//! `dispatch::handle_cached`) are answered by the connection's task
//! itself, without the hand-off: at many calls in flight the wake-up of a
//! worker per call cost more than such a call. Nothing in that path reads
//! the pool or waits for a lock a change holds; everything else goes to
//! the workers. Their replies, while more calls wait in the read buffer,
//! are sent together (`Batch`).
//!
//! Busy polling (tarn-share `poll.rs`): a connection with at most one
//! call in flight polls its socket for the next call up to
//! `[nfs] busy_poll_us` before it sleeps; on a VM, waking an idle CPU
//! costs more than a cached call. The poll holds one of the runtime's two
//! threads, for at most that long, and one connection polls at a time.
//!
//! Memory bound per connection: at most `IN_FLIGHT` calls are read and
//! not yet answered; each record is at most `rpc::MAX_RECORD`, each reply
//! at most about 1 MiB (READ, READDIR are capped), so a connection holds
//! at most `IN_FLIGHT` × ~2 MiB whatever the client sends, plus its
//! 64 KiB read buffer.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use tarn_share::poll::Poller;
use tarn_share::workers::Workers;

use crate::exports::Table;
use crate::rpc::{read_record, reply, write_record, Record, Status};

/// Calls running in tarn-fs at once, over all connections.
pub const WORKERS: usize = 32;
/// Calls read and not yet answered, per connection.
pub const IN_FLIGHT: usize = 16;

pub struct Shared {
    pub table: RwLock<Arc<Table>>,
    /// The write verifier (`lib.rs`'s `verifier` of the current seed).
    pub verifier: AtomicU64,
    /// The threads calls run on (`WORKERS`); closed at shutdown.
    pub calls: Workers,
    pub port: u16,
    /// Busy polling for the next call (`[nfs] busy_poll_us`).
    pub poller: Poller,
}

impl Shared {
    pub fn new(table: Table, verifier: u64, calls: Workers, port: u16) -> Shared {
        Shared {
            table: RwLock::new(Arc::new(table)),
            verifier: AtomicU64::new(verifier),
            calls,
            port,
            poller: Poller::default(),
        }
    }
}

/// Accepts connections once `gate` has a permit (`NfsServer::serve_now`);
/// until then clients wait in the listen backlog.
pub async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, gate: Arc<Semaphore>) {
    if let Ok(permit) = gate.acquire().await {
        permit.forget();
    }
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, peer, shared.clone()));
            }
            // Out of descriptors and the like: wait a little, keep serving.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}

/// Where a connection's replies go. A worker that finished a call writes
/// its reply itself when the socket is free and takes it whole without
/// waiting (the usual case: no hand-off back to the async side); otherwise
/// a task writes it (or its rest) once the socket is free and writable.
/// The mutex keeps records whole; replies go out in completion order
/// (clients match them by xid).
struct Replies {
    wr: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    rt: tokio::runtime::Handle,
}

impl Replies {
    /// Sends `rec`; `permit` (the places among `IN_FLIGHT` of the calls it
    /// answers) is given back once it is written or the connection is
    /// broken.
    fn send<P: Send + 'static>(&self, rec: Record, permit: P) {
        let mut rec = rec;
        match self.wr.clone().try_lock_owned() {
            Ok(guard) => {
                match try_write(&guard, &rec) {
                    Ok(n) if n == rec.size() => return,
                    Ok(n) => rec = rec.rest(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return, // broken: the reader sees it too
                }
                // Part of the record is out: finish it before anyone else writes.
                self.rt.spawn(async move {
                    let mut guard = guard;
                    let _ = write_record(&mut *guard, &rec).await;
                    drop(permit);
                });
            }
            Err(_) => {
                let wr = self.wr.clone();
                self.rt.spawn(async move {
                    let mut guard = wr.lock_owned().await;
                    let _ = write_record(&mut *guard, &rec).await;
                    drop(permit);
                });
            }
        }
    }
}

/// Replies of cached calls answered while more calls wait in the read
/// buffer: sent together once the buffer holds no whole call (or the
/// batch is full, or the connection has no place for another call), one
/// send for many replies instead of one each. Over loopback TCP a send
/// runs the receiver's side of the stack too, so at many calls in flight
/// the sends were most of a cached call's cost.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    permits: Vec<OwnedSemaphorePermit>,
}

/// A batch is sent once it holds this many bytes.
const BATCH_MAX: usize = 256 << 10;
/// Larger replies (READs of more than a few blocks) go out alone, their
/// data not copied.
const BATCH_ONE_MAX: usize = 16 << 10;

impl Batch {
    fn add(&mut self, rec: &Record, permit: OwnedSemaphorePermit) {
        rec.append_to(&mut self.bytes);
        self.permits.push(permit);
    }

    fn flush(&mut self, replies: &Replies) {
        if !self.permits.is_empty() {
            let bytes = std::mem::take(&mut self.bytes);
            replies.send(Record::joined(bytes), std::mem::take(&mut self.permits));
        }
    }
}

/// Whether `buf` starts with a whole single-fragment record: a call that
/// can be read without waiting for the client.
fn whole_record_buffered(buf: &[u8]) -> bool {
    let Some(&[a, b, c, d]) = buf.get(..4) else { return false };
    let mark = u32::from_be_bytes([a, b, c, d]);
    mark & 0x8000_0000 != 0 && buf.len() - 4 >= (mark & 0x7fff_ffff) as usize
}

/// Writes what the socket takes now, without waiting.
fn try_write(wr: &OwnedWriteHalf, rec: &Record) -> io::Result<usize> {
    let total = rec.size();
    let mut done = 0;
    let mut slices = Vec::new();
    while done < total {
        rec.unsent(done, &mut slices);
        match wr.try_write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && done > 0 => return Ok(done),
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

async fn serve(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let client = peer.ip().to_canonical();
    let fd = stream.as_raw_fd();
    let (rd, wr) = stream.into_split();
    // Small calls come whole, and calls a client pipelines come several
    // at a time, from one read; a 1 MiB WRITE's body bypasses the buffer.
    let mut rd = tokio::io::BufReader::with_capacity(64 << 10, rd);
    let replies = Arc::new(Replies { wr: Arc::new(tokio::sync::Mutex::new(wr)), rt: tokio::runtime::Handle::current() });
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut batch = Batch::default();
    loop {
        // The batch goes before anything may wait: for the client (no
        // whole call buffered) or for a place (its calls hold theirs).
        if !(whole_record_buffered(rd.buffer()) && in_flight.available_permits() > 0) {
            batch.flush(&replies);
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else { break };
        // At most one call in flight (the one just handed over) and
        // nothing buffered: a client waiting on each reply.
        if rd.buffer().is_empty() && in_flight.available_permits() + 2 >= IN_FLIGHT {
            shared.poller.wait_readable(fd);
        }
        let record = match read_record(&mut rd).await {
            Ok(Some(r)) => r,
            // End of stream, an oversized record, or a broken one: close.
            Ok(None) | Err(_) => break,
        };
        if record.len() < 8 {
            break; // no xid and message type: nothing to answer
        }
        let xid = u32::from_be_bytes([record[0], record[1], record[2], record[3]]);
        let table = shared.table.read().clone();
        let (verifier, port) = (shared.verifier.load(Ordering::Acquire).to_be_bytes(), shared.port);
        // A GETATTR, ACCESS or READ that memory alone answers is answered
        // here; a panic in it leaves the call to a worker, which answers it.
        let cached = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::dispatch::handle_cached(&record, &table, client, verifier)
        }));
        if let Ok(Some(rec)) = cached {
            if rec.size() <= BATCH_ONE_MAX && (whole_record_buffered(rd.buffer()) || !batch.permits.is_empty()) {
                batch.add(&rec, permit);
                if batch.bytes.len() >= BATCH_MAX {
                    batch.flush(&replies);
                }
            } else {
                replies.send(rec, permit);
            }
            continue;
        }
        let replies = replies.clone();
        let call = move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::dispatch::handle(&record, &table, client, verifier, port)
            }));
            let rec = match out {
                Ok(Some(rec)) => rec,
                Ok(None) => return,
                // A procedure panicked: a bug, answered as SYSTEM_ERR so the
                // client does not wait forever; the server keeps running.
                Err(_) => reply(xid, Status::SystemErr, None),
            };
            replies.send(rec, permit);
        };
        if !shared.calls.run(Box::new(call)) {
            break;
        }
    }
    // Every call answered (each gives its permit back once its reply is
    // written), then the write side is closed.
    batch.flush(&replies);
    let _ = in_flight.acquire_many(IN_FLIGHT as u32).await;
    let mut wr = replies.wr.lock().await;
    let _ = wr.shutdown().await;
}
