//! Extended attributes: a ZAP per inode, large values in their own objects.

use tarn_obj::zap::Zap;
use tarn_obj::{ObjectId, Tx};

use crate::{
    now_ns, otype, Fs, FsError, Result, MIN_BLOCK, XATTR_CREATE, XATTR_INLINE_MAX, XATTR_NAME_MAX,
    XATTR_REPLACE, XATTR_SIZE_MAX,
};

impl Fs {
    pub(crate) fn check_xattr_name(name: &[u8]) -> Result<()> {
        if name.is_empty() || name.contains(&0) {
            return Err(FsError::Invalid("xattr name"));
        }
        if name.len() > XATTR_NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        Ok(())
    }

    pub(crate) fn xattr_value(&self, v: &[u8]) -> Result<Vec<u8>> {
        match v.first() {
            Some(0) => Ok(v[1..].to_vec()),
            Some(1) if v.len() == 13 => {
                let obj = u64::from_le_bytes(v[1..9].try_into().unwrap_or([0; 8]));
                let len = u32::from_le_bytes(v[9..13].try_into().unwrap_or([0; 4])) as usize;
                if len > XATTR_SIZE_MAX {
                    return Err(FsError::Corrupt("xattr length".into()));
                }
                let mut buf = vec![0u8; len];
                self.os.read(ObjectId(obj), 0, &mut buf)?;
                Ok(buf)
            }
            _ => Err(FsError::Corrupt("xattr value tag".into())),
        }
    }

    pub(crate) fn free_xattr_value(&self, tx: &Tx, v: &[u8]) -> Result<()> {
        if v.first() == Some(&1) && v.len() == 13 {
            let obj = u64::from_le_bytes(v[1..9].try_into().unwrap_or([0; 8]));
            self.os.free(tx, ObjectId(obj))?;
        }
        Ok(())
    }

    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        self.committed(self.setxattr_uncommitted(ino, name, value, flags))
    }

    fn setxattr_uncommitted(&self, ino: u64, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        self.writable()?;
        Self::check_xattr_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(FsError::TooBig);
        }
        self.make_room(value.len() as u64)?;
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[ino]);
        let mut p = self.inode(ino)?;
        let old = if p.xattr_obj != 0 {
            Zap::lookup(&self.os, ObjectId(p.xattr_obj), name)?
        } else {
            None
        };
        if flags & XATTR_CREATE != 0 && old.is_some() {
            return Err(FsError::Exists);
        }
        if flags & XATTR_REPLACE != 0 && old.is_none() {
            return Err(FsError::NoData);
        }
        if p.xattr_obj == 0 {
            p.xattr_obj = Zap::create(&self.os, &tx, otype::XATTR_DIR)?.0;
        }
        if let Some(o) = &old {
            self.free_xattr_value(&tx, o)?;
        }
        let enc = if value.len() <= XATTR_INLINE_MAX {
            let mut e = Vec::with_capacity(value.len() + 1);
            e.push(0);
            e.extend_from_slice(value);
            e
        } else {
            let bs = (value.len() as u32).div_ceil(MIN_BLOCK) * MIN_BLOCK;
            let o = self
                .os
                .create(&tx, otype::XATTR_VALUE, bs, &[0u8; tarn_obj::BONUS_LEN])?;
            self.os.write_data(&tx, o, 0, value)?;
            let mut e = vec![1u8];
            e.extend_from_slice(&o.0.to_le_bytes());
            e.extend_from_slice(&(value.len() as u32).to_le_bytes());
            e
        };
        Zap::update(&self.os, &tx, ObjectId(p.xattr_obj), name, &enc)?;
        p.ctime_ns = now_ns();
        self.put_inode(&tx, ino, &p)
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        Self::check_xattr_name(name)?;
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        if p.xattr_obj == 0 {
            return Err(FsError::NoData);
        }
        match Zap::lookup(&self.os, ObjectId(p.xattr_obj), name)? {
            Some(v) => self.xattr_value(&v),
            None => Err(FsError::NoData),
        }
    }

    /// Attribute names (without NUL terminators).
    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        let mut names = Vec::new();
        if p.xattr_obj != 0 {
            Zap::iterate(&self.os, ObjectId(p.xattr_obj), 0, &mut |_, k, _| {
                names.push(k.to_vec());
                true
            })?;
        }
        Ok(names)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.committed(self.removexattr_uncommitted(ino, name))
    }

    fn removexattr_uncommitted(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.writable()?;
        Self::check_xattr_name(name)?;
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[ino]);
        let mut p = self.inode(ino)?;
        if p.xattr_obj == 0 {
            return Err(FsError::NoData);
        }
        let xo = ObjectId(p.xattr_obj);
        let old = Zap::lookup(&self.os, xo, name)?.ok_or(FsError::NoData)?;
        self.free_xattr_value(&tx, &old)?;
        Zap::remove(&self.os, &tx, xo, name)?;
        p.ctime_ns = now_ns();
        self.put_inode(&tx, ino, &p)
    }
}
