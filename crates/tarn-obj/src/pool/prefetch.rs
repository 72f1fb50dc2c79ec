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
                let pending = self.prefetch_pending.clone();
                let _ = std::thread::Builder::new().name(format!("tarn-prefetch-{i}")).spawn(move || loop {
                    let job = rx.lock().recv();
                    match job {
                        Ok(job) => {
                            job();
                            pending.fetch_sub(1, Ordering::AcqRel);
                        }
                        Err(_) => return,
                    }
                });
            }
            *q = Some(tx);
        }
        if let Some(tx) = q.as_ref() {
            self.prefetch_pending.fetch_add(1, Ordering::AcqRel);
            if tx.send(job).is_err() {
                self.prefetch_pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl ObjPool {
    /// Blocks read ahead of a sequential reader since import.
    pub fn prefetched_blocks(&self) -> u64 {
        self.shared.prefetched_blocks.load(Ordering::Relaxed)
    }

    /// Waits (at most `limit`) until every prefetch job queued so far has
    /// run; returns whether they all had.
    pub fn wait_prefetch_idle(&self, limit: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + limit;
        while self.shared.prefetch_pending.load(Ordering::Acquire) != 0 {
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        true
    }
}
