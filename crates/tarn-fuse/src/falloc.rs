//! FALLOCATE and LSEEK (SEEK_DATA / SEEK_HOLE) requests.
//!
//! The kernel answers SEEK_SET / SEEK_CUR / SEEK_END itself and sends only
//! SEEK_DATA and SEEK_HOLE here; before this existed it answered them as if
//! the whole file were data. FALLOCATE reaches us with the modes the FUSE
//! driver passes (KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE); the kernel drops
//! the cached pages of a punched range itself.

use fuser::{Errno, ReplyEmpty, ReplyLseek};

use crate::{errno, guarded, TarnFuse};

impl TarnFuse {
    pub(crate) fn do_fallocate(&self, ino: fuser::INodeNo, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        let (fs, ino, k) = match self.node(ino) {
            Ok(x) => x,
            Err(e) => return reply.error(errno(&e)),
        };
        match guarded(|| fs.fallocate(ino, offset, length, mode as u32)) {
            Ok(a) => {
                // Our own change: the kernel's cached pages stay current.
                self.opened.shard(ino).lock().insert((k, ino), (a.mtime_ns, a.size));
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(crate) fn do_lseek(&self, ino: fuser::INodeNo, offset: i64, whence: i32, reply: ReplyLseek) {
        let (fs, ino, _) = match self.node(ino) {
            Ok(x) => x,
            Err(e) => return reply.error(errno(&e)),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        match guarded(|| fs.seek_data_hole(ino, offset, whence as u32)) {
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
