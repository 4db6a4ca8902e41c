//! Tests of version 5 (`columns.rs`): the documented bytes, round trips over blocks, the
//! heads a replay of whole blocks reads, and damage.

use super::*;
use crate::trace::binary::MAGIC;
use crate::trace::{BinaryReader, BinaryWriter};

fn ev(kind: TraceKind, addr: u64, size: u64) -> TraceEvent {
    TraceEvent { kind, addr, size }
}

fn encode(events: &[TraceEvent]) -> Vec<u8> {
    let mut w = BinaryWriter::with_version(Vec::new(), 5).unwrap();
    for e in events {
        w.write(e).unwrap();
    }
    w.finish().unwrap()
}

fn reader(bytes: &[u8]) -> Result<ColumnReader<&[u8]>, SimError> {
    let r = BinaryReader::new(bytes)?;
    assert_eq!(r.version(), 5);
    Ok(r.into_columns())
}

fn decode(bytes: &[u8]) -> Result<Vec<TraceEvent>, SimError> {
    let mut r = reader(bytes)?;
    let mut got = Vec::new();
    while let Some(e) = r.next_event()? {
        got.push(e);
    }
    assert_eq!(r.next_event().unwrap(), None, "stays at the end");
    Ok(got)
}

/// Program-like events: straight-line fetches, fetches straddling lines, loads and stores
/// in runs, sizes up to 200 bytes, addresses near the top of the address space.
fn program(n: usize) -> Vec<TraceEvent> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut pc = 0x40_0000u64;
    let mut events = Vec::new();
    while events.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pc = if x.is_multiple_of(40) {
            0x40_0000 + (x >> 30) % 0x4000
        } else {
            pc + 1 + x % 9
        };
        events.push(ev(TraceKind::Instr, pc, 1 + (x >> 8) % 9));
        let kind = [TraceKind::Load, TraceKind::Store, TraceKind::Modify][(x >> 12) as usize % 3];
        let size = match (x >> 16) % 10 {
            0 => 1 + (x >> 20) % 200,
            1 => 32,
            _ => 1 << ((x >> 20) % 4),
        };
        let addr = match (x >> 24) % 5 {
            0 => u64::MAX - 4096 + (x >> 28) % 4000,
            1 => 0x7ff0_0000 + (x >> 28) % 4096,
            _ => 0x1000_0000 + (events.len() as u64 * 12) % (1 << 20),
        };
        for k in 0..1 + (x >> 40) % 3 {
            events.push(ev(kind, addr.wrapping_add(k * size), size));
        }
    }
    events
}

#[test]
fn the_bytes_of_version_5_are_the_documented_ones() {
    let bytes = encode(&[
        ev(TraceKind::Instr, 0x40_0000, 4),
        ev(TraceKind::Instr, 0x40_0004, 4),
        ev(TraceKind::Load, 0x1000, 8),
        ev(TraceKind::Store, 0x1008, 8),
        // Ends in the next line: a group of its own, straddling.
        ev(TraceKind::Instr, 0x40_003e, 4),
        ev(TraceKind::Modify, 0x2000, 64),
    ]);
    let words = |w: [u32; 7]| w.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    let want = [
        &MAGIC[..],
        &5u32.to_le_bytes(),
        &[0; 4],
        // 6 references, 2 groups of each stream; the lengths of the four columns.
        &words([6, 2, 2, 5, 5, 5, 6]),
        // References 2, 3 and 5 are data accesses.
        &0b10_1100u64.to_le_bytes(),
        // Fetch heads: line 0x10000 (zigzag 0x20000) << 2 | more, then 2 - 2; then the
        // same line again, straddling, alone.
        &[0x81, 0x80, 0x20, 0x00, 0x02],
        // Data heads: line 0x40 (zigzag 0x80) << 2 | more, 2 - 2; then 0x40 lines on, alone.
        &[0x81, 0x04, 0x00, 0x80, 0x04],
        // Fetch details: offset 0 and size 4 << 2; sequential 4 << 2; offset 0x3e, 4 << 2.
        &[0x80, 0x10, 0x10, 0xbe, 0x10],
        // Data details: offset 0, 8 << 2 | load; sequential 8 << 2 | store; offset 0 and
        // 64 << 2 | modify as a varint.
        &[0x80, 0x21, 0x22, 0x80, 0x83, 0x02],
        // The end and the count.
        &[0; 28],
        &6u64.to_le_bytes(),
    ]
    .concat();
    assert_eq!(bytes, want);
    let mut r = reader(&bytes).unwrap();
    let block = r.peek_block().unwrap().unwrap();
    let mut fetch_heads = block.heads(0);
    let head = |line, straddles, count| Head {
        line,
        straddles,
        count,
    };
    assert_eq!(fetch_heads.read(), Some(head(0x10000, false, 2)));
    assert_eq!(fetch_heads.read(), Some(head(0x10000, true, 1)));
    assert!(fetch_heads.done());
    let mut data_heads = block.heads(1);
    assert_eq!(data_heads.read(), Some(head(0x40, false, 2)));
    assert_eq!(data_heads.read(), Some(head(0x80, false, 1)));
    assert!(data_heads.done());
}

#[test]
fn events_round_trip_over_many_blocks_and_heads_stand_for_them() {
    for n in [0, 1, BLOCK_REFS - 1, BLOCK_REFS, 3 * BLOCK_REFS + 17] {
        let events = program(n)[..n].to_vec();
        let bytes = encode(&events);
        assert_eq!(decode(&bytes).unwrap(), events, "{n} events");
        // Each block's heads stand for its references: a group's references after the
        // first lie in its line, and they are as many as the stream bits say.
        let mut r = reader(&bytes).unwrap();
        let mut at = 0;
        while let Some(block) = r.peek_block().unwrap() {
            let refs = &events[at..at + block.refs];
            for s in 0..2 {
                let mut mine = refs.iter().filter(|e| stream_of(e.kind) == s);
                let mut heads = block.heads(s);
                for _ in 0..block.groups[s] {
                    let h = heads.read().unwrap();
                    let first = mine.next().unwrap();
                    assert_eq!(h.line, first.addr >> GROUP_LINE_SHIFT);
                    assert_eq!(h.group_line(), group_line(first.addr, first.size));
                    for e in mine.by_ref().take(h.count as usize - 1) {
                        assert_eq!(e.addr >> GROUP_LINE_SHIFT, h.group_line());
                        assert_eq!(group_line(e.addr, e.size), h.group_line());
                    }
                }
                assert!(heads.done() && mine.next().is_none());
            }
            at += block.refs;
            r.take_block();
        }
        assert_eq!((at, r.events()), (n, n as u64));
    }
}

#[test]
fn damage_is_an_error_with_its_offset_never_a_panic() {
    let bytes = encode(&program(300)[..300]);
    // Cut anywhere after the header: an error (a trace without its end is not complete).
    for cut in 16..bytes.len() {
        assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let block_at = 16;
    let refs_at = block_at;
    let wrong = |at: usize, value: &[u8], want: &str| {
        let mut b = bytes.clone();
        b[at..at + value.len()].copy_from_slice(value);
        let e = decode(&b).expect_err(want).to_string();
        assert!(e.contains(want), "want {want:?}, got {e:?}");
    };
    wrong(
        refs_at,
        &5000u32.to_le_bytes(),
        "byte 16: a block header that makes no sense",
    );
    // Stream bits past the block's references (300 of 320 bits used).
    let bits_end = block_at + 28 + 40;
    wrong(
        bits_end - 1,
        &[0x80],
        "byte 16: stream bits set past the block's references",
    );
    // The end's count.
    let end = bytes.len() - 8;
    wrong(
        end,
        &301u64.to_le_bytes(),
        "the end counts 301 events but 300 were read",
    );
    let mut longer = bytes.clone();
    longer.push(0);
    let e = decode(&longer).unwrap_err().to_string();
    assert!(e.contains("bytes after the end"), "{e}");
    // Any byte of the columns changed: an error or other events, never a panic.
    for at in bits_end..end - 28 {
        let mut b = bytes.clone();
        b[at] ^= 0x55;
        let _ = decode(&b);
    }
}
