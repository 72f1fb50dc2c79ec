//! The transmission phase: requests read by the connection's thread, run
//! by the shared workers, each answered whole under the write lock in
//! completion order (clients match replies by cookie).

use std::io::{BufReader, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tarn_vol::{Segment, VolError, Volume};

use crate::handshake::Chosen;
use crate::proto::*;
use crate::{Shared, IN_FLIGHT, IN_FLIGHT_BYTES, MAX_PAYLOAD};

/// Most extents one BLOCK_STATUS reply describes (the client asks again
/// from where it ends).
const MAX_EXTENTS: usize = 4096;

/// Requests and payload bytes in flight on one connection.
struct Budget {
    used: Mutex<(usize, u64)>,
    freed: Condvar,
}

impl Budget {
    /// Waits for room; a connection with nothing in flight always gets
    /// it (one request may be larger than the byte budget).
    fn acquire(&self, bytes: u64) {
        let mut u = self.used.lock();
        while u.0 > 0 && (u.0 + 1 > IN_FLIGHT || u.1 + bytes > IN_FLIGHT_BYTES) {
            self.freed.wait(&mut u);
        }
        u.0 += 1;
        u.1 += bytes;
    }
    fn release(&self, bytes: u64) {
        let mut u = self.used.lock();
        u.0 -= 1;
        u.1 -= bytes;
        self.freed.notify_all();
    }
    fn in_flight(&self) -> usize {
        self.used.lock().0
    }
    fn wait_idle(&self) {
        let mut u = self.used.lock();
        while u.0 > 0 {
            self.freed.wait(&mut u);
        }
    }
}

struct Ctx {
    writer: Mutex<TcpStream>,
    volume: Arc<Volume>,
    readonly: bool,
    structured: bool,
    allocation: bool,
    budget: Budget,
}

struct Request {
    flags: u16,
    rtype: u16,
    cookie: u64,
    offset: u64,
    len: u32,
}

pub(crate) fn run(stream: TcpStream, shared: &Shared, chosen: Chosen) {
    let Ok(writer) = stream.try_clone() else { return };
    let ctx = Arc::new(Ctx {
        writer: Mutex::new(writer),
        volume: chosen.export.volume.clone(),
        readonly: chosen.export.readonly,
        structured: chosen.structured,
        allocation: chosen.allocation,
        budget: Budget { used: Mutex::new((0, 0)), freed: Condvar::new() },
    });
    let mut r = BufReader::with_capacity(256 << 10, &stream);
    loop {
        // At most one request in flight and nothing buffered: a client
        // waiting on each reply (tarn-share `poll.rs`).
        if r.buffer().is_empty() && ctx.budget.in_flight() <= 1 {
            shared.poller.wait_readable(stream.as_raw_fd());
        }
        let mut h = [0u8; 28];
        if r.read_exact(&mut h).is_err() {
            break;
        }
        if u32::from_be_bytes(h[0..4].try_into().expect("4")) != REQUEST_MAGIC {
            break; // garbage: the stream cannot be trusted any more
        }
        let req = Request {
            flags: u16::from_be_bytes(h[4..6].try_into().expect("2")),
            rtype: u16::from_be_bytes(h[6..8].try_into().expect("2")),
            cookie: u64::from_be_bytes(h[8..16].try_into().expect("8")),
            offset: u64::from_be_bytes(h[16..24].try_into().expect("8")),
            len: u32::from_be_bytes(h[24..28].try_into().expect("4")),
        };
        let mut payload = Vec::new();
        let bytes = match req.rtype {
            CMD_DISC => break,
            CMD_WRITE => {
                if req.len > MAX_PAYLOAD {
                    break; // its payload cannot be skipped safely
                }
                u64::from(req.len)
            }
            CMD_READ if req.len <= MAX_PAYLOAD => u64::from(req.len),
            _ => 0,
        };
        ctx.budget.acquire(bytes);
        if req.rtype == CMD_WRITE {
            // Read into the spare capacity: no zeroing of a buffer the
            // payload overwrites whole.
            payload = Vec::with_capacity(req.len as usize);
            let got = (&mut r).take(u64::from(req.len)).read_to_end(&mut payload);
            if got.map_or(true, |n| n != req.len as usize) {
                // The client vanished mid-write: nothing of it is applied.
                ctx.budget.release(bytes);
                break;
            }
        }
        if req.rtype == CMD_READ && req.len <= MAX_PAYLOAD {
            if let Some(reply) = read_inline(&ctx, &req) {
                let _ = send(&mut ctx.writer.lock(), &reply);
                ctx.budget.release(bytes);
                continue;
            }
        }
        let c = ctx.clone();
        let job: tarn_share::workers::Job = Box::new(move || {
            let cookie = req.cookie;
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(&c, &req, payload)));
            // A request that panicked: a bug, answered EIO; the server keeps running.
            let reply = out.unwrap_or_else(|_| status_reply(c.structured, cookie, EIO, "internal error").into());
            let _ = send(&mut c.writer.lock(), &reply);
            c.budget.release(bytes);
        });
        if !shared.jobs.run(job) {
            // The workers are gone: the job was dropped unrun.
            ctx.budget.release(bytes);
            break;
        }
    }
    // Every request read is answered before the connection closes.
    ctx.budget.wait_idle();
    let _ = stream.shutdown(Shutdown::Both);
}

/// A reply: its head (all of it, but for a read) and a read's data as
/// the volume's own block buffers and runs of zeros, sent together in
/// vectored writes: the data is not copied into a reply buffer first.
struct Reply {
    head: Vec<u8>,
    body: Vec<Segment>,
}

impl From<Vec<u8>> for Reply {
    fn from(head: Vec<u8>) -> Reply {
        Reply { head, body: Vec::new() }
    }
}

/// Writes `r` whole (a vectored write may take part of it).
fn send(w: &mut TcpStream, r: &Reply) -> std::io::Result<()> {
    let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(1 + r.body.len());
    iov.push(IoSlice::new(&r.head));
    for seg in &r.body {
        iov.extend(seg.slices().map(IoSlice::new));
    }
    let mut left = &mut iov[..];
    while !left.is_empty() {
        match w.write_vectored(left) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn vol_error(structured: bool, cookie: u64, e: &VolError) -> Reply {
    status_reply(structured, cookie, nbd_error(e.errno()), &e.to_string()).into()
}

fn execute(ctx: &Ctx, req: &Request, payload: Vec<u8>) -> Reply {
    let (s, cookie) = (ctx.structured, req.cookie);
    let err = |code: u32, msg: &str| -> Reply { status_reply(s, cookie, code, msg).into() };
    if req.flags & !CMD_FLAGS_KNOWN != 0 {
        return err(EINVAL, "unknown command flags");
    }
    let vol = &ctx.volume;
    let (off, len) = (req.offset, u64::from(req.len));
    let in_range = in_range(vol, req);
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let done = |r: tarn_vol::Result<()>| match r {
        Ok(()) => status_reply(s, cookie, 0, "").into(),
        Err(e) => vol_error(s, cookie, &e),
    };
    match req.rtype {
        CMD_READ => {
            if req.len > MAX_PAYLOAD {
                return err(EOVERFLOW, "read larger than the maximum payload");
            }
            if !in_range {
                return err(EINVAL, "read past the end of the volume");
            }
            read(ctx, req)
        }
        CMD_WRITE => {
            if ctx.readonly {
                return err(EPERM, "read-only volume");
            }
            if !in_range {
                return err(ENOSPC, "write past the end of the volume");
            }
            done(vol.write(off, &payload, fua))
        }
        CMD_FLUSH => done(vol.flush()),
        CMD_TRIM => {
            if ctx.readonly {
                return err(EPERM, "read-only volume");
            }
            if !in_range {
                return err(EINVAL, "trim past the end of the volume");
            }
            done(vol.trim(off, len, fua))
        }
        CMD_WRITE_ZEROES => {
            if ctx.readonly {
                return err(EPERM, "read-only volume");
            }
            if !in_range {
                return err(ENOSPC, "write past the end of the volume");
            }
            let no_hole = req.flags & CMD_FLAG_NO_HOLE != 0;
            if no_hole && req.flags & CMD_FLAG_FAST_ZERO != 0 {
                // Zeros without holes are written: not fast.
                return err(ENOTSUP, "zeros without holes are not fast");
            }
            done(vol.write_zeroes(off, len, !no_hole, fua))
        }
        CMD_CACHE => {
            if !in_range {
                return err(EINVAL, "cache past the end of the volume");
            }
            status_reply(s, cookie, 0, "").into()
        }
        CMD_BLOCK_STATUS => {
            if !ctx.structured || !ctx.allocation {
                return err(EINVAL, "no meta context was negotiated");
            }
            if len == 0 || !in_range {
                return err(EINVAL, "block status past the end of the volume");
            }
            let max = if req.flags & CMD_FLAG_REQ_ONE != 0 { 1 } else { MAX_EXTENTS };
            match vol.extents(off, len, max) {
                Ok(extents) => block_status(cookie, &extents).into(),
                Err(e) => vol_error(s, cookie, &e),
            }
        }
        _ => err(EINVAL, "unknown command"),
    }
}

/// A READ every block of which is dirty or cached, of any size, answered
/// on the connection's own thread: no hand-off to a worker and back. That
/// hand-off was most of a cached 4 KiB read's cost; for 1 MiB sequential
/// reads the hand-offs and the workers queueing for the connection's send
/// lock made 11 context switches per MiB (nbdkit: 2) and held the rate at
/// half of what answering inline gives (by hand, QD8: about 1,000 against
/// 2,100 MiB/s). None (a worker takes it) for anything else, an error
/// included.
fn read_inline(ctx: &Ctx, req: &Request) -> Option<Reply> {
    if req.flags & !CMD_FLAGS_KNOWN != 0 {
        return None;
    }
    if !in_range(&ctx.volume, req) {
        return None;
    }
    // A panic here falls back to the worker, which answers it EIO.
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.volume.read_segments_cached(req.offset, req.len as usize)));
    let body = read.ok()?.ok()??;
    Some(read_reply(ctx, req, body))
}

/// Whether `req`'s range lies within the volume.
fn in_range(vol: &Volume, req: &Request) -> bool {
    req.offset.checked_add(u64::from(req.len)).is_some_and(|end| end <= vol.size())
}

fn read(ctx: &Ctx, req: &Request) -> Reply {
    let n = req.len as usize;
    match ctx.volume.read_segments(req.offset, n) {
        Ok(body) => read_reply(ctx, req, body),
        Err(e) => vol_error(ctx.structured, req.cookie, &e),
    }
}

/// The reply carrying `body`, the data of READ `req`.
fn read_reply(ctx: &Ctx, req: &Request, body: Vec<Segment>) -> Reply {
    let n = req.len as usize;
    let head = if ctx.structured {
        let mut h = vec![0u8; CHUNK_HEADER + 8];
        chunk_header(&mut h, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, req.cookie, (8 + n) as u32);
        h[CHUNK_HEADER..].copy_from_slice(&req.offset.to_be_bytes());
        h
    } else {
        let mut h = vec![0u8; SIMPLE_HEADER];
        simple_header(&mut h, 0, req.cookie);
        h
    };
    assert_eq!(body.iter().map(Segment::len).sum::<usize>(), n, "a read's segments cover it");
    Reply { head, body }
}

fn block_status(cookie: u64, extents: &[tarn_vol::Extent]) -> Vec<u8> {
    let len = 4 + 8 * extents.len();
    let mut out = vec![0u8; CHUNK_HEADER + len];
    chunk_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, cookie, len as u32);
    out[CHUNK_HEADER..CHUNK_HEADER + 4].copy_from_slice(&1u32.to_be_bytes());
    for (i, e) in extents.iter().enumerate() {
        let at = CHUNK_HEADER + 4 + 8 * i;
        // Extents never exceed the request's u32 length.
        out[at..at + 4].copy_from_slice(&(e.len.min(u64::from(u32::MAX)) as u32).to_be_bytes());
        let flags = if e.hole { STATE_HOLE | STATE_ZERO } else { 0 };
        out[at + 4..at + 8].copy_from_slice(&flags.to_be_bytes());
    }
    out
}
