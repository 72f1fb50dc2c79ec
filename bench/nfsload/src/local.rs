//! The same workloads on a local directory (a FUSE mount, ext4): `conns ×
//! qd` threads, each with one system call in flight, stand for the
//! connections and their requests in flight.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::rpc::Result;
use crate::workload::{meta_name, Op, Pattern, Source};

pub struct Local {
    pub file: PathBuf,
    pub dir: PathBuf,
}

fn err(what: impl std::fmt::Display, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

impl Local {
    pub fn open(&self, truncate: bool) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(truncate)
            .truncate(truncate)
            .mode(0o644)
            .open(&self.file)
            .map_err(|e| err(self.file.display(), e))
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
        let mut done = 0;
        while let Some(op) = source.next() {
            match op {
                Op::Write { off, len } => {
                    pattern.fill(off, &mut data, len as usize);
                    file.expect("a data workload has a file").write_all_at(&data, off).map_err(|e| err(format!("write at {off}"), e))?;
                }
                Op::Read { off, len } => {
                    data.resize(len as usize, 0);
                    file.expect("a data workload has a file").read_exact_at(&mut data, off).map_err(|e| err(format!("read at {off}"), e))?;
                    Pattern::check(off, &data)?;
                }
                Op::Create(i) => {
                    let p = self.meta(i);
                    OpenOptions::new().write(true).create_new(true).mode(0o644).open(&p).map_err(|e| err(p.display(), e))?;
                }
                Op::Getattr(i) => {
                    let p = self.meta(i);
                    let m = std::fs::metadata(&p).map_err(|e| err(p.display(), e))?;
                    if m.len() != 0 {
                        return Err(format!("{}: size {}, expected 0", p.display(), m.len()));
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
