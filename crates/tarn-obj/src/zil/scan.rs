//! Scrub and resilver of the live log blocks. Their pointers carry no
//! checksum (each block checks itself: magic, chain, sequence, blake3),
//! so the tree walk does not cover them; at the end of a scan every
//! written block of every open chain is read on each of its copies'
//! devices and a copy that does not verify is rewritten from one that
//! does, as for any block (a log block written while a mirror side was
//! offline is on the other side only until then).

use super::format;
use crate::pool::Shared;

/// What scanning the log blocks found.
#[derive(Default, Debug)]
pub(crate) struct LogScan {
    pub read_bytes: u64,
    pub repaired: u64,
    pub resilvered: u64,
    pub errors: u64,
}

pub(crate) fn scan_live(s: &Shared, scrub: bool) -> LogScan {
    let mut out = LogScan::default();
    let mut blocks = Vec::new();
    for log in s.logs.all() {
        let st = log.st.lock();
        blocks.extend(st.live.iter().map(|b| (b.bp, st.chain, b.seq)));
    }
    let tops = s.io.tops();
    for (bp, chain, seq) in blocks {
        let verify = |b: &[u8]| format::verifies(b, chain, seq);
        for d in bp.dvas() {
            let Some(top) = tops.get(d.vdev as usize) else { continue };
            if !scrub && !top.needs_resilver(bp.birth) {
                continue;
            }
            match top.scan(d.offset, bp.psize as u64, bp.birth, &verify, scrub) {
                Ok(o) => {
                    out.read_bytes += o.read_bytes;
                    out.repaired += o.repaired_bytes;
                    out.resilvered += o.resilvered_bytes;
                }
                Err(_) => out.errors += 1,
            }
        }
    }
    out
}
