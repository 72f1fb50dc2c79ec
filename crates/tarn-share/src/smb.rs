//! `sharesmb`: per-share options, and the smb.conf written for the daemon's smbd.
