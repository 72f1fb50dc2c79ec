//! What the per-device I/O counters (`zpool iostat`) cost on the data path:
//! a 4 KiB write and read on a memory device, directly and through the
//! counting wrapper the leaf vdev hands out (two clock reads and four
//! relaxed atomic adds per operation), and a 128 KiB block written through
//! a raidz1 of 4 memory devices (every column counted).
//!
//!     cargo bench -p tarn-bench-micro --bench iostat
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tarn_dev::{Device, MemDevice};
use tarn_vdev::iostat::{CountedDevice, IoStats};
use tarn_vdev::{TopConfig, TopKind, TopVdev};

fn device_ops(c: &mut Criterion) {
    let raw: Arc<dyn Device> = MemDevice::new("m", 64 << 20);
    let counted = CountedDevice::new(raw.clone(), Arc::new(IoStats::default()));
    let data = vec![7u8; 4096];
    let mut buf = vec![0u8; 4096];
    let mut g = c.benchmark_group("device 4K");
    g.throughput(Throughput::Bytes(4096));
    let mut at = 0u64;
    let mut next = || {
        at = (at + 4096) % (60 << 20);
        at
    };
    g.bench_function("write direct", |b| b.iter(|| raw.write_at(&data, next()).unwrap()));
    g.bench_function("write counted", |b| b.iter(|| counted.write_at(&data, next()).unwrap()));
    g.bench_function("read direct", |b| b.iter(|| raw.read_at(&mut buf, next()).unwrap()));
    g.bench_function("read counted", |b| b.iter(|| counted.read_at(&mut buf, next()).unwrap()));
    g.finish();
}

fn raidz_block(c: &mut Criterion) {
    let devs: Vec<Option<Arc<dyn Device>>> =
        (0..4).map(|i| Some(MemDevice::new(&format!("r{i}"), 256 << 20) as Arc<dyn Device>)).collect();
    let kind = TopKind::Raidz { parity: 1 };
    let asize = TopVdev::compute_asize(&kind, 12, &[256 << 20; 4]).expect("asize");
    let cfg = TopConfig {
        id: 0,
        guid: 1,
        kind,
        ashift: 12,
        asize,
        children: (0..4).map(|i| tarn_vdev::LeafConfig::new(10 + i, format!("r{i}"))).collect(),
        class: Default::default(),
    };
    let top = TopVdev::new(cfg, devs).expect("vdev");
    let block = vec![3u8; 128 << 10];
    let mut g = c.benchmark_group("raidz1 of 4, 128K block");
    g.throughput(Throughput::Bytes(block.len() as u64));
    let mut at = 0u64;
    g.bench_function("write (counted columns)", |b| {
        b.iter(|| {
            at = (at + (256 << 10)) % (512 << 20);
            top.write(at, &block, 5).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, device_ops, raidz_block);
criterion_main!(benches);
