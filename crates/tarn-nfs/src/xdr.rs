//! Decoding of call arguments straight from the received record.
//!
//! nfs3_types packs our replies, but its `Unpack` allocates an opaque's
//! length as read from the wire before checking that the bytes exist, so
//! a 20-byte garbage record could ask for 4 GiB. Arguments are decoded
//! here instead: every length is checked against what is left of the
//! record (and against the field's protocol maximum) before it is used,
//! and opaques borrow from the record (a WRITE's data is never copied).
//! Any failure is `Garbage`, answered with GARBAGE_ARGS.

use nfs3_types::nfs3::{
    createhow3, createverf3, diropargs3, filename3, mknoddata3, nfs_fh3, nfspath3, nfstime3,
    sattr3, set_atime, set_mtime, specdata3, stable_how, Nfs3Option,
};
use nfs3_types::nfs3::devicedata3;
use nfs3_types::xdr_codec::Opaque;

/// The record does not decode as the procedure's arguments.
#[derive(Debug)]
pub struct Garbage;

pub type Result<T> = std::result::Result<T, Garbage>;

/// A cursor over one record.
pub struct Reader<'a> {
    buf: &'a [u8],
}

/// File handles are at most 64 bytes (RFC 1813 NFS3_FHSIZE).
pub const FH_MAX: usize = 64;
/// Longest name accepted on the wire (tarn-fs refuses > 255 itself, with
/// NAMETOOLONG, so a longer name still decodes).
pub const NAME_WIRE_MAX: usize = 4096;
/// Longest symlink target or mount path on the wire.
pub const PATH_WIRE_MAX: usize = 4096;

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    #[cfg(test)]
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.buf.len() {
            return Err(Garbage);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(((self.u32()? as u64) << 32) | self.u32()? as u64)
    }

    pub fn bool(&mut self) -> Result<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Garbage),
        }
    }

    /// Variable-length opaque of at most `max` bytes, padded to 4.
    pub fn opaque(&mut self, max: usize) -> Result<&'a [u8]> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(Garbage);
        }
        let data = self.take(len)?;
        self.take((4 - len % 4) % 4)?;
        Ok(data)
    }

    pub fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        let b = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        self.take((4 - N % 4) % 4)?;
        Ok(out)
    }

    pub fn fh(&mut self) -> Result<nfs_fh3> {
        Ok(nfs_fh3 { data: Opaque::owned(self.opaque(FH_MAX)?.to_vec()) })
    }

    pub fn name(&mut self) -> Result<filename3<'a>> {
        Ok(filename3(Opaque::borrowed(self.opaque(NAME_WIRE_MAX)?)))
    }

    pub fn diropargs(&mut self) -> Result<diropargs3<'a>> {
        Ok(diropargs3 { dir: self.fh()?, name: self.name()? })
    }

    pub fn time(&mut self) -> Result<nfstime3> {
        Ok(nfstime3 { seconds: self.u32()?, nseconds: self.u32()? })
    }

    fn opt_u32(&mut self) -> Result<Nfs3Option<u32>> {
        Ok(if self.bool()? { Nfs3Option::Some(self.u32()?) } else { Nfs3Option::None })
    }

    pub fn sattr(&mut self) -> Result<sattr3> {
        let mode = self.opt_u32()?;
        let uid = self.opt_u32()?;
        let gid = self.opt_u32()?;
        let size = if self.bool()? { Nfs3Option::Some(self.u64()?) } else { Nfs3Option::None };
        let atime = match self.u32()? {
            0 => set_atime::DONT_CHANGE,
            1 => set_atime::SET_TO_SERVER_TIME,
            2 => set_atime::SET_TO_CLIENT_TIME(self.time()?),
            _ => return Err(Garbage),
        };
        let mtime = match self.u32()? {
            0 => set_mtime::DONT_CHANGE,
            1 => set_mtime::SET_TO_SERVER_TIME,
            2 => set_mtime::SET_TO_CLIENT_TIME(self.time()?),
            _ => return Err(Garbage),
        };
        Ok(sattr3 { mode, uid, gid, size, atime, mtime })
    }

    pub fn stable(&mut self) -> Result<stable_how> {
        match self.u32()? {
            0 => Ok(stable_how::UNSTABLE),
            1 => Ok(stable_how::DATA_SYNC),
            2 => Ok(stable_how::FILE_SYNC),
            _ => Err(Garbage),
        }
    }

    pub fn createhow(&mut self) -> Result<createhow3> {
        match self.u32()? {
            0 => Ok(createhow3::UNCHECKED(self.sattr()?)),
            1 => Ok(createhow3::GUARDED(self.sattr()?)),
            2 => Ok(createhow3::EXCLUSIVE(createverf3(self.fixed::<8>()?))),
            _ => Err(Garbage),
        }
    }

    pub fn path(&mut self) -> Result<nfspath3<'a>> {
        Ok(nfspath3(Opaque::borrowed(self.opaque(PATH_WIRE_MAX)?)))
    }

    /// MKNOD's `mknoddata3`; a regular file, directory or symlink type
    /// decodes as `default` (answered NFS3ERR_BADTYPE).
    pub fn mknoddata(&mut self) -> Result<mknoddata3> {
        let device = |r: &mut Reader<'a>| -> Result<devicedata3> {
            let dev_attributes = r.sattr()?;
            let spec = specdata3 { specdata1: r.u32()?, specdata2: r.u32()? };
            Ok(devicedata3 { dev_attributes, spec })
        };
        Ok(match self.u32()? {
            3 => mknoddata3::NF3BLK(device(self)?),
            4 => mknoddata3::NF3CHR(device(self)?),
            6 => mknoddata3::NF3SOCK(self.sattr()?),
            7 => mknoddata3::NF3FIFO(self.sattr()?),
            1 | 2 | 5 => mknoddata3::default,
            _ => return Err(Garbage),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opaque_length_is_checked_before_use() {
        // A length of 4 GiB - 1 with 4 bytes behind it: Garbage, no allocation.
        let rec = [0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4];
        assert!(Reader::new(&rec).opaque(usize::MAX).is_err());
        let rec = [0, 0, 0, 3, b'a', b'b', b'c', 0];
        let mut r = Reader::new(&rec);
        assert_eq!(r.opaque(8).unwrap(), b"abc");
        assert_eq!(r.remaining(), 0);
        assert!(Reader::new(&rec).opaque(2).is_err());
    }

    #[test]
    fn enums_out_of_range_are_garbage() {
        assert!(Reader::new(&[0, 0, 0, 3]).stable().is_err());
        assert!(Reader::new(&[0, 0, 0, 2]).bool().is_err());
    }
}
