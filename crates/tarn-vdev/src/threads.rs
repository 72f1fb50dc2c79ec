//! The I/O thread pool for child I/O: dedicated, so that vdev I/O never
//! competes with (or deadlocks on) the global rayon pool used above.

use std::sync::OnceLock;

const IO_THREADS: usize = 16;

pub fn io_pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(IO_THREADS)
            .thread_name(|i| format!("tarn-vdev-io-{i}"))
            .build()
            // Thread creation failing at startup is not recoverable.
            .unwrap_or_else(|e| panic!("cannot start vdev I/O threads: {e}"))
    })
}

/// Runs `f` over `items` on the I/O pool, results in order.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync + Send) -> Vec<R> {
    use rayon::prelude::*;
    if items.len() <= 1 {
        return items.iter().map(f).collect();
    }
    io_pool().install(|| items.par_iter().map(f).collect())
}
