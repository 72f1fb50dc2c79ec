//! Redundancy: leaf devices, mirrors and raidz, labels and the uberblock ring.
//!
//! A top-level vdev ([`TopVdev`]) turns one or more leaf devices into one
//! linear, redundant address space of `asize` bytes. Reads are verified by a
//! caller-supplied closure (the block layer's checksum); a read that fails
//! verification is reconstructed from redundancy and the bad copies are
//! rewritten, so silent corruption is never returned.
//!
//! # Leaf device layout
//!
//! `end` = device size rounded down to 256 KiB.
//!
//! | range                          | contents                          |
//! |--------------------------------|-----------------------------------|
//! | `[0, 256K)`                    | label L0                          |
//! | `[256K, 512K)`                 | label L1                          |
//! | `[512K, 4M)`                   | reserved (zero)                   |
//! | `[4M, end - 512K)`             | data region ([`DATA_START`])      |
//! | `[end - 512K, end - 256K)`     | label L2                          |
//! | `[end - 256K, end)`            | label L3                          |
//!
//! Each 256 KiB label copy:
//!
//! | range           | contents                                              |
//! |-----------------|-------------------------------------------------------|
//! | `[0, 8K)`       | unused (left for boot blocks / partition tables)      |
//! | `[8K, 128K)`    | config: 48-byte header (magic `TARNLBL1`, version u32 = 1, payload_len u32, blake3 of payload) + JSON [`Label`] |
//! | `[128K, 256K)`  | uberblock ring: 128 slots of 1 KiB; txg `t` goes to slot `t % 128` |
//!
//! Byte layouts of the header and of an uberblock slot are in `format.rs`.
//! Labels are written L0+L2, flush, L1+L3, flush, so a crash mid-update
//! always leaves a complete old or new copy. An uberblock is written to its
//! slot in all four copies, then the device is flushed.
//!
//! Invariants:
//! - A read returns data that passed the caller's verify closure, or an
//!   error; never unverified data.
//! - A raidz block is its own full stripe; parity is never read-modified-written.
//! - Malformed labels and slots are errors, never panics.

mod config;
mod error;
mod format;
mod gather;
pub mod iostat;
mod label;
mod leaf;
mod parity;
mod raidz;
mod threads;
mod top;
mod trim;

pub use config::{
    Label, LeafConfig, LeafRole, PoolConfig, PoolState, TopClass, TopConfig, TopKind, CACHE_TOP_ID, FEATURE_ENCRYPTION, KNOWN_FEATURES,
    SPARE_TOP_ID,
};
pub use error::{Result, VdevError};
pub use label::{
    clear_labels, data_region_size, read_label, read_uberblocks, write_label, write_uberblock, Uberblock,
    UberblockWrite, DATA_START, MIN_DEVICE_SIZE, UBERBLOCK_PAYLOAD_MAX,
};
pub use iostat::{CountedDevice, IoCounters};
pub use leaf::{Dtl, DevState, LeafStatus, LeafVdev};
pub use parity::{ParityCodec, ReedSolomonCodec, XorCodec};
pub use top::{ReadOutcome, ScanOutcome, Slot, TopStatus, TopVdev};
