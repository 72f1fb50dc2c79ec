//! What to do, independent of how: the operations of each workload, handed
//! out one at a time to any number of workers, and the data pattern that
//! lets every read check what it got.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One request.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Write { off: u64, len: u32 },
    Read { off: u64, len: u32 },
    Create(u32),
    Getattr(u32),
    Remove(u32),
}

/// How the workload hands out operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    SeqWrite,
    SeqRead,
    RandRead,
    RandWrite,
    Create,
    Getattr,
    Remove,
}

/// A shared source of operations: sequential ones from a counter, random
/// ones until the deadline.
pub struct Source {
    kind: Kind,
    size: u64,
    bs: u32,
    count: u64,
    next: AtomicU64,
    deadline: Option<Instant>,
    rng: Mutex<u64>,
}

impl Source {
    pub fn new(kind: Kind, size: u64, bs: u32, count: u64, runtime: Option<Duration>, seed: u64) -> Source {
        Source {
            kind,
            size,
            bs,
            count,
            next: AtomicU64::new(0),
            deadline: runtime.map(|d| Instant::now() + d),
            rng: Mutex::new(seed | 1),
        }
    }

    /// The next operation, or None when the workload is done.
    pub fn next(&self) -> Option<Op> {
        let blocks = self.size / u64::from(self.bs);
        match self.kind {
            Kind::SeqWrite | Kind::SeqRead => {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                if i >= blocks {
                    return None;
                }
                let off = i * u64::from(self.bs);
                let len = self.bs;
                Some(if self.kind == Kind::SeqWrite { Op::Write { off, len } } else { Op::Read { off, len } })
            }
            Kind::RandRead | Kind::RandWrite => {
                if self.deadline.is_some_and(|d| Instant::now() >= d) {
                    return None;
                }
                let r = {
                    let mut s = self.rng.lock().unwrap();
                    // xorshift64*
                    *s ^= *s >> 12;
                    *s ^= *s << 25;
                    *s ^= *s >> 27;
                    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
                };
                let off = (r % blocks) * u64::from(self.bs);
                let len = self.bs;
                Some(if self.kind == Kind::RandWrite { Op::Write { off, len } } else { Op::Read { off, len } })
            }
            Kind::Create | Kind::Getattr | Kind::Remove => {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                if i >= self.count {
                    return None;
                }
                let i = u32::try_from(i).expect("file count fits u32");
                Some(match self.kind {
                    Kind::Create => Op::Create(i),
                    Kind::Getattr => Op::Getattr(i),
                    _ => Op::Remove(i),
                })
            }
        }
    }
}

/// Data written at `off`: incompressible bytes (so compression on the
/// server cannot flatter a row) with the offset of each 4 KiB piece stamped
/// at its start, so a read can tell it got the right bytes.
pub struct Pattern {
    noise: Vec<u8>,
}

pub const STAMP: u64 = 4096;

impl Pattern {
    pub fn new(max_len: usize) -> Pattern {
        let mut noise = vec![0u8; max_len];
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        for chunk in noise.chunks_mut(8) {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let v = s.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Pattern { noise }
    }

    /// Fills `buf` with the data of `buf.len()` bytes at `off` (`off` a
    /// multiple of 4 KiB).
    pub fn fill(&self, off: u64, buf: &mut Vec<u8>, len: usize) {
        buf.clear();
        buf.extend_from_slice(&self.noise[..len]);
        for (k, piece) in buf.chunks_mut(STAMP as usize).enumerate() {
            if piece.len() >= 8 {
                piece[..8].copy_from_slice(&(off + k as u64 * STAMP).to_le_bytes());
            }
        }
    }

    /// Checks the stamps of data read at `off`.
    pub fn check(off: u64, data: &[u8]) -> Result<(), String> {
        for (k, piece) in data.chunks(STAMP as usize).enumerate() {
            if piece.len() < 8 {
                continue;
            }
            let want = off + k as u64 * STAMP;
            let got = u64::from_le_bytes(piece[..8].try_into().unwrap());
            if got != want {
                return Err(format!("read at {off}: piece {k} holds the data of offset {got}, expected {want}"));
            }
        }
        Ok(())
    }
}

/// The file name of metadata file `i`.
pub fn meta_name(i: u32) -> String {
    format!("f{i:06}")
}
