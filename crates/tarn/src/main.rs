//! `tarn`: the command-line client of the tarn daemon (and the daemon
//! itself, via `tarn daemon`).
//!
//! Exit status: 0 ok, 1 failure, 2 usage. Errors are one line on stderr,
//! prefixed `tarn: `.

mod alloc;
mod cli;
mod client;
mod clock;
mod commands;
mod devices;
mod diff;
mod events;
mod health_x;
mod history;
mod iostat;
mod keys;
mod output;
mod replication;
mod shares;
mod status;
mod trim;
mod tunable;
mod up;
mod vdevspec;

use clap::Parser;

/// An error with the exit status it maps to.
pub struct Failure {
    pub message: String,
    pub exit: i32,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), exit: 2 }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure { message, exit: 1 }
    }
}

/// mimalloc: the daemon allocates and frees block-sized buffers from many
/// threads; glibc malloc spent a fifth of a metadata-heavy run in
/// `malloc_consolidate` and friends (measured with perf, docs/benchmarks.md).
/// In front of it, a cache of at most `alloc::CAP` bytes of large freed
/// buffers (`alloc.rs`): with `purge_delay` 0 below, mimalloc would give
/// each freed 128 KiB–1 MiB buffer back and the kernel would zero it again
/// on its next use.
#[global_allocator]
static GLOBAL: alloc::Alloc = alloc::Alloc::new(alloc::CAP);

/// Empties the buffer cache whenever it sat unused for `alloc::IDLE_DRAIN`
/// (an idle daemon holds none of it).
fn spawn_idle_drain() {
    let _ = std::thread::Builder::new().name("tarn-alloc-drain".into()).spawn(|| {
        let mut seen = GLOBAL.cache.activity();
        loop {
            std::thread::sleep(alloc::IDLE_DRAIN);
            GLOBAL.drain_if_idle(&mut seen);
        }
    });
}

/// mimalloc 3's option numbers (include/mimalloc.h, `mi_option_e`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Memory freed is given back to the system at once (mimalloc 3 waits
/// 1 s by default, and only purges when the freeing thread allocates
/// again, so an idle thread's frees stayed resident), and no transparent
/// huge pages (a 2 MiB page half used counts whole). Measured with
/// bench/memory.sh (docs/benchmarks.md, "Daemon memory"): with both, the
/// RSS after an export fell from 61 to 17 MiB and during sequential reads
/// from 387 to 328 MiB with a 256 MiB ARC.
/// mimalloc's own environment variables (`MIMALLOC_PURGE_DELAY`,
/// `MIMALLOC_ALLOW_THP`) still win, so the two can be compared.
fn tune_allocator() {
    let unset = |name: &str| std::env::var_os(name).is_none();
    // SAFETY: setting mimalloc options (plain integers) before threads start.
    unsafe {
        if unset("MIMALLOC_PURGE_DELAY") {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        }
        if libmimalloc_sys::_mi_option_last == 47 && unset("MIMALLOC_ALLOW_THP") {
            libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0);
        }
    }
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown".into());
        eprintln!("tarn: internal error: {what}");
    }));
    tune_allocator();
    // The daemon gives freed memory back after an export and when tunables
    // shrink the ARC (tarn-daemon's memory.rs).
    tarn_daemon::set_release_hook(|| {
        GLOBAL.cache.drain();
        // SAFETY: mi_collect only walks mimalloc's own heaps.
        unsafe { libmimalloc_sys::mi_collect(true) }
    });
    client::set_argv(std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect());
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if e.use_stderr() {
                eprintln!("tarn: {} (try 'tarn --help')", cli::usage_line(&e.to_string()));
                std::process::exit(2);
            }
            let _ = e.print();
            std::process::exit(0);
        }
    };
    if matches!(cli.command, cli::Command::Daemon { .. }) {
        spawn_idle_drain();
    }
    let code = match std::panic::catch_unwind(|| commands::run(cli)) {
        Ok(Ok(code)) => code.max(commands::PARTIAL_FAILURE_EXIT.load(std::sync::atomic::Ordering::Relaxed)),
        Ok(Err(failure)) => {
            eprintln!("tarn: {}", failure.message);
            failure.exit
        }
        Err(_) => 1,
    };
    std::process::exit(code);
}
