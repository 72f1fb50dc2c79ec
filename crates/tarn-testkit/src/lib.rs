//! Test tooling shared by the tests of every crate (a dev-dependency only).
//!
//! [`Seeded`] is the one reader of `TARN_SEED` and `TARN_COUNT`: every
//! randomized test takes its seed and its count through it, so a seed CI
//! sets in hex (`0x7a2e5eed`) means the same thing to every test, a value
//! that does not parse stops the test instead of silently running another
//! seed, and a failing test prints the command that reproduces it.
//!
//! ```ignore
//! let run = tarn_testkit::seeded!(400);       // count defaults to 400
//! let mut rng = run.rng(0);
//! for step in 0..run.count { /* ... */ }
//! ```

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The seed used when `TARN_SEED` is not set (the one CI sets too).
pub const DEFAULT_SEED: u64 = 0x7a2e_5eed;

/// Parses a seed: decimal, or hexadecimal with a `0x` prefix.
pub fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Seed and count of one randomized test run. Printed when created;
/// printed again with the exact command to reproduce if the test panics
/// while it is alive.
pub struct Seeded {
    pub seed: u64,
    pub count: u64,
    reproduce: String,
}

impl Seeded {
    /// Reads `TARN_SEED` and `TARN_COUNT` (`count_default` when unset).
    /// `reproduce` is the command that runs this test alone (without the
    /// variables); [`seeded!`] builds it from the calling test.
    ///
    /// Panics with a clear message if either variable is set but does not
    /// parse: a typo must not run a different seed than the one asked for.
    pub fn from_env(count_default: u64, reproduce: String) -> Seeded {
        let seed = match std::env::var("TARN_SEED") {
            Ok(v) if !v.trim().is_empty() => {
                parse_seed(&v).unwrap_or_else(|| panic!("TARN_SEED={v:?} is not a number (decimal or 0x hex)"))
            }
            _ => DEFAULT_SEED,
        };
        let count = match std::env::var("TARN_COUNT") {
            Ok(v) if !v.trim().is_empty() => {
                v.trim().parse().unwrap_or_else(|_| panic!("TARN_COUNT={v:?} is not a number"))
            }
            _ => count_default,
        };
        eprintln!("TARN_SEED={seed:#x} TARN_COUNT={count} ({reproduce})");
        Seeded { seed, count, reproduce }
    }

    /// A generator for one independent stream of this run.
    pub fn rng(&self, stream: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(stream);
        rng
    }

    /// The command that reproduces this run, variables included.
    pub fn reproduce_command(&self) -> String {
        format!("TARN_SEED={:#x} TARN_COUNT={} {}", self.seed, self.count, self.reproduce)
    }
}

impl Drop for Seeded {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("FAILED with TARN_SEED={:#x} TARN_COUNT={}; reproduce with:\n  {}", self.seed, self.count, self.reproduce_command());
        }
    }
}

/// The `cargo test` command line that runs the calling test alone, from the
/// test harness's thread name (the test's path) and the calling crate.
#[doc(hidden)]
pub fn reproduce_line(package: &str, target: &str) -> String {
    let thread = std::thread::current();
    let test = thread.name().filter(|n| *n != "main").unwrap_or("");
    // An integration test binary is named after its file; the library's
    // unit tests after the package.
    let integration = target != package.replace('-', "_");
    let which = if integration { format!(" --test {target}") } else { " --lib".to_string() };
    format!("cargo test -p {package}{which} -- --exact {test} --nocapture")
}

/// `seeded!(count_default)`: a [`Seeded`] for the calling test, whose
/// failure message names the package, test binary and test to rerun.
#[macro_export]
macro_rules! seeded {
    ($count_default:expr) => {
        $crate::Seeded::from_env(
            $count_default,
            $crate::reproduce_line(env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME")),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_in_decimal_and_hex() {
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(parse_seed("0x7a2e5eed"), Some(0x7a2e_5eed));
        assert_eq!(parse_seed("0X10"), Some(16));
        assert_eq!(parse_seed(" 7 "), Some(7));
        assert_eq!(parse_seed("0xnope"), None);
        assert_eq!(parse_seed("12a"), None);
        assert_eq!(parse_seed(""), None);
    }

    #[test]
    fn streams_differ_and_repeat() {
        use rand::RngCore;
        let run = Seeded { seed: 5, count: 1, reproduce: String::new() };
        let (mut a, mut b, mut c) = (run.rng(0), run.rng(1), run.rng(0));
        let (x, y, z) = (a.next_u64(), b.next_u64(), c.next_u64());
        assert_ne!(x, y);
        assert_eq!(x, z);
    }
}
