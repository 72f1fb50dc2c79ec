//! Read-ahead: a small pool of plain threads (see par.rs for why not
//! rayon) running prefetch jobs queued by readers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{ObjPool, Shared};

pub(crate) type PrefetchJob = Box<dyn FnOnce() + Send>;
const PREFETCH_THREADS: usize = 4;

impl Shared {
    /// Queue a prefetch job; workers start on first use.
    pub fn prefetch(&self, job: PrefetchJob) {
        let mut q = self.prefetch_queue.lock();
        if q.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<PrefetchJob>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..PREFETCH_THREADS {
                let rx = rx.clone();
                let _ = std::thread::Builder::new().name(format!("tarn-prefetch-{i}")).spawn(move || loop {
                    let job = rx.lock().recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                });
            }
            *q = Some(tx);
        }
        if let Some(tx) = q.as_ref() {
            let _ = tx.send(job);
        }
    }
}

impl ObjPool {
    /// Blocks read ahead of a sequential reader since import.
    pub fn prefetched_blocks(&self) -> u64 {
        self.shared.prefetched_blocks.load(Ordering::Relaxed)
    }
}
