//! Replication at the object level: send streams of snapshots and receive
//! them into another pool (or the same one).
//!
//! - [`send`]: a full stream of a snapshot, or an incremental one from an
//!   earlier snapshot of the same head; [`send_series`]: consecutive
//!   incrementals (`-I`) as sub-streams of one stream; [`estimate`] /
//!   [`estimate_series`]: the exact size of that stream without producing
//!   it (`send -nv`).
//! - [`receive`]: applies a stream to a new object set (full) or to a head
//!   whose newest snapshot is the stream's base (incremental), taking a
//!   snapshot after each sub-stream. Every record is verified before it is
//!   applied; on any error the target is rolled back to what it was, or,
//!   with [`RecvOptions::resumable`], the partial state is kept and a
//!   resume token returned ([`SendError::Interrupted`]).
//! - [`send_resume`] / [`send_series_resume`]: the rest of a stream from a
//!   token; receiving it with [`RecvTarget::Resume`] completes the
//!   interrupted receive.
//!
//! The base of an incremental is a [`SendBase`]: a snapshot, or a bookmark
//! (the txg and guid of a snapshot that may be gone).
//!
//! Snapshots are named by [`SnapRef`]: the object set, the txg it was taken
//! in, and its guid. The object layer has no snapshot guids; the dataset
//! layer keeps them (and a received snapshot keeps its source's guid, as in
//! ZFS, so that the next incremental finds its base by guid).
//!
//! The stream format is in `docs/send-stream.md`; the design of the
//! receive (rollback on failure, resume) is there too.

use tarn_obj::{ObjError, ObjsetId, Txg, WriteProps};

pub mod format;
mod recv;
mod send;
mod verify;

pub use format::{Begin, Position, ResumeToken};
pub use recv::{abort_partial, peek_begin, receive, undo_receive};
pub use verify::verify_copy;
pub use send::{estimate, estimate_raw, estimate_resume, estimate_series, send, send_raw, send_resume, send_series, send_series_resume};

pub type Result<T> = std::result::Result<T, SendError>;

/// A snapshot: its object set, the txg it was taken in (on this pool) and
/// its guid (the same on every pool it was replicated to).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SnapRef {
    pub objset: ObjsetId,
    pub txg: Txg,
    pub guid: u64,
}

/// The base of an incremental stream: a snapshot, or a bookmark of one
/// (`fs#name`: only the txg and guid of a snapshot that may be destroyed
/// since). From a bookmark the sender cannot read the base's tree, so the
/// stream frees every hole and free object slot under what changed (see
/// `docs/send-stream.md`, "Incremental from a bookmark"); the receiver,
/// which holds the snapshot itself, applies it to the same result.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SendBase {
    Snapshot(SnapRef),
    Bookmark { txg: Txg, guid: u64 },
}

impl SendBase {
    /// The txg the base (snapshot) was taken in, on the sending pool.
    pub fn txg(&self) -> Txg {
        match self {
            SendBase::Snapshot(s) => s.txg,
            SendBase::Bookmark { txg, .. } => *txg,
        }
    }

    /// The base snapshot's guid.
    pub fn guid(&self) -> u64 {
        match self {
            SendBase::Snapshot(s) => s.guid,
            SendBase::Bookmark { guid, .. } => *guid,
        }
    }

    pub fn is_bookmark(&self) -> bool {
        matches!(self, SendBase::Bookmark { .. })
    }
}

impl From<SnapRef> for SendBase {
    fn from(s: SnapRef) -> Self {
        SendBase::Snapshot(s)
    }
}

impl From<&SnapRef> for SendBase {
    fn from(s: &SnapRef) -> Self {
        SendBase::Snapshot(*s)
    }
}

/// Where a stream is received.
#[derive(Clone, Debug)]
pub enum RecvTarget {
    /// A full stream (or a series starting with one) into a new object set
    /// that the receive creates.
    New,
    /// An incremental stream (or series) onto `head`, whose newest snapshot
    /// is `base` (this pool's object set and txg, the source's guid). The
    /// stream's base guid must be `base.guid`. If `head` changed since
    /// `base`, the receive fails unless `force` (`-F`), which first rolls
    /// `head` back to `base`.
    Existing { head: ObjsetId, base: SnapRef, force: bool },
    /// Continue an interrupted resumable receive whose partial state is
    /// `head`, with the token that interruption returned. Always resumable.
    Resume { head: ObjsetId, token: String },
}

/// What a receive tells its caller as it goes, each call inside the
/// transaction of the change it describes, so that a journal the caller
/// writes in that transaction is in the same txg as the change: an import
/// after a crash finds the journal and the object sets consistent (the
/// dataset layer's "receive in progress" record, `docs/send-stream.md`,
/// "Crash safety").
pub trait RecvJournal: Send + Sync {
    /// A full stream's object set `head` was created in `tx`; `token`
    /// resumes the stream from its start.
    fn created(&self, tx: &tarn_obj::Tx, head: ObjsetId, token: &str) -> tarn_obj::Result<()>;
    /// `tx` holds the first change of its txg; every state that includes
    /// it is at or past `token`'s position.
    fn progress(&self, tx: &tarn_obj::Tx, token: &str) -> tarn_obj::Result<()>;
    /// Snapshot `snap` is taken in `tx` (it exists once `tx`'s txg is on
    /// disk); `token` resumes after it.
    fn snapshot(&self, tx: &tarn_obj::Tx, snap: &ReceivedSnap, token: &str) -> tarn_obj::Result<()>;
}

#[derive(Clone, Default)]
pub struct RecvOptions {
    /// `-s`: on failure keep what arrived and return a resume token.
    pub resumable: bool,
    /// Write properties of the receiving object set (compression,
    /// checksum, copies); `None`: the object set's current ones.
    pub props: Option<WriteProps>,
    /// A raw stream is expected, of this cipher and key guid (checked
    /// against its CRYPT record before anything is created); `None`: a
    /// plain stream is (a raw one is refused).
    pub raw: Option<tarn_obj::crypt::Crypt>,
    /// Told of every change as it is made (see [`RecvJournal`]).
    pub journal: Option<std::sync::Arc<dyn RecvJournal>>,
}

impl std::fmt::Debug for RecvOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvOptions")
            .field("resumable", &self.resumable)
            .field("props", &self.props)
            .field("raw", &self.raw)
            .field("journal", &self.journal.is_some())
            .finish()
    }
}

/// A snapshot a receive created.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReceivedSnap {
    /// The new snapshot's object set on the receiving pool.
    pub objset: ObjsetId,
    /// The receiving pool's txg it was taken in.
    pub txg: Txg,
    /// The source snapshot's guid (the received snapshot keeps it).
    pub guid: u64,
    /// The source snapshot's txg on the sending pool.
    pub source_txg: Txg,
}

impl ReceivedSnap {
    /// As a base for the next incremental on this pool.
    pub fn snap_ref(&self) -> SnapRef {
        SnapRef { objset: self.objset, txg: self.txg, guid: self.guid }
    }
}

#[derive(Clone, Debug)]
pub struct RecvOutcome {
    /// The object set that received the stream (new for a full stream).
    pub head: ObjsetId,
    /// One snapshot per sub-stream applied, in order.
    pub snapshots: Vec<ReceivedSnap>,
    pub bytes: u64,
    pub records: u64,
}

/// What an interrupted resumable receive kept.
#[derive(Clone, Debug)]
pub struct PartialRecv {
    /// Opaque; give it to `send_resume` on the sending side and to
    /// `receive` with `RecvTarget::Resume` here.
    pub token: String,
    /// The object set holding the partial state.
    pub head: ObjsetId,
    /// Snapshots of the sub-streams completed before the interruption.
    pub snapshots: Vec<ReceivedSnap>,
}

/// Bytes and records of a stream written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SendSummary {
    pub bytes: u64,
    pub records: u64,
    pub stream_guid: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("stream I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Obj(#[from] ObjError),
    #[error("stream truncated: {0}")]
    Truncated(String),
    #[error("corrupt stream: {0}")]
    Corrupt(String),
    #[error("wrong base: {0}")]
    WrongBase(String),
    #[error("not supported: {0}")]
    Unsupported(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("destination has been modified since the base snapshot (receive with force to roll it back)")]
    Modified,
    #[error("{cause}; and restoring the target failed: {cleanup}")]
    CleanupFailed { cause: Box<SendError>, cleanup: String },
    #[error("receive interrupted ({cause}); partial state kept in object set {}, resume token {}", partial.head.0, partial.token)]
    Interrupted { cause: Box<SendError>, partial: Box<PartialRecv> },
}

impl SendError {
    /// The underlying error of an interrupted or uncleanly failed receive.
    pub fn cause(&self) -> &SendError {
        match self {
            SendError::Interrupted { cause, .. } | SendError::CleanupFailed { cause, .. } => cause.cause(),
            e => e,
        }
    }
}
