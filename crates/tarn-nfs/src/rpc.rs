//! ONC RPC (RFC 5531) over TCP: record marking, the call header, AUTH_SYS,
//! and the reply header. Procedures never see any of it.
//!
//! Invariants:
//! - A record is at most `MAX_RECORD` bytes summed over its fragments; the
//!   connection is closed before more is buffered (a record's memory is
//!   bounded before it is read, not after).
//! - Every reply carries the xid of its call; a call whose header cannot
//!   be decoded gets no reply (there is nothing to match it to) and closes
//!   the connection, since the stream's framing can no longer be trusted.

use std::io;

use nfs3_types::rpc::{
    accept_stat_data, accepted_reply, auth_stat, msg_body, opaque_auth, rejected_reply,
    reply_body, rpc_msg,
};
use nfs3_types::xdr_codec::Pack;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::xdr::{Garbage, Reader};
use tarn_fs::Segment;

/// Largest WRITE (1 MiB, our wtmax) plus room for its header and handle.
pub const MAX_RECORD: usize = (1 << 20) + 4096;

/// AUTH_SYS machine names and group lists are bounded by RFC 5531.
const AUTH_BODY_MAX: usize = 400;
const AUTH_SYS_GROUPS_MAX: usize = 16;

/// Reads one record (all its fragments). `Ok(None)` at a clean end of
/// stream between records; an error (and a closed connection) for a
/// record over `MAX_RECORD` or a stream that ends inside one.
pub async fn read_record<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<Vec<u8>>> {
    let mut record = Vec::new();
    loop {
        let mut hdr = [0u8; 4];
        match r.read_exact(&mut hdr).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && record.is_empty() => return Ok(None),
            Err(e) => return Err(e),
        }
        let word = u32::from_be_bytes(hdr);
        let last = word & 0x8000_0000 != 0;
        let len = (word & 0x7fff_ffff) as usize;
        if record.len() + len > MAX_RECORD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("RPC record larger than {MAX_RECORD} bytes"),
            ));
        }
        // Read straight into the reserved capacity: a 1 MiB WRITE is not
        // zero-filled first.
        let end = record.len() + len;
        record.reserve_exact(len);
        let mut frag = (&mut *r).take(len as u64);
        while record.len() < end {
            if frag.read_buf(&mut record).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        if last {
            return Ok(Some(record));
        }
    }
}

/// The caller's identity as AUTH_SYS (or AUTH_NONE) gave it, before the
/// export's squash rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    None,
    Sys { uid: u32, gid: u32, groups: Vec<u32> },
}

/// A decoded call header; `args` is the rest of the record.
pub struct Call<'a> {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub auth: Result<Auth, auth_stat>,
    pub args: Reader<'a>,
}

/// What a call header can be besides a call we can dispatch.
pub enum Header<'a> {
    Call(Call<'a>),
    /// RPC version other than 2: MSG_DENIED / RPC_MISMATCH.
    RpcMismatch { xid: u32 },
    /// Not a call at all (a reply, or garbage after the xid).
    Garbage { xid: Option<u32> },
}

pub fn parse_call(record: &[u8]) -> Header<'_> {
    let mut r = Reader::new(record);
    let Ok(xid) = r.u32() else {
        return Header::Garbage { xid: None };
    };
    let parsed = (|| -> Result<Header<'_>, Garbage> {
        if r.u32()? != 0 {
            return Err(Garbage); // msg_type REPLY
        }
        if r.u32()? != 2 {
            return Ok(Header::RpcMismatch { xid });
        }
        let prog = r.u32()?;
        let vers = r.u32()?;
        let proc_ = r.u32()?;
        let flavor = r.u32()?;
        let body = r.opaque(AUTH_BODY_MAX)?;
        let _verf_flavor = r.u32()?;
        let _verf = r.opaque(AUTH_BODY_MAX)?;
        let auth = match flavor {
            0 => Ok(Auth::None),
            1 => parse_auth_sys(body).map_err(|_| auth_stat::AUTH_BADCRED),
            _ => Err(auth_stat::AUTH_REJECTEDCRED),
        };
        Ok(Header::Call(Call { xid, prog, vers, proc_, auth, args: Reader::new(&[]) }))
    })();
    match parsed {
        Ok(Header::Call(mut c)) => {
            c.args = r;
            Header::Call(c)
        }
        Ok(h) => h,
        Err(Garbage) => Header::Garbage { xid: Some(xid) },
    }
}

fn parse_auth_sys(body: &[u8]) -> Result<Auth, Garbage> {
    let mut r = Reader::new(body);
    let _stamp = r.u32()?;
    let _machine = r.opaque(255)?;
    let uid = r.u32()?;
    let gid = r.u32()?;
    let n = r.u32()? as usize;
    if n > AUTH_SYS_GROUPS_MAX {
        return Err(Garbage);
    }
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        groups.push(r.u32()?);
    }
    Ok(Auth::Sys { uid, gid, groups })
}

/// The reply to a call: accepted with a status, or denied.
pub enum Status {
    Success,
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
    RpcMismatch,
    AuthError(auth_stat),
}

/// A reply record: `head` (record mark, RPC header, the packed results),
/// then `tail` (READ's data: the file's blocks as the cache or the dirty
/// txg holds them and runs of zeros, sent as they are, not copied into
/// `head`) and the XDR padding of the tail.
pub struct Record {
    pub head: Vec<u8>,
    pub tail: Vec<Segment>,
    /// Zero bytes after `tail` (the tail's XDR padding, 0–3).
    pub pad: usize,
}

impl Record {
    pub fn tail_len(&self) -> usize {
        self.tail.iter().map(Segment::len).sum()
    }

    pub fn size(&self) -> usize {
        self.head.len() + self.tail_len() + self.pad
    }

    /// What is left after its first `n` bytes went out (`n` < `len()`).
    pub fn rest(self, n: usize) -> Record {
        let Record { mut head, mut tail, pad } = self;
        if n < head.len() {
            head.drain(..n);
            return Record { head, tail, pad };
        }
        let mut skip = n - head.len();
        let mut gone = 0;
        for seg in tail.iter_mut() {
            if skip == 0 {
                break;
            }
            if skip >= seg.len() {
                skip -= seg.len();
                gone += 1;
                continue;
            }
            *seg = match std::mem::replace(seg, Segment::Zeros(0)) {
                Segment::Data { block, start, len } => Segment::Data { block, start: start + skip, len: len - skip },
                Segment::Zeros(len) => Segment::Zeros(len - skip),
            };
            skip = 0;
        }
        tail.drain(..gone);
        Record { head: Vec::new(), tail, pad: pad - skip }
    }

    /// The whole record as one buffer (tests).
    #[cfg(test)]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size());
        self.append_to(&mut out);
        out
    }

    /// The whole record, copied to the end of `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        for seg in &self.tail {
            seg.append_to(out);
        }
        out.resize(out.len() + self.pad, 0);
    }

    /// Records already whole, sent as one (`append_to` of each).
    pub fn joined(bytes: Vec<u8>) -> Record {
        Record { head: bytes, tail: Vec::new(), pad: 0 }
    }
}

/// Zero bytes a record is padded with.
const PAD: [u8; 3] = [0; 3];

impl Record {
    /// The bytes still to send after the first `done` (head, tail,
    /// padding), as slices put into `out` (emptied first).
    pub fn unsent<'a>(&'a self, done: usize, out: &mut Vec<io::IoSlice<'a>>) {
        out.clear();
        let mut skip = done;
        let mut put = |p: &'a [u8], out: &mut Vec<io::IoSlice<'a>>| {
            if skip >= p.len() {
                skip -= p.len();
            } else {
                out.push(io::IoSlice::new(&p[skip..]));
                skip = 0;
            }
        };
        put(&self.head, out);
        for seg in &self.tail {
            for b in seg.slices() {
                put(b, out);
            }
        }
        put(&PAD[..self.pad], out);
    }
}

/// Writes `rec` with vectored writes (head, tail, padding: no copy).
pub async fn write_record<W: AsyncWrite + Unpin>(w: &mut W, rec: &Record) -> io::Result<()> {
    let total = rec.size();
    let mut done = 0;
    let mut slices = Vec::new();
    while done < total {
        rec.unsent(done, &mut slices);
        let wrote = w.write_vectored(&slices).await?;
        if wrote == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        done += wrote;
    }
    Ok(())
}

/// The reply record to call `xid`: the header for `status` and, for
/// `Success`, `body` packed after it (its tail, if any, sent after that).
pub fn reply(xid: u32, status: Status, body: Option<&mut dyn PackDyn>) -> Record {
    let reply_body = match status {
        Status::RpcMismatch => reply_body::MSG_DENIED(rejected_reply::rpc_mismatch(2, 2)),
        Status::AuthError(s) => reply_body::MSG_DENIED(rejected_reply::auth_error(s)),
        other => reply_body::MSG_ACCEPTED(accepted_reply {
            verf: opaque_auth::default(),
            reply_data: match other {
                Status::Success => accept_stat_data::SUCCESS,
                Status::ProgUnavail => accept_stat_data::PROG_UNAVAIL,
                Status::ProgMismatch { low, high } => accept_stat_data::PROG_MISMATCH { low, high },
                Status::ProcUnavail => accept_stat_data::PROC_UNAVAIL,
                Status::GarbageArgs => accept_stat_data::GARBAGE_ARGS,
                _ => accept_stat_data::SYSTEM_ERR,
            },
        }),
    };
    let msg = rpc_msg { xid, body: msg_body::REPLY(reply_body) };
    let body_len = body.as_ref().map_or(0, |b| b.size());
    let mut out = Vec::with_capacity(4 + msg.packed_size() + body_len);
    out.extend_from_slice(&[0; 4]);
    // Packing into a Vec cannot fail (the codec's only errors are the
    // writer's and lengths over 4 GiB, which a reply never has).
    let _ = msg.pack(&mut out);
    let mut tail = Vec::new();
    if let Some(b) = body {
        b.pack_into(&mut out);
        tail = b.take_tail();
    }
    let tail_len: usize = tail.iter().map(Segment::len).sum();
    let pad = (4 - tail_len % 4) % 4;
    let mut rec = Record { head: out, tail, pad };
    let len = (rec.size() - 4) as u32;
    rec.head[..4].copy_from_slice(&(len | 0x8000_0000).to_be_bytes());
    rec
}

/// `Pack` as a trait object (the codec's trait is generic over the writer).
pub trait PackDyn {
    fn size(&self) -> usize;
    fn pack_into(&self, out: &mut Vec<u8>);
    /// Bytes that follow what `pack_into` wrote, handed over rather than
    /// copied (an opaque's data whose length `pack_into` already wrote;
    /// `reply` adds the padding). Called once, after `pack_into`.
    fn take_tail(&mut self) -> Vec<Segment> {
        Vec::new()
    }
}

impl<T: Pack> PackDyn for T {
    fn size(&self) -> usize {
        self.packed_size()
    }
    fn pack_into(&self, out: &mut Vec<u8>) {
        let _ = self.pack(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever prefix went out, the rest completes the same bytes.
    #[test]
    fn rest_of_a_record_is_its_remaining_bytes() {
        for tail_len in [0usize, 1, 3, 4, 7] {
            // Bytes, then zeros, then bytes again: a cut can land anywhere.
            let bytes = |from: u8| Segment::Data { block: std::sync::Arc::new((from..from + 9).collect()), start: 2, len: tail_len };
            let rec = || Record { head: vec![1, 2, 3, 4, 5, 6], tail: vec![bytes(10), Segment::Zeros(3), bytes(40)], pad: (4 - (2 * tail_len + 3) % 4) % 4 };
            let whole = rec().to_bytes();
            assert_eq!(whole.len(), rec().size());
            for n in 0..rec().size() {
                let rest = rec().rest(n);
                assert_eq!(rest.size(), whole.len() - n, "tail {tail_len}, n {n}");
                assert_eq!(rest.to_bytes(), whole[n..], "tail {tail_len}, n {n}");
            }
        }
    }
}
