//! rocs's compact binary trace format: the same events as a lackey trace in about a sixth of
//! the bytes, read many times faster than text. Version 5 is written (its blocks of
//! columns are specified in [`super::columns`]); versions 1 to 5 are read.
//!
//! ```text
//! header, 16 bytes
//!   0..8    magic: 89 52 4f 43 53 54 52 0a  ("\x89ROCSTR\n"; the first byte is not text,
//!           so a reader tells it from a lackey trace by one byte)
//!   8..12   version, u32 little-endian: 1 to 5 (5: see `columns`)
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
//! version 3: the records of version 2, and
//!   run     tag 0x01, fetches (a byte), data accesses (a byte), length (varint), then the
//!           records of those fetches + data (at least 1) events, `length` bytes, each of
//!           which lies in the 64-byte line its stream's last event ended in (sizes
//!           clamped to 64); after them the streams are as they were before the run record
//! version 4: the records of version 2, and
//!   run     as version 3's, with two slot bytes after the two counts: tag 0x01, fetches,
//!           data accesses, slots (u16 little-endian), length (varint), records. Each
//!           stream has a ring of the 64-byte lines its last 8 plain records outside runs
//!           ended in (sizes clamped to 64; slot 0 the newest, none at the start); each
//!           record of the run lies in one line that is in its stream's ring, and bit
//!           `slot + 8 * stream` of the slots is set for each slot they lie in (stream 0
//!           instruction fetches, 1 data; exactly the streams in the run have bits). A writer
//!           puts every reference that lies in a ring line in a run (at most 255 of each
//!           stream in one)
//! end record
//!   tag 0x00, then the number of events as a varint (runs' included); nothing may follow
//! tags 0x01..=0x03 are reserved (in versions 3 and 4, 0x02 and 0x03), in versions 2 to 4
//! 0x80..=0x83 too
//! ```
//!
//! Varints are unsigned LEB128 (7 bits a byte, least significant first, high bit set on all
//! but the last byte; at most 10 bytes). Zigzag maps a signed delta d to `(d << 1) ^ (d >> 63)`
//! so that small negative deltas are small too. The end record lets a reader tell a
//! complete trace from one whose writer stopped. Version 2's sequential record is one byte
//! for most of a program's instruction fetches (straight-line code) and many of its data
//! accesses (a structure walked field by field), decoded without a varint. Version 3's run
//! record lets a replay whose L1s have 64-byte lines count repeats of the lines its streams
//! touched last (most of a program's references, hits that change nothing) in bulk and skip
//! their records; any other reader decodes them one by one (docs/traces.md). Version 4's
//! runs stand for references to any of a stream's last few lines, which a replay on LRU
//! L1s of 64-byte lines counts in bulk when each of those lines is the most recent of its
//! set.

use std::io::{Read, Write};

use super::columns::{ColumnBlocks, ColumnReader};
use super::{TraceEvent, TraceKind};
use crate::error::SimError;

pub const MAGIC: [u8; 8] = *b"\x89ROCSTR\n";
/// The version written.
pub const VERSION: u32 = 5;
const HEADER_LEN: usize = 16;
const END_TAG: u8 = 0;
/// Version 1: size code saying that the size follows as a varint.
const V1_SIZE_FOLLOWS: u8 = 63;
/// Version 2: the high bit of a sequential record's tag.
const SEQUENTIAL: u8 = 0x80;
/// Version 2: the largest size of a sequential record, and the size code of an other
/// record whose size follows as a varint.
const V2_SIZE_FOLLOWS: u8 = 31;
/// Version 3: the tag of a run record.
const RUN_TAG: u8 = 0x01;
/// Version 3: run records count repeats of lines of this many bytes (log2).
pub const RUN_LINE_SHIFT: u32 = 6;
/// Version 3: the fewest references a writer makes a run of. Replays of gzip's trace were
/// fastest with runs from 2 on (1, 2, 3, 4 and 6 measured; docs/traces.md).
const MIN_RUN: u32 = 2;
/// Version 3: at most this many of each stream's references in one run (a byte each).
const MAX_RUN: u32 = 255;
/// Version 4: a run holds references to any of each stream's last this many lines.
pub const RING_LINES: usize = 8;
/// Version 4: a run record's slots take this many bytes (a bit per ring line and stream).
const SLOT_BYTES: usize = 2 * RING_LINES / 8;
/// No run being decoded record by record.
const NO_RUN: u64 = u64::MAX;
/// Longest record: a tag and two 10-byte varints.
const MAX_RECORD: usize = 21;
const BUF_SIZE: usize = 1 << 18;

pub(super) fn kind_code(kind: TraceKind) -> u8 {
    match kind {
        TraceKind::Instr => 0,
        TraceKind::Load => 1,
        TraceKind::Store => 2,
        TraceKind::Modify => 3,
    }
}

pub(super) const KINDS: [TraceKind; 4] = [
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

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Append the record of `ev` (of kind code `kind`) in `version` to `out`, from and
/// updating `streams`.
fn put_record(out: &mut Vec<u8>, version: u32, streams: &mut Streams, kind: u8, ev: &TraceEvent) {
    let s = stream(kind);
    let size_follows = if version == 1 {
        V1_SIZE_FOLLOWS
    } else {
        V2_SIZE_FOLLOWS
    };
    if version >= 2 && ev.addr == streams.end[s] && ev.size <= V2_SIZE_FOLLOWS as u64 {
        out.push(SEQUENTIAL | kind | (ev.size as u8) << 2);
    } else {
        if ev.size < size_follows as u64 {
            out.push(kind | (ev.size as u8) << 2);
        } else {
            out.push(kind | size_follows << 2);
            put_varint(out, ev.size);
        }
        let delta = ev.addr.wrapping_sub(streams.prev[s]) as i64;
        put_varint(out, ((delta << 1) ^ (delta >> 63)) as u64);
    }
    streams.event(kind, ev.addr, ev.size);
}

/// The varint at `*i` in `buf`, `None` if `buf` ends inside it or it is longer than 10 bytes.
#[inline(always)]
pub(super) fn get_varint(buf: &[u8], i: &mut usize) -> Option<u64> {
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

/// The run record at `i` in `buf` (of version 4 if `V4`): its fetches, its data accesses,
/// its slots (version 4, else 0), where its records start and where they end (which may
/// be past `buf`); `None` if `buf` ends inside its header, its length's varint is over 10
/// bytes, it counts no events or (version 4) its slots are not those of its streams.
#[inline(always)]
fn run_header<const V4: bool>(buf: &[u8], i: usize) -> Option<(u64, u64, u32, usize, usize)> {
    let fetches = *buf.get(i + 1)? as u64;
    let data = *buf.get(i + 2)? as u64;
    let mut body = i + 3;
    let mut slots = 0;
    if V4 {
        for k in 0..SLOT_BYTES {
            slots |= u32::from(*buf.get(body + k)?) << (8 * k);
        }
        body += SLOT_BYTES;
        let mask = (1 << RING_LINES) - 1;
        if (fetches == 0) != (slots & mask == 0) || (data == 0) != (slots >> RING_LINES == 0) {
            return None;
        }
    }
    let len = get_varint(buf, &mut body)?;
    if fetches + data == 0 {
        return None;
    }
    Some((
        fetches,
        data,
        slots,
        body,
        body.checked_add(usize::try_from(len).ok()?)?,
    ))
}

/// Read from `input` into `buf[*end..]` until `*end` reaches `want` or the input ends
/// (`*eof`); `base`: the input offset of `buf[0]`, for errors.
pub(super) fn read_until(
    input: &mut impl Read,
    buf: &mut [u8],
    end: &mut usize,
    want: usize,
    eof: &mut bool,
    base: u64,
) -> Result<(), SimError> {
    while !*eof && *end < want {
        match input.read(&mut buf[*end..]) {
            Ok(0) => *eof = true,
            Ok(n) => *end += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(reason) => {
                return Err(SimError::BinaryTraceIo {
                    offset: base + *end as u64,
                    reason,
                })
            }
        }
    }
    Ok(())
}

#[inline(always)]
pub(super) fn unzigzag(v: u64) -> u64 {
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

/// The line (64 bytes, [`RUN_LINE_SHIFT`]) an access of `size` bytes at `addr` ends in,
/// its size clamped to the line, as a replay on such lines tells it.
#[inline(always)]
fn last_line(addr: u64, size: u64) -> u64 {
    addr.saturating_add(size.min(1 << RUN_LINE_SHIFT) - 1) >> RUN_LINE_SHIFT
}

/// Version 4: the lines the last [`RING_LINES`] plain records (those outside run records)
/// of each stream ended in, kept alike by the writer and the reader. Slot 0 is the newest.
#[derive(Clone, Copy)]
pub struct LineRing {
    lines: [[u64; RING_LINES]; 2],
    /// Where each stream's newest line is in `lines`.
    newest: [usize; 2],
}

impl LineRing {
    fn new() -> Self {
        LineRing {
            lines: [[NO_LINE; RING_LINES]; 2],
            newest: [0; 2],
        }
    }

    /// `line` becomes `stream`'s newest (slot 0), each other one slot older, the oldest
    /// dropped. Newer lines are at lower positions (modulo the ring), so that slots map to
    /// positions by a rotation.
    #[inline(always)]
    fn push(&mut self, stream: usize, line: u64) {
        let at = (self.newest[stream] + RING_LINES - 1) % RING_LINES;
        self.newest[stream] = at;
        self.lines[stream][at] = line;
    }

    /// The line in `stream`'s slot `slot` (0 newest; `NO_LINE` if none yet).
    #[inline(always)]
    fn line(&self, stream: usize, slot: usize) -> u64 {
        self.lines[stream][(self.newest[stream] + slot) % RING_LINES]
    }

    /// The newest slot of `stream` that holds `line`.
    fn slot(&self, stream: usize, line: u64) -> Option<usize> {
        (0..RING_LINES).find(|&slot| self.line(stream, slot) == line)
    }
}

/// Version 4: the lines a run's references lie in, for [`EventSink::run_of_lines`].
pub struct RunLines<'a> {
    ring: &'a LineRing,
    /// Bit `slot + RING_LINES * stream`: some reference of `stream` lies in that slot's line.
    slots: u32,
}

impl RunLines<'_> {
    /// The last [`RING_LINES`] lines of `stream` (0 instruction fetches, 1 data accesses) in
    /// some order (`NO_LINE` for none), and the mask of those (bit i: `lines[i]`) that the
    /// run's references of `stream` lie in: a sink can test all of them without a branch.
    #[inline(always)]
    pub fn lines(&self, stream: usize) -> (&[u64; RING_LINES], u32) {
        let slots = (self.slots >> (RING_LINES * stream)) & ((1 << RING_LINES) - 1);
        // Slot i is at position (newest + i) mod RING_LINES: rotate the slots' mask left.
        let newest = self.ring.newest[stream] as u32;
        let at =
            (slots << newest | slots >> (RING_LINES as u32 - newest)) & ((1 << RING_LINES) - 1);
        (&self.ring.lines[stream], at)
    }
}

/// What [`BinaryReader::feed`] hands events to.
pub trait EventSink {
    /// Whether it takes another event.
    fn wants(&self) -> bool;
    /// Take one event; an error stops the feed (the event counts as read).
    fn event(&mut self, ev: TraceEvent) -> Result<(), SimError>;
    /// Version 3: the next `fetches` instruction fetches and `data` data accesses (in some
    /// order) each lie in the 64-byte line ([`RUN_LINE_SHIFT`]) their stream touched last,
    /// its size clamped to the line. True if the sink takes them as a whole (the reader
    /// skips their records); false to be handed them one by one, as by default. Asked only
    /// while the sink wants events.
    #[inline(always)]
    fn run(&mut self, fetches: u64, data: u64) -> bool {
        let _ = (fetches, data);
        false
    }

    /// Version 4: the next `fetches` instruction fetches and `data` data accesses (in some
    /// order) each lie in one of the 64-byte lines `lines` gives for its stream, its size
    /// clamped to the line. True if the sink takes them as a whole, as [`EventSink::run`].
    #[inline(always)]
    fn run_of_lines(&mut self, fetches: u64, data: u64, lines: &RunLines) -> bool {
        let _ = (fetches, data, lines);
        false
    }
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
    /// Version 3: each stream's last 64-byte line (`NO_LINE` before its first reference),
    lines: [u64; 2],
    /// the records of the run of repeats being gathered, encoded from `run_start`,
    run: Vec<u8>,
    /// and how many fetches and data accesses it holds,
    run_counts: [u32; 2],
    run_start: Streams,
    /// version 4: which of the ring's lines its references lie in (a run record's slot
    /// byte), and the lines of each stream's last plain records.
    run_slots: u32,
    ring: LineRing,
    /// Version 5: the block being gathered.
    columns: Option<Box<ColumnBlocks>>,
}

/// No line yet (a line number is an address shifted right by 6 bits).
pub const NO_LINE: u64 = u64::MAX;

impl<W: Write> BinaryWriter<W> {
    /// A writer of the current version.
    pub fn new(out: W) -> Self {
        Self::with_version(out, VERSION).expect("the current version")
    }

    /// A writer of `version` (1 to 5: old traces are made to test that they still replay).
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
            lines: [NO_LINE; 2],
            run: Vec::new(),
            run_counts: [0; 2],
            run_start: Streams::default(),
            run_slots: 0,
            ring: LineRing::new(),
            columns: (version >= 5).then(|| Box::new(ColumnBlocks::new())),
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
        if let Some(columns) = &mut self.columns {
            columns.push(ev, &mut self.buf);
            self.events += 1;
            return self.flush_some();
        }
        let kind = kind_code(ev.kind);
        if self.version >= 4 {
            let s = stream(kind);
            let first = ev.addr >> RUN_LINE_SHIFT;
            let last = last_line(ev.addr, ev.size);
            let slot = if first == last {
                self.ring.slot(s, first)
            } else {
                None
            };
            let Some(slot) = slot else {
                self.end_run()?;
                self.ring.push(s, last);
                put_record(&mut self.buf, self.version, &mut self.streams, kind, ev);
                self.events += 1;
                return self.flush_some();
            };
            if self.run_counts[s] == MAX_RUN {
                self.end_run()?;
            }
            if self.run_counts == [0; 2] {
                self.run_start = self.streams;
            }
            put_record(&mut self.run, self.version, &mut self.streams, kind, ev);
            self.run_counts[s] += 1;
            self.run_slots |= 1 << (slot + RING_LINES * s);
            self.events += 1;
            return Ok(());
        }
        if self.version >= 3 {
            let s = stream(kind);
            // As the replay tells repeats: the size clamped to the line.
            let first = ev.addr >> RUN_LINE_SHIFT;
            let size = ev.size.min(1 << RUN_LINE_SHIFT);
            let last = ev.addr.saturating_add(size - 1) >> RUN_LINE_SHIFT;
            let repeats = first == self.lines[s] && last == first;
            self.lines[s] = last;
            if !repeats || self.run_counts[s] == MAX_RUN {
                self.end_run()?;
            }
            if repeats {
                if self.run_counts == [0; 2] {
                    self.run_start = self.streams;
                }
                put_record(&mut self.run, self.version, &mut self.streams, kind, ev);
                self.run_counts[s] += 1;
                self.events += 1;
                return Ok(());
            }
        }
        put_record(&mut self.buf, self.version, &mut self.streams, kind, ev);
        self.events += 1;
        self.flush_some()
    }

    /// Write the run gathered so far: as a run record if it is long enough, else as its
    /// plain records.
    fn end_run(&mut self) -> std::io::Result<()> {
        let [fetches, data] = self.run_counts;
        // Version 4 makes a run of every reference that lies in a ring line, so that a
        // reader's ring follows the plain records alone.
        let min_run = if self.version >= 4 { 1 } else { MIN_RUN };
        if fetches + data >= min_run {
            self.buf.extend([RUN_TAG, fetches as u8, data as u8]);
            if self.version >= 4 {
                self.buf
                    .extend_from_slice(&self.run_slots.to_le_bytes()[..SLOT_BYTES]);
            }
            put_varint(&mut self.buf, self.run.len() as u64);
            // The records after a run are encoded from the streams as they were before
            // it, so that a reader that skips the run's records needs nothing from them.
            self.streams = self.run_start;
        }
        self.buf.extend_from_slice(&self.run);
        self.run.clear();
        self.run_counts = [0; 2];
        self.run_slots = 0;
        self.flush_some()
    }

    fn flush_some(&mut self) -> std::io::Result<()> {
        if self.buf.len() >= BUF_SIZE {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Write the end record and flush; returns the output.
    pub fn finish(mut self) -> std::io::Result<W> {
        if let Some(columns) = &mut self.columns {
            columns.finish(&mut self.buf);
        } else {
            self.end_run()?;
            self.buf.push(END_TAG);
            put_varint(&mut self.buf, self.events);
        }
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
    /// Version 3, while the records of a run are handed one by one: the input offset where
    /// they end (`NO_RUN` otherwise), the streams before them (restored there) and the
    /// events read by then.
    run_end: u64,
    run_start: Streams,
    run_events: u64,
    /// Version 4: the lines of each stream's last plain records outside runs (boxed: it
    /// is as large as the rest of the reader, which sits in an enum of readers).
    ring: Box<LineRing>,
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
            run_end: NO_RUN,
            run_start: Streams::default(),
            run_events: 0,
            ring: Box::new(LineRing::new()),
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

    /// A version 5 trace's reader, from where this one stopped (just after the header).
    pub fn into_columns(self) -> ColumnReader<R> {
        let rest = self.buf[self.pos..self.end].to_vec();
        ColumnReader::new(self.input, rest, self.base + self.pos as u64)
    }

    /// Events read so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The next event, `None` after the end record.
    #[inline]
    pub fn next_event(&mut self) -> Result<Option<TraceEvent>, SimError> {
        if self.version >= 5 {
            return Err(self.columns_error());
        }
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
        if self.run_end != NO_RUN {
            self.leave_run()?;
        } else if self.version >= 4 {
            self.ring.push(stream(kind), last_line(ev.addr, ev.size));
        }
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
            // Versions 2 and 3 share a loop: a run record is as rare a case as any other
            // tag it cannot take, and one loop less keeps the code inlined around it small.
            if self.version >= 5 {
                return Err(self.columns_error());
            } else if self.version >= 4 {
                self.feed_plain::<true, true, S>(sink)?;
            } else if self.version >= 2 {
                self.feed_plain::<true, false, S>(sink)?;
            } else {
                self.feed_plain::<false, false, S>(sink)?;
            }
            if self.run_end != NO_RUN && self.base + self.pos as u64 >= self.run_end {
                self.leave_run()?;
                continue;
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

    /// Hand `sink` events of plain records and runs of version 2 to 4 (`V2`; `V4`: version
    /// 4) or plain records of version 1 while it wants them, until the buffer may end inside
    /// the next record, the next record is not plain (an end or reserved tag, a size in a
    /// varint, a varint over 10 bytes) or the records of a run handed one by one end.
    #[inline(always)]
    fn feed_plain<const V2: bool, const V4: bool, S: EventSink>(
        &mut self,
        sink: &mut S,
    ) -> Result<(), SimError> {
        // Below `safe_end` a whole record of the longest kind is buffered; a run's records
        // handed one by one stop at their end, where the streams go back.
        let mut safe_end = self.end.saturating_sub(MAX_RECORD);
        if self.run_end != NO_RUN {
            safe_end = safe_end.min((self.run_end - self.base) as usize);
        }
        let buf = &self.buf[..self.end];
        let mut i = self.pos;
        let mut streams = self.streams;
        // Version 4: plain records outside runs move the ring (a run's records handed one
        // by one leave it as it is).
        let mut ring = *self.ring;
        let mut in_run = self.run_end != NO_RUN;
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
                    let runs = V2 && self.version >= 3 && self.run_end == NO_RUN;
                    if !(runs && tag == RUN_TAG) {
                        break;
                    }
                    let Some((fetches, data, slots, body, body_end)) = run_header::<V4>(buf, i)
                    else {
                        break;
                    };
                    let n = fetches + data;
                    let taken = body_end <= buf.len()
                        && if V4 {
                            let lines = RunLines { ring: &ring, slots };
                            sink.run_of_lines(fetches, data, &lines)
                        } else {
                            sink.run(fetches, data)
                        };
                    if taken {
                        i = body_end;
                        events += n;
                        continue;
                    }
                    // Its records one by one, from the streams as they are now.
                    self.run_end = self.base + body_end as u64;
                    self.run_start = streams;
                    self.run_events = self.events + events + n;
                    safe_end = safe_end.min(body_end);
                    in_run = true;
                    i = body;
                    continue;
                }
                let mut j = i + 1;
                let Some(delta) = get_varint(buf, &mut j) else {
                    break;
                };
                i = j;
                let addr = streams.prev[stream(kind)].wrapping_add(unzigzag(delta));
                streams.event(kind, addr, code as u64)
            };
            if V4 && !in_run {
                // Sizes here are below a line: no clamp.
                ring.push(
                    stream(kind),
                    ev.addr.saturating_add(ev.size - 1) >> RUN_LINE_SHIFT,
                );
            }
            events += 1;
            if let Err(e) = sink.event(ev) {
                result = Err(e);
                break;
            }
        }
        self.pos = i;
        self.streams = streams;
        *self.ring = ring;
        self.events += events;
        result
    }

    /// Version 5 has no records: its blocks are read by [`ColumnReader`].
    #[cold]
    fn columns_error(&self) -> SimError {
        self.error(
            HEADER_LEN,
            "a version 5 trace is read by its blocks (`into_columns`, or a TraceReader)".into(),
        )
    }

    /// The end record, or a reserved tag.
    #[cold]
    fn special_record(&mut self, tag: u8) -> Result<Option<TraceEvent>, SimError> {
        let start = self.pos;
        if tag == RUN_TAG && self.version >= 3 {
            if self.run_end != NO_RUN {
                return Err(self.error(start, "a run record inside a run".into()));
            }
            let buf = &self.buf[..self.end];
            let header = if self.version >= 4 {
                run_header::<true>(buf, start)
            } else {
                run_header::<false>(buf, start)
            };
            let Some((fetches, data, _, body, body_end)) = header else {
                return Err(self.error(
                    start,
                    "a run record cut short, with a varint over 10 bytes, of no events or with \
                     slots not those of its streams"
                        .into(),
                ));
            };
            // Not skipped here: its records are read one by one.
            self.run_end = self.base + body_end as u64;
            self.run_start = self.streams;
            self.run_events = self.events + fetches + data;
            self.pos = body;
            return self.next_event();
        }
        if tag != END_TAG {
            return Err(self.error(start, format!("reserved tag {tag:#04x}")));
        }
        if self.run_end != NO_RUN {
            return Err(self.error(start, "the trace ends inside a run".into()));
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

    /// At or past the end of a run whose records were handed one by one: check that they
    /// were what its record said, and go back to the streams before them.
    #[cold]
    fn leave_run(&mut self) -> Result<(), SimError> {
        let at = self.base + self.pos as u64;
        if at < self.run_end {
            return Ok(());
        }
        if at > self.run_end || self.events != self.run_events {
            return Err(SimError::BinaryTrace {
                offset: self.run_end,
                message: "a run's records do not end where its run record says, or are \
                          not as many as it counts"
                    .into(),
            });
        }
        self.streams = self.run_start;
        self.run_end = NO_RUN;
        Ok(())
    }

    /// Move the unread tail to the front and read until `MAX_RECORD` bytes are buffered or
    /// the input ends.
    #[cold]
    fn refill(&mut self) -> Result<(), SimError> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        let want = MAX_RECORD.max(HEADER_LEN);
        read_until(
            &mut self.input,
            &mut self.buf,
            &mut self.end,
            want,
            &mut self.eof,
            self.base,
        )
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
