//! Parity codecs behind a small trait, so a faster implementation can be
//! swapped in without touching the raidz logic.
//!
//! Shard order everywhere in this trait: the data shards, then the parity
//! shards; all shards of one call have the same length.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use reed_solomon_erasure::galois_8::ReedSolomon;

pub trait ParityCodec: Send + Sync {
    /// Number of parity shards this codec produces.
    fn parity(&self) -> usize;
    /// Fills `parity` (each as long as a data shard) from `data`.
    fn encode(&self, data: &[&[u8]], parity: &mut [Vec<u8>]) -> Result<(), String>;
    /// Rebuilds, in place, every shard whose `present` entry is false (data
    /// and parity) from the others. At most `parity()` may be missing.
    fn reconstruct(&self, shards: &mut [Vec<u8>], present: &[bool], data_shards: usize) -> Result<(), String>;
}

/// The codec for `parity` parity shards: XOR for 1, Reed-Solomon above.
pub fn codec_for(parity: usize) -> Arc<dyn ParityCodec> {
    if parity == 1 {
        Arc::new(XorCodec)
    } else {
        Arc::new(ReedSolomonCodec::new(parity))
    }
}

/// Single parity: the XOR of the data shards.
pub struct XorCodec;

impl ParityCodec for XorCodec {
    fn parity(&self) -> usize {
        1
    }

    fn encode(&self, data: &[&[u8]], parity: &mut [Vec<u8>]) -> Result<(), String> {
        let [p] = parity else { return Err(format!("xor codec makes 1 parity shard, asked for {}", parity.len())) };
        if data.iter().any(|shard| shard.len() != p.len()) {
            return Err("shards differ in length".into());
        }
        // The first shard is copied, the others folded in: one pass fewer
        // than zeroing the parity first.
        match data.split_first() {
            None => p.fill(0),
            Some((first, rest)) => {
                p.copy_from_slice(first);
                for shard in rest {
                    p.iter_mut().zip(shard.iter()).for_each(|(x, y)| *x ^= y);
                }
            }
        }
        Ok(())
    }

    fn reconstruct(&self, shards: &mut [Vec<u8>], present: &[bool], _data_shards: usize) -> Result<(), String> {
        let missing: Vec<usize> = (0..shards.len()).filter(|&i| !present.get(i).copied().unwrap_or(false)).collect();
        let target = match missing.as_slice() {
            [] => return Ok(()),
            [one] => *one,
            _ => return Err(format!("xor parity cannot rebuild {} missing shards", missing.len())),
        };
        let len = shards.first().map_or(0, Vec::len);
        let mut acc = vec![0u8; len];
        for (i, shard) in shards.iter().enumerate() {
            if i != target {
                if shard.len() != len {
                    return Err("shards differ in length".into());
                }
                acc.iter_mut().zip(shard.iter()).for_each(|(x, y)| *x ^= y);
            }
        }
        if let Some(slot) = shards.get_mut(target) {
            *slot = acc;
        }
        Ok(())
    }
}

/// Reed-Solomon over GF(2^8) (the `reed-solomon-erasure` crate); one
/// encoder per data-shard count, built on first use.
pub struct ReedSolomonCodec {
    parity: usize,
    encoders: Mutex<HashMap<usize, Arc<ReedSolomon>>>,
}

impl ReedSolomonCodec {
    pub fn new(parity: usize) -> ReedSolomonCodec {
        ReedSolomonCodec { parity, encoders: Mutex::new(HashMap::new()) }
    }

    fn encoder(&self, data_shards: usize) -> Result<Arc<ReedSolomon>, String> {
        let mut map = self.encoders.lock();
        if let Some(rs) = map.get(&data_shards) {
            return Ok(rs.clone());
        }
        let rs = Arc::new(ReedSolomon::new(data_shards, self.parity).map_err(|e| format!("{e:?}"))?);
        map.insert(data_shards, rs.clone());
        Ok(rs)
    }
}

impl ParityCodec for ReedSolomonCodec {
    fn parity(&self) -> usize {
        self.parity
    }

    fn encode(&self, data: &[&[u8]], parity: &mut [Vec<u8>]) -> Result<(), String> {
        self.encoder(data.len())?.encode_sep(data, parity).map_err(|e| format!("{e:?}"))
    }

    fn reconstruct(&self, shards: &mut [Vec<u8>], present: &[bool], data_shards: usize) -> Result<(), String> {
        let rs = self.encoder(data_shards)?;
        let mut view: Vec<(&mut [u8], bool)> =
            shards.iter_mut().zip(present.iter()).map(|(s, &p)| (s.as_mut_slice(), p)).collect();
        rs.reconstruct(&mut view).map_err(|e| format!("{e:?}"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_rebuilds_any_p_missing() {
        for p in 1..=3usize {
            let codec = codec_for(p);
            let d = 5;
            let data: Vec<Vec<u8>> = (0..d).map(|i| (0..64).map(|j| (i * 31 + j * 7) as u8).collect()).collect();
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let mut parity = vec![vec![0u8; 64]; p];
            codec.encode(&refs, &mut parity).unwrap();
            let all: Vec<Vec<u8>> = data.iter().cloned().chain(parity.iter().cloned()).collect();
            for gone in 0..all.len() {
                for gone2 in gone..all.len() {
                    let missing: Vec<usize> = if p >= 2 { vec![gone, gone2] } else { vec![gone] };
                    let mut shards = all.clone();
                    let mut present = vec![true; all.len()];
                    for &m in &missing {
                        present[m] = false;
                        shards[m].fill(0xee);
                    }
                    codec.reconstruct(&mut shards, &present, d).unwrap();
                    assert_eq!(shards, all, "p={p} missing {missing:?}");
                }
            }
        }
    }
}
