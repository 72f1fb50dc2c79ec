//! Block encryption speed on one core (issue 12 asks for the AEAD crate's
//! per-core seal/open rate): `BlockKeys::seal` and `open` of 4 KiB, 128 KiB
//! and 1 MiB physical blocks with AES-128-GCM and AES-256-GCM (aws-lc-rs),
//! the numbers docs/benchmarks.md records, plus a key derivation (what a
//! salt rotation or the first read of an old salt costs).
//!
//!     cargo bench -p tarn-bench-micro --bench crypt
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tarn_block::{BlockKeys, BlockPtr, Cipher};
use tarn_keys::MasterKey;

fn bp_for(len: usize) -> BlockPtr {
    let mut bp = BlockPtr::HOLE;
    bp.lsize = len as u32;
    bp.psize = len as u32;
    bp.ndva = 1;
    bp.otype = 19;
    bp
}

fn seal_open(c: &mut Criterion) {
    for cipher in [Cipher::Aes128Gcm, Cipher::Aes256Gcm] {
        let keys = BlockKeys::new(cipher, &MasterKey::from_bytes(&[0x5a; 32])).expect("keys");
        for len in [4096usize, 128 << 10, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let mut g = c.benchmark_group(format!("{} {}K", cipher.name(), len >> 10));
            g.throughput(Throughput::Bytes(len as u64));
            g.bench_function("seal", |b| {
                b.iter_batched_ref(
                    || (bp_for(len), data.clone()),
                    |(bp, buf)| keys.seal(bp, buf).expect("seal"),
                    BatchSize::LargeInput,
                )
            });
            let mut sealed_bp = bp_for(len);
            let mut sealed = data.clone();
            keys.seal(&mut sealed_bp, &mut sealed).expect("seal");
            g.bench_function("open", |b| {
                b.iter_batched_ref(
                    || {
                        let mut v = Vec::with_capacity(len + 16);
                        v.extend_from_slice(&sealed);
                        v
                    },
                    |buf| keys.open(&sealed_bp, buf).expect("open"),
                    BatchSize::LargeInput,
                )
            });
            g.finish();
        }
    }
    c.bench_function("derive a block key (salt rotation)", |b| {
        let keys = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[1; 32])).expect("keys");
        b.iter(|| keys.rotate().expect("rotate"))
    });
}

criterion_group!(benches, seal_open);
criterion_main!(benches);
