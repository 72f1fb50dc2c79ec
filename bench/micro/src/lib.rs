//! Criterion benchmarks live in `benches/`; run `cargo bench -p tarn-bench-micro`.
