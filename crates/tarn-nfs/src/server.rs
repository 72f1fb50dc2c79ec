//! Connections: tokio tasks for the network, a bounded pool of blocking
//! workers for tarn-fs.
//!
//! Why tokio: an idle or slow client costs a parked task, not a thread,
//! and a connection's reader, its calls and its writer run independently,
//! so replies go out in completion order (clients match them by xid) and
//! a client that stops reading its replies stalls only its own calls.
//! tarn-fs is synchronous and blocks on I/O and txg syncs (COMMIT), so
//! each call runs in `spawn_blocking`, at most `WORKERS` at once across
//! all connections.
//!
//! Memory bound per connection: at most `IN_FLIGHT` calls are read and
//! not yet answered; each record is at most `rpc::MAX_RECORD`, each reply
//! at most about 1 MiB (READ, READDIR are capped), so a connection holds
//! at most `IN_FLIGHT` × ~2 MiB whatever the client sends.

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::RwLock;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

use crate::exports::Table;
use crate::rpc::{read_record, reply, Status};

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

pub async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
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

async fn serve(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let client = peer.ip().to_canonical();
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT);
    let writer = tokio::spawn(async move {
        while let Some(buf) = rx.recv().await {
            if wr.write_all(&buf).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
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
        let tx = tx.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(worker) = shared.workers.clone().acquire_owned().await else { return };
            let table = shared.table.read().clone();
            let (verifier, port) = (shared.verifier.load(std::sync::atomic::Ordering::Acquire).to_be_bytes(), shared.port);
            let out = tokio::task::spawn_blocking(move || {
                let _worker = worker;
                crate::dispatch::handle(&record, &table, client, verifier, port)
            })
            .await;
            let bytes = match out {
                Ok(Some(b)) => b,
                Ok(None) => return,
                // A procedure panicked: a bug, answered as SYSTEM_ERR so the
                // client does not wait forever; the server keeps running.
                Err(_) => reply(xid, Status::SystemErr, None),
            };
            let _ = tx.send(bytes).await;
        });
    }
    drop(tx);
    let _ = writer.await;
}
