//! The crate's error type and its errno at the POSIX edge.

use tarn_obj::ObjError;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("name too long")]
    NameTooLong,
    #[error("read-only file system")]
    ReadOnly,
    #[error("no such attribute")]
    NoData,
    #[error("attribute value too large")]
    TooBig,
    #[error("operation not permitted")]
    Perm,
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    FileTooBig,
    #[error("quota exceeded")]
    Quota,
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    #[error("no such device")]
    NoDevice,
    #[error("no data or hole at or past the end of the file")]
    NoSuchOffset,
    #[error("corrupt: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Obj(#[from] ObjError),
    /// A file handle (inode number and generation) that names no live
    /// inode: freed, reused, unlinked, or not an inode at all.
    #[error("stale file handle")]
    Stale,
    /// The permission bits refuse the caller (`access.rs`); EPERM
    /// (`Perm`) is for what only an owner or root may do.
    #[error("permission denied")]
    Access,
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::ReadOnly => libc::EROFS,
            FsError::NoData => libc::ENODATA,
            FsError::TooBig => libc::E2BIG,
            FsError::Perm => libc::EPERM,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::FileTooBig => libc::EFBIG,
            FsError::Quota => libc::EDQUOT,
            FsError::NotSupported(_) => libc::EOPNOTSUPP,
            FsError::NoDevice => libc::ENODEV,
            FsError::NoSuchOffset => libc::ENXIO,
            FsError::Corrupt(_) => libc::EIO,
            FsError::Obj(e) => e.errno(),
            FsError::Stale => libc::ESTALE,
            FsError::Access => libc::EACCES,
        }
    }
}
