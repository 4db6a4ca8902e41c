//! rocs's compact binary trace format: the same events as a lackey trace in about an eighth of
//! the bytes, read many times faster than text. Version 2 is written; versions 1 and 2 are
//! read.
//!
//! ```text
//! header, 16 bytes
//!   0..8    magic: 89 52 4f 43 53 54 52 0a  ("\x89ROCSTR\n"; the first byte is not text,
//!           so a reader tells it from a lackey trace by one byte)
//!   8..12   version, u32 little-endian: 1 or 2
//!   12..16  flags, u32 little-endian: 0 (none defined; a reader refuses flags it does not know)
//! one record per event; instruction fetches and data accesses are two streams, each with
//! the address and the end (address + size) of its last event, both 0 at the start
//! version 1
//!   tag     one byte: kind | size_code << 2
//!           kind: 0 instruction fetch, 1 load, 2 store, 3 modify (lackey's I, L, S, M)
//!           size_code 1..=62: the access size in bytes; 63: the size follows as a varint
//!   [size]  varint, only when size_code is 63
//!   delta   varint, zigzag-encoded: address minus the previous address of the same stream,
//!           wrapping modulo 2^64
//! version 2: the tag's high bit tells two records apart
//!   sequential, one byte: 0x80 | kind | size << 2, size 1..=31: the event starts at the
//!           end of its stream's last event (modulo 2^64)
//!   other   tag kind | size_code << 2, size_code 1..=30: the size; 31: the size follows as
//!           a varint; then [size] and delta as in version 1
//! end record
//!   tag 0x00, then the number of events as a varint; nothing may follow it
//! tags 0x01..=0x03 are reserved, and in version 2 0x80..=0x83 too
//! ```
//!
//! Varints are unsigned LEB128 (7 bits a byte, least significant first, high bit set on all
//! but the last byte; at most 10 bytes). Zigzag maps a signed delta d to `(d << 1) ^ (d >> 63)`
//! so that small negative deltas are small too. The end record lets a reader tell a
//! complete trace from one whose writer stopped. Version 2's sequential record is one byte
//! for most of a program's instruction fetches (straight-line code) and many of its data
//! accesses (a structure walked field by field), decoded without a varint.

use std::io::{Read, Write};

use super::{TraceEvent, TraceKind};
use crate::error::SimError;

pub const MAGIC: [u8; 8] = *b"\x89ROCSTR\n";
/// The version written.
pub const VERSION: u32 = 2;
const HEADER_LEN: usize = 16;
const END_TAG: u8 = 0;
/// Version 1: size code saying that the size follows as a varint.
const V1_SIZE_FOLLOWS: u8 = 63;
/// Version 2: the high bit of a sequential record's tag.
const SEQUENTIAL: u8 = 0x80;
/// Version 2: the largest size of a sequential record, and the size code of an other
/// record whose size follows as a varint.
const V2_SIZE_FOLLOWS: u8 = 31;
/// Longest record: a tag and two 10-byte varints.
const MAX_RECORD: usize = 21;
const BUF_SIZE: usize = 1 << 18;

fn kind_code(kind: TraceKind) -> u8 {
    match kind {
        TraceKind::Instr => 0,
        TraceKind::Load => 1,
        TraceKind::Store => 2,
        TraceKind::Modify => 3,
    }
}

const KINDS: [TraceKind; 4] = [
    TraceKind::Instr,
    TraceKind::Load,
    TraceKind::Store,
    TraceKind::Modify,
];

/// Which address stream (0 instructions, 1 data) a kind code belongs to.
#[inline(always)]
fn stream(kind_code: u8) -> usize {
    (kind_code != 0) as usize
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at `*i` in `buf`, `None` if `buf` ends inside it or it is longer than 10 bytes.
#[inline(always)]
fn get_varint(buf: &[u8], i: &mut usize) -> Option<u64> {
    let first = *buf.get(*i)?;
    *i += 1;
    if first < 0x80 {
        return Some(first as u64);
    }
    let mut v = (first & 0x7f) as u64;
    let mut shift = 7;
    loop {
        let b = *buf.get(*i)?;
        *i += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[inline(always)]
fn unzigzag(v: u64) -> u64 {
    ((v >> 1) as i64 ^ -((v & 1) as i64)) as u64
}

/// The address and the end of the last event of each stream.
#[derive(Clone, Copy, Default)]
struct Streams {
    prev: [u64; 2],
    end: [u64; 2],
}

impl Streams {
    #[inline(always)]
    fn event(&mut self, kind: u8, addr: u64, size: u64) -> TraceEvent {
        let s = stream(kind);
        self.prev[s] = addr;
        self.end[s] = addr.wrapping_add(size);
        TraceEvent {
            kind: KINDS[kind as usize],
            addr,
            size,
        }
    }
}

/// What [`BinaryReader::feed`] hands events to.
pub trait EventSink {
    /// Whether it takes another event.
    fn wants(&self) -> bool;
    /// Take one event; an error stops the feed (the event counts as read).
    fn event(&mut self, ev: TraceEvent) -> Result<(), SimError>;
}

/// Collects events into a vector, up to `max`.
struct Batch<'a> {
    out: &'a mut Vec<TraceEvent>,
    max: usize,
}

impl EventSink for Batch<'_> {
    #[inline(always)]
    fn wants(&self) -> bool {
        self.out.len() < self.max
    }

    #[inline(always)]
    fn event(&mut self, ev: TraceEvent) -> Result<(), SimError> {
        self.out.push(ev);
        Ok(())
    }
}

/// Writes events in the binary format; [`BinaryWriter::finish`] writes the end record.
pub struct BinaryWriter<W: Write> {
    out: W,
    version: u32,
    buf: Vec<u8>,
    streams: Streams,
    events: u64,
}

impl<W: Write> BinaryWriter<W> {
    /// A writer of the current version.
    pub fn new(out: W) -> Self {
        Self::with_version(out, VERSION).expect("the current version")
    }

    /// A writer of `version` (1 or 2: old traces are made to test that they still replay).
    pub fn with_version(out: W, version: u32) -> std::io::Result<Self> {
        if !(1..=VERSION).contains(&version) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("no binary trace version {version}; there are 1 to {VERSION}"),
            ));
        }
        let mut buf = Vec::with_capacity(BUF_SIZE + MAX_RECORD);
        buf.extend_from_slice(&MAGIC);
        buf.extend_from_slice(&version.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        Ok(BinaryWriter {
            out,
            version,
            buf,
            streams: Streams::default(),
            events: 0,
        })
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn write(&mut self, ev: &TraceEvent) -> std::io::Result<()> {
        if ev.size == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an access of 0 bytes",
            ));
        }
        let kind = kind_code(ev.kind);
        let s = stream(kind);
        let size_follows = if self.version == 1 {
            V1_SIZE_FOLLOWS
        } else {
            V2_SIZE_FOLLOWS
        };
        if self.version >= 2 && ev.addr == self.streams.end[s] && ev.size <= V2_SIZE_FOLLOWS as u64
        {
            self.buf.push(SEQUENTIAL | kind | (ev.size as u8) << 2);
        } else {
            if ev.size < size_follows as u64 {
                self.buf.push(kind | (ev.size as u8) << 2);
            } else {
                self.buf.push(kind | size_follows << 2);
                put_varint(&mut self.buf, ev.size);
            }
            let delta = ev.addr.wrapping_sub(self.streams.prev[s]) as i64;
            put_varint(&mut self.buf, ((delta << 1) ^ (delta >> 63)) as u64);
        }
        self.streams.event(kind, ev.addr, ev.size);
        self.events += 1;
        if self.buf.len() >= BUF_SIZE {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Write the end record and flush; returns the output.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.buf.push(END_TAG);
        put_varint(&mut self.buf, self.events);
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads a binary trace as a stream of events.
pub struct BinaryReader<R> {
    input: R,
    version: u32,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    eof: bool,
    /// Offset in the input of `buf[0]`.
    base: u64,
    streams: Streams,
    events: u64,
    ended: bool,
}

impl<R: Read> BinaryReader<R> {
    /// Reads and checks the header.
    pub fn new(input: R) -> Result<Self, SimError> {
        let mut r = BinaryReader {
            input,
            version: 0,
            buf: vec![0; BUF_SIZE].into_boxed_slice(),
            pos: 0,
            end: 0,
            eof: false,
            base: 0,
            streams: Streams::default(),
            events: 0,
            ended: false,
        };
        r.refill()?;
        let header = &r.buf[..r.end.min(HEADER_LEN)];
        if header.len() < HEADER_LEN || header[..8] != MAGIC {
            return Err(r.error(0, "not a rocs binary trace (no \\x89ROCSTR\\n header); convert a lackey trace with `rocsctl sim trace convert IN OUT`".into()));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        let flags = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        if !(1..=VERSION).contains(&version) {
            return Err(r.error(
                8,
                format!("version {version}; this rocs reads versions 1 to {VERSION}"),
            ));
        }
        if flags != 0 {
            return Err(r.error(
                12,
                format!("unknown flags {flags:#x}; this rocs knows none"),
            ));
        }
        r.version = version;
        r.pos = HEADER_LEN;
        Ok(r)
    }

    /// The format version of the trace.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Events read so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The next event, `None` after the end record.
    #[inline]
    pub fn next_event(&mut self) -> Result<Option<TraceEvent>, SimError> {
        if self.end - self.pos < MAX_RECORD && !self.eof {
            self.refill()?;
        }
        let buf = &self.buf[..self.end];
        let start = self.pos;
        let Some(&tag) = buf.get(start) else {
            return if self.ended {
                Ok(None)
            } else {
                Err(self.error(
                    start,
                    format!(
                        "the trace stops after {} events without its end record (did its writer stop early?)",
                        self.events
                    ),
                ))
            };
        };
        let v2 = self.version >= 2;
        let mut i = start + 1;
        let kind = tag & 3;
        let (size_code, size_follows) = if v2 {
            (tag >> 2 & 0x1f, V2_SIZE_FOLLOWS)
        } else {
            (tag >> 2, V1_SIZE_FOLLOWS)
        };
        if size_code == 0 {
            return self.special_record(tag);
        }
        let ev = if v2 && tag & SEQUENTIAL != 0 {
            let addr = self.streams.end[stream(kind)];
            self.streams.event(kind, addr, size_code as u64)
        } else {
            let size = if size_code == size_follows {
                get_varint(buf, &mut i)
            } else {
                Some(size_code as u64)
            };
            let delta = get_varint(buf, &mut i);
            let (Some(size), Some(delta)) = (size, delta) else {
                return Err(self.error(
                    start,
                    "a record cut short or with a varint over 10 bytes".into(),
                ));
            };
            if size == 0 {
                return Err(self.error(start, "an access of 0 bytes".into()));
            }
            let addr = self.streams.prev[stream(kind)].wrapping_add(unzigzag(delta));
            self.streams.event(kind, addr, size)
        };
        self.pos = i;
        self.events += 1;
        Ok(Some(ev))
    }

    /// Append the next events to `out` until it holds `max` (fewer at the end of the trace).
    pub fn next_batch(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<(), SimError> {
        self.feed(&mut Batch { out, max })?;
        Ok(())
    }

    /// Decode events and hand them to `sink` while it wants more; false when the trace is
    /// over. Records that lie wholly in the buffer and carry their size in the tag (nearly
    /// all) are decoded in one tight loop that the compiler fuses with `sink`'s; the rest go
    /// through [`BinaryReader::next_event`]. Inlined, so that `sink`'s fields can live in
    /// registers.
    #[inline(always)]
    pub fn feed<S: EventSink>(&mut self, sink: &mut S) -> Result<bool, SimError> {
        loop {
            if !sink.wants() {
                return Ok(true);
            }
            if self.end - self.pos < MAX_RECORD && !self.eof {
                self.refill()?;
            }
            if self.version >= 2 {
                self.feed_plain::<true, S>(sink)?;
            } else {
                self.feed_plain::<false, S>(sink)?;
            }
            if !sink.wants() {
                return Ok(true);
            }
            // Near the buffer's end, or a record of another kind: one at a time.
            match self.next_event()? {
                Some(ev) => sink.event(ev)?,
                None => return Ok(false),
            }
        }
    }

    /// Hand `sink` events of plain records of version 2 (`V2`) or 1 while it wants them,
    /// until the buffer may end inside the next record or the next record is not plain (an
    /// end or reserved tag, a size in a varint, a varint over 10 bytes).
    #[inline(always)]
    fn feed_plain<const V2: bool, S: EventSink>(&mut self, sink: &mut S) -> Result<(), SimError> {
        // Below `safe_end` a whole record of the longest kind is buffered.
        let safe_end = self.end.saturating_sub(MAX_RECORD);
        let buf = &self.buf[..self.end];
        let mut i = self.pos;
        let mut streams = self.streams;
        let mut events = 0;
        let mut result = Ok(());
        while i < safe_end && sink.wants() {
            let tag = buf[i];
            let kind = tag & 3;
            let ev = if V2 && tag & SEQUENTIAL != 0 {
                let size = (tag >> 2 & 0x1f) as u64;
                if size == 0 {
                    break;
                }
                i += 1;
                let addr = streams.end[stream(kind)];
                streams.event(kind, addr, size)
            } else {
                let code = tag >> 2;
                let size_follows = if V2 { V2_SIZE_FOLLOWS } else { V1_SIZE_FOLLOWS };
                if code == 0 || code == size_follows {
                    break;
                }
                let mut j = i + 1;
                let Some(delta) = get_varint(buf, &mut j) else {
                    break;
                };
                i = j;
                let addr = streams.prev[stream(kind)].wrapping_add(unzigzag(delta));
                streams.event(kind, addr, code as u64)
            };
            events += 1;
            if let Err(e) = sink.event(ev) {
                result = Err(e);
                break;
            }
        }
        self.pos = i;
        self.streams = streams;
        self.events += events;
        result
    }

    /// The end record, or a reserved tag.
    #[cold]
    fn special_record(&mut self, tag: u8) -> Result<Option<TraceEvent>, SimError> {
        let start = self.pos;
        if tag != END_TAG {
            return Err(self.error(start, format!("reserved tag {tag:#04x}")));
        }
        let mut i = start + 1;
        let Some(count) = get_varint(&self.buf[..self.end], &mut i) else {
            return Err(self.error(start, "the end record is cut short".into()));
        };
        if count != self.events {
            return Err(self.error(
                start,
                format!(
                    "the end record counts {count} events but the trace holds {}",
                    self.events
                ),
            ));
        }
        self.pos = i;
        self.refill()?;
        if self.pos != self.end {
            return Err(self.error(self.pos, "bytes after the end record".into()));
        }
        self.ended = true;
        Ok(None)
    }

    /// Move the unread tail to the front and read until `MAX_RECORD` bytes are buffered or
    /// the input ends.
    #[cold]
    fn refill(&mut self) -> Result<(), SimError> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while !self.eof && self.end < MAX_RECORD.max(HEADER_LEN) {
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(reason) => {
                    return Err(SimError::BinaryTraceIo {
                        offset: self.base + self.end as u64,
                        reason,
                    })
                }
            }
        }
        Ok(())
    }

    #[cold]
    fn error(&self, at: usize, message: String) -> SimError {
        SimError::BinaryTrace {
            offset: self.base + at as u64,
            message,
        }
    }
}

#[cfg(test)]
#[path = "binary_tests.rs"]
mod tests;
