use tarn_dev::DevError;

pub type Result<T> = std::result::Result<T, VdevError>;

#[derive(Debug, thiserror::Error)]
pub enum VdevError {
    #[error(transparent)]
    Dev(#[from] DevError),
    #[error("{path}: no tarn label found")]
    NoLabel { path: String },
    #[error("{path}: {what}")]
    Corrupt { path: String, what: String },
    #[error("block at vdev offset {offset} ({psize} bytes) cannot be reconstructed from the surviving copies")]
    Unrecoverable { offset: u64, psize: u64 },
    #[error("{what}: {failed} of {children} children failed, at most {tolerated} may")]
    TooManyFailures { what: String, failed: usize, children: usize, tolerated: usize },
    #[error("not enough devices: {kind} needs at least {need}, got {have}")]
    NotEnoughDevices { kind: String, need: usize, have: usize },
    #[error("invalid: {0}")]
    Invalid(String),
}
