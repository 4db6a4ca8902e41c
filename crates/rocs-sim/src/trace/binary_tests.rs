//! Tests of the binary trace format (`binary.rs`): the documented bytes of every version,
//! round trips, batches, runs, and every kind of damage.

use super::*;

fn ev(kind: TraceKind, addr: u64, size: u64) -> TraceEvent {
    TraceEvent { kind, addr, size }
}

fn encode_version(events: &[TraceEvent], version: u32) -> Vec<u8> {
    let mut w = BinaryWriter::with_version(Vec::new(), version).unwrap();
    for e in events {
        w.write(e).unwrap();
    }
    w.finish().unwrap()
}

/// Version 4, the last of records (these tests are of versions 1 to 4; version 5's blocks
/// are tested in `columns_tests.rs`).
fn encode(events: &[TraceEvent]) -> Vec<u8> {
    encode_version(events, 4)
}

fn decode(bytes: &[u8]) -> Result<Vec<TraceEvent>, SimError> {
    let r = BinaryReader::new(bytes)?;
    let mut got = Vec::new();
    if r.version() >= 5 {
        let mut r = r.into_columns();
        while let Some(e) = r.next_event()? {
            got.push(e);
        }
        assert_eq!(r.next_event().unwrap(), None, "stays at the end");
        return Ok(got);
    }
    let mut r = r;
    while let Some(e) = r.next_event()? {
        got.push(e);
    }
    assert_eq!(r.next_event().unwrap(), None, "stays at the end");
    Ok(got)
}

#[test]
fn the_bytes_of_version_1_are_the_documented_ones() {
    let bytes = encode_version(
        &[
            ev(TraceKind::Instr, 0x400000, 4),
            ev(TraceKind::Load, 0x1000, 8),
            ev(TraceKind::Load, 0xff8, 8),
            ev(TraceKind::Modify, 0x1000, 64),
        ],
        1,
    );
    let mut want = b"\x89ROCSTR\n\x01\0\0\0\0\0\0\0".to_vec();
    // I, size 4: tag 0 | 4 << 2; delta +0x400000 zigzag 0x800000 = varint 80 80 80 04.
    want.extend([0x10, 0x80, 0x80, 0x80, 0x04]);
    // L, size 8: tag 1 | 8 << 2; data stream delta +0x1000, zigzag 0x2000 = 80 40.
    want.extend([0x21, 0x80, 0x40]);
    // L, delta -8: zigzag 15.
    want.extend([0x21, 0x0f]);
    // M, size 64 does not fit the tag: code 63, size varint 64, delta +8 zigzag 16.
    want.extend([0xff, 0x40, 0x10]);
    // End record: 4 events.
    want.extend([0x00, 0x04]);
    assert_eq!(bytes, want);
    assert_eq!(BinaryReader::new(&bytes[..]).unwrap().version(), 1);
}

#[test]
fn the_bytes_of_version_2_are_the_documented_ones() {
    let bytes = encode_version(
        &[
            ev(TraceKind::Instr, 0x400000, 4),
            ev(TraceKind::Instr, 0x400004, 3),
            ev(TraceKind::Load, 0x1000, 8),
            ev(TraceKind::Load, 0x1008, 8),
            ev(TraceKind::Store, 0x1000, 8),
            ev(TraceKind::Modify, 0x1000, 64),
            ev(TraceKind::Store, 0x1040, 32),
        ],
        2,
    );
    let mut want = b"\x89ROCSTR\n\x02\0\0\0\0\0\0\0".to_vec();
    // I, size 4, not at the stream's end (0): tag 0 | 4 << 2; delta +0x400000 zigzag
    // 0x800000 = varint 80 80 80 04.
    want.extend([0x10, 0x80, 0x80, 0x80, 0x04]);
    // I at the end of the last fetch (0x400004), size 3: sequential, 0x80 | 0 | 3 << 2.
    want.push(0x8c);
    // L, size 8: tag 1 | 8 << 2; data stream delta +0x1000, zigzag 0x2000 = 80 40.
    want.extend([0x21, 0x80, 0x40]);
    // L at the end of the last data access: sequential, 0x80 | 1 | 8 << 2.
    want.push(0xa1);
    // S back to 0x1000: tag 2 | 8 << 2, delta -8 from the last address, zigzag 15.
    want.extend([0x22, 0x0f]);
    // M, size 64 over 30: code 31, size varint 64, delta 0.
    want.extend([0x7f, 0x40, 0x00]);
    // S at the stream's end but 32 bytes, too large for a sequential record: code 31,
    // size 32, delta +0x40 zigzag 0x80 = 80 01.
    want.extend([0x7e, 0x20, 0x80, 0x01]);
    // End record: 7 events.
    want.extend([0x00, 0x07]);
    assert_eq!(bytes, want);
    assert_eq!(BinaryReader::new(&bytes[..]).unwrap().version(), 2);
}

/// The events of the documented version 3 trace.
fn version_3_example() -> Vec<TraceEvent> {
    vec![
        ev(TraceKind::Instr, 0x400000, 4),
        ev(TraceKind::Load, 0x1000, 8),
        ev(TraceKind::Instr, 0x400004, 4),
        ev(TraceKind::Load, 0x1008, 8),
        ev(TraceKind::Instr, 0x400008, 4),
        ev(TraceKind::Instr, 0x400040, 4),
        ev(TraceKind::Load, 0x1010, 8),
    ]
}

#[test]
fn the_bytes_of_version_3_are_the_documented_ones() {
    let bytes = encode_version(&version_3_example(), 3);
    let mut want = b"\x89ROCSTR\n\x03\0\0\0\0\0\0\0".to_vec();
    // I, size 4: as in version 2.
    want.extend([0x10, 0x80, 0x80, 0x80, 0x04]);
    // L, size 8, delta +0x1000.
    want.extend([0x21, 0x80, 0x40]);
    // The next three repeat their stream's last 64-byte line: a run record of 2 fetches
    // and 1 data access whose records take 3 bytes, then those records (each sequential).
    want.extend([0x01, 0x02, 0x01, 0x03, 0x90, 0xa1, 0x90]);
    // I at 0x400040, a new line: encoded from the fetch stream as it was before the run
    // (last fetch 0x400000..0x400004), delta +0x40, zigzag 0x80 = 80 01.
    want.extend([0x10, 0x80, 0x01]);
    // L at 0x1010 repeats its line, but alone: a plain record, from the data stream as
    // it was before the run (0x1000..0x1008), delta +0x10, zigzag 0x20.
    want.extend([0x21, 0x20]);
    // End record: 7 events.
    want.extend([0x00, 0x07]);
    assert_eq!(bytes, want);
    assert_eq!(BinaryReader::new(&bytes[..]).unwrap().version(), 3);
    assert_eq!(decode(&bytes).unwrap(), version_3_example());
}

/// The events of the documented version 4 trace.
fn version_4_example() -> Vec<TraceEvent> {
    vec![
        ev(TraceKind::Instr, 0x400000, 4),
        ev(TraceKind::Load, 0x1000, 8),
        ev(TraceKind::Load, 0x2000, 8),
        ev(TraceKind::Instr, 0x400004, 4),
        ev(TraceKind::Load, 0x1008, 8),
        ev(TraceKind::Load, 0x2008, 8),
        ev(TraceKind::Instr, 0x400040, 4),
    ]
}

#[test]
fn the_bytes_of_version_4_are_the_documented_ones() {
    let bytes = encode(&version_4_example());
    let mut want = b"\x89ROCSTR\n\x04\0\0\0\0\0\0\0".to_vec();
    // Three plain records (no ring lines yet, or new ones): I 0x400000, L 0x1000, L 0x2000
    // (delta +0x1000). The rings: fetches 0x10000; data 0x80 (slot 0), 0x40 (slot 1).
    want.extend([
        0x10, 0x80, 0x80, 0x80, 0x04, 0x21, 0x80, 0x40, 0x21, 0x80, 0x40,
    ]);
    // The next three lie in ring lines: a run record of 1 fetch and 2 data accesses, slots
    // 0x0301 (fetch slot 0; data slots 0 and 1, bits 8 and 9), 7 bytes of records: I
    // sequential; L 0x1008, delta -0xff8 from 0x2000 (zigzag 0x1fef = ef 3f); L 0x2008,
    // delta +0x1000.
    want.extend([0x01, 0x01, 0x02, 0x01, 0x03, 0x07]);
    want.extend([0x90, 0x21, 0xef, 0x3f, 0x21, 0x80, 0x40]);
    // I at 0x400040, a new line: from the fetch stream before the run, delta +0x40.
    want.extend([0x10, 0x80, 0x01]);
    want.extend([0x00, 0x07]);
    assert_eq!(bytes, want);
    assert_eq!(BinaryReader::new(&bytes[..]).unwrap().version(), 4);
    assert_eq!(decode(&bytes).unwrap(), version_4_example());
}

/// What a sink that takes every run whole sees: the events handed one by one, and the
/// runs (fetches, data accesses).
#[derive(Default)]
struct TakesRuns {
    events: Vec<TraceEvent>,
    runs: Vec<(u64, u64)>,
    /// Version 4: each run's lines, per stream.
    run_lines: Vec<[Vec<u64>; 2]>,
    /// Decline every run once `events` holds this many (to see the one-by-one path).
    decline_from: Option<usize>,
}

impl EventSink for TakesRuns {
    fn wants(&self) -> bool {
        true
    }

    fn event(&mut self, ev: TraceEvent) -> Result<(), SimError> {
        self.events.push(ev);
        Ok(())
    }

    fn run(&mut self, fetches: u64, data: u64) -> bool {
        if self.decline_from.is_some_and(|n| self.events.len() >= n) {
            return false;
        }
        self.runs.push((fetches, data));
        true
    }

    fn run_of_lines(&mut self, fetches: u64, data: u64, lines: &RunLines) -> bool {
        if !self.run(fetches, data) {
            return false;
        }
        self.run_lines.push([0, 1].map(|stream| {
            let (ring, used) = lines.lines(stream);
            (0..RING_LINES)
                .filter(|i| used >> i & 1 == 1)
                .map(|i| ring[i])
                .collect()
        }));
        true
    }
}

#[test]
fn a_sink_may_take_runs_whole() {
    // Runs are offered where a whole record of the longest kind is buffered after them
    // (not in the trace's last 21 bytes): more events after the example's.
    let mut all = version_3_example();
    all.extend((1..20).map(|i| ev(TraceKind::Store, i << 20, 8)));
    let bytes = encode_version(&all, 3);
    let mut sink = TakesRuns::default();
    let mut r = BinaryReader::new(&bytes[..]).unwrap();
    while r.feed(&mut sink).unwrap() {}
    assert_eq!(sink.runs, [(2, 1)]);
    let skipped = [2, 3, 4];
    let rest: Vec<_> = (0..all.len())
        .filter(|i| !skipped.contains(i))
        .map(|i| all[i])
        .collect();
    assert_eq!(sink.events, rest);
    assert_eq!(r.events(), all.len() as u64);
}

/// A program-like stream: fetches of straight-line code with jumps, and data accesses
/// mostly near the last, so that many references repeat their stream's last line.
fn program_events(n: u64) -> Vec<TraceEvent> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let (mut pc, mut data) = (0x40_0000u64, 0x7000_0000u64);
    let mut events = Vec::new();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pc = if x.is_multiple_of(13) {
            0x40_0000 + (x >> 30) % 0x4000
        } else {
            pc + 4
        };
        events.push(ev(TraceKind::Instr, pc, 1 + (x >> 8) % 6));
        if !x.is_multiple_of(3) {
            data = match (x >> 4) % 8 {
                0 => 0x7000_0000 + (x >> 20) % (1 << 20),
                1 => data.wrapping_sub(8),
                _ => data + 8,
            };
            let kind = KINDS[1 + (x >> 12) as usize % 3];
            // Now and then one larger than a line.
            let size = if x.is_multiple_of(97) { 100 } else { 8 };
            events.push(ev(kind, data, size));
        }
    }
    events
}

#[test]
fn runs_round_trip_and_skipped_runs_are_the_repeats_they_count() {
    let events = program_events(300_000);
    let bytes = encode_version(&events, 3);
    assert!(
        bytes.len() > 2 * BUF_SIZE,
        "several buffers: {}",
        bytes.len()
    );
    assert_eq!(decode(&bytes).unwrap(), events);
    for decline_from in [None, Some(events.len() / 3)] {
        let mut sink = TakesRuns {
            decline_from,
            ..TakesRuns::default()
        };
        let mut r = BinaryReader::new(&bytes[..]).unwrap();
        while r.feed(&mut sink).unwrap() {}
        assert!(sink.runs.len() > 10_000, "{}", sink.runs.len());
        // The events handed one by one are the trace's in order; those skipped between
        // them are, kind by kind, the runs' counts, and each repeats its stream's last line.
        let mut last = [u64::MAX; 2];
        let (mut handed, mut skipped) = (sink.events.iter().peekable(), [0u64; 2]);
        for e in &events {
            let s = stream(kind_code(e.kind));
            let first = e.addr >> RUN_LINE_SHIFT;
            let end = (e.addr + e.size.min(64) - 1) >> RUN_LINE_SHIFT;
            if handed.peek() == Some(&e) {
                handed.next();
            } else {
                assert!(first == last[s] && end == first, "{e:?} skipped");
                skipped[s] += 1;
            }
            last[s] = end;
        }
        assert_eq!(handed.next(), None);
        let counted = sink
            .runs
            .iter()
            .fold([0, 0], |[f, d], r| [f + r.0, d + r.1]);
        assert_eq!(skipped, counted);
        assert_eq!(r.events(), events.len() as u64);
    }
}

#[test]
fn version_4_runs_round_trip_and_skipped_runs_lie_in_their_lines() {
    let events = program_events(300_000);
    let bytes = encode(&events);
    assert!(bytes.len() > 2 * BUF_SIZE, "several buffers");
    assert_eq!(decode(&bytes).unwrap(), events);
    for decline_from in [None, Some(events.len() / 3)] {
        let mut sink = TakesRuns {
            decline_from,
            ..TakesRuns::default()
        };
        let mut r = BinaryReader::new(&bytes[..]).unwrap();
        while r.feed(&mut sink).unwrap() {}
        assert!(sink.runs.len() > 10_000, "{}", sink.runs.len());
        assert_eq!(r.events(), events.len() as u64);
        // The events skipped between those handed are, in order, the runs' references:
        // each run's counts kind by kind, each reference in one of its stream's lines
        // that the run names.
        let mut handed = sink.events.iter().peekable();
        let mut skipped = Vec::new();
        for e in &events {
            if handed.peek() == Some(&e) {
                handed.next();
            } else {
                skipped.push(*e);
            }
        }
        assert_eq!(handed.next(), None);
        let mut skipped = skipped.iter();
        for (&(fetches, data), lines) in sink.runs.iter().zip(&sink.run_lines) {
            let mut counts = [0; 2];
            for e in skipped.by_ref().take((fetches + data) as usize) {
                let s = stream(kind_code(e.kind));
                let first = e.addr >> RUN_LINE_SHIFT;
                let end = (e.addr + e.size.min(64) - 1) >> RUN_LINE_SHIFT;
                assert!(first == end && lines[s].contains(&first), "{e:?} skipped");
                counts[s] += 1;
            }
            assert_eq!(counts, [fetches, data]);
        }
        assert_eq!(skipped.next(), None);
        // Where every run is taken, the events handed are the plain records outside runs:
        // the runs' lines are among each stream's last RING_LINES of theirs.
        if decline_from.is_none() {
            let mut runs = sink.runs.iter().zip(&sink.run_lines);
            let mut ring = [[NO_LINE; RING_LINES]; 2];
            let mut handed = sink.events.iter().peekable();
            let mut left_in_run = 0;
            for e in &events {
                let s = stream(kind_code(e.kind));
                if handed.peek() == Some(&e) {
                    handed.next();
                    ring[s].rotate_right(1);
                    ring[s][0] = (e.addr + e.size.min(64) - 1) >> RUN_LINE_SHIFT;
                    continue;
                }
                if left_in_run == 0 {
                    let (&(fetches, data), lines) = runs.next().unwrap();
                    left_in_run = fetches + data;
                    for s in 0..2 {
                        assert!(lines[s].iter().all(|l| ring[s].contains(l)));
                    }
                }
                left_in_run -= 1;
            }
        }
    }
}

#[test]
fn round_trips_extreme_addresses_and_sizes() {
    let events = vec![
        ev(TraceKind::Instr, u64::MAX, 1),
        // Sequential across the wrap of the address space.
        ev(TraceKind::Instr, 0, 31),
        ev(TraceKind::Store, 0, 62),
        ev(TraceKind::Load, u64::MAX, 63),
        ev(TraceKind::Instr, 0, u64::MAX),
        ev(TraceKind::Modify, 1 << 63, 512),
        ev(TraceKind::Load, 0x7fff_ffff_ffff_ffff, 4),
        ev(TraceKind::Store, 0x8000_0000_0000_0003, 30),
    ];
    for version in [1, 2, 3, 4] {
        let bytes = encode_version(&events, version);
        assert_eq!(decode(&bytes).unwrap(), events, "version {version}");
    }
}

/// Events of every kind and many sizes, sequential ones among them, with the
/// pseudo-random addresses `addr(i)`.
fn mixed_events(n: u64, addr: impl Fn(u64) -> u64) -> Vec<TraceEvent> {
    let mut events: Vec<TraceEvent> = Vec::new();
    for i in 0..n {
        let kind = KINDS[(i % 4) as usize];
        let size = 1 + i % 70;
        let same_stream = events
            .iter()
            .rev()
            .find(|e| stream(kind_code(e.kind)) == stream(kind_code(kind)));
        let addr = match same_stream {
            Some(last) if i % 3 == 0 => last.addr.wrapping_add(last.size),
            _ => addr(i),
        };
        events.push(ev(kind, addr, size));
    }
    events
}

#[test]
fn round_trips_across_buffer_refills() {
    let events = mixed_events(200_000, |i| {
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 40)
    });
    for version in [1, 2, 3, 4] {
        let bytes = encode_version(&events, version);
        assert!(
            bytes.len() > 2 * BUF_SIZE,
            "several buffers: {}",
            bytes.len()
        );
        assert_eq!(decode(&bytes).unwrap(), events, "version {version}");
    }
}

/// Every event by batches of `max`, then the error if any.
fn decode_batches(bytes: &[u8], max: usize) -> (Vec<TraceEvent>, Option<String>) {
    let mut r = BinaryReader::new(bytes).unwrap();
    let (mut got, mut batch) = (Vec::new(), Vec::new());
    loop {
        batch.clear();
        if let Err(e) = r.next_batch(&mut batch, max) {
            got.extend(&batch);
            return (got, Some(e.to_string()));
        }
        if batch.is_empty() {
            return (got, None);
        }
        assert!(batch.len() <= max);
        got.extend(&batch);
    }
}

#[test]
fn batches_decode_what_single_events_do() {
    // Sizes in varints (the batch loop hands those to next_event), sequential records,
    // records across buffer refills, and the end record.
    let mixed = mixed_events(150_000, |i| i.wrapping_mul(0x9e37_79b9) >> (i % 30));
    let cases = [
        (&mixed, 1),
        (&mixed, 2),
        (&mixed, 3),
        (&mixed, 4),
        (&program_events(150_000), 3),
        (&program_events(150_000), 4),
    ];
    for (events, version) in cases {
        let bytes = encode_version(events, version);
        for max in [1, 7, 4096] {
            assert_eq!(
                decode_batches(&bytes, max),
                (events.to_vec(), None),
                "version {version}, batches of {max}"
            );
        }
        // A cut trace: the events before the cut, then the error next_event gives.
        let cut = &bytes[..bytes.len() - 5];
        let mut r = BinaryReader::new(cut).unwrap();
        let single = loop {
            match r.next_event() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("a cut trace ends with an error"),
                Err(e) => break e.to_string(),
            }
        };
        let (got, err) = decode_batches(cut, 4096);
        assert_eq!(err.as_deref(), Some(single.as_str()), "version {version}");
        assert_eq!(got[..], events[..got.len()]);
    }
}

#[test]
fn bad_input_is_refused_with_its_offset() {
    let two = [
        ev(TraceKind::Load, 0x1000, 8),
        ev(TraceKind::Store, 0x2000, 8),
    ];
    let (v1, v2) = (encode_version(&two, 1), encode_version(&two, 2));
    let (v3, v4) = (encode_version(&two, 3), encode(&two));
    assert_eq!(v3[16..], v4[16..], "no ring lines: the same records");
    assert_eq!(v2[16..], v3[16..], "no repeats: the same records");
    assert_eq!(
        v1[16..],
        v2[16..],
        "neither event is sequential: the same records"
    );
    let header = |version: u32| [&MAGIC[..], &version.to_le_bytes(), &[0; 4]].concat();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"I  1000,4\n".to_vec(), "byte 0: not a rocs binary trace"),
        (v2[..10].to_vec(), "byte 0: not a rocs binary trace"),
        (
            header(0),
            "byte 8: version 0; this rocs reads versions 1 to 5",
        ),
        (header(6), "byte 8: version 6"),
        (
            [&MAGIC[..], &1u32.to_le_bytes(), &[1, 0, 0, 0]].concat(),
            "byte 12: unknown flags 0x1",
        ),
        (
            v2[..v2.len() - 2].to_vec(),
            "byte 22: the trace stops after 2 events without its end record",
        ),
        (v2[..v2.len() - 3].to_vec(), "byte 19: a record cut short"),
        ([&v2[..16], &[0x02]].concat(), "byte 16: reserved tag 0x02"),
        // A run record is version 3's.
        ([&v2[..16], &[0x01]].concat(), "byte 16: reserved tag 0x01"),
        (
            [&v3[..22], &[0x01, 0x01, 0x00, 0x01, 0x01, 0x01, 0x01]].concat(),
            "byte 26: a run record inside a run",
        ),
        (
            [&v3[..22], &[0x01, 0x00, 0x00, 0x00]].concat(),
            "byte 22: a run record cut short, with a varint over 10 bytes, of no events",
        ),
        // Version 4: a run's slots name lines of its streams only.
        (
            [
                &v4[..22],
                &[0x01, 0x01, 0x00, 0x00, 0x01, 0x01, 0x90, 0x00, 0x03],
            ]
            .concat(),
            "with slots not those of its streams",
        ),
        (
            [
                &v4[..22],
                &[0x01, 0x00, 0x01, 0x00, 0x00, 0x01, 0xa1, 0x00, 0x03],
            ]
            .concat(),
            "with slots not those of its streams",
        ),
        (
            [&v3[..22], &[0x01, 0x00, 0x02, 0x01, 0xa1, 0x00, 0x04]].concat(),
            "byte 27: a run's records do not end where its run record says",
        ),
        (
            [&v3[..22], &[0x01, 0x00, 0x01, 0x02, 0xa1, 0x00, 0x03]].concat(),
            "byte 27: the trace ends inside a run",
        ),
        (
            [&header(2)[..], &[0x83]].concat(),
            "byte 16: reserved tag 0x83",
        ),
        (
            [&v2[..22], &[0x00, 0x05]].concat(),
            "byte 22: the end record counts 5 events but the trace holds 2",
        ),
        (
            [&v2[..], &[0x10]].concat(),
            "byte 24: bytes after the end record",
        ),
        (
            [&v2[..16], &[0x21], &[0xff; 11]].concat(),
            "byte 16: a record cut short or with a varint over 10 bytes",
        ),
        (
            [&header(2)[..], &[0x7d, 0x00, 0x00]].concat(),
            "byte 16: an access of 0 bytes",
        ),
    ];
    for (bytes, want) in cases {
        let e = decode(&bytes).unwrap_err().to_string();
        assert!(e.contains(want), "want {want:?}, got {e:?}");
    }
    // In version 1, 0x83 is a modify of 32 bytes.
    let m = [&header(1)[..], &[0x83, 0x00, 0x00, 0x01]].concat();
    assert_eq!(decode(&m).unwrap(), vec![ev(TraceKind::Modify, 0, 32)]);
}

#[test]
fn a_writer_of_an_unknown_version_is_refused() {
    for version in [0, 6] {
        let Err(e) = BinaryWriter::with_version(Vec::new(), version) else {
            panic!("version {version} accepted")
        };
        assert!(e.to_string().contains("there are 1 to 5"), "{e}");
    }
}
