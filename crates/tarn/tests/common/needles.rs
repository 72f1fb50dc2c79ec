//! Byte strings to look for where they must not be (devices, logs,
//! reports, a process's memory): secrets in every form they could leak
//! in, and a matcher that checks many of them in one pass.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::Path;

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Standard base64 without padding (a prefix of the padded form).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// A secret as it could leak: its bytes, as hex either case, as a JSON or
/// Debug byte array (how a `Vec<u8>` in a request would print), as base64.
pub fn secret_forms(label: &str, secret: &[u8]) -> Vec<(String, Vec<u8>)> {
    let decimal = |sep: &str| secret.iter().map(u8::to_string).collect::<Vec<_>>().join(sep);
    vec![
        (label.to_string(), secret.to_vec()),
        (format!("{label} as lowercase hex"), hex(secret).into_bytes()),
        (format!("{label} as uppercase hex"), hex(secret).to_ascii_uppercase().into_bytes()),
        (format!("{label} as a JSON byte array"), format!("[{}]", decimal(",")).into_bytes()),
        (format!("{label} as a Debug byte array"), format!("[{}]", decimal(", ")).into_bytes()),
        (format!("{label} as base64"), base64(secret).into_bytes()),
    ]
}

/// Byte strings to look for, indexed by their first two bytes so that one
/// pass over a device image checks them all.
pub struct Needles {
    pub list: Vec<(String, Vec<u8>)>,
    by_prefix: HashMap<u16, Vec<usize>>,
    bitmap: Vec<bool>,
}

impl Needles {
    pub fn new(list: Vec<(String, Vec<u8>)>) -> Needles {
        let mut by_prefix: HashMap<u16, Vec<usize>> = HashMap::new();
        let mut bitmap = vec![false; 1 << 16];
        for (i, (label, needle)) in list.iter().enumerate() {
            assert!(needle.len() >= 2 && needle.len() <= 4096, "needle '{label}' of {} bytes", needle.len());
            let key = u16::from_le_bytes([needle[0], needle[1]]);
            by_prefix.entry(key).or_default().push(i);
            bitmap[key as usize] = true;
        }
        Needles { list, by_prefix, bitmap }
    }

    /// The labels of the needles `hay` holds.
    pub fn found_in(&self, hay: &[u8], found: &mut BTreeSet<String>) {
        for i in 0..hay.len().saturating_sub(1) {
            let key = u16::from_le_bytes([hay[i], hay[i + 1]]);
            if !self.bitmap[key as usize] {
                continue;
            }
            for &n in &self.by_prefix[&key] {
                let (label, needle) = &self.list[n];
                if hay[i..].starts_with(needle) {
                    found.insert(label.clone());
                }
            }
        }
    }

    pub fn find(&self, hay: &[u8]) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        self.found_in(hay, &mut found);
        found
    }

    /// The labels of the needles anywhere in the device image `path`: its
    /// runs of non-zero 4 KiB pages are searched, each widened by a page
    /// on both sides (a needle may run into a page of zeros).
    pub fn find_on_device(&self, path: &Path) -> BTreeSet<String> {
        const PAGE: usize = 4096;
        let data = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let pages = data.len().div_ceil(PAGE);
        let nonzero = |i: usize| data[i * PAGE..((i + 1) * PAGE).min(data.len())].iter().any(|b| *b != 0);
        let mut found = BTreeSet::new();
        let mut i = 0;
        while i < pages {
            if !nonzero(i) {
                i += 1;
                continue;
            }
            let start = i;
            while i < pages && nonzero(i) {
                i += 1;
            }
            let from = start.saturating_sub(1) * PAGE;
            let to = ((i + 1) * PAGE).min(data.len());
            self.found_in(&data[from..to], &mut found);
        }
        found
    }
}
