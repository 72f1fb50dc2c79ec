//! Parallel map for the sync pipeline on plain scoped threads.
//!
//! Not rayon: a rayon worker that blocks (here: on vdev child I/O) steals
//! more pipeline jobs while it waits, nesting stack frames without bound,
//! and its idle workers spin. Plain threads just block.

use std::sync::atomic::{AtomicUsize, Ordering};

pub const PIPELINE_THREADS: usize = 4;

pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let threads = PIPELINE_THREADS.min(items.len());
    let mut parts: Vec<Vec<(usize, R)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        out.push((i, f(item)));
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("pipeline thread panicked")).collect()
    });
    let mut all: Vec<(usize, R)> = parts.drain(..).flatten().collect();
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}
