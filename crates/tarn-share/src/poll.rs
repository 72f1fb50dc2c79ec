//! Busy polling of a client's socket, shared by the servers that speak to
//! network clients (tarn-nfs, tarn-nbd).
//!
//! A client with one request at a time sends its next request only after
//! the reply to the last, and the server's thread, asleep meanwhile, has
//! to be woken for it. On a virtual machine waking an idle CPU costs tens
//! of microseconds (measured on the 2-core VM of docs/benchmarks.md: a
//! 4 KiB TCP ping-pong over loopback made 17,000 round trips a second
//! between two CPUs and 37,000 when the server polled its socket instead
//! of sleeping), more than a cached read costs us. So before it sleeps, a
//! connection waiting for its client's next request may poll the socket
//! for a short while (`limit_us`), yielding the CPU between polls; one
//! connection of a server polls at a time, so polling holds at most one
//! thread (for an async server, one runtime thread) for at most the limit,
//! whatever the number of connections. Linux's `net.core.busy_read` does
//! the same in the kernel for NIC queues, not for loopback or a userspace
//! server's own wait.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The default poll time, in microseconds.
pub const BUSY_POLL_US: u64 = 100;

/// One server's busy polling: how long, and whether a connection is at it.
#[derive(Debug)]
pub struct Poller {
    limit_us: AtomicU64,
    polling: AtomicBool,
}

impl Default for Poller {
    fn default() -> Poller {
        Poller::new(BUSY_POLL_US)
    }
}

impl Poller {
    pub const fn new(limit_us: u64) -> Poller {
        Poller { limit_us: AtomicU64::new(limit_us), polling: AtomicBool::new(false) }
    }

    /// How long a connection polls; 0 turns polling off.
    pub fn set_limit_us(&self, us: u64) {
        self.limit_us.store(us, Ordering::Relaxed);
    }

    pub fn limit_us(&self) -> u64 {
        self.limit_us.load(Ordering::Relaxed)
    }

    /// Polls socket `fd` until it has bytes to read (or is closed or
    /// broken), at most the limit; returns at once when another connection
    /// of this server is polling. Nothing is read: the caller's next read
    /// finds the bytes.
    pub fn wait_readable(&self, fd: RawFd) {
        let limit = self.limit_us();
        if limit == 0 || self.polling.swap(true, Ordering::Acquire) {
            return;
        }
        let start = Instant::now();
        let mut byte = 0u8;
        while start.elapsed() < Duration::from_micros(limit) {
            // SAFETY: the caller holds `fd` open for the call; one byte is
            // peeked into `byte`, nothing is consumed.
            let n = unsafe { libc::recv(fd, (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
            if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock {
                break; // data, end of stream, or an error the read will see
            }
            std::thread::yield_now();
        }
        self.polling.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn returns_when_data_arrives_and_after_the_limit_without() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        // Nothing to read: back after the limit (50 ms here, to be seen).
        let p = Poller::new(50_000);
        let t = Instant::now();
        p.wait_readable(server.as_raw_fd());
        assert!(t.elapsed() >= Duration::from_millis(50), "polled the whole limit");
        // Data waiting: back at once, and the byte is still there to read.
        client.write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let p = Poller::new(5_000_000);
        let t = Instant::now();
        p.wait_readable(server.as_raw_fd());
        assert!(t.elapsed() < Duration::from_secs(4), "returned on data");
        let mut b = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &server, &mut b).unwrap(), 1);
        // Off, or another connection polling: back at once.
        let off = Poller::new(0);
        let t = Instant::now();
        off.wait_readable(server.as_raw_fd());
        let busy = Poller::new(5_000_000);
        busy.polling.store(true, Ordering::Relaxed);
        busy.wait_readable(server.as_raw_fd());
        assert!(t.elapsed() < Duration::from_secs(4), "no poll when off or taken");
        // A closed peer ends the poll too.
        drop(client);
        let t = Instant::now();
        Poller::new(5_000_000).wait_readable(server.as_raw_fd());
        assert!(t.elapsed() < Duration::from_secs(4), "returned on end of stream");
    }
}
