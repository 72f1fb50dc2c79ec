//! Shared test harness: seeded randomness from the environment, through
//! the workspace's one `TARN_SEED`/`TARN_COUNT` parser (tarn-testkit), which
//! prints the command that reproduces a failing run.

#![allow(dead_code)]

use rand_chacha::ChaCha8Rng;

/// A generator, the run's count (`count_default` unless `TARN_COUNT` is
/// set) and the guard that reports the seed if the test fails.
#[macro_export]
macro_rules! seeded_run {
    ($count_default:expr) => {{
        let run = tarn_testkit::seeded!($count_default);
        (run.rng(0), run.count, run)
    }};
}

pub type Rng = ChaCha8Rng;
