//! Syncing context: [`SyncTx`], the transaction of the txg being written.
//!
//! Open context changes data through a [`Tx`], a hold on the open txg. The
//! sync of txg T changes things too — object-set roots into the MOS table,
//! dead lists, snapshot bookkeeping, frees of T, the space map log — after
//! T has been quiesced, while T+1 is open. Those changes go through a
//! `SyncTx`, which stands for "inside the sync of T".
//!
//! Invariants (assertions on in release builds):
//! - A `SyncTx` for T exists only while `sync_txg` writes T: it is made by
//!   the sync thread's `sync_once` (and by tests), under the sync lock (the constructor wants its
//!   guard), after T was quiesced (T < the open txg), and at most one
//!   exists at a time (`Shared::syncing_txg` is T while it lives, 0 after).
//! - Every syncing-only operation checks that the `SyncTx` it was given is
//!   the one of the txg being synced ([`SyncTx::check`]).
//! - A change tagged with a txg that is neither open nor syncing would be
//!   lost (its txg is written already, or not yet quiesced): objset.rs
//!   asserts it when a dirty record is made (`Shared::assert_txg_writable`).

use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;
use tarn_block::BlockPtr;

use super::Shared;
use crate::{Tx, Txg};

/// The transaction of the txg being synced. Not `Clone`; borrowed, never
/// stored past the sync that made it.
pub(crate) struct SyncTx<'a> {
    shared: &'a Shared,
    /// A `Tx` of T without a hold (T is quiesced: no hold is needed), for
    /// the object-set operations the sync makes on the MOS.
    tx: Tx,
}

impl<'a> SyncTx<'a> {
    /// Enter the sync of `txg`. `_sync_lock` proves the caller is the one
    /// sync running.
    pub(crate) fn begin(shared: &'a Shared, _sync_lock: &MutexGuard<'_, ()>, txg: Txg) -> SyncTx<'a> {
        let open = shared.open_txg.load(Ordering::Acquire);
        assert!(txg > 0 && txg < open, "sync of txg {txg} while txg {open} is open: only a quiesced txg is synced");
        let prev = shared.syncing_txg.swap(txg, Ordering::AcqRel);
        assert_eq!(prev, 0, "sync of txg {txg} began while txg {prev} was still syncing");
        SyncTx { shared, tx: Tx { txg, _hold: None, redo: None } }
    }

    pub fn txg(&self) -> Txg {
        self.tx.txg
    }

    /// Asserts this is the transaction of the txg being synced.
    pub fn check(&self) {
        let syncing = self.shared.syncing_txg.load(Ordering::Acquire);
        assert_eq!(syncing, self.tx.txg, "a syncing-context operation for txg {} while txg {syncing} syncs", self.tx.txg);
    }

    /// The `Tx` for object-set changes made by the sync (MOS table, dead
    /// lists, snapshot bookkeeping), tagged with the syncing txg.
    pub fn tx(&self) -> &Tx {
        self.check();
        &self.tx
    }

    /// Free every copy of `bp` in the syncing txg.
    pub fn free(&self, bp: &BlockPtr) {
        self.check();
        self.shared.io.free(bp, self.tx.txg);
    }
}

impl Drop for SyncTx<'_> {
    fn drop(&mut self) {
        let prev = self.shared.syncing_txg.swap(0, Ordering::AcqRel);
        // Not an assert: a panic while unwinding would abort.
        if prev != self.tx.txg && !std::thread::panicking() {
            panic!("sync of txg {} ended while txg {prev} was marked syncing", self.tx.txg);
        }
    }
}

impl Shared {
    /// A change may be tagged only with the open txg (a `Tx` holds it open)
    /// or the txg being synced (a `SyncTx`): any other txg is written
    /// already or not yet quiesced, and the change would be lost.
    pub(crate) fn assert_txg_writable(&self, txg: Txg) {
        let open = self.open_txg.load(Ordering::Acquire);
        if txg == open {
            return;
        }
        let syncing = self.syncing_txg.load(Ordering::Acquire);
        assert!(txg == syncing, "a change tagged txg {txg}, which is neither open ({open}) nor syncing ({syncing})");
    }
}
