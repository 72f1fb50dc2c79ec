//! Shared test harness: seeded randomness from the environment.
//!
//! `TARN_SEED` (default: fixed) and `TARN_COUNT` (default per test) make a
//! run reproducible; the seed is printed if the test fails.

#![allow(dead_code)]

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub fn seed() -> u64 {
    env_u64("TARN_SEED", 0x7a41_2026)
}

pub fn count(default: u64) -> u64 {
    env_u64("TARN_COUNT", default)
}

/// Prints the seed when dropped during a panic, so a failure can be rerun.
pub struct SeedGuard(pub u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("FAILED with TARN_SEED={} (rerun with this env var to reproduce)", self.0);
        }
    }
}

pub fn rng() -> (ChaCha8Rng, SeedGuard) {
    let seed = seed();
    (ChaCha8Rng::seed_from_u64(seed), SeedGuard(seed))
}
