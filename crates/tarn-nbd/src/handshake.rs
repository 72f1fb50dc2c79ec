//! The fixed newstyle handshake: greeting, client flags, option haggling
//! until `OPT_GO` or `OPT_EXPORT_NAME` picks an export.

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};

use crate::proto::*;
use crate::{Export, Shared, MAX_OPTION, MAX_PAYLOAD};

/// What the handshake settled.
pub(crate) struct Chosen {
    pub export: Export,
    pub structured: bool,
    /// `base:allocation` was selected (context id 1).
    pub allocation: bool,
}

/// The transmission flags of `export` for this connection.
pub(crate) fn transmission_flags(export: &Export, structured: bool) -> u16 {
    let mut f = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO | FLAG_CAN_MULTI_CONN | FLAG_SEND_CACHE;
    if structured {
        f |= FLAG_SEND_DF;
    }
    if export.readonly {
        f |= FLAG_READ_ONLY;
    }
    f
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

/// A cursor over an option's data that fails (`None`) instead of reading
/// past it.
struct Data<'a>(&'a [u8]);

impl<'a> Data<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

struct State {
    structured: bool,
    /// The export `OPT_SET_META_CONTEXT` selected `base:allocation` for.
    allocation_for: Option<String>,
}

/// Runs the handshake. `Ok(None)`: the client aborted or was refused and
/// the connection is to be closed.
pub(crate) fn negotiate(stream: &TcpStream, shared: &Shared, client: IpAddr) -> io::Result<Option<Chosen>> {
    let mut w = stream;
    let mut r = stream;
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBDMAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    w.write_all(&greeting)?;
    let cflags = read_u32(&mut r)?;
    // Unknown client flags, or a client that is not fixed newstyle: close.
    if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 || cflags & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Ok(None);
    }
    let no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
    let allowed = shared.allowed(client);
    let mut st = State { structured: false, allocation_for: None };
    loop {
        let mut head = [0u8; 16];
        r.read_exact(&mut head)?;
        if u64::from_be_bytes(head[0..8].try_into().expect("8")) != IHAVEOPT {
            return Ok(None);
        }
        let option = u32::from_be_bytes(head[8..12].try_into().expect("4"));
        let len = u32::from_be_bytes(head[12..16].try_into().expect("4"));
        if len > MAX_OPTION {
            w.write_all(&option_reply(option, REP_ERR_TOO_BIG, b"option too long"))?;
            return Ok(None);
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data)?;
        let reply = |rtype: u32, payload: &[u8]| option_reply(option, rtype, payload);
        let error = |rtype: u32, msg: &str| option_reply(option, rtype, msg.as_bytes());
        match option {
            OPT_EXPORT_NAME => {
                // No way to answer an error here: the connection closes.
                let name = String::from_utf8(data).unwrap_or_default();
                let Some(export) = allowed.then(|| shared.export(&name)).flatten() else { return Ok(None) };
                let mut out = Vec::with_capacity(10 + 124);
                out.extend_from_slice(&export.volume.size().to_be_bytes());
                out.extend_from_slice(&transmission_flags(&export, st.structured).to_be_bytes());
                if !no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                w.write_all(&out)?;
                let allocation = st.allocation_for.as_deref() == Some(name.as_str());
                return Ok(Some(Chosen { export, structured: st.structured, allocation }));
            }
            OPT_ABORT => {
                let _ = w.write_all(&reply(REP_ACK, &[]));
                return Ok(None);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    w.write_all(&error(REP_ERR_INVALID, "OPT_LIST takes no data"))?;
                } else if !allowed {
                    w.write_all(&error(REP_ERR_POLICY, "this client's address is not allowed"))?;
                } else {
                    let mut out = Vec::new();
                    for (name, _) in shared.names() {
                        let mut d = (name.len() as u32).to_be_bytes().to_vec();
                        d.extend_from_slice(name.as_bytes());
                        out.extend_from_slice(&reply(REP_SERVER, &d));
                    }
                    out.extend_from_slice(&reply(REP_ACK, &[]));
                    w.write_all(&out)?;
                }
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    w.write_all(&error(REP_ERR_INVALID, "OPT_STRUCTURED_REPLY takes no data"))?;
                } else {
                    st.structured = true;
                    w.write_all(&reply(REP_ACK, &[]))?;
                }
            }
            OPT_INFO | OPT_GO => {
                let mut d = Data(&data);
                let parsed = (|| {
                    let name = d.string()?;
                    let n = d.u16()?;
                    let mut infos = Vec::new();
                    for _ in 0..n {
                        infos.push(d.u16()?);
                    }
                    d.0.is_empty().then_some((name, infos))
                })();
                let Some((name, infos)) = parsed else {
                    w.write_all(&error(REP_ERR_INVALID, "malformed OPT_INFO/OPT_GO"))?;
                    continue;
                };
                if !allowed {
                    w.write_all(&error(REP_ERR_POLICY, "this client's address is not allowed"))?;
                    continue;
                }
                let Some(export) = shared.export(&name) else {
                    w.write_all(&error(REP_ERR_UNKNOWN, &format!("no volume named '{name}'")))?;
                    continue;
                };
                let mut out = Vec::new();
                let mut info = INFO_EXPORT.to_be_bytes().to_vec();
                info.extend_from_slice(&export.volume.size().to_be_bytes());
                info.extend_from_slice(&transmission_flags(&export, st.structured).to_be_bytes());
                out.extend_from_slice(&reply(REP_INFO, &info));
                if infos.contains(&INFO_NAME) {
                    let mut i = INFO_NAME.to_be_bytes().to_vec();
                    i.extend_from_slice(export.name.as_bytes());
                    out.extend_from_slice(&reply(REP_INFO, &i));
                }
                if infos.contains(&INFO_DESCRIPTION) && !export.description.is_empty() {
                    let mut i = INFO_DESCRIPTION.to_be_bytes().to_vec();
                    i.extend_from_slice(export.description.as_bytes());
                    out.extend_from_slice(&reply(REP_INFO, &i));
                }
                if infos.contains(&INFO_BLOCK_SIZE) {
                    let mut i = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                    i.extend_from_slice(&1u32.to_be_bytes());
                    i.extend_from_slice(&export.volume.block_size().max(4096).to_be_bytes());
                    i.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
                    out.extend_from_slice(&reply(REP_INFO, &i));
                }
                out.extend_from_slice(&reply(REP_ACK, &[]));
                w.write_all(&out)?;
                if option == OPT_GO {
                    let allocation = st.allocation_for.as_deref() == Some(name.as_str());
                    return Ok(Some(Chosen { export, structured: st.structured, allocation }));
                }
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let set = option == OPT_SET_META_CONTEXT;
                let mut d = Data(&data);
                let parsed = (|| {
                    let name = d.string()?;
                    let n = d.u32()?;
                    let mut queries = Vec::new();
                    for _ in 0..n {
                        queries.push(d.string()?);
                    }
                    d.0.is_empty().then_some((name, queries))
                })();
                let Some((name, queries)) = parsed else {
                    w.write_all(&error(REP_ERR_INVALID, "malformed meta context option"))?;
                    continue;
                };
                if set && !st.structured {
                    w.write_all(&error(REP_ERR_INVALID, "meta contexts need structured replies"))?;
                    continue;
                }
                if !allowed {
                    w.write_all(&error(REP_ERR_POLICY, "this client's address is not allowed"))?;
                    continue;
                }
                if shared.export(&name).is_none() {
                    w.write_all(&error(REP_ERR_UNKNOWN, &format!("no volume named '{name}'")))?;
                    continue;
                }
                let wanted = if queries.is_empty() {
                    !set
                } else {
                    queries.iter().any(|q| q == META_BASE_ALLOCATION || (!set && q == "base:"))
                };
                let mut out = Vec::new();
                if wanted {
                    let mut d = 1u32.to_be_bytes().to_vec();
                    d.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
                    out.extend_from_slice(&reply(REP_META_CONTEXT, &d));
                }
                out.extend_from_slice(&reply(REP_ACK, &[]));
                w.write_all(&out)?;
                if set {
                    st.allocation_for = wanted.then_some(name);
                }
            }
            OPT_STARTTLS => w.write_all(&error(REP_ERR_UNSUP, "TLS is not offered by this server"))?,
            _ => w.write_all(&error(REP_ERR_UNSUP, "unknown option"))?,
        }
    }
}
