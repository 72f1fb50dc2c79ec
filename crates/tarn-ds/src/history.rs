//! Pool history (`zpool history`): every command that changed the pool
//! and the internal events it caused, kept in the pool itself, so the
//! history moves with the pool through export and import.
//!
//! On disk (byte layout also in docs/on-disk-format.md): one MOS object of
//! type [`DS_HISTORY`], named by the pool directory's bonus word at byte 32
//! (0: no history yet; pools made before history existed get the object at
//! their first logged command). Its bonus:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TARNHST1` |
//! | 8 | 8 | version = 1 |
//! | 16 | 8 | capacity: bytes of object data the history may use |
//! | 24 | 8 | `first_len`: bytes at `[0, first_len)` holding the pool's first records (its creation), never dropped |
//! | 32 | 8 | `head`: ring offset of the oldest kept record |
//! | 40 | 8 | `tail`: ring offset just past the newest record |
//! | 48 | 8 | records dropped so far to make room |
//! | 56 | 40 | zero |
//!
//! Ring offsets count every byte ever appended to the ring; ring offset
//! `r` lives at object offset `first_len + r % (capacity - first_len)`, so a
//! record may wrap around the end of the ring. A record is a u32
//! little-endian length `n` followed by `n` bytes of JSON
//! ([`HistoryRecord`]). Appending a record that does not fit drops the
//! oldest ring records (never the first ones) until it does, like ZFS's
//! history ring. The data and the bonus of an append change in one
//! transaction, so a crash keeps the old history or the new one, never a
//! torn record. Every length is checked when read: a bad one is
//! `DsError::Corrupt`, never a panic or a read outside the object.
//!
//! Invariants: `head <= tail`, `tail - head <= capacity - first_len`, and
//! the ring bytes between them are whole records.

use serde::{Deserialize, Serialize};
use tarn_obj::{ObjType, ObjectId, ObjectSet, Tx, BONUS_LEN};

use crate::pool::Pool;
use crate::{DsError, Result};

/// Object type of the pool history (a MOS object).
pub const DS_HISTORY: ObjType = ObjType(35);
/// The pool directory (MOS object 1, see `pool.rs`) and the bonus word
/// that names the history object.
const DIRECTORY_OBJECT: ObjectId = ObjectId(1);
const DIRECTORY_HISTORY_AT: usize = 32;

const MAGIC: &[u8; 8] = b"TARNHST1";
const VERSION: u64 = 1;
const BLOCK_SIZE: u32 = 16 << 10;
/// Bounds of the capacity (ZFS: 0.1% of the pool, at least 128 KiB).
pub const CAPACITY_MIN: u64 = 128 << 10;
pub const CAPACITY_MAX: u64 = 32 << 20;
const LEN_BYTES: u64 = 4;

/// One history record: a command (`command` set, with who ran it where),
/// or an internal event (`event` set, with the txg it was applied in and
/// the dataset it concerns).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRecord {
    /// Unix seconds.
    pub time: u64,
    /// The command line as the user typed it (`tarn snapshot tank@a`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Numeric user id and name of the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub who: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Internal events: the txg the change was applied in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txg: Option<u64>,
    /// Internal events: what happened (`create`, `snapshot`, `destroy`,
    /// `set`, `import`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Internal events: the dataset, snapshot or bookmark, and the id of
    /// its object set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsid: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The history object's bonus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    capacity: u64,
    first_len: u64,
    head: u64,
    tail: u64,
    lost: u64,
}

impl Header {
    fn encode(&self) -> [u8; BONUS_LEN] {
        let mut b = [0u8; BONUS_LEN];
        b[0..8].copy_from_slice(MAGIC);
        for (i, v) in [VERSION, self.capacity, self.first_len, self.head, self.tail, self.lost].iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8; BONUS_LEN]) -> Result<Header> {
        let corrupt = |why: &str| DsError::Corrupt(format!("pool history: {why}"));
        if &b[0..8] != MAGIC {
            return Err(corrupt("bad magic"));
        }
        let word = |i: usize| u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().unwrap_or([0; 8]));
        if word(0) != VERSION {
            return Err(corrupt(&format!("unsupported version {}", word(0))));
        }
        let h = Header { capacity: word(1), first_len: word(2), head: word(3), tail: word(4), lost: word(5) };
        if h.capacity < CAPACITY_MIN.min(4096) || h.capacity > CAPACITY_MAX || h.first_len >= h.capacity {
            return Err(corrupt("bad size"));
        }
        if h.head > h.tail || h.tail - h.head > h.ring_len() {
            return Err(corrupt("bad ring bounds"));
        }
        Ok(h)
    }

    fn ring_len(&self) -> u64 {
        self.capacity - self.first_len
    }
}

/// What `history` returns: the records, oldest first, and how many were
/// dropped to keep the history within its capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub records: Vec<HistoryRecord>,
    pub dropped: u64,
}

fn directory_word(mos: &ObjectSet) -> Result<u64> {
    let bonus = mos.bonus(DIRECTORY_OBJECT)?;
    Ok(u64::from_le_bytes(bonus[DIRECTORY_HISTORY_AT..DIRECTORY_HISTORY_AT + 8].try_into().unwrap_or([0; 8])))
}

/// Default capacity for a pool of `size` bytes.
pub fn default_capacity(size: u64) -> u64 {
    (size / 1000).clamp(CAPACITY_MIN, CAPACITY_MAX)
}

/// Reads `len` ring bytes at ring offset `at`.
fn read_ring(mos: &ObjectSet, obj: ObjectId, h: &Header, at: u64, len: u64) -> Result<Vec<u8>> {
    let ring = h.ring_len();
    let mut out = vec![0u8; len as usize];
    let start = at % ring;
    let first = len.min(ring - start);
    mos.read(obj, h.first_len + start, &mut out[..first as usize])?;
    if first < len {
        mos.read(obj, h.first_len, &mut out[first as usize..])?;
    }
    Ok(out)
}

/// Writes ring bytes at ring offset `at` (wrapping).
fn write_ring(mos: &ObjectSet, tx: &Tx, obj: ObjectId, h: &Header, at: u64, data: &[u8]) -> Result<()> {
    let ring = h.ring_len();
    let start = at % ring;
    let first = (data.len() as u64).min(ring - start) as usize;
    mos.write(tx, obj, h.first_len + start, &data[..first])?;
    if first < data.len() {
        mos.write(tx, obj, h.first_len, &data[first..])?;
    }
    Ok(())
}

fn encode(record: &HistoryRecord) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(record).map_err(|e| DsError::Corrupt(e.to_string()))?;
    let len = u32::try_from(json.len()).map_err(|_| DsError::BadValue("history record too long".into()))?;
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    Ok(out)
}

fn decode(bytes: &[u8]) -> Result<HistoryRecord> {
    serde_json::from_slice(bytes).map_err(|e| DsError::Corrupt(format!("pool history record: {e}")))
}

fn record_len(bytes: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(bytes.get(..4).and_then(|b| b.try_into().ok()).unwrap_or([0; 4])))
}

impl Pool {
    fn history_object(&self) -> Result<Option<ObjectId>> {
        let id = directory_word(&self.obj.mos())?;
        Ok((id != 0).then_some(ObjectId(id)))
    }

    /// Creates the history object (if the pool has none) with room for
    /// `capacity` bytes (4 KiB to [`CAPACITY_MAX`]).
    pub fn history_init(&self, capacity: u64) -> Result<()> {
        let _change = self.change.lock();
        self.history_init_locked(capacity)?;
        Ok(())
    }

    fn history_init_locked(&self, capacity: u64) -> Result<ObjectId> {
        if let Some(id) = self.history_object()? {
            return Ok(id);
        }
        if !(4096..=CAPACITY_MAX).contains(&capacity) {
            return Err(DsError::BadValue(format!("history capacity {capacity} is out of range")));
        }
        let mos = self.obj.mos();
        let tx = self.obj.begin();
        let header = Header { capacity, first_len: 0, head: 0, tail: 0, lost: 0 };
        let id = mos.create(&tx, DS_HISTORY, BLOCK_SIZE, &header.encode())?;
        let mut dir = mos.bonus(DIRECTORY_OBJECT)?;
        dir[DIRECTORY_HISTORY_AT..DIRECTORY_HISTORY_AT + 8].copy_from_slice(&id.0.to_le_bytes());
        mos.set_bonus(&tx, DIRECTORY_OBJECT, &dir)?;
        Ok(id)
    }

    /// Appends records in one transaction (not waited for: they reach
    /// disk with the next txg, or the export). `first`: they are the
    /// pool's creation and are kept for good if the history is empty.
    pub fn history_append(&self, records: &[HistoryRecord], first: bool) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let _change = self.change.lock();
        let obj = self.history_init_locked(default_capacity(self.obj.space().size))?;
        let mos = self.obj.mos();
        let mut h = Header::decode(&mos.bonus(obj)?)?;
        let encoded: Vec<Vec<u8>> = records.iter().map(encode).collect::<Result<_>>()?;
        // Refuse before writing anything: a record the ring cannot hold.
        if let Some(e) = encoded.iter().find(|e| e.len() as u64 > h.ring_len() / 2) {
            return Err(DsError::BadValue(format!("history record of {} bytes does not fit", e.len())));
        }
        let tx = self.obj.begin();
        let total: u64 = encoded.iter().map(|e| e.len() as u64).sum();
        if first && h.first_len == 0 && h.tail == 0 && total <= h.capacity / 4 {
            let mut at = 0;
            for e in &encoded {
                mos.write(&tx, obj, at, e)?;
                at += e.len() as u64;
            }
            h.first_len = at;
        } else {
            for e in &encoded {
                let need = e.len() as u64;
                while h.tail - h.head + need > h.ring_len() {
                    let len = record_len(&read_ring(&mos, obj, &h, h.head, LEN_BYTES)?);
                    if h.head + LEN_BYTES + len > h.tail {
                        return Err(DsError::Corrupt("pool history: record runs past the end".into()));
                    }
                    h.head += LEN_BYTES + len;
                    h.lost += 1;
                }
                write_ring(&mos, &tx, obj, &h, h.tail, e)?;
                h.tail += need;
            }
        }
        mos.set_bonus(&tx, obj, &h.encode())?;
        Ok(())
    }

    /// Every record kept, oldest first (the first records, then the ring).
    pub fn history(&self) -> Result<History> {
        let _change = self.change.lock();
        let Some(obj) = self.history_object()? else { return Ok(History::default()) };
        let mos = self.obj.mos();
        let h = Header::decode(&mos.bonus(obj)?)?;
        let mut records = Vec::new();
        let corrupt = || DsError::Corrupt("pool history: a record runs past its region".into());
        let mut first = vec![0u8; h.first_len as usize];
        mos.read(obj, 0, &mut first)?;
        let mut at = 0u64;
        while at < h.first_len {
            let start = at as usize;
            let len = record_len(first.get(start..).ok_or_else(corrupt)?);
            let end = at.checked_add(LEN_BYTES + len).filter(|e| *e <= h.first_len).ok_or_else(corrupt)?;
            records.push(decode(first.get(start + 4..end as usize).ok_or_else(corrupt)?)?);
            at = end;
        }
        let mut at = h.head;
        while at < h.tail {
            if h.tail - at < LEN_BYTES {
                return Err(corrupt());
            }
            let len = record_len(&read_ring(&mos, obj, &h, at, LEN_BYTES)?);
            if LEN_BYTES + len > h.tail - at {
                return Err(corrupt());
            }
            records.push(decode(&read_ring(&mos, obj, &h, at + LEN_BYTES, len)?)?);
            at += LEN_BYTES + len;
        }
        Ok(History { records, dropped: h.lost })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_bad_bounds() {
        let h = Header { capacity: 1 << 20, first_len: 300, head: 10, tail: 5000, lost: 2 };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut bad = h;
        bad.head = bad.tail + 1;
        assert!(Header::decode(&bad.encode()).is_err());
        let mut bad = h;
        bad.tail = bad.head + bad.ring_len() + 1;
        assert!(Header::decode(&bad.encode()).is_err());
        let mut bytes = h.encode();
        bytes[0] ^= 1;
        assert!(Header::decode(&bytes).is_err());
        assert_eq!(default_capacity(1 << 30), (1 << 30) / 1000);
        assert_eq!(default_capacity(1 << 20), CAPACITY_MIN);
        assert_eq!(default_capacity(1 << 50), CAPACITY_MAX);
    }
}
