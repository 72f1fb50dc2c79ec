//! The same workloads on a local directory (a FUSE mount, ext4): `conns ×
//! qd` threads, each with one system call in flight, stand for the
//! connections and their requests in flight.
//!
//! `uncached`: reads with O_DIRECT and getattr with `statx(...,
//! AT_STATX_FORCE_SYNC)`, so that on a FUSE mount every read and getattr
//! reaches the daemon instead of the kernel's page and attribute caches
//! (FUSE honours both), as every call reaches an NFS server here.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::rpc::Result;
use crate::workload::{meta_name, Op, Pattern, Source};

pub struct Local {
    pub file: PathBuf,
    pub dir: PathBuf,
    pub uncached: bool,
}

/// O_DIRECT wants the buffer, offset and length aligned to the logical
/// block size; 4 KiB covers every device and FUSE.
const DIRECT_ALIGN: usize = 4096;

/// A buffer for reads of up to any length at a `DIRECT_ALIGN`-aligned address.
struct Aligned {
    buf: Vec<u8>,
}

impl Aligned {
    fn new() -> Aligned {
        Aligned { buf: Vec::new() }
    }

    /// `len` bytes at an aligned address.
    fn get(&mut self, len: usize) -> &mut [u8] {
        if self.buf.len() < len + DIRECT_ALIGN {
            self.buf = vec![0u8; len + DIRECT_ALIGN];
        }
        let at = self.buf.as_ptr().align_offset(DIRECT_ALIGN);
        &mut self.buf[at..at + len]
    }
}

fn err(what: impl std::fmt::Display, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

impl Local {
    /// The data file; `direct`: with O_DIRECT (the uncached reads).
    pub fn open(&self, truncate: bool, direct: bool) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(truncate)
            .truncate(truncate)
            .mode(0o644)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(&self.file)
            .map_err(|e| err(format!("{}{}", self.file.display(), if direct { " (O_DIRECT)" } else { "" }), e))
    }

    pub fn run(&self, threads: usize, source: &Source, file: Option<&File>, pattern: &Pattern) -> Result<u64> {
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads).map(|_| s.spawn(|| self.worker(source, file, pattern))).collect();
            let mut total = 0;
            let mut first_err = None;
            for w in workers {
                match w.join().expect("worker thread panicked") {
                    Ok(n) => total += n,
                    Err(e) => first_err = first_err.or(Some(e)),
                }
            }
            first_err.map_or(Ok(total), Err)
        })
    }

    fn worker(&self, source: &Source, file: Option<&File>, pattern: &Pattern) -> Result<u64> {
        let mut data = Vec::new();
        let mut aligned = Aligned::new();
        let mut done = 0;
        while let Some(op) = source.next() {
            match op {
                Op::Write { off, len } => {
                    pattern.fill(off, &mut data, len as usize);
                    file.expect("a data workload has a file").write_all_at(&data, off).map_err(|e| err(format!("write at {off}"), e))?;
                }
                Op::Read { off, len } => {
                    let buf = if self.uncached {
                        aligned.get(len as usize)
                    } else {
                        data.resize(len as usize, 0);
                        &mut data[..]
                    };
                    file.expect("a data workload has a file").read_exact_at(buf, off).map_err(|e| err(format!("read at {off}"), e))?;
                    Pattern::check(off, buf)?;
                }
                Op::Create(i) => {
                    let p = self.meta(i);
                    OpenOptions::new().write(true).create_new(true).mode(0o644).open(&p).map_err(|e| err(p.display(), e))?;
                }
                Op::Getattr(i) => {
                    let p = self.meta(i);
                    let size = if self.uncached { statx_sync_size(&p)? } else { std::fs::metadata(&p).map_err(|e| err(p.display(), e))?.len() };
                    if size != 0 {
                        return Err(format!("{}: size {size}, expected 0", p.display()));
                    }
                }
                Op::Remove(i) => {
                    let p = self.meta(i);
                    std::fs::remove_file(&p).map_err(|e| err(p.display(), e))?;
                }
            }
            done += 1;
        }
        Ok(done)
    }

    fn meta(&self, i: u32) -> PathBuf {
        self.dir.join(meta_name(i))
    }
}

pub fn size(path: &Path) -> Result<u64> {
    std::fs::metadata(path).map(|m| m.len()).map_err(|e| err(path.display(), e))
}

/// The size of `path` from `statx` with AT_STATX_FORCE_SYNC: the file
/// system is asked, not the kernel's attribute cache.
fn statx_sync_size(path: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{}: NUL in path", path.display()))?;
    // SAFETY: an all-zero statx is a valid value of the plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `stx` is writable.
    let rc = unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), libc::AT_STATX_FORCE_SYNC, libc::STATX_SIZE, &mut stx) };
    if rc != 0 {
        return Err(err(format!("statx {}", path.display()), std::io::Error::last_os_error()));
    }
    Ok(stx.stx_size)
}
