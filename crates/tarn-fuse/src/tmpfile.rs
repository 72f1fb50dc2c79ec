//! TMPFILE requests (`open(2)` with `O_TMPFILE`; fuser patched for them,
//! see vendor/fuser/TARN-PATCH.md): an unnamed file, created and opened
//! at once, answered like CREATE.

use fuser::{FileHandle, FopenFlags, Generation, ReplyCreate, Request};

use crate::{cred, errno, guarded, TarnFuse, TTL};

impl TarnFuse {
    pub(crate) fn do_tmpfile(&self, req: &Request, parent: fuser::INodeNo, mode: u32, reply: ReplyCreate) {
        let (fs, parent, k) = match self.node(parent) {
            Ok(x) => x,
            Err(e) => return reply.error(errno(&e)),
        };
        match guarded(|| fs.create_tmpfile(parent, mode & 0o7777, cred(req))) {
            Ok(a) => {
                self.opened.shard(a.ino).lock().insert((k, a.ino), (a.mtime_ns, a.size));
                reply.created(&TTL, &self.attr(&fs, k, &a), Generation(a.generation), FileHandle(0), FopenFlags::empty())
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}
