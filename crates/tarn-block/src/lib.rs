//! Blocks: block pointers, the checksum and compression registries, the
//! write and read pipelines, and space allocation with its on-disk log.
//!
//! Write: compress -> pad to sector -> seal (encrypted datasets, crypt.rs)
//! -> checksum -> allocate copies on distinct vdevs -> write. Read: read a
//! copy (the vdev verifies and repairs against the checksum) -> on failure
//! try the next copy and rewrite the bad one -> open (MAC, then decrypt) ->
//! decompress -> cache.
pub mod alloc;
pub mod alloc_lock;
pub mod arc;
pub mod bp;
pub mod checksum;
pub mod compress;
pub mod crypt;
pub mod gang;
pub mod io;
pub mod props;
pub mod read_cache;
pub mod spacemap;

pub use alloc::{Allocator, Extent, DEFER_TXGS};
pub use alloc_lock::{AllocGuard, AllocLock, SpaceTotals};
pub use arc::{arc, ArcStats};
pub use bp::{BlockPtr, Dva, BP_SIZE};
pub use crypt::{BlockKeys, Cipher, CryptError, RawBlock};
pub use gang::{CopyPlace, Placement};
pub use io::{BlockError, BlockIo, WriteSpec};
pub use props::{ChecksumKind, Compression};
pub use read_cache::{CacheKey, ReadCache, SecondLevel};
