//! Checking a whole stream before anything is applied (`recv -F` when it
//! would destroy something: the stream is spooled and verified first).

use std::io::{Read, Write};

use crate::format::{RecordReader, RecordType};
use crate::{Result, SendError};

/// Copies what it reads to `out`.
struct Tee<'a> {
    input: &'a mut dyn Read,
    out: &'a mut dyn Write,
    bytes: u64,
}

impl Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.input.read(buf)?;
        self.out.write_all(&buf[..n])?;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Reads one whole stream (every sub-stream of a series) from `input`,
/// verifying each record's checksum and sequence, each END's hash and
/// counts, and the order of the sub-streams, and copies the bytes read to
/// `out`. Applies nothing; reads nothing past the last END. Returns the
/// stream's length.
pub fn verify_copy(input: &mut dyn Read, out: &mut dyn Write) -> Result<u64> {
    let mut tee = Tee { input, out, bytes: 0 };
    {
        let mut rd = RecordReader::new(&mut tee);
        let mut begin = rd.read_begin()?;
        loop {
            loop {
                let (ty, payload) = rd.read_record()?;
                if ty == RecordType::End {
                    rd.finish_end(&payload)?;
                    break;
                }
            }
            if begin.series_index + 1 >= begin.series_count {
                break;
            }
            let next = rd.read_begin()?;
            if next.stream_guid != begin.stream_guid
                || next.series_index != begin.series_index + 1
                || next.series_count != begin.series_count
                || next.series_last_guid != begin.series_last_guid
            {
                return Err(SendError::Corrupt(format!(
                    "sub-stream {} does not follow sub-stream {} of this stream",
                    next.series_index, begin.series_index
                )));
            }
            begin = next;
        }
    }
    tee.out.flush()?;
    Ok(tee.bytes)
}
