//! NFSv3 and MOUNT over one TCP port, translated onto tarn-fs.
//!
//! A userspace NFS server inside the daemon: no kernel NFS server,
//! rpcbind or nfs-utils, no FUSE. Built on `nfs3_types` (XDR codec and
//! protocol types); RPC framing, dispatch and every procedure are ours.
//!
//! # API (what the daemon calls)
//!
//! ```text
//! let server = NfsServer::start("0.0.0.0:2049".parse()?, verifier_seed)?;
//! server.set_exports(vec![Export { path: "/tank/media".into(), mountpoint: Some("/tank/media".into()),
//!     fs, pool_guid, objset, rules, snapshots: Some(source) }]);
//! server.exports();   // Vec<ExportInfo>: what is served, and to whom it is mounted
//! server.set_verifier_seed(seed); // a pool was imported: clients resend unstable writes
//! server.shutdown();  // closes every connection; also on drop
//! ```
//! `verifier_seed` must change at every daemon start and pool import: the
//! write verifier is derived from it, and a changed verifier makes
//! clients resend the UNSTABLE writes a restart may have lost.
//! `set_exports` replaces the whole table; calls in flight finish on the
//! table they started with.
//!
//! # Invariants
//! - Permission checks are tarn-fs's (`caller.rs` is the only door);
//!   tarn-nfs applies only the export rules (refused clients, read-only
//!   clients, squashing), on every call, by client address.
//! - A file handle names pool, dataset, inode and generation
//!   (`handle.rs`, docs/nfs.md): never another file than the one it was
//!   made for; gone or unknown is NFS3ERR_STALE, undecodable BADHANDLE.
//! - An acknowledged FILE_SYNC write or COMMIT is durable (`Fs::fsync`).
//! - Input is never trusted: records are bounded before they are read,
//!   arguments are decoded with every length checked (`xdr.rs`).

mod caller;
mod dispatch;
mod exports;
mod handle;
mod mount;
mod nfs;
mod proc_dir;
mod proc_read;
mod proc_write;
mod rpc;
mod server;
mod xdr;

#[cfg(test)]
#[path = "../../tarn-fs/tests/support/mod.rs"]
mod fs_support;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

pub use exports::{Export, ExportInfo};
pub use handle::{HANDLE_LEN, HANDLE_VERSION};
pub use rpc::MAX_RECORD;

/// A running NFS server (MOUNT v3 + NFS v3, and PMAP GETPORT for itself,
/// on one TCP port).
pub struct NfsServer {
    shared: Arc<server::Shared>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    local: SocketAddr,
    /// Opened by `serve_now`: the accept loop waits for its one permit.
    gate: Arc<tokio::sync::Semaphore>,
    gate_opened: std::sync::atomic::AtomicBool,
}

/// The 8-byte write verifier for a seed (splitmix64: every bit of the
/// seed changes it).
fn verifier(seed: u64) -> [u8; 8] {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).to_be_bytes()
}

impl NfsServer {
    /// Listens on `listen` (port 0: any free port, see `local_addr`) and
    /// serves no export until `set_exports`.
    pub fn start(listen: SocketAddr, verifier_seed: u64) -> io::Result<NfsServer> {
        let server = NfsServer::start_held(listen, verifier_seed)?;
        server.serve_now();
        Ok(server)
    }

    /// Like [`NfsServer::start`], but connections wait in the listen
    /// backlog until [`NfsServer::serve_now`]: the daemon binds its port at
    /// start (a port in use is an error at once) and answers only once its
    /// pools are imported and their exports set, so a client that held
    /// handles across a daemon restart never gets STALE or NOENT for an
    /// export that is about to come back.
    pub fn start_held(listen: SocketAddr, verifier_seed: u64) -> io::Result<NfsServer> {
        let std_listener = std::net::TcpListener::bind(listen)?;
        std_listener.set_nonblocking(true)?;
        let local = std_listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tarn-nfs")
            .enable_all()
            .build()?;
        let shared = Arc::new(server::Shared::new(
            exports::Table::default(),
            u64::from_be_bytes(verifier(verifier_seed)),
            tarn_share::workers::Workers::start("tarn-nfs-call", server::WORKERS)?,
            local.port(),
        ));
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(std_listener)?
        };
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        runtime.spawn(server::accept_loop(listener, shared.clone(), gate.clone()));
        Ok(NfsServer { shared, runtime: Mutex::new(Some(runtime)), local, gate, gate_opened: std::sync::atomic::AtomicBool::new(false) })
    }

    /// How long a connection with one call at a time polls for its next
    /// call before it sleeps (`[nfs] busy_poll_us`; 0: never).
    pub fn set_busy_poll_us(&self, us: u64) {
        self.shared.poller.set_limit_us(us);
    }

    /// Start accepting connections (a no-op after the first call).
    pub fn serve_now(&self) {
        if !self.gate_opened.swap(true, std::sync::atomic::Ordering::AcqRel) {
            self.gate.add_permits(1);
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves exactly `exports` from now on (the mount list is kept for
    /// the paths still exported).
    /// A new write verifier, from `seed`: the daemon calls this when a
    /// pool is imported (writes a client sent UNSTABLE before may be gone).
    pub fn set_verifier_seed(&self, seed: u64) {
        let v = u64::from_be_bytes(verifier(seed));
        self.shared.verifier.store(v, std::sync::atomic::Ordering::Release);
    }

    pub fn set_exports(&self, exports: Vec<Export>) {
        let mut table = self.shared.table.write();
        let mounts: Vec<_> = table.mounts.lock().iter().filter(|(_, p)| exports.iter().any(|e| e.path == *p)).cloned().collect();
        let entries = exports.into_iter().map(|e| Arc::new(exports::Entry::new(e))).collect();
        *table = Arc::new(exports::Table { entries, mounts: Mutex::new(mounts) });
    }

    pub fn exports(&self) -> Vec<ExportInfo> {
        let table = self.shared.table.read().clone();
        let mounts = table.mounts.lock().clone();
        table
            .entries
            .iter()
            .map(|e| ExportInfo {
                path: e.export.path.clone(),
                mountpoint: e.export.mountpoint.clone(),
                pool_guid: e.export.pool_guid,
                objset: e.export.objset,
                clients: mounts.iter().filter(|(_, p)| *p == e.export.path).map(|(c, _)| *c).collect(),
            })
            .collect()
    }

    /// Stops listening and closes every connection; calls queued and not
    /// started are dropped unanswered (clients resend them), calls running
    /// in tarn-fs get up to 5 s to finish. Idempotent.
    pub fn shutdown(&self) {
        if let Some(rt) = self.runtime.lock().take() {
            self.shared.calls.close();
            if tokio::runtime::Handle::try_current().is_ok() {
                // Called from async code: waiting here would panic (the
                // runtime) or hold a runtime thread (the calls).
                rt.shutdown_background();
            } else {
                rt.shutdown_timeout(Duration::from_secs(5));
                // No connection is left to queue calls; let the running ones end.
                self.shared.calls.drain(Duration::from_secs(5));
            }
        }
    }
}

impl Drop for NfsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}
