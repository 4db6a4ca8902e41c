//! Version 5 of the binary trace format: references in blocks, each stream's (instruction
//! fetches, data accesses) in columns of its own, so that a replay whose L1s see only
//! their own stream can take each stream apart from the other and reach the shared levels
//! in the trace's order only for the L1 misses (`machine::replay`, docs/traces.md).
//!
//! ```text
//! after the 16-byte header of every version (version 5), blocks:
//! block header, 7 u32 little-endian
//!   refs        references in the block, 1 to 4096; 0 marks the end: a u64 little-endian
//!               with the trace's references follows, and nothing after it
//!   groups      instruction groups, data groups
//!   lengths     bytes of the instruction heads, data heads, instruction details, data
//!               details
//! stream bits   (refs + 63) / 64 u64 little-endian: bit i (of word i / 64, bit i % 64) set
//!               if reference i of the block is a data access; the bits past refs are 0
//! heads         per stream, one per group: a stream's references in a row that lie in the
//!               64-byte line (the group's line) its first one ends in, sizes clamped to 64;
//!               the first one anywhere. A varint, zigzag(the first one's first line - the
//!               previous head's, 0 for the first head of the block) << 2 | straddles << 1
//!               | more, where straddles is 1 if the first one ends in the next line (its
//!               line is then the group's line - 1); if more, a second varint: references
//!               in the group - 2
//! details       per stream, every reference in order: sequential, one byte below 0x80,
//!               size << 2 | kind (size 1..=31): it starts where the stream's reference
//!               before it in the block ended; other: 0x80 | its offset in its first line,
//!               then a varint, size << 2 | kind
//! ```
//!
//! Kinds are those of the earlier versions (0 fetch, 1 load, 2 store, 3 modify); a fetch's
//! is always 0 and a data access's never. A group's references after the first are hits
//! on the most recent line of their L1 set on any LRU L1 of 64-byte lines, changing
//! nothing, and the first touches one line or two: a replay on such a machine reads only
//! the heads.

use std::io::Read;

use super::binary::{get_varint, kind_code, put_varint, read_until, unzigzag, KINDS};
use super::{TraceEvent, TraceKind};
use crate::error::SimError;

/// References in a full block.
pub const BLOCK_REFS: usize = 4096;
/// Groups are of references in one line of this many bytes (log2).
pub const GROUP_LINE_SHIFT: u32 = 6;
const HEADER_WORDS: usize = 7;
const HEADER_LEN: usize = 4 * HEADER_WORDS;
/// Bytes read from the input at a time.
const READ_SIZE: usize = 1 << 20;
/// A detail byte below this is a sequential reference.
const OTHER: u8 = 0x80;
const SEQUENTIAL_MAX_SIZE: u64 = 31;

#[inline(always)]
fn stream_of(kind: TraceKind) -> usize {
    (kind != TraceKind::Instr) as usize
}

/// The line a group's references lie in: where an access ends, its size clamped to a line.
#[inline(always)]
pub fn group_line(addr: u64, size: u64) -> u64 {
    addr.saturating_add(size.min(1 << GROUP_LINE_SHIFT) - 1) >> GROUP_LINE_SHIFT
}

/// Gathers events into blocks and encodes them.
pub(super) struct ColumnBlocks {
    events: Vec<TraceEvent>,
    total: u64,
    heads: [Vec<u8>; 2],
    details: [Vec<u8>; 2],
}

impl ColumnBlocks {
    pub(super) fn new() -> Self {
        ColumnBlocks {
            events: Vec::with_capacity(BLOCK_REFS),
            total: 0,
            heads: Default::default(),
            details: Default::default(),
        }
    }

    /// Add `ev`; a full block is appended to `out`.
    pub(super) fn push(&mut self, ev: &TraceEvent, out: &mut Vec<u8>) {
        self.events.push(*ev);
        self.total += 1;
        if self.events.len() == BLOCK_REFS {
            self.flush(out);
        }
    }

    /// Append the block gathered so far (if any) to `out`.
    fn flush(&mut self, out: &mut Vec<u8>) {
        if self.events.is_empty() {
            return;
        }
        let mut bits = vec![0u64; self.events.len().div_ceil(64)];
        let mut groups = [0u32; 2];
        // Per stream: the open group's line, the end of its last reference, and each
        // group's first line, whether its first reference straddles, and its references.
        let mut line = [u64::MAX; 2];
        let mut end = [0u64; 2];
        let mut open: [Vec<(u64, bool, u64)>; 2] = Default::default();
        for h in &mut self.heads {
            h.clear();
        }
        for d in &mut self.details {
            d.clear();
        }
        for (i, ev) in self.events.iter().enumerate() {
            let s = stream_of(ev.kind);
            bits[i / 64] |= (s as u64) << (i % 64);
            let first = ev.addr >> GROUP_LINE_SHIFT;
            let last = group_line(ev.addr, ev.size);
            if first == line[s] && last == first {
                open[s].last_mut().expect("an open group").2 += 1;
            } else {
                groups[s] += 1;
                open[s].push((first, last != first, 1));
                line[s] = last;
            }
            let kind = kind_code(ev.kind) as u64;
            let d = &mut self.details[s];
            if ev.addr == end[s] && ev.size <= SEQUENTIAL_MAX_SIZE {
                d.push((ev.size << 2 | kind) as u8);
            } else {
                d.push(OTHER | (ev.addr & ((1 << GROUP_LINE_SHIFT) - 1)) as u8);
                put_varint(d, ev.size << 2 | kind);
            }
            end[s] = ev.addr.wrapping_add(ev.size);
        }
        for (s, open) in open.iter().enumerate() {
            let mut prev = 0u64;
            for &(first, straddles, n) in open {
                let delta = first.wrapping_sub(prev) as i64;
                prev = first;
                let zigzag = ((delta << 1) ^ (delta >> 63)) as u64;
                let h = &mut self.heads[s];
                put_varint(h, zigzag << 2 | (straddles as u64) << 1 | (n > 1) as u64);
                if n > 1 {
                    put_varint(h, n - 2);
                }
            }
        }
        let words = [
            self.events.len() as u32,
            groups[0],
            groups[1],
            self.heads[0].len() as u32,
            self.heads[1].len() as u32,
            self.details[0].len() as u32,
            self.details[1].len() as u32,
        ];
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for w in bits {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for part in self.heads.iter().chain(&self.details) {
            out.extend_from_slice(part);
        }
        self.events.clear();
    }

    /// Append the last block and the end to `out`.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) {
        self.flush(out);
        out.extend_from_slice(&[0; HEADER_LEN]);
        out.extend_from_slice(&self.total.to_le_bytes());
    }
}

/// One block of a version 5 trace, as read.
pub struct Block<'a> {
    /// Where it starts in the trace.
    pub offset: u64,
    /// References in the block.
    pub refs: usize,
    /// Groups per stream (0 instruction fetches, 1 data accesses).
    pub groups: [usize; 2],
    bits: &'a [u8],
    heads: [&'a [u8]; 2],
    details: [&'a [u8]; 2],
}

/// A group: its first reference's first line, whether that reference ends in the next
/// line (the group's line), and how many references the group holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub line: u64,
    pub straddles: bool,
    pub count: u64,
}

impl Head {
    /// The line the group's references after the first lie in.
    #[inline(always)]
    pub fn group_line(&self) -> u64 {
        self.line + self.straddles as u64
    }
}

/// Reads one stream's heads of a block in order.
pub struct Heads<'a> {
    bytes: &'a [u8],
    pos: usize,
    prev: u64,
}

impl Heads<'_> {
    /// The next head; `None` if the bytes end inside it.
    #[inline(always)]
    pub fn read(&mut self) -> Option<Head> {
        let word = get_varint(self.bytes, &mut self.pos)?;
        let count = if word & 1 != 0 {
            get_varint(self.bytes, &mut self.pos)?.checked_add(2)?
        } else {
            1
        };
        self.prev = self.prev.wrapping_add(unzigzag(word >> 2));
        Some(Head {
            line: self.prev,
            straddles: word & 2 != 0,
            count,
        })
    }

    /// Whether every head was read and nothing follows.
    pub fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }
}

impl<'a> Block<'a> {
    /// The heads of `stream`'s groups.
    pub fn heads(&self, stream: usize) -> Heads<'a> {
        Heads {
            bytes: self.heads[stream],
            pos: 0,
            prev: 0,
        }
    }

    /// Word `w` of the stream bits (bit i set: reference 64 w + i is a data access).
    #[inline(always)]
    pub fn bits(&self, w: usize) -> u64 {
        u64::from_le_bytes(self.bits[8 * w..8 * w + 8].try_into().expect("8 bytes"))
    }

    /// Every reference in the trace's order; `Err` with what is wrong.
    fn expand(&self, out: &mut Vec<TraceEvent>) -> Result<(), String> {
        let mut heads = [self.heads(0), self.heads(1)];
        let mut detail_pos = [0usize; 2];
        // Per stream: references left in the open group, its line, the last one's end.
        let mut left = [0u64; 2];
        let mut line = [0u64; 2];
        let mut end = [0u64; 2];
        for i in 0..self.refs {
            let s = (self.bits(i / 64) >> (i % 64) & 1) as usize;
            // The line this reference starts in, and the one it ends in.
            let (first, last) = if left[s] == 0 {
                let h = heads[s]
                    .read()
                    .ok_or_else(|| format!("stream {s}: a head cut short"))?;
                left[s] = h.count - 1;
                line[s] = h.group_line();
                (h.line, line[s])
            } else {
                left[s] -= 1;
                (line[s], line[s])
            };
            let ev = detail(self.details[s], &mut detail_pos[s], s, first, last, end[s])?;
            end[s] = ev.addr.wrapping_add(ev.size);
            out.push(ev);
        }
        for s in 0..2 {
            if left[s] != 0 || !heads[s].done() || detail_pos[s] != self.details[s].len() {
                return Err(format!(
                    "stream {s}: its groups do not match the stream bits"
                ));
            }
        }
        Ok(())
    }
}

/// The reference of stream `s` whose detail is at `*p` in `details`: it starts in line
/// `first` and ends in `last`, and the stream's reference before it ended at `end`.
#[inline(always)]
fn detail(
    details: &[u8],
    p: &mut usize,
    s: usize,
    first: u64,
    last: u64,
    end: u64,
) -> Result<TraceEvent, String> {
    let &b = details
        .get(*p)
        .ok_or_else(|| format!("stream {s}: details cut short"))?;
    *p += 1;
    let (addr, size_kind) = if b < OTHER {
        (end, b as u64)
    } else {
        let sk = get_varint(details, p).ok_or_else(|| format!("stream {s}: a detail cut short"))?;
        (first << GROUP_LINE_SHIFT | (b & !OTHER) as u64, sk)
    };
    let (size, kind) = (size_kind >> 2, (size_kind & 3) as usize);
    if size == 0 || (kind != 0) as usize != s {
        return Err(format!("stream {s}: a malformed detail"));
    }
    if addr >> GROUP_LINE_SHIFT != first || group_line(addr, size) != last {
        return Err(format!("stream {s}: a reference outside its group's lines"));
    }
    Ok(TraceEvent {
        kind: KINDS[kind],
        addr,
        size,
    })
}

/// Where a block fed in runs stands: the next reference, and per stream the references
/// left in its open group, that group's line, the end of its last reference, and where
/// its next detail and next head are (and the head before it).
#[derive(Clone, Copy, Default)]
struct Cursor {
    i: usize,
    left: [u64; 2],
    line: [u64; 2],
    end: [u64; 2],
    detail: [usize; 2],
    head: [usize; 2],
    head_prev: [u64; 2],
}

/// How feeding a block in runs stopped.
enum Stop {
    /// The sink wants no more (the block is left part fed).
    Wants,
    /// The block is fed.
    BlockDone,
    /// The sink did not take the run from this reference on: the rest goes one by one.
    Refused(usize),
    /// The trace is over.
    End,
}

/// Reads a version 5 trace (after its header) block by block.
pub struct ColumnReader<R> {
    input: R,
    /// Bytes read are `buf[pos..end]`.
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    /// Offset in the input of `buf[0]`.
    base: u64,
    /// The events of a block read one by one, and the next of them to hand out.
    pending: Vec<TraceEvent>,
    next: usize,
    events: u64,
    ended: bool,
    /// `feed` stops at the end of a block read one by one (its caller may take the next
    /// whole).
    stop_at_block_end: bool,
    /// The references and bytes of the block `peek_block` gave last.
    peeked: Option<(usize, usize)>,
    /// A block part fed in runs (`feed`), still at `pos`.
    cursor: Option<Cursor>,
    /// `feed` offers its sink runs (see `offer_runs`).
    runs: bool,
}

impl<R: Read> ColumnReader<R> {
    /// A reader of `input` whose first `buffered` bytes were already read, at input offset
    /// `offset` (just after the header).
    pub fn new(input: R, buffered: Vec<u8>, offset: u64) -> Self {
        ColumnReader {
            input,
            end: buffered.len(),
            buf: buffered,
            pos: 0,
            eof: false,
            base: offset,
            pending: Vec::with_capacity(BLOCK_REFS),
            next: 0,
            events: 0,
            ended: false,
            stop_at_block_end: false,
            peeked: None,
            cursor: None,
            runs: false,
        }
    }

    /// Whether `feed` offers its sink the references that repeat their stream's last
    /// 64-byte line as runs (`EventSink::run`): for a sink that takes them, as a replay on
    /// L1s of such lines does; for any other, reading each block one by one is cheaper.
    pub fn offer_runs(&mut self, offer: bool) {
        self.runs = offer;
    }

    /// Whether `feed` stops at the end of each block it reads one by one.
    pub fn stop_at_block_end(&mut self, stop: bool) {
        self.stop_at_block_end = stop;
    }

    /// Events read so far (those of blocks taken whole included).
    pub fn events(&self) -> u64 {
        self.events
    }

    fn error(&self, at: usize, message: String) -> SimError {
        SimError::BinaryTrace {
            offset: self.base + at as u64,
            message,
        }
    }

    /// Make the buffer hold at least `n` bytes from `pos` if the input has them.
    fn fill(&mut self, n: usize) -> Result<(), SimError> {
        if self.end - self.pos >= n || self.eof {
            return Ok(());
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        // Zeroed once, read into many times.
        if self.buf.len() < n.max(READ_SIZE) {
            self.buf.resize(n.max(READ_SIZE), 0);
        }
        read_until(
            &mut self.input,
            &mut self.buf,
            &mut self.end,
            n,
            &mut self.eof,
            self.base,
        )
    }

    /// The next block, left in place (`take_block` or `expand_block` moves past it); `None`
    /// at the end of the trace. Only when no block is being read one by one.
    pub fn peek_block(&mut self) -> Result<Option<Block<'_>>, SimError> {
        debug_assert!(self.next == self.pending.len() && self.cursor.is_none());
        if self.ended {
            return Ok(None);
        }
        self.fill(HEADER_LEN)?;
        let at = self.pos;
        let Some(header) = self.buf[..self.end].get(at..at + HEADER_LEN) else {
            return Err(self.error(
                at,
                format!(
                    "the trace stops after {} events without its end (did its writer stop early?)",
                    self.events
                ),
            ));
        };
        let w: [usize; HEADER_WORDS] = std::array::from_fn(|k| {
            u32::from_le_bytes(header[4 * k..4 * k + 4].try_into().expect("4 bytes")) as usize
        });
        let refs = w[0];
        if refs == 0 {
            return self.end().map(|()| None);
        }
        if refs > BLOCK_REFS || w[1] + w[2] > refs || (w[1] == 0) != (w[3] == 0) {
            return Err(self.error(at, format!("a block header that makes no sense: {w:?}")));
        }
        let bits = refs.div_ceil(64) * 8;
        let len = HEADER_LEN + bits + w[3..7].iter().sum::<usize>();
        // Filling may move the buffered bytes: the block starts at `pos` still.
        self.fill(len)?;
        let at = self.pos;
        let Some(bytes) = self.buf[..self.end].get(at..at + len) else {
            return Err(self.error(at, "a block cut short".into()));
        };
        let last = u64::from_le_bytes(bytes[HEADER_LEN + bits - 8..][..8].try_into().expect("8"));
        if !refs.is_multiple_of(64) && last >> (refs % 64) != 0 {
            return Err(self.error(at, "stream bits set past the block's references".into()));
        }
        let mut cut = [0; 5];
        cut[0] = HEADER_LEN + bits;
        for k in 0..4 {
            cut[k + 1] = cut[k] + w[3 + k];
        }
        self.peeked = Some((refs, len));
        Ok(Some(Block {
            offset: self.base + at as u64,
            refs,
            groups: [w[1], w[2]],
            bits: &bytes[HEADER_LEN..cut[0]],
            heads: [&bytes[cut[0]..cut[1]], &bytes[cut[1]..cut[2]]],
            details: [&bytes[cut[2]..cut[3]], &bytes[cut[3]..cut[4]]],
        }))
    }

    /// Move past the block `peek_block` gave last, taken whole.
    pub fn take_block(&mut self) {
        let (refs, bytes) = self.peeked.take().expect("a block peeked at");
        self.pos += bytes;
        self.events += refs as u64;
    }

    /// The end: the count of references must match and nothing may follow.
    fn end(&mut self) -> Result<(), SimError> {
        self.fill(HEADER_LEN + 8 + 1)?;
        let at = self.pos;
        let Some(count) = self.buf[..self.end].get(at + HEADER_LEN..at + HEADER_LEN + 8) else {
            return Err(self.error(at, "the end cut short".into()));
        };
        let count = u64::from_le_bytes(count.try_into().expect("8 bytes"));
        if count != self.events {
            return Err(self.error(
                at,
                format!(
                    "the end counts {count} events but {} were read",
                    self.events
                ),
            ));
        }
        if self.end > at + HEADER_LEN + 8 {
            return Err(self.error(at + HEADER_LEN + 8, "bytes after the end".into()));
        }
        self.ended = true;
        Ok(())
    }

    /// Read the next block's events into the pending ones; false at the end.
    fn expand_block(&mut self) -> Result<bool, SimError> {
        let mut pending = std::mem::take(&mut self.pending);
        pending.clear();
        self.next = 0;
        let block = match self.peek_block() {
            Ok(Some(b)) => b,
            Ok(None) => {
                self.pending = pending;
                self.next = 0;
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let (refs, len) = (block.refs, block.bytes());
        let expanded = block.expand(&mut pending);
        let at = self.pos;
        self.pending = pending;
        self.next = 0;
        if let Err(message) = expanded {
            self.pending.clear();
            return Err(self.error(at, message));
        }
        self.pos += len;
        Ok(refs > 0)
    }

    /// The next event, `None` at the end of the trace.
    pub fn next_event(&mut self) -> Result<Option<TraceEvent>, SimError> {
        if let Some(c) = self.cursor.take() {
            self.read_one_by_one_from(c.i)?;
        }
        if self.next == self.pending.len() && !self.expand_block()? {
            return Ok(None);
        }
        self.next += 1;
        self.events += 1;
        Ok(Some(self.pending[self.next - 1]))
    }

    /// Whether a block is part read (its events one by one, or in runs).
    pub fn in_block(&self) -> bool {
        self.next < self.pending.len() || self.cursor.is_some()
    }

    /// The block at `pos` read into the pending events, to be handed out from reference
    /// `from` on (those before it were handed out already).
    fn read_one_by_one_from(&mut self, from: usize) -> Result<(), SimError> {
        self.expand_block()?;
        self.next = from;
        Ok(())
    }

    /// Hand events to `sink` while it wants more; false when the trace is over. A group's
    /// references after its first repeat the line their stream touched last: those between
    /// two first ones are offered to the sink as a run (`EventSink::run`), and handed one
    /// by one only if it does not take them.
    #[inline(always)]
    pub fn feed<S: super::EventSink>(&mut self, sink: &mut S) -> Result<bool, SimError> {
        loop {
            while self.next < self.pending.len() {
                if !sink.wants() {
                    return Ok(true);
                }
                let ev = self.pending[self.next];
                self.next += 1;
                self.events += 1;
                sink.event(ev)?;
            }
            if !self.pending.is_empty() {
                // A block handed out one by one has ended.
                self.pending.clear();
                self.next = 0;
                if self.stop_at_block_end {
                    return Ok(true);
                }
            }
            if !sink.wants() {
                return Ok(true);
            }
            if !self.runs && self.cursor.is_none() {
                if !self.expand_block()? {
                    return Ok(false);
                }
                continue;
            }
            match self.feed_runs(sink)? {
                Stop::Wants => return Ok(true),
                Stop::BlockDone if self.stop_at_block_end => return Ok(true),
                Stop::BlockDone => {}
                Stop::Refused(from) => self.read_one_by_one_from(from)?,
                Stop::End => return Ok(false),
            }
        }
    }

    /// Feed the block at `pos` (from where an earlier call stopped) in runs: each group's
    /// first reference as an event, the references between them as runs.
    #[inline(always)]
    fn feed_runs<S: super::EventSink>(&mut self, sink: &mut S) -> Result<Stop, SimError> {
        self.pending.clear();
        self.next = 0;
        let mut c = self.cursor.take().unwrap_or_default();
        let Some(block) = self.peek_block()? else {
            return Ok(Stop::End);
        };
        let (refs, bytes, offset) = (block.refs, block.bytes(), block.offset);
        let mut run = [0u64; 2];
        let mut run_from = c.i;
        let mut taken = 0u64;
        let mut failed = None;
        let stop = loop {
            if c.i == refs {
                if run != [0; 2] && !(sink.wants() && sink.run(run[0], run[1])) {
                    break Stop::Refused(run_from);
                }
                taken += run[0] + run[1];
                break Stop::BlockDone;
            }
            let s = (block.bits(c.i / 64) >> (c.i % 64) & 1) as usize;
            if c.left[s] > 0 {
                // Its event is not needed, but its end is (the next may start there).
                let line = c.line[s];
                match detail(block.details[s], &mut c.detail[s], s, line, line, c.end[s]) {
                    Ok(ev) => c.end[s] = ev.addr.wrapping_add(ev.size),
                    Err(m) => {
                        failed = Some(m);
                        break Stop::Wants;
                    }
                }
                c.left[s] -= 1;
                run[s] += 1;
                c.i += 1;
                continue;
            }
            if run != [0; 2] {
                if !(sink.wants() && sink.run(run[0], run[1])) {
                    break Stop::Refused(run_from);
                }
                taken += run[0] + run[1];
                run = [0; 2];
            }
            if !sink.wants() {
                break Stop::Wants;
            }
            let mut heads = Heads {
                bytes: block.heads[s],
                pos: c.head[s],
                prev: c.head_prev[s],
            };
            let Some(h) = heads.read() else {
                failed = Some(format!("stream {s}: a head cut short"));
                break Stop::Wants;
            };
            (c.head[s], c.head_prev[s]) = (heads.pos, heads.prev);
            let ev = match detail(
                block.details[s],
                &mut c.detail[s],
                s,
                h.line,
                h.group_line(),
                c.end[s],
            ) {
                Ok(ev) => ev,
                Err(m) => {
                    failed = Some(m);
                    break Stop::Wants;
                }
            };
            c.left[s] = h.count - 1;
            c.line[s] = h.group_line();
            c.end[s] = ev.addr.wrapping_add(ev.size);
            c.i += 1;
            run_from = c.i;
            taken += 1;
            if let Err(e) = sink.event(ev) {
                self.events += taken;
                self.cursor = Some(c);
                return Err(e);
            }
        };
        if let Some(message) = failed {
            return Err(self.error(self.pos, message));
        }
        if let Stop::BlockDone = stop {
            let whole = c.left == [0; 2]
                && c.head.iter().zip(block.heads).all(|(&p, h)| p == h.len())
                && c.detail
                    .iter()
                    .zip(block.details)
                    .all(|(&p, d)| p == d.len());
            if !whole {
                return Err(SimError::BinaryTrace {
                    offset,
                    message: "a block: its groups do not match its stream bits".into(),
                });
            }
        }
        self.events += taken;
        match stop {
            Stop::BlockDone => {
                self.pos += bytes;
                self.peeked = None;
            }
            Stop::Wants => self.cursor = Some(c),
            // `read_one_by_one_from` reads the block again.
            Stop::Refused(_) | Stop::End => self.peeked = None,
        }
        Ok(stop)
    }
}

impl Block<'_> {
    /// Bytes the block takes in the trace, its header included.
    fn bytes(&self) -> usize {
        HEADER_LEN
            + self.bits.len()
            + self
                .heads
                .iter()
                .chain(&self.details)
                .map(|p| p.len())
                .sum::<usize>()
    }
}

#[cfg(test)]
#[path = "columns_tests.rs"]
mod tests;
