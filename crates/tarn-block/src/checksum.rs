//! Checksum registry: fletcher4 (default), sha256, blake3. All produce 32 bytes.

use crate::ChecksumKind;
use sha2::Digest;

/// Fletcher-4 over little-endian 32-bit words (a trailing partial word is
/// zero-padded), four 64-bit running sums, as ZFS defines the algorithm.
pub fn fletcher4(data: &[u8]) -> [u8; 32] {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut chunks = data.chunks_exact(4);
    for w in &mut chunks {
        let x = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64;
        a = a.wrapping_add(x);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 4];
        w[..rest.len()].copy_from_slice(rest);
        let x = u32::from_le_bytes(w) as u64;
        a = a.wrapping_add(x);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let mut out = [0u8; 32];
    out[0..8].copy_from_slice(&a.to_le_bytes());
    out[8..16].copy_from_slice(&b.to_le_bytes());
    out[16..24].copy_from_slice(&c.to_le_bytes());
    out[24..32].copy_from_slice(&d.to_le_bytes());
    out
}

pub fn compute(kind: ChecksumKind, data: &[u8]) -> [u8; 32] {
    match kind {
        ChecksumKind::Fletcher4 => fletcher4(data),
        ChecksumKind::Sha256 => sha2::Sha256::digest(data).into(),
        ChecksumKind::Blake3 => *blake3::hash(data).as_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn kinds_differ_and_detect_flips() {
        let mut data = vec![7u8; 4099];
        for k in [ChecksumKind::Fletcher4, ChecksumKind::Sha256, ChecksumKind::Blake3] {
            let c = compute(k, &data);
            data[100] ^= 1;
            assert_ne!(c, compute(k, &data));
            data[100] ^= 1;
            assert_eq!(c, compute(k, &data));
        }
    }
}
