//! Streaming reader for valgrind lackey traces (`valgrind --tool=lackey --trace-mem=yes`).
//!
//! Lines: `I  addr,size` (instruction fetch), ` L addr,size` (load), ` S addr,size` (store),
//! ` M addr,size` (modify: a load and a store of the same location by one instruction).
//! Addresses are hexadecimal, sizes decimal. Lines valgrind itself writes into the same
//! stream (`==pid== ...`, `--pid-- ...`) and blank lines are skipped; anything else is an
//! error that names its line number.
//!
//! Speed: a trace is hundreds of millions of lines, so the reader parses bytes in place in
//! its own buffer (no copy of a line, no allocation per line, one table lookup per hex
//! digit). `cargo bench -p rocs-sim --bench traces` measures it.

use std::io::Read;

use super::{TraceEvent, TraceKind};
use crate::error::SimError;

/// Bytes read from the input at a time; also the longest line accepted.
const BUF_SIZE: usize = 1 << 18;

/// Value of each byte as a hex digit, `NOT_HEX` if it is none.
const NOT_HEX: u8 = 0xff;
const HEX: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Reads events one line at a time, without holding the trace in memory.
pub struct LackeyReader<R> {
    input: R,
    buf: Box<[u8]>,
    /// Next byte to parse.
    pos: usize,
    /// One past the last newline in `buf`: every line before it is complete.
    complete: usize,
    /// One past the last byte read into `buf`.
    end: usize,
    eof: bool,
    line: u64,
}

/// What one line held.
enum Line {
    Event(TraceEvent),
    /// Valgrind's own output or a blank line.
    Skip,
    Bad,
}

impl<R: Read> LackeyReader<R> {
    pub fn new(input: R) -> Self {
        LackeyReader {
            input,
            // One spare byte: a last line without a newline gets one.
            buf: vec![0; BUF_SIZE + 1].into_boxed_slice(),
            pos: 0,
            complete: 0,
            end: 0,
            eof: false,
            line: 0,
        }
    }

    /// Lines read so far.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The next event, `None` at the end of the trace.
    #[inline]
    pub fn next_event(&mut self) -> Result<Option<TraceEvent>, SimError> {
        loop {
            if self.pos == self.complete && !self.refill()? {
                return Ok(None);
            }
            let start = self.pos;
            let (parsed, next) = parse_line(&self.buf[..self.complete], start);
            self.pos = next;
            self.line += 1;
            match parsed {
                Line::Event(ev) => return Ok(Some(ev)),
                Line::Skip => continue,
                Line::Bad => return Err(self.bad_line(start, next)),
            }
        }
    }

    /// Move the unparsed tail to the front and read until the buffer holds a whole line;
    /// false at the end of the input.
    #[cold]
    fn refill(&mut self) -> Result<bool, SimError> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        self.complete = 0;
        loop {
            let scanned = self.end;
            if !self.eof && self.end < BUF_SIZE {
                match self.input.read(&mut self.buf[self.end..BUF_SIZE]) {
                    Ok(0) => self.eof = true,
                    Ok(n) => self.end += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(reason) => {
                        return Err(SimError::TraceIo {
                            line: self.line,
                            reason,
                        })
                    }
                }
            }
            if let Some(last_nl) = self.buf[scanned..self.end]
                .iter()
                .rposition(|&b| b == b'\n')
            {
                self.complete = scanned + last_nl + 1;
                return Ok(true);
            }
            if self.eof {
                if self.end == 0 {
                    return Ok(false);
                }
                // The last line has no newline: give it one (the spare byte).
                self.buf[self.end] = b'\n';
                self.end += 1;
                self.complete = self.end;
                return Ok(true);
            }
            if self.end == BUF_SIZE {
                return Err(SimError::Trace {
                    line: self.line + 1,
                    message: format!(
                        "line longer than {BUF_SIZE} bytes: is this a lackey trace (valgrind --tool=lackey --trace-mem=yes)?"
                    ),
                });
            }
        }
    }

    #[cold]
    fn bad_line(&self, start: usize, next: usize) -> SimError {
        let text = &self.buf[start..next];
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        SimError::Trace {
            line: self.line,
            message: format!(
                "cannot parse '{}': expected 'I  addr,size', ' L addr,size', ' S addr,size' or ' M addr,size' (hex address, decimal size)",
                String::from_utf8_lossy(text)
            ),
        }
    }
}

/// Parse the line starting at `at` in `buf`, which ends with a newline; returns what it
/// held and where the next line starts.
#[inline(always)]
fn parse_line(buf: &[u8], at: usize) -> (Line, usize) {
    let mut i = at;
    let first = buf[i];
    if first == b'\n' {
        return (Line::Skip, i + 1);
    }
    // In bounds: this line goes on to its newline.
    let kind = match (first, buf[i + 1]) {
        (b'I', _) => {
            i += 1;
            TraceKind::Instr
        }
        (b' ', b'L') => {
            i += 2;
            TraceKind::Load
        }
        (b' ', b'S') => {
            i += 2;
            TraceKind::Store
        }
        (b' ', b'M') => {
            i += 2;
            TraceKind::Modify
        }
        (b'\r', b'\n') => return (Line::Skip, i + 2),
        (b'=', b'=') | (b'-', b'-') => return (Line::Skip, skip_line(buf, i)),
        _ => return (Line::Bad, skip_line(buf, i)),
    };
    let spaces = i;
    while buf[i] == b' ' {
        i += 1;
    }
    let digits = i;
    let mut addr: u64 = 0;
    loop {
        let d = HEX[buf[i] as usize];
        if d == NOT_HEX {
            break;
        }
        addr = (addr << 4) | d as u64;
        i += 1;
    }
    // 16 hex digits fill a u64; more would overflow.
    if i == spaces || i == digits || i - digits > 16 || buf[i] != b',' {
        return (Line::Bad, skip_line(buf, i));
    }
    i += 1;
    let sdigits = i;
    let mut size: u64 = 0;
    while buf[i].is_ascii_digit() && i - sdigits < 19 {
        size = size * 10 + (buf[i] - b'0') as u64;
        i += 1;
    }
    if buf[i] == b'\r' {
        i += 1;
    }
    if i == sdigits || buf[i] != b'\n' || size == 0 {
        return (Line::Bad, skip_line(buf, i));
    }
    (Line::Event(TraceEvent { kind, addr, size }), i + 1)
}

/// Where the line holding `i` ends (one past its newline).
fn skip_line(buf: &[u8], i: usize) -> usize {
    buf[i..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(buf.len(), |n| i + n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &[u8]) -> Result<Vec<TraceEvent>, SimError> {
        let mut r = LackeyReader::new(text);
        let mut got = Vec::new();
        while let Some(e) = r.next_event()? {
            got.push(e);
        }
        Ok(got)
    }

    fn ev(kind: TraceKind, addr: u64, size: u64) -> TraceEvent {
        TraceEvent { kind, addr, size }
    }

    #[test]
    fn reads_every_kind_and_skips_valgrind_chatter() {
        let t = "==123== Lackey\nI  04016fc3,3\n L 1ffefffd18,8\n S 04227e48,4\n M 0422a008,16\n\n--123-- done\n";
        assert_eq!(
            read_all(t.as_bytes()).unwrap(),
            vec![
                ev(TraceKind::Instr, 0x04016fc3, 3),
                ev(TraceKind::Load, 0x1ffefffd18, 8),
                ev(TraceKind::Store, 0x04227e48, 4),
                ev(TraceKind::Modify, 0x0422a008, 16),
            ]
        );
    }

    #[test]
    fn crlf_a_missing_last_newline_and_upper_case_hex() {
        let t = "I  0401ABCF,3\r\n L ffffffffffffffff,512";
        assert_eq!(
            read_all(t.as_bytes()).unwrap(),
            vec![
                ev(TraceKind::Instr, 0x0401abcf, 3),
                ev(TraceKind::Load, u64::MAX, 512)
            ]
        );
    }

    #[test]
    fn lines_across_buffer_refills_are_whole() {
        // Enough lines that the buffer is refilled many times, at every offset of a line.
        let mut t = String::new();
        let mut want = Vec::new();
        for i in 0..100_000u64 {
            let addr = i.wrapping_mul(0x9e37_79b9) & 0xff_ffff_ffff;
            t.push_str(&format!(" S {addr:x},{}\n", 1 + i % 16));
            want.push(ev(TraceKind::Store, addr, 1 + i % 16));
            if i % 1000 == 0 {
                t.push_str("==1== a line of valgrind's own\n");
            }
        }
        // A reader that hands out a few bytes at a time, like a pipe.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = out.len().min(self.0.len()).min(4093);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut r = LackeyReader::new(Trickle(t.as_bytes()));
        let mut got = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            got.push(e);
        }
        assert_eq!(got, want);
        assert_eq!(r.line(), 100_000 + 100);
    }

    #[test]
    fn a_bad_line_reports_its_number_and_text() {
        for bad in [
            " X 1000,8",
            " L zz,8",
            " L 1000",
            " L 1000,",
            "L 1000,8",
            " L 1000,8x",
            " L 1000,0",
            " L,8",
            " L 10000000000000000,8",
            " L 1000,99999999999999999999",
        ] {
            let t = format!("I  1000,4\n L 2000,8\n{bad}\n I  3000,4\n");
            let mut r = LackeyReader::new(t.as_bytes());
            r.next_event().unwrap();
            r.next_event().unwrap();
            let e = r.next_event().unwrap_err().to_string();
            assert!(
                e.starts_with("trace line 3:") && e.contains(&format!("'{bad}'")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_line_longer_than_the_buffer_is_refused() {
        let t = vec![b'x'; BUF_SIZE + 10];
        let e = read_all(&t).unwrap_err().to_string();
        assert!(e.contains("trace line 1: line longer than"), "{e}");
    }
}
