//! Block encryption: AES-GCM over the physical block, authenticated by a
//! MAC kept in the block pointer.
//!
//! Order on write: compress -> pad to the sector -> **seal** -> checksum.
//! The checksum in the block pointer is over the ciphertext, so scrub,
//! resilver and `debug check` verify and repair encrypted blocks without a
//! key; the 16-byte GCM tag (the MAC) proves, to a reader holding the key,
//! that the plaintext is the one written with these block pointer fields.
//! On read: checksum (any copy, self-healing as for every block) -> **open**
//! (MAC checked before any plaintext is used) -> decompress.
//!
//! Keys. An encryption root has one random 256-bit master key (wrapped by
//! the user's key; changing the user's key only rewraps it). Blocks are
//! never sealed with the master key itself: each is sealed with a key
//! derived by HKDF-SHA-512 from the master key and a 32-bit *salt* the
//! block pointer carries. A writer (`BlockKeys`) picks a random salt and
//! draws a new one after `SALT_ROTATE_BLOCKS` blocks, and a random 96-bit
//! nonce per block. Why nonces never repeat under one key, in numbers: a
//! derived key seals at most 2^24 blocks per writer epoch; the chance
//! that two of n random 96-bit nonces collide is about n^2 / 2^97, so
//! 2^-49 for one epoch. Two epochs share a derived key only when their
//! random salts collide: with E epochs in a dataset's life that chance is
//! about E^2 / 2^33 (E = 1,000 epochs, i.e. 16 billion blocks written:
//! 1.2 * 10^-4), and even then the pair's 2^25 blocks collide on a nonce
//! with chance about 2^-47. This keeps every key far below the 2^32
//! random-nonce invocations NIST SP 800-38D allows.
//!
//! The MAC's additional data binds the ciphertext to the block pointer
//! fields a reader trusts: logical and physical size, compression, level,
//! object type and the salt. (What binds a block to its place in a file,
//! so two valid blocks cannot be swapped, is the tree above it: see
//! docs/on-disk-format.md "Encryption".)

use std::sync::atomic::{AtomicU64, Ordering};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hkdf;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use parking_lot::Mutex;
use tarn_keys::MasterKey;

use crate::bp::BlockPtr;

/// Bytes of a GCM tag, kept in the block pointer as its MAC.
pub const MAC_LEN: usize = 16;
/// A writer draws a new salt (so a new derived key) after this many blocks.
pub const SALT_ROTATE_BLOCKS: u64 = 1 << 24;
/// Domain separation of derived block keys (the HKDF salt input).
const BLOCK_KEY_DOMAIN: &[u8] = b"tarn block key v1";
/// HKDF info of the object set root MAC key.
const ROOT_MAC_DOMAIN: &[u8] = b"tarn objset mac key v1";

/// Block pointer flag bit 0: the physical block is sealed (crypt.rs).
pub const FLAG_ENCRYPTED: u8 = 1 << 0;

/// Block pointer flag bit 2: the block is stored readable (scrub and the
/// tree walk need no key), but the object layer sealed parts of it with
/// [`BlockKeys::seal_detached`] under the pointer's IV, the MAC
/// authenticating the rest (a dnode block: inode attributes sealed, the
/// block pointers in the clear but bound).
pub const FLAG_PARTLY_SEALED: u8 = 1 << 2;

/// Block pointer flag bit 3: the block is an array of block pointers
/// (an indirect block of an encrypted object set) and the pointer's MAC
/// field holds [`children_digest`] of them, checked whenever the block is
/// read from disk. Unkeyed: the chain of trust ends in a keyed MAC above
/// (a dnode block's), which covers this pointer's portable form.
pub const FLAG_CHILDREN_DIGEST: u8 = 1 << 3;

/// Block pointer flag bit 4: an object set root whose pointer's MAC field
/// holds [`BlockKeys::objset_mac`] of its portable part (tarn-obj crypt.rs).
pub const FLAG_OBJSET_MAC: u8 = 1 << 4;

/// The flags a parent's authentication covers (`BlockPtr::portable`).
pub const SEALING_FLAGS: u8 = FLAG_ENCRYPTED | FLAG_PARTLY_SEALED | FLAG_CHILDREN_DIGEST | FLAG_OBJSET_MAC;

/// The digest an indirect block's pointer carries: BLAKE3 of a domain
/// string and the portable form of each child, first 16 bytes. None if
/// `data` is not an array of block pointers.
pub fn children_digest(data: &[u8]) -> Option<[u8; MAC_LEN]> {
    if data.is_empty() || !data.len().is_multiple_of(crate::bp::BP_SIZE) {
        return None;
    }
    let mut h = blake3::Hasher::new();
    h.update(b"tarn children v1");
    for chunk in data.chunks_exact(crate::bp::BP_SIZE) {
        h.update(&BlockPtr::decode(chunk).ok()?.portable());
    }
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&h.finalize().as_bytes()[..MAC_LEN]);
    Some(out)
}

/// A sealed level-0 block as a raw send carries it: the pointer fields
/// its seal binds (or that describe the ciphertext), without the
/// addresses, birth or checksum, which are the receiving pool's.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RawBlock {
    pub lsize: u32,
    pub psize: u32,
    pub compression: u8,
    pub iv: [u8; 16],
    pub mac: [u8; 16],
}

impl RawBlock {
    /// The raw form of `bp`, if it is a sealed level-0 block.
    pub fn of(bp: &BlockPtr) -> Option<RawBlock> {
        (is_encrypted(bp) && bp.level == 0 && !bp.is_hole())
            .then_some(RawBlock { lsize: bp.lsize, psize: bp.psize, compression: bp.compression, iv: bp.iv, mac: bp.mac })
    }
}

pub fn is_encrypted(bp: &BlockPtr) -> bool {
    bp.flags & FLAG_ENCRYPTED != 0
}

/// The `encryption` property's ciphers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
}

impl Cipher {
    /// Parses an `encryption` value other than `off` (`on` is aes-256-gcm).
    pub fn parse(s: &str) -> Option<Cipher> {
        match s {
            "on" | "aes-256-gcm" => Some(Cipher::Aes256Gcm),
            "aes-128-gcm" => Some(Cipher::Aes128Gcm),
            _ => None,
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            Cipher::Aes128Gcm => "aes-128-gcm",
            Cipher::Aes256Gcm => "aes-256-gcm",
        }
    }
    /// The code stored on disk (in an encryption root's key record).
    pub fn code(&self) -> u8 {
        match self {
            Cipher::Aes128Gcm => 1,
            Cipher::Aes256Gcm => 2,
        }
    }
    pub fn from_code(code: u8) -> Option<Cipher> {
        match code {
            1 => Some(Cipher::Aes128Gcm),
            2 => Some(Cipher::Aes256Gcm),
            _ => None,
        }
    }
    fn algorithm(&self) -> &'static aws_lc_rs::aead::Algorithm {
        match self {
            Cipher::Aes128Gcm => &AES_128_GCM,
            Cipher::Aes256Gcm => &AES_256_GCM,
        }
    }
}

/// Why a sealed block could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptError {
    /// The MAC does not match: the block, or the block pointer fields bound
    /// to it, changed since it was written (or the key is not its key).
    #[error("MAC mismatch (authentication failed)")]
    Authentication,
    #[error("block is not encrypted")]
    NotEncrypted,
    #[error("no random numbers: {0}")]
    Random(String),
}

/// The key material of one encryption root, as the pipeline uses it:
/// derives per-salt block keys, seals blocks under the writer's current
/// salt, opens blocks under whichever salt they carry.
pub struct BlockKeys {
    cipher: Cipher,
    /// The master key, in locked memory that never reaches a core dump.
    master: MasterKey,
    /// The writer's salt and how many blocks it has sealed.
    current: Mutex<(u32, LessSafeKeyBox)>,
    sealed_under_current: AtomicU64,
    /// Recently used derived keys for opening, by salt (a small cache:
    /// most reads hit the few salts of recent epochs).
    opened: Mutex<Vec<(u32, std::sync::Arc<LessSafeKey>)>>,
    rng: SystemRandom,
    /// HMAC-SHA-256 key of object set roots (HKDF from the master key).
    root_key: aws_lc_rs::hmac::Key,
    /// The cache key prefix of the plaintext opened with these keys.
    cache_id: u64,
}

type LessSafeKeyBox = std::sync::Arc<LessSafeKey>;

const OPEN_CACHE: usize = 8;

impl BlockKeys {
    /// Keys for blocks of an encryption root whose master key is `master`.
    pub fn new(cipher: Cipher, master: &MasterKey) -> Result<BlockKeys, CryptError> {
        let rng = SystemRandom::new();
        let master = master.clone();
        let salt = random_salt(&rng)?;
        let key = std::sync::Arc::new(derive(cipher, &master, salt));
        let root_key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, master.derive(ROOT_MAC_DOMAIN, 32).expose());
        Ok(BlockKeys {
            cache_id: crate::io::next_cache_id(),
            root_key,
            cipher,
            master,
            current: Mutex::new((salt, key)),
            sealed_under_current: AtomicU64::new(0),
            opened: Mutex::new(Vec::new()),
            rng,
        })
    }

    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// The cache key prefix of the plaintext opened with these keys
    /// (process-unique; `BlockIo::drop_keyed`).
    pub fn cache_id(&self) -> u64 {
        self.cache_id
    }

    /// The keyed MAC of an object set root's authenticated part (HMAC-SHA-256
    /// under a key derived for this purpose alone, first 16 bytes).
    pub fn objset_mac(&self, data: &[u8]) -> [u8; MAC_LEN] {
        let tag = aws_lc_rs::hmac::sign(&self.root_key, data);
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&tag.as_ref()[..MAC_LEN]);
        out
    }

    /// The salt the next sealed block will carry (tests).
    pub fn current_salt(&self) -> u32 {
        self.current.lock().0
    }

    /// The derived key and salt for sealing one more block (rotating the
    /// salt every `SALT_ROTATE_BLOCKS`).
    fn sealing_key(&self) -> Result<(u32, LessSafeKeyBox), CryptError> {
        let n = self.sealed_under_current.fetch_add(1, Ordering::Relaxed);
        let mut cur = self.current.lock();
        if n >= SALT_ROTATE_BLOCKS {
            let salt = random_salt(&self.rng)?;
            *cur = (salt, std::sync::Arc::new(derive(self.cipher, &self.master, salt)));
            self.sealed_under_current.store(1, Ordering::Relaxed);
        }
        Ok((cur.0, cur.1.clone()))
    }

    /// Forces a new salt now (tests of rotation; a writer after a long
    /// life).
    pub fn rotate(&self) -> Result<(), CryptError> {
        let salt = random_salt(&self.rng)?;
        *self.current.lock() = (salt, std::sync::Arc::new(derive(self.cipher, &self.master, salt)));
        self.sealed_under_current.store(0, Ordering::Relaxed);
        Ok(())
    }

    fn opening_key(&self, salt: u32) -> std::sync::Arc<LessSafeKey> {
        {
            let cur = self.current.lock();
            if cur.0 == salt {
                return cur.1.clone();
            }
        }
        let mut cache = self.opened.lock();
        if let Some((_, k)) = cache.iter().find(|(s, _)| *s == salt) {
            return k.clone();
        }
        let key = std::sync::Arc::new(derive(self.cipher, &self.master, salt));
        if cache.len() == OPEN_CACHE {
            cache.remove(0);
        }
        cache.push((salt, key.clone()));
        key
    }

    /// Seals the padded physical block `phys` in place for `bp` (whose
    /// sizes, compression, level and object type are already set): sets
    /// the encrypted flag, the IV (salt and nonce) and the MAC. The caller
    /// computes the checksum afterwards, over the ciphertext.
    pub fn seal(&self, bp: &mut BlockPtr, phys: &mut [u8]) -> Result<(), CryptError> {
        let (salt, key) = self.sealing_key()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|e| CryptError::Random(e.to_string()))?;
        bp.flags |= FLAG_ENCRYPTED;
        bp.iv[..4].copy_from_slice(&salt.to_le_bytes());
        bp.iv[4..].copy_from_slice(&nonce);
        let aad = aad(bp);
        let tag = key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&aad), phys)
            .map_err(|_| CryptError::Random("seal failed".into()))?;
        bp.mac.copy_from_slice(tag.as_ref());
        Ok(())
    }

    /// Opens the verified physical block of `bp` in place: checks the MAC
    /// against the block and `bp`'s bound fields, then decrypts. Nothing
    /// of `phys` is plaintext unless this returns Ok.
    pub fn open(&self, bp: &BlockPtr, phys: &mut Vec<u8>) -> Result<(), CryptError> {
        if !is_encrypted(bp) {
            return Err(CryptError::NotEncrypted);
        }
        let salt = u32::from_le_bytes(bp.iv[..4].try_into().expect("4 bytes"));
        let nonce: [u8; NONCE_LEN] = bp.iv[4..].try_into().expect("12 bytes");
        let key = self.opening_key(salt);
        let aad = aad(bp);
        // The tag apart: appending it to a buffer read to its exact size
        // would reallocate and copy the whole block.
        match key.open_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&aad), &bp.mac, phys) {
            Ok(_) => Ok(()),
            Err(_) => {
                // Whatever aws-lc left in the buffer, hand back nothing.
                phys.clear();
                Err(CryptError::Authentication)
            }
        }
    }
}

impl BlockKeys {
    /// Seals `buf` in place under the writer's current salt, binding
    /// `aad`; returns the IV (salt, nonce) and MAC for the caller to keep
    /// in the block pointer with [`FLAG_PARTLY_SEALED`]. The caller's `aad`
    /// must start with a domain string of its own, so a detached seal can
    /// never be taken for a block seal (whose additional data is the fixed
    /// 16 bytes of `aad()`).
    pub fn seal_detached(&self, aad: &[u8], buf: &mut [u8]) -> Result<([u8; 16], [u8; MAC_LEN]), CryptError> {
        let (salt, key) = self.sealing_key()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|e| CryptError::Random(e.to_string()))?;
        let mut iv = [0u8; 16];
        iv[..4].copy_from_slice(&salt.to_le_bytes());
        iv[4..].copy_from_slice(&nonce);
        let tag = key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), buf)
            .map_err(|_| CryptError::Random("seal failed".into()))?;
        let mut mac = [0u8; MAC_LEN];
        mac.copy_from_slice(tag.as_ref());
        Ok((iv, mac))
    }

    /// Opens what [`BlockKeys::seal_detached`] sealed: `ciphertext` into
    /// `out` (the same length). On failure `out` is zeroed: nothing of it
    /// is handed back.
    pub fn open_detached(&self, iv: &[u8; 16], mac: &[u8; MAC_LEN], aad: &[u8], ciphertext: &[u8], out: &mut [u8]) -> Result<(), CryptError> {
        let salt = u32::from_le_bytes(iv[..4].try_into().expect("4 bytes"));
        let nonce: [u8; NONCE_LEN] = iv[4..].try_into().expect("12 bytes");
        let key = self.opening_key(salt);
        if ciphertext.len() != out.len() {
            return Err(CryptError::Authentication);
        }
        match key.open_separate_gather(Nonce::assume_unique_for_key(nonce), Aad::from(aad), ciphertext, mac, out) {
            Ok(()) => Ok(()),
            Err(_) => {
                out.fill(0);
                Err(CryptError::Authentication)
            }
        }
    }
}

fn random_salt(rng: &SystemRandom) -> Result<u32, CryptError> {
    let mut s = [0u8; 4];
    rng.fill(&mut s).map_err(|e| CryptError::Random(e.to_string()))?;
    Ok(u32::from_le_bytes(s))
}

/// The block key for `salt`: HKDF-SHA-512(master, domain, salt).
fn derive(cipher: Cipher, master: &MasterKey, salt: u32) -> LessSafeKey {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA512, BLOCK_KEY_DOMAIN).extract(master.bytes());
    let info = salt.to_le_bytes();
    let info_parts = [&info[..]];
    let okm = prk.expand(&info_parts, cipher.algorithm()).expect("key length within HKDF's bound");
    LessSafeKey::new(UnboundKey::from(okm))
}

/// What the MAC binds besides the ciphertext: the fields of the block
/// pointer a reader relies on to interpret the plaintext (not the
/// addresses, birth or checksum: a block may be moved or rewritten as is
/// by resilver, and the checksum is over the ciphertext).
fn aad(bp: &BlockPtr) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0..4].copy_from_slice(&bp.lsize.to_le_bytes());
    a[4..8].copy_from_slice(&bp.psize.to_le_bytes());
    a[8] = bp.compression;
    a[9] = bp.level;
    a[10] = bp.otype;
    a[11] = 1; // AAD layout version
    a[12..16].copy_from_slice(&bp.iv[..4]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bp_for(len: usize) -> BlockPtr {
        let mut bp = BlockPtr::HOLE;
        bp.lsize = len as u32;
        bp.psize = len as u32;
        bp.ndva = 1;
        bp.level = 0;
        bp.otype = 19;
        bp
    }

    #[test]
    fn seal_then_open_round_trips_for_both_ciphers() {
        for cipher in [Cipher::Aes128Gcm, Cipher::Aes256Gcm] {
            let keys = BlockKeys::new(cipher, &MasterKey::from_bytes(&[7u8; 32])).unwrap();
            let plain: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 251) as u8).collect();
            let mut bp = bp_for(plain.len());
            let mut phys = plain.clone();
            keys.seal(&mut bp, &mut phys).unwrap();
            assert!(is_encrypted(&bp));
            assert_ne!(phys, plain, "sealed bytes are not the plaintext");
            assert!(!phys.windows(64).any(|w| plain.windows(64).any(|p| p == w)), "no 64-byte run of plaintext survives");
            keys.open(&bp, &mut phys).unwrap();
            assert_eq!(phys, plain);
        }
    }

    #[test]
    fn any_change_to_block_or_bound_fields_fails_authentication() {
        let keys = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[1u8; 32])).unwrap();
        let plain = vec![0xabu8; 4096];
        let mut bp = bp_for(plain.len());
        let mut sealed = plain.clone();
        keys.seal(&mut bp, &mut sealed).unwrap();
        // A flipped bit anywhere in the block.
        for bit in [0usize, 7, 4096 * 8 / 2, 4096 * 8 - 1] {
            let mut phys = sealed.clone();
            phys[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(keys.open(&bp, &mut phys), Err(CryptError::Authentication), "bit {bit}");
            assert!(phys.is_empty(), "nothing handed back on failure");
        }
        // Each bound field, the nonce and the MAC itself.
        type Change = (&'static str, fn(&mut BlockPtr));
        let changes: [Change; 7] = [
            ("lsize", |b| b.lsize += 1),
            ("compression", |b| b.compression = 1),
            ("level", |b| b.level = 1),
            ("otype", |b| b.otype = 20),
            ("salt", |b| b.iv[0] ^= 1),
            ("nonce", |b| b.iv[15] ^= 1),
            ("mac", |b| b.mac[3] ^= 1),
        ];
        for (what, change) in changes {
            let mut b = bp;
            change(&mut b);
            let mut phys = sealed.clone();
            assert_eq!(keys.open(&b, &mut phys), Err(CryptError::Authentication), "{what}");
        }
        // Another master key.
        let other = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[2u8; 32])).unwrap();
        let mut phys = sealed.clone();
        assert_eq!(other.open(&bp, &mut phys), Err(CryptError::Authentication));
        // And the untouched block still opens.
        let mut phys = sealed.clone();
        keys.open(&bp, &mut phys).unwrap();
        assert_eq!(phys, plain);
    }

    #[test]
    fn nonces_and_salts_differ_and_old_salts_still_open() {
        let keys = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[3u8; 32])).unwrap();
        let plain = vec![5u8; 512];
        let mut seen = std::collections::HashSet::new();
        let mut blocks = Vec::new();
        for i in 0..200 {
            if i > 0 && i % 50 == 0 {
                keys.rotate().unwrap();
            }
            let mut bp = bp_for(plain.len());
            let mut phys = plain.clone();
            keys.seal(&mut bp, &mut phys).unwrap();
            assert!(seen.insert(bp.iv), "an IV repeated");
            blocks.push((bp, phys));
        }
        let salts: std::collections::HashSet<u32> = blocks.iter().map(|(bp, _)| u32::from_le_bytes(bp.iv[..4].try_into().unwrap())).collect();
        assert_eq!(salts.len(), 4, "three rotations, four salts");
        // Identical plaintext never gives identical ciphertext.
        let cts: std::collections::HashSet<&Vec<u8>> = blocks.iter().map(|(_, p)| p).collect();
        assert_eq!(cts.len(), blocks.len());
        for (bp, mut phys) in blocks {
            keys.open(&bp, &mut phys).unwrap();
            assert_eq!(phys, plain);
        }
        // A fresh BlockKeys for the same master (after a re-import) opens
        // blocks of every salt, and writes under a salt of its own.
        let again = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[3u8; 32])).unwrap();
        let mut bp = bp_for(plain.len());
        let mut phys = plain.clone();
        keys.seal(&mut bp, &mut phys).unwrap();
        again.open(&bp, &mut phys).unwrap();
        assert_eq!(phys, plain);
    }

    #[test]
    fn the_writer_rotates_its_salt_after_its_quota() {
        let keys = BlockKeys::new(Cipher::Aes128Gcm, &MasterKey::from_bytes(&[4u8; 32])).unwrap();
        keys.sealed_under_current.store(SALT_ROTATE_BLOCKS, Ordering::Relaxed);
        let before = keys.current_salt();
        let mut bp = bp_for(16);
        let mut phys = vec![0u8; 16];
        keys.seal(&mut bp, &mut phys).unwrap();
        // A random 32-bit salt equal to the old one: 1 in 4 billion.
        assert_ne!(u32::from_le_bytes(bp.iv[..4].try_into().unwrap()), before);
        assert_eq!(keys.sealed_under_current.load(Ordering::Relaxed), 1);
        keys.open(&bp, &mut phys).unwrap();
    }

    #[test]
    fn detached_seals_bind_their_additional_data() {
        let keys = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[9u8; 32])).unwrap();
        let plain = b"inode attributes, 96 bytes each".repeat(5);
        let aad = b"tarn test aad: the block pointers".to_vec();
        let mut ct = plain.clone();
        let (iv, mac) = keys.seal_detached(&aad, &mut ct).unwrap();
        assert_ne!(ct, plain);
        let mut out = vec![0u8; ct.len()];
        keys.open_detached(&iv, &mac, &aad, &ct, &mut out).unwrap();
        assert_eq!(out, plain);
        let mut other_aad = aad.clone();
        other_aad[20] ^= 1;
        assert_eq!(keys.open_detached(&iv, &mac, &other_aad, &ct, &mut out), Err(CryptError::Authentication));
        assert!(out.iter().all(|&b| b == 0), "nothing handed back");
        let mut bad = ct.clone();
        bad[3] ^= 0x40;
        assert_eq!(keys.open_detached(&iv, &mac, &aad, &bad, &mut out), Err(CryptError::Authentication));
        let mut iv2 = iv;
        iv2[9] ^= 1;
        assert_eq!(keys.open_detached(&iv2, &mac, &aad, &ct, &mut out), Err(CryptError::Authentication));
        // An empty plaintext still authenticates its additional data.
        let (iv, mac) = keys.seal_detached(&aad, &mut []).unwrap();
        keys.open_detached(&iv, &mac, &aad, &[], &mut []).unwrap();
        assert_eq!(keys.open_detached(&iv, &mac, &other_aad, &[], &mut []), Err(CryptError::Authentication));
    }

    #[test]
    fn cipher_names_and_codes() {
        assert_eq!(Cipher::parse("on"), Some(Cipher::Aes256Gcm));
        assert_eq!(Cipher::parse("aes-128-gcm"), Some(Cipher::Aes128Gcm));
        assert_eq!(Cipher::parse("aes-256-ccm"), None);
        assert_eq!(Cipher::parse("off"), None);
        for c in [Cipher::Aes128Gcm, Cipher::Aes256Gcm] {
            assert_eq!(Cipher::from_code(c.code()), Some(c));
            assert_eq!(Cipher::parse(c.name()), Some(c));
        }
        assert_eq!(Cipher::from_code(0), None);
    }
}
