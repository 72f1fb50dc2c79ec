//! Compression registry. A compressed physical block starts with a 4-byte
//! little-endian length of the compressed payload, then the payload, then
//! zero padding up to the sector size.

use crate::Compression;

/// Bytes of each of the three samples the incompressibility probe compresses.
const PROBE_SAMPLE: usize = 4096;

/// Cheap early abort for large blocks: lz4 over three 4 KiB samples (start,
/// middle, end). If they save less than 1/16 the block is almost surely
/// incompressible (media, encrypted or already-compressed files) and is not
/// worth compressing whole.
fn looks_incompressible(data: &[u8]) -> bool {
    if data.len() < 8 * PROBE_SAMPLE {
        return false;
    }
    let mid = data.len() / 2 - PROBE_SAMPLE / 2;
    let end = data.len() - PROBE_SAMPLE;
    let mut input = 0usize;
    let mut output = 0usize;
    for start in [0, mid, end] {
        let sample = &data[start..start + PROBE_SAMPLE];
        input += sample.len();
        output += lz4_flex::block::compress(sample).len();
    }
    output > input - input / 16
}

/// Compress `data`; `None` when it does not save at least 1/8 (the block is
/// then stored uncompressed). Large blocks are probed first (see
/// `looks_incompressible`); zstd also tries lz4 on the whole block as a
/// cheap probe and gives up when lz4 cannot save 1/8 either.
pub fn compress(c: Compression, data: &[u8]) -> Option<Vec<u8>> {
    if c == Compression::Off || looks_incompressible(data) {
        return None;
    }
    let limit = data.len() - data.len() / 8;
    let payload = match c {
        Compression::Off => return None,
        Compression::Lz4 => lz4_flex::block::compress(data),
        Compression::Zstd(level) => {
            if data.len() >= 16 * 1024 {
                let probe = lz4_flex::block::compress(data);
                if probe.len() + 4 > limit {
                    return None;
                }
            }
            zstd::bulk::compress(data, level as i32).ok()?
        }
    };
    if payload.len() + 4 > limit {
        return None;
    }
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&payload);
    Some(out)
}

/// Decompress a physical block into exactly `lsize` bytes.
/// Whether `code` is a compression this build reads.
pub fn known_code(code: u8) -> bool {
    code <= crate::bp::COMP_ZSTD
}

pub fn decompress(code: u8, phys: &[u8], lsize: usize) -> Result<Vec<u8>, String> {
    if code == crate::bp::COMP_OFF {
        return phys.get(..lsize).map(|s| s.to_vec()).ok_or_else(|| "short block".to_string());
    }
    let len_bytes: [u8; 4] = phys.get(..4).and_then(|s| s.try_into().ok()).ok_or("short block")?;
    let len = u32::from_le_bytes(len_bytes) as usize;
    let payload = phys.get(4..4 + len).ok_or("compressed length past block end")?;
    let out = match code {
        crate::bp::COMP_LZ4 => lz4_flex::block::decompress(payload, lsize).map_err(|e| format!("lz4: {e}"))?,
        crate::bp::COMP_ZSTD => zstd::bulk::decompress(payload, lsize).map_err(|e| format!("zstd: {e}"))?,
        _ => return Err(format!("unknown compression {code}")),
    };
    if out.len() != lsize {
        return Err(format!("decompressed {} bytes, expected {lsize}", out.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn round_trips_and_aborts() {
        let text: Vec<u8> = (0..200_000u32).map(|i| b"tarn pools disks "[i as usize % 17]).collect();
        for c in [Compression::Lz4, Compression::Zstd(3), Compression::Zstd(19)] {
            let z = compress(c, &text).expect("compressible");
            let code = crate::bp::compression_code(c);
            assert_eq!(decompress(code, &z, text.len()).unwrap(), text);
        }
        let mut x = 0x12345678u64;
        let noise: Vec<u8> = (0..131072)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(compress(Compression::Zstd(3), &noise).is_none());
        assert!(decompress(crate::bp::COMP_LZ4, &[255, 255, 0, 0, 1], 10).is_err());
    }
}
