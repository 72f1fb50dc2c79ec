//! Checksum registry: fletcher4 (default), sha256, blake3. All produce 32 bytes.

use crate::ChecksumKind;
use sha2::Digest;

/// Fletcher-4 over little-endian 32-bit words (a trailing partial word is
/// zero-padded), four 64-bit running sums, as ZFS defines the algorithm.
///
/// Computed as four interleaved lanes (word i goes to lane i % 4), which
/// breaks the serial dependency of the running sums so the CPU overlaps
/// them, then combined. With t = m - j counting from the end of a lane of m
/// words and n = 4m, word 4j + k sits n - i = 4t - k from the end, and the
/// whole-stream sums are, mod 2^64 (every coefficient is an integer):
///   A = Σ a_k
///   B = Σ 4 b_k - k a_k
///   C = Σ 16 c_k - (6 + 4k) b_k + C(k,2) a_k
///   D = Σ 64 d_k - (48 + 16k) c_k + (4 + 4k + 2k²) b_k - C(k,3) a_k
/// Words past the last multiple of four continue the plain recurrence.
/// The four lanes' sums run with AVX2 where the CPU has it (four 64-bit
/// lanes in one register each for a, b, c and d: about four times the
/// scalar loop's rate, which spilled its sixteen sums to the stack).
pub fn fletcher4(data: &[u8]) -> [u8; 32] {
    let quads = data.len() / 16;
    let body = &data[..quads * 16];
    #[cfg(target_arch = "x86_64")]
    let sums = if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        unsafe { lanes_avx2(body) }
    } else {
        lanes_scalar(body)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let sums = lanes_scalar(body);
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let [sa, sb, sc, sd] = sums;
    for (k, (((la, lb), lc), ld)) in sa.into_iter().zip(sb).zip(sc).zip(sd).enumerate() {
        let k = k as u64;
        let choose2 = k * k.saturating_sub(1) / 2;
        let choose3 = k * k.saturating_sub(1) * k.saturating_sub(2) / 6;
        a = a.wrapping_add(la);
        b = b.wrapping_add(lb.wrapping_mul(4)).wrapping_sub(la.wrapping_mul(k));
        c = c
            .wrapping_add(lc.wrapping_mul(16))
            .wrapping_sub(lb.wrapping_mul(6 + 4 * k))
            .wrapping_add(la.wrapping_mul(choose2));
        d = d
            .wrapping_add(ld.wrapping_mul(64))
            .wrapping_sub(lc.wrapping_mul(48 + 16 * k))
            .wrapping_add(lb.wrapping_mul(4 + 4 * k + 2 * k * k))
            .wrapping_sub(la.wrapping_mul(choose3));
    }
    to_bytes(fold_serial([a, b, c, d], &data[quads * 16..]))
}

/// The lanes' running sums over `body` (a multiple of 16 bytes): `[a, b,
/// c, d]`, each indexed by lane.
fn lanes_scalar(body: &[u8]) -> [[u64; 4]; 4] {
    let (mut a, mut b, mut c, mut d) = ([0u64; 4], [0u64; 4], [0u64; 4], [0u64; 4]);
    for q in body.chunks_exact(16) {
        for k in 0..4 {
            let x = u32::from_le_bytes([q[4 * k], q[4 * k + 1], q[4 * k + 2], q[4 * k + 3]]) as u64;
            a[k] = a[k].wrapping_add(x);
            b[k] = b[k].wrapping_add(a[k]);
            c[k] = c[k].wrapping_add(b[k]);
            d[k] = d[k].wrapping_add(c[k]);
        }
    }
    [a, b, c, d]
}

/// `lanes_scalar` with AVX2: the four words of each 16 bytes widened to
/// four 64-bit lanes, added into a, b, c and d in turn.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lanes_avx2(body: &[u8]) -> [[u64; 4]; 4] {
    use std::arch::x86_64::*;
    let zero = _mm256_setzero_si256();
    let (mut a, mut b, mut c, mut d) = (zero, zero, zero, zero);
    for q in body.chunks_exact(16) {
        // SAFETY: `q` is 16 readable bytes; the load has no alignment need.
        let x = _mm256_cvtepu32_epi64(unsafe { _mm_loadu_si128(q.as_ptr().cast::<__m128i>()) });
        a = _mm256_add_epi64(a, x);
        b = _mm256_add_epi64(b, a);
        c = _mm256_add_epi64(c, b);
        d = _mm256_add_epi64(d, c);
    }
    let mut out = [[0u64; 4]; 4];
    for (dst, v) in out.iter_mut().zip([a, b, c, d]) {
        // SAFETY: `dst` is 32 writable bytes; the store has no alignment need.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast::<__m256i>(), v) };
    }
    out
}

/// The definition itself: continue the running sums (a, b, c, d) over
/// `bytes`, a trailing partial word zero-padded.
fn fold_serial(mut s: [u64; 4], bytes: &[u8]) -> [u64; 4] {
    for w in bytes.chunks(4) {
        let mut x = [0u8; 4];
        x[..w.len()].copy_from_slice(w);
        s[0] = s[0].wrapping_add(u32::from_le_bytes(x) as u64);
        s[1] = s[1].wrapping_add(s[0]);
        s[2] = s[2].wrapping_add(s[1]);
        s[3] = s[3].wrapping_add(s[2]);
    }
    s
}

fn to_bytes(s: [u64; 4]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, v) in s.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    out
}

pub fn compute(kind: ChecksumKind, data: &[u8]) -> [u8; 32] {
    match kind {
        ChecksumKind::Fletcher4 => fletcher4(data),
        ChecksumKind::Sha256 => sha2::Sha256::digest(data).into(),
        ChecksumKind::Blake3 => *blake3::hash(data).as_bytes(),
    }
}

/// The plain serial definition over the whole input: the reference the
/// lane version is tested against.
#[cfg(test)]
fn fletcher4_serial(data: &[u8]) -> [u8; 32] {
    to_bytes(fold_serial([0; 4], data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fletcher4_lanes_match_the_serial_definition() {
        let mut x = 0x9e3779b97f4a7c15u64;
        let data: Vec<u8> = (0..200_003)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for len in [0, 1, 3, 4, 15, 16, 17, 31, 64, 100, 512, 4096, 131072, 200_003] {
            assert_eq!(fletcher4(&data[..len]), fletcher4_serial(&data[..len]), "len {len}");
        }
        let ones = vec![0xFFu8; 1 << 20];
        assert_eq!(fletcher4(&ones), fletcher4_serial(&ones), "wrapping sums");
        // Both ways of running the lanes agree (the CPU here picks one).
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            for len in [0, 16, 4096, 131072, 200_000] {
                // SAFETY: the CPU has AVX2.
                assert_eq!(lanes_scalar(&data[..len]), unsafe { lanes_avx2(&data[..len]) }, "len {len}");
            }
            assert_eq!(lanes_scalar(&ones), unsafe { lanes_avx2(&ones) }, "wrapping lanes");
        }
    }
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
