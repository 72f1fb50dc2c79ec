//! Share rules, kept apart from the protocol code: what the `sharenfs` and
//! `sharesmb` properties mean, which client may do what, and the Samba
//! configuration the daemon writes for its own smbd.

pub mod nfs;
pub mod smb;
