//! Share rules, kept apart from the protocol code: what the `sharenfs` and
//! `sharesmb` properties mean, which client may do what, and the Samba
//! configuration the daemon writes for its own smbd; and what the network
//! servers share beyond the rules (`poll`: busy polling of a socket;
//! `workers`: the threads that run requests).

pub mod nfs;
pub mod poll;
pub mod smb;
pub mod workers;
