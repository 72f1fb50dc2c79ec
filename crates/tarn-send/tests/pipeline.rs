//! The send pipeline (walker, readers, writer threads) ends cleanly on
//! every error: a failing output (EPIPE) and failing block reads return
//! the error and nothing hangs.
mod common;
use common::*;

use std::io::{self, Write};
use std::sync::Arc;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tarn_dev::{Device, FaultDevice, MemDevice};
use tarn_obj::{ObjPool, PoolCreate, TopKind};
use tarn_send::*;

/// Accepts `left` bytes, then fails like a closed pipe.
struct Failing {
    left: usize,
    got: usize,
}

impl Write for Failing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"));
        }
        let n = buf.len().min(self.left);
        self.left -= n;
        self.got += n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn write_errors_end_the_send() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let src = pool(Layout::Raidz1);
    let head = new_head(&src);
    populate(&src, head, &mut rng, 12);
    let snap = snapshot(&src, head, &mut rng);
    let mut full = Vec::new();
    let sum = send(&src, &snap, None, &mut full).unwrap();
    assert_eq!(sum.bytes as usize, full.len());
    for left in [0, 1, 31, 4096, full.len() / 3, full.len() - 1] {
        let mut out = Failing { left, got: 0 };
        match send(&src, &snap, None, &mut out) {
            Err(SendError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "after {left} bytes"),
            other => panic!("after {left} bytes: {other:?}"),
        }
        assert!(out.got <= left);
    }
    let mut again = Vec::new();
    send(&src, &snap, None, &mut again).unwrap();
    assert_eq!(again.len(), full.len());
}

#[test]
fn read_errors_end_the_send() {
    let faults: Vec<Arc<FaultDevice>> = (0..2).map(|i| FaultDevice::new(MemDevice::new(&format!("m{i}"), 160 << 20))).collect();
    let src: Arc<ObjPool> = ObjPool::create(PoolCreate {
        name: "t".into(),
        tops: vec![(TopKind::Mirror, faults.iter().enumerate().map(|(i, d)| (format!("d{i}"), d.clone() as Arc<dyn Device>)).collect())],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool");
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let head = new_head(&src);
    populate(&src, head, &mut rng, 12);
    let snap = snapshot(&src, head, &mut rng);
    let mut full = Vec::new();
    send(&src, &snap, None, &mut full).unwrap();
    // Every read fails: the send fails (on metadata or on a block).
    for f in &faults {
        f.set_fail_reads(true);
    }
    let mut out = Vec::new();
    assert!(send(&src, &snap, None, &mut out).is_err());
    for f in &faults {
        f.set_fail_reads(false);
    }
    // Reads failing from some point on, somewhere in the stream.
    let reads = faults[0].reads() + faults[1].reads();
    let mut failed = 0;
    for n in [0, 1, 2, 5, 10, 20, 40] {
        for f in &faults {
            f.fail_after(n);
        }
        let mut out = Vec::new();
        let r = send(&src, &snap, None, &mut out);
        for f in &faults {
            f.disarm_fail_after();
        }
        match r {
            Ok(s) => assert_eq!(s.bytes as usize, full.len()),
            Err(SendError::Obj(_)) => failed += 1,
            Err(e) => panic!("after {n} reads: {e}"),
        }
        assert!(out.len() <= full.len());
    }
    // (After read errors the leaves may be out of service: sends can keep
    // failing; they must fail cleanly.)
    assert!(failed > 0, "no send failed ({reads} reads before)");
}
