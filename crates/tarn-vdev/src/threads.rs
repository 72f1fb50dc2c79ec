//! The I/O threads for child I/O: dedicated, so that vdev I/O never
//! competes with (or deadlocks on) the global rayon pool used above.
//!
//! Not rayon either: its idle workers spin (`sched_yield`) for a while
//! after every job, and child I/O is many short jobs (a raidz read is one
//! `pread` per column), so on a machine with few cores the spinning took
//! the CPU from the threads doing the work. Here idle workers block on a
//! condition variable, and the caller of [`par_map`] works through the
//! items itself while helpers join in: it never waits for a helper to
//! start, only for the items helpers took to finish.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex};

use crate::iostat::IoStart;

const IO_THREADS: usize = 16;

/// One `par_map` call as its helpers see it.
struct Call {
    state: Mutex<CallState>,
    finished: Condvar,
    n: usize,
    /// The caller's `|i| run item i`, its lifetime erased. Only called by
    /// a thread that claimed an item: claims stop when the caller closes
    /// the call, and the caller returns only after that and after every
    /// claimed item finished, so the closure outlives every call of it.
    job: *const (dyn Fn(usize) + Sync + 'static),
}

// SAFETY: `job` points to a `Sync` closure, used as described above.
unsafe impl Send for Call {}
unsafe impl Sync for Call {}

#[derive(Default)]
struct CallState {
    next: usize,
    running: usize,
    closed: bool,
    panic: Option<Box<dyn Any + Send>>,
}

impl Call {
    fn claim(&self) -> Option<usize> {
        let mut st = self.state.lock();
        if st.closed || st.next >= self.n {
            return None;
        }
        let i = st.next;
        st.next += 1;
        st.running += 1;
        Some(i)
    }

    /// Runs items until none is left.
    fn work(&self) {
        while let Some(i) = self.claim() {
            // SAFETY: see `job`; item `i` is claimed and not finished.
            let job = unsafe { &*self.job };
            let r = catch_unwind(AssertUnwindSafe(|| job(i)));
            let mut st = self.state.lock();
            st.running -= 1;
            if let Err(p) = r {
                st.closed = true;
                st.panic.get_or_insert(p);
            }
            if st.running == 0 {
                self.finished.notify_all();
            }
        }
    }
}

struct Pool {
    queue: Mutex<Queue>,
    wake: Condvar,
    threads: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    calls: VecDeque<Arc<Call>>,
    idle: usize,
}

impl Pool {
    fn worker(&self) {
        let mut q = self.queue.lock();
        loop {
            match q.calls.pop_front() {
                Some(call) => {
                    drop(q);
                    call.work();
                    drop(call);
                    q = self.queue.lock();
                }
                None => {
                    q.idle += 1;
                    self.wake.wait(&mut q);
                    q.idle -= 1;
                }
            }
        }
    }

    /// Asks up to `k` idle workers to help with `call`.
    fn post(&self, call: &Arc<Call>, k: usize) {
        let mut q = self.queue.lock();
        let k = k.min(q.idle.saturating_sub(q.calls.len()));
        for _ in 0..k {
            q.calls.push_back(call.clone());
        }
        drop(q);
        for _ in 0..k {
            self.wake.notify_one();
        }
    }
}

fn io_pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    static STARTED: std::sync::Once = std::sync::Once::new();
    let pool = POOL.get_or_init(|| Pool { queue: Mutex::new(Queue::default()), wake: Condvar::new(), threads: AtomicUsize::new(0) });
    STARTED.call_once(|| {
        // Threads that cannot be started are done without: the callers
        // then do all of their items themselves.
        for i in 0..IO_THREADS {
            if std::thread::Builder::new().name(format!("tarn-vdev-io-{i}")).spawn(move || pool.worker()).is_ok() {
                pool.threads.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    pool
}

/// Runs `f` over `items` on the calling thread and idle I/O threads,
/// results in order. A panic in `f` is resumed on the caller once every
/// item started has finished.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync + Send) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(f).collect();
    }
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    // The block I/O this work belongs to started when the caller's did
    // (iostat's total wait), whichever thread runs the item.
    let start = IoStart::current();
    let job = |i: usize| {
        let _start = IoStart::enter(start);
        let r = f(&items[i]);
        *slots[i].lock() = Some(r);
    };
    let job: &(dyn Fn(usize) + Sync) = &job;
    // SAFETY: lifetime erasure only; see `Call::job`.
    let job: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(job as *const (dyn Fn(usize) + Sync)) };
    let call = Arc::new(Call { state: Mutex::new(CallState::default()), finished: Condvar::new(), n: items.len(), job });
    let pool = io_pool();
    if pool.threads.load(Ordering::Relaxed) > 0 {
        pool.post(&call, items.len() - 1);
    }
    call.work();
    let panic = {
        let mut st = call.state.lock();
        st.closed = true;
        while st.running > 0 {
            call.finished.wait(&mut st);
        }
        st.panic.take()
    };
    if let Some(p) = panic {
        resume_unwind(p);
    }
    slots.into_iter().map(|s| s.into_inner().expect("every item of a par_map ran")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_in_order() {
        for n in [0, 1, 2, 3, 17, 100] {
            let items: Vec<usize> = (0..n).collect();
            let out = par_map(&items, |&x| x * 2);
            assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        }
    }

    #[test]
    fn nested_and_concurrent() {
        let outer: Vec<usize> = (0..8).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let r = par_map(&outer, |&a| par_map(&outer, |&b| a * b).iter().sum::<usize>());
                    assert_eq!(r, outer.iter().map(|a| a * 28).collect::<Vec<_>>());
                });
            }
        });
    }

    #[test]
    fn panics_reach_the_caller() {
        let items: Vec<usize> = (0..10).collect();
        let r = catch_unwind(|| par_map(&items, |&x| if x == 5 { panic!("item five") } else { x }));
        assert!(r.is_err());
        // The pool still works.
        assert_eq!(par_map(&items, |&x| x + 1)[9], 10);
    }
}
