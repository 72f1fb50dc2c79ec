//! Connections: tokio tasks for the network, a bounded pool of blocking
//! workers for tarn-fs.
//!
//! Why tokio: an idle or slow client costs a parked task, not a thread,
//! and a connection's reader, its calls and its replies run independently,
//! so replies go out in completion order (clients match them by xid) and
//! a client that stops reading its replies stalls only its own calls.
//! tarn-fs is synchronous and blocks on I/O and txg syncs (COMMIT), so
//! each call runs under `block_in_place` (the runtime moves the thread's
//! other tasks to another thread while it blocks), at most `WORKERS` at
//! once across all connections. The thread that ran a call also writes
//! its reply when the socket takes it at once (`Replies::send`): no
//! thread hand-off on a call's way (there were three, with
//! `spawn_blocking` and a writer task; at one call in flight that doubled
//! the time of a CREATE or REMOVE, docs/benchmarks.md); a reply the
//! socket cannot take now is written by a task, so no call ever waits on
//! a client.
//!
//! Memory bound per connection: at most `IN_FLIGHT` calls are read and
//! not yet answered; each record is at most `rpc::MAX_RECORD`, each reply
//! at most about 1 MiB (READ, READDIR are capped), so a connection holds
//! at most `IN_FLIGHT` × ~2 MiB whatever the client sends.

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::RwLock;
use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::exports::Table;
use crate::rpc::{read_record, reply, write_record, Record, Status};

/// Calls running in tarn-fs at once, over all connections.
pub const WORKERS: usize = 32;
/// Calls read and not yet answered, per connection.
pub const IN_FLIGHT: usize = 16;

pub struct Shared {
    pub table: RwLock<Arc<Table>>,
    /// The write verifier (`lib.rs`'s `verifier` of the current seed).
    pub verifier: std::sync::atomic::AtomicU64,
    pub workers: Arc<Semaphore>,
    pub port: u16,
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
    /// Sends `rec`; `permit` (the call's place among `IN_FLIGHT`) is given
    /// back once it is written or the connection is broken.
    fn send(&self, rec: Record, permit: OwnedSemaphorePermit) {
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

/// Writes what the socket takes now, without waiting.
fn try_write(wr: &OwnedWriteHalf, rec: &Record) -> io::Result<usize> {
    let total = rec.size();
    let mut done = 0;
    while done < total {
        let mut slices = [io::IoSlice::new(&[]); 3];
        let k = rec.unsent(done, &mut slices);
        match wr.try_write_vectored(&slices[..k]) {
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
    let (mut rd, wr) = stream.into_split();
    let replies = Arc::new(Replies { wr: Arc::new(tokio::sync::Mutex::new(wr)), rt: tokio::runtime::Handle::current() });
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else { break };
        let record = match read_record(&mut rd).await {
            Ok(Some(r)) => r,
            // End of stream, an oversized record, or a broken one: close.
            Ok(None) | Err(_) => break,
        };
        if record.len() < 8 {
            break; // no xid and message type: nothing to answer
        }
        let xid = u32::from_be_bytes([record[0], record[1], record[2], record[3]]);
        let shared = shared.clone();
        let replies = replies.clone();
        tokio::spawn(async move {
            let Ok(worker) = shared.workers.clone().acquire_owned().await else { return };
            let table = shared.table.read().clone();
            let (verifier, port) = (shared.verifier.load(std::sync::atomic::Ordering::Acquire).to_be_bytes(), shared.port);
            let call = move || {
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    crate::dispatch::handle(&record, &table, client, verifier, port)
                }));
                drop(worker);
                let rec = match out {
                    Ok(Some(rec)) => rec,
                    Ok(None) => return,
                    // A procedure panicked: a bug, answered as SYSTEM_ERR so the
                    // client does not wait forever; the server keeps running.
                    Err(_) => reply(xid, Status::SystemErr, None),
                };
                replies.send(rec, permit);
            };
            // On this thread: the runtime hands this worker's other tasks
            // to another thread, and no thread waits for this one.
            tokio::task::block_in_place(call);
        });
    }
    // Every call answered (each gives its permit back once its reply is
    // written), then the write side is closed.
    let _ = in_flight.acquire_many(IN_FLIGHT as u32).await;
    let mut wr = replies.wr.lock().await;
    let _ = wr.shutdown().await;
}

