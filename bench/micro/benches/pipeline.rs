//! Hot paths of the write and read pipelines, one 128 KiB block at a time:
//! checksums, compression (compressible text and incompressible noise, which
//! the lz4 probe should reject quickly), raidz parity, and a whole block
//! written and read back through `BlockIo` on a raidz1 of 4 memory devices.
//!
//!     cargo bench -p tarn-bench-micro
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tarn_block::{checksum, compress, Allocator, BlockIo, ChecksumKind, Compression, WriteSpec};
use tarn_dev::{Device, MemDevice};
use tarn_vdev::{ParityCodec, ReedSolomonCodec, TopConfig, TopKind, TopVdev, XorCodec};

const BLOCK: usize = 128 * 1024;

fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e3779b97f4a7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn text(len: usize) -> Vec<u8> {
    let words = ["pool ", "vdev ", "raidz ", "scrub ", "snapshot ", "dataset ", "txg ", "checksum "];
    let mut out = Vec::with_capacity(len);
    let mut i = 7usize;
    while out.len() < len {
        i = i.wrapping_mul(1103515245).wrapping_add(12345);
        out.extend_from_slice(words[(i >> 16) % words.len()].as_bytes());
    }
    out.truncate(len);
    out
}

fn checksums(c: &mut Criterion) {
    let data = noise(BLOCK);
    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Bytes(BLOCK as u64));
    for kind in [ChecksumKind::Fletcher4, ChecksumKind::Blake3, ChecksumKind::Sha256] {
        g.bench_function(kind.name(), |b| b.iter(|| checksum::compute(kind, &data)));
    }
    g.finish();
}

fn compression(c: &mut Criterion) {
    let mut g = c.benchmark_group("compress");
    g.throughput(Throughput::Bytes(BLOCK as u64));
    for (name, data) in [("text", text(BLOCK)), ("noise", noise(BLOCK))] {
        for comp in [Compression::Lz4, Compression::Zstd(3)] {
            g.bench_with_input(BenchmarkId::new(comp.name(), name), &data, |b, d| b.iter(|| compress::compress(comp, d)));
        }
    }
    g.finish();
}

fn parity(c: &mut Criterion) {
    let mut g = c.benchmark_group("parity-encode");
    for (name, codec, data_shards) in [
        ("raidz1 3+1", Box::new(XorCodec) as Box<dyn ParityCodec>, 3usize),
        ("raidz2 4+2", Box::new(ReedSolomonCodec::new(2)), 4),
        ("raidz3 5+3", Box::new(ReedSolomonCodec::new(3)), 5),
    ] {
        let shard = BLOCK / data_shards;
        let data: Vec<Vec<u8>> = (0..data_shards).map(|_| noise(shard)).collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut out = vec![vec![0u8; shard]; codec.parity()];
        g.throughput(Throughput::Bytes((shard * data_shards) as u64));
        g.bench_function(name, |b| b.iter(|| codec.encode(&refs, &mut out).expect("encode")));
    }
    g.finish();
}

fn pipeline(c: &mut Criterion) {
    let devs: Vec<Option<Arc<dyn Device>>> = (0..4).map(|i| Some(MemDevice::new(&format!("m{i}"), 1 << 30) as Arc<dyn Device>)).collect();
    let kind = TopKind::Raidz { parity: 1 };
    let asize = TopVdev::compute_asize(&kind, 12, &[1 << 30; 4]).expect("asize");
    let cfg = TopConfig {
        id: 0,
        guid: 1,
        kind,
        ashift: 12,
        asize,
        children: (0..4).map(|i| tarn_vdev::LeafConfig::new(10 + i, format!("m{i}"))).collect(),
        class: Default::default(),
    };
    let top = Arc::new(TopVdev::new(cfg, devs).expect("vdev"));
    let io = BlockIo::new(vec![top.clone()], Allocator::new(&[top.asize()]));
    let data = text(BLOCK);
    let spec = WriteSpec { compression: Compression::Lz4, checksum: ChecksumKind::Fletcher4, copies: 1, level: 0, otype: 0, metadata: false };
    let mut g = c.benchmark_group("blockio raidz1-4");
    g.throughput(Throughput::Bytes(BLOCK as u64));
    let mut written = Vec::new();
    g.bench_function("write 128K lz4", |b| {
        b.iter(|| {
            let bp = io.write(&data, spec, 1).expect("write");
            written.push(bp);
            if written.len() > 2000 {
                for bp in written.drain(..) {
                    io.free(&bp, 1);
                }
                io.alloc.lock().release_deferred(100);
            }
        })
    });
    let bp = io.write(&data, spec, 1).expect("write");
    g.bench_function("read 128K lz4 uncached", |b| b.iter(|| io.read_uncached(&bp).expect("read")));
    g.finish();
}

criterion_group!(benches, checksums, compression, parity, pipeline);
criterion_main!(benches);
