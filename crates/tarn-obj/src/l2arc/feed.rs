//! The feed thread of one pool's L2ARC: rebuilds the devices' indexes,
//! then every `FEED_INTERVAL` writes what the ARC offered, within the
//! byte budget of `l2arc_write_max` (+ `l2arc_write_boost` while warming).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::format::{self, Queued};
use super::{count, rebuild, PoolL2, WRITE_BOOST, WRITE_MAX};

/// How often the feed writes (5 times a second: the budget per tick is a
/// fifth of the per-second rates).
pub const FEED_INTERVAL: Duration = Duration::from_millis(200);
const TICKS_PER_SECOND: u64 = 5;


pub(crate) fn run(pool: &Arc<PoolL2>) {
    rebuild_all(pool);
    let mut next_dev = 0usize;
    loop {
        {
            let (lock, cv) = &pool.wake;
            let mut woken = lock.lock();
            if !*woken {
                cv.wait_for(&mut woken, FEED_INTERVAL);
            }
            *woken = false;
        }
        if pool.stop.load(Ordering::Relaxed) {
            return;
        }
        // Devices added since (`pool add`) or back: rebuild what is not ready.
        rebuild_all(pool);
        feed_once(pool, &mut next_dev);
        pool.charge();
    }
}

fn rebuild_all(pool: &Arc<PoolL2>) {
    let devs = pool.devs.read().clone();
    for d in devs.iter().filter(|d| !d.ready.load(Ordering::Relaxed) && d.serving()) {
        let r = rebuild::rebuild(d, pool.max_birth.load(Ordering::Relaxed), &pool.stop);
        count(&pool.counters, |c| &c.rebuild_blocks, r.blocks);
        d.ready.store(true, Ordering::Relaxed);
        pool.charge();
    }
}

/// One tick: takes up to the tick's budget from the queue and writes it
/// as chunks, round-robin over the devices that serve.
fn feed_once(pool: &Arc<PoolL2>, next_dev: &mut usize) {
    let devs: Vec<_> = pool.devs.read().iter().filter(|d| d.serving() && d.ready.load(Ordering::Relaxed)).cloned().collect();
    if devs.is_empty() {
        let dropped: Vec<Queued> = pool.queue.lock().drain(..).collect();
        pool.queued_bytes.store(0, Ordering::Relaxed);
        count(&pool.counters, |c| &c.feed_dropped, dropped.len() as u64);
        return;
    }
    let warming = !pool.devs.read().iter().any(|d| d.ring.lock().wrapped);
    let rate = WRITE_MAX.load(Ordering::Relaxed) + if warming { WRITE_BOOST.load(Ordering::Relaxed) } else { 0 };
    let mut budget = (rate / TICKS_PER_SECOND).max(format::CHUNK_ALIGN);
    while budget > 0 {
        let d = &devs[*next_dev % devs.len()];
        *next_dev = next_dev.wrapping_add(1);
        let batch = take(pool, budget.min(d.chunk_max()), d.chunk_max());
        if batch.is_empty() {
            return;
        }
        match d.write_chunk(&batch) {
            Ok(written) => {
                count(&pool.counters, |c| &c.write_bytes, written);
                count(&pool.counters, |c| &c.writes, 1);
                budget = budget.saturating_sub(written);
            }
            Err(_) => {
                // Counted on the leaf; what it held may be gone with it.
                if !d.leaf.usable() {
                    d.clear();
                }
                return;
            }
        }
    }
}

/// Takes blocks from the front of the queue for a chunk of about `limit`
/// bytes (at least one block; a block whose record could never fit a
/// chunk of `chunk_max` is dropped).
fn take(pool: &PoolL2, limit: u64, chunk_max: u64) -> Vec<Queued> {
    let mut q = pool.queue.lock();
    let mut out = Vec::new();
    let mut used = format::ChunkHeader::size_for(0) + format::CHUNK_ALIGN;
    while let Some((_, _, data)) = q.front() {
        let cost = format::record_size(data.len() as u64) + format::ENTRY_SIZE as u64;
        if used + cost > chunk_max {
            if out.is_empty() {
                if let Some((_, _, d)) = q.pop_front() {
                    pool.queued_bytes.fetch_sub(d.len() as u64, Ordering::Relaxed);
                }
                continue;
            }
            break;
        }
        if used + cost > limit && !out.is_empty() {
            break;
        }
        used += cost;
        if let Some(item) = q.pop_front() {
            pool.queued_bytes.fetch_sub(item.2.len() as u64, Ordering::Relaxed);
            out.push(item);
        }
    }
    out
}
