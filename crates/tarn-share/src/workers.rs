//! A fixed set of threads fed by one queue, shared by the network servers
//! (tarn-nfs's calls, tarn-nbd's requests): handing a request over is one
//! queue push and, when a thread is idle, one wake-up.
//!
//! The threads end once the queue's sender (the `Workers`) is dropped and
//! the queue is empty. After `close` a queued job is dropped unrun (its
//! connection is closing; what it holds is released), so nothing a client
//! sent changes a dataset after its server stopped. A job that panics
//! does not take its thread with it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub type Job = Box<dyn FnOnce() + Send>;

pub struct Workers {
    tx: crossbeam_channel::Sender<Job>,
    /// Jobs queued or running.
    pending: Arc<AtomicUsize>,
    closed: Arc<AtomicBool>,
}

/// Counts a job out of `pending` however its run ends.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Workers {
    /// Starts `n` threads named `{name}{i}`.
    pub fn start(name: &str, n: usize) -> std::io::Result<Workers> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let pending = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicBool::new(false));
        for i in 0..n {
            let (rx, pending, closed) = (rx.clone(), pending.clone(), closed.clone());
            std::thread::Builder::new().name(format!("{name}{i}")).spawn(move || {
                while let Ok(job) = rx.recv() {
                    let _done = Done(&pending);
                    if !closed.load(Ordering::Acquire) {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                }
            })?;
        }
        Ok(Workers { tx, pending, closed })
    }

    /// Queues `job`; false once the threads are gone.
    pub fn run(&self, job: Job) -> bool {
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(job).is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// From now on queued jobs are dropped unrun.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Waits until no job is queued or running, at most `limit`.
    pub fn drain(&self, limit: Duration) {
        let start = Instant::now();
        while self.pending.load(Ordering::Acquire) > 0 && start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn jobs_run_a_panic_spares_the_thread_and_closed_jobs_are_dropped() {
        let w = Workers::start("test-worker", 1).unwrap();
        let (tx, rx) = mpsc::channel();
        assert!(w.run(Box::new(|| panic!("a job's bug"))));
        let t = tx.clone();
        assert!(w.run(Box::new(move || t.send(1).unwrap())));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(1), "the one thread survived the panic");
        w.drain(Duration::from_secs(10));
        assert_eq!(w.pending.load(Ordering::Acquire), 0, "the panicked job is counted out too");
        w.close();
        let t = tx.clone();
        assert!(w.run(Box::new(move || t.send(2).unwrap())));
        w.drain(Duration::from_secs(10));
        assert_eq!(w.pending.load(Ordering::Acquire), 0);
        drop(tx);
        assert_eq!(rx.recv_timeout(Duration::from_secs(1)), Err(mpsc::RecvTimeoutError::Disconnected), "dropped unrun: its sender went with it");
    }
}
