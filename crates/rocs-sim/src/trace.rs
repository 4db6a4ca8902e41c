//! Streaming reader for valgrind lackey traces (`valgrind --tool=lackey --trace-mem=yes`).
//!
//! Lines: `I  addr,size` (instruction fetch), ` L addr,size` (load), ` S addr,size` (store),
//! ` M addr,size` (modify: a load and a store of the same location by one instruction).
//! Addresses are hexadecimal, sizes decimal. Lines valgrind itself writes into the same
//! stream (`==pid== ...`, `--pid-- ...`) and blank lines are skipped; anything else is an
//! error that names its line number.

use std::io::BufRead;

use crate::error::SimError;

/// What one trace line asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    Instr,
    Load,
    Store,
    Modify,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    pub kind: TraceKind,
    pub addr: u64,
    pub size: u64,
}

/// Reads events one line at a time, without holding the trace in memory.
pub struct LackeyReader<R> {
    input: R,
    buf: Vec<u8>,
    line: u64,
}

impl<R: BufRead> LackeyReader<R> {
    pub fn new(input: R) -> Self {
        LackeyReader {
            input,
            buf: Vec::with_capacity(64),
            line: 0,
        }
    }

    /// Lines read so far.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The next event, `None` at the end of the trace.
    pub fn next_event(&mut self) -> Result<Option<TraceEvent>, SimError> {
        loop {
            self.buf.clear();
            let n = self
                .input
                .read_until(b'\n', &mut self.buf)
                .map_err(|reason| SimError::TraceIo {
                    line: self.line,
                    reason,
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            let mut l = &self.buf[..];
            while let [rest @ .., b'\n' | b'\r'] = l {
                l = rest;
            }
            if l.is_empty() || l.starts_with(b"==") || l.starts_with(b"--") {
                continue;
            }
            return parse_line(l)
                .map(Some)
                .ok_or_else(|| SimError::Trace {
                    line: self.line,
                    message: format!(
                        "cannot parse '{}': expected 'I  addr,size', ' L addr,size', ' S addr,size' or ' M addr,size' (hex address, decimal size)",
                        String::from_utf8_lossy(l)
                    ),
                });
        }
    }
}

#[inline]
fn parse_line(l: &[u8]) -> Option<TraceEvent> {
    let (kind, rest) = match l {
        [b'I', rest @ ..] => (TraceKind::Instr, rest),
        [b' ', b'L', rest @ ..] => (TraceKind::Load, rest),
        [b' ', b'S', rest @ ..] => (TraceKind::Store, rest),
        [b' ', b'M', rest @ ..] => (TraceKind::Modify, rest),
        _ => return None,
    };
    let mut i = 0;
    while i < rest.len() && rest[i] == b' ' {
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut addr: u64 = 0;
    let start = i;
    while i < rest.len() && rest[i] != b',' {
        let d = (rest[i] as char).to_digit(16)? as u64;
        addr = addr.checked_mul(16)?.checked_add(d)?;
        i += 1;
    }
    if i == start || i >= rest.len() {
        return None;
    }
    i += 1;
    let sstart = i;
    let mut size: u64 = 0;
    while i < rest.len() && rest[i].is_ascii_digit() {
        size = size.checked_mul(10)?.checked_add((rest[i] - b'0') as u64)?;
        i += 1;
    }
    if i == sstart || i != rest.len() || size == 0 {
        return None;
    }
    Some(TraceEvent { kind, addr, size })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_kind_and_skips_valgrind_chatter() {
        let t = "==123== Lackey\nI  04016fc3,3\n L 1ffefffd18,8\n S 04227e48,4\n M 0422a008,16\n\n";
        let mut r = LackeyReader::new(t.as_bytes());
        let mut got = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            got.push(e);
        }
        assert_eq!(
            got,
            vec![
                TraceEvent {
                    kind: TraceKind::Instr,
                    addr: 0x04016fc3,
                    size: 3
                },
                TraceEvent {
                    kind: TraceKind::Load,
                    addr: 0x1ffefffd18,
                    size: 8
                },
                TraceEvent {
                    kind: TraceKind::Store,
                    addr: 0x04227e48,
                    size: 4
                },
                TraceEvent {
                    kind: TraceKind::Modify,
                    addr: 0x0422a008,
                    size: 16
                },
            ]
        );
    }

    #[test]
    fn a_bad_line_reports_its_number() {
        for bad in [
            " X 1000,8",
            " L zz,8",
            " L 1000",
            " L 1000,",
            "L 1000,8",
            " L 1000,8x",
        ] {
            let t = format!("I  1000,4\n L 2000,8\n{bad}\n");
            let mut r = LackeyReader::new(t.as_bytes());
            r.next_event().unwrap();
            r.next_event().unwrap();
            let e = r.next_event().unwrap_err().to_string();
            assert!(e.starts_with("trace line 3:"), "{bad}: {e}");
        }
    }
}
