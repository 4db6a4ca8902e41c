//! The perf.data reader on files written here byte by byte: several events told apart by
//! sample id, data sources classified into LLC hits and misses, damaged records.

use std::path::Path;

use rocs_linux::perf_abi::*;
use rocs_linux::perfdata::parse_perf_data;
use rocs_linux::PerfDataError;

const ST: u64 = SAMPLE_IDENTIFIER
    | SAMPLE_IP
    | SAMPLE_TID
    | SAMPLE_TIME
    | SAMPLE_ADDR
    | SAMPLE_WEIGHT
    | SAMPLE_DATA_SRC;

// perf_mem_data_src words: load, L3 hit; load, local DRAM (mem_lvl_num RAM); load, L1 hit.
const L3_HIT: u64 = 0x02 | (0x40 | 0x02) << 5 | 3 << 33;
const DRAM: u64 = 0x02 | (0x80 | 0x02) << 5 | 0xd << 33;
const L1_HIT: u64 = 0x02 | (0x08 | 0x02) << 5 | 1 << 33;

/// Writes numbers in one byte order: little-endian files as x86 and arm64 perf write
/// them, big-endian ones as s390x or ppc64 perf do (magic "2ELIFREP").
#[derive(Clone, Copy)]
struct Order {
    big: bool,
}

impl Order {
    fn u64(self, out: &mut Vec<u8>, v: u64) {
        out.extend_from_slice(&if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }

    fn u16(self, out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }

    fn u32(self, out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }
}

const LE: Order = Order { big: false };
const BE: Order = Order { big: true };

/// A perf_event_attr of 128 bytes (PERF_ATTR_SIZE_VER7): type, size, config, period,
/// sample_type, read_format, flags (sample_id_all), the rest zero.
fn attr(o: Order, type_: u32, config: u64, sample_type: u64) -> Vec<u8> {
    let mut a = Vec::new();
    o.u32(&mut a, type_);
    o.u32(&mut a, 128);
    o.u64(&mut a, config);
    o.u64(&mut a, 2003);
    o.u64(&mut a, sample_type);
    o.u64(&mut a, 0);
    o.u64(&mut a, ATTR_FLAG_SAMPLE_ID_ALL);
    a.resize(128, 0);
    a
}

/// HEADER_EVENT_DESC, the feature bit of the event descriptions (tools/perf/util/header.h).
const HEADER_EVENT_DESC: u64 = 12;

/// The EVENT_DESC feature section as perf writes it (write_event_desc in
/// tools/perf/util/header.c): u32 count, u32 attr size, then per event its attr, u32 id
/// count, its name as a perf_header_string (u32 length, NUL-padded bytes), its ids.
fn event_desc(o: Order, events: &[(Vec<u8>, Vec<u64>)]) -> Vec<u8> {
    let mut d = Vec::new();
    o.u32(&mut d, events.len() as u32);
    o.u32(&mut d, 128);
    for (i, (a, ids)) in events.iter().enumerate() {
        d.extend_from_slice(a);
        o.u32(&mut d, ids.len() as u32);
        let mut name = format!("event{i}").into_bytes();
        name.resize(64, 0);
        o.u32(&mut d, 64);
        d.extend_from_slice(&name);
        for &id in ids {
            o.u64(&mut d, id);
        }
    }
    d
}

/// A perf.data file (tools/perf/Documentation/perf.data-file-format.txt): the header,
/// the attribute section (each attr followed by the file section of its ids), the ids,
/// the data section, then the feature sections' table and the EVENT_DESC section that
/// perf writes into every file.
fn file(o: Order, events: &[(Vec<u8>, Vec<u64>)], data: &[u8]) -> Vec<u8> {
    let attr_size = 128 + 16;
    let attrs_off = 104u64;
    let ids_off = attrs_off + (events.len() * attr_size) as u64;
    let n_ids: usize = events.iter().map(|e| e.1.len()).sum();
    let data_off = ids_off + 8 * n_ids as u64;
    let mut f = Vec::new();
    f.extend_from_slice(if o.big { b"2ELIFREP" } else { b"PERFILE2" });
    for v in [
        104u64,
        attr_size as u64,
        attrs_off,
        (events.len() * attr_size) as u64,
        data_off,
        data.len() as u64,
        0,
        0,
        1 << HEADER_EVENT_DESC,
        0,
        0,
        0,
    ] {
        o.u64(&mut f, v);
    }
    let mut id_at = ids_off;
    for (a, ids) in events {
        f.extend_from_slice(a);
        o.u64(&mut f, id_at);
        o.u64(&mut f, 8 * ids.len() as u64);
        id_at += 8 * ids.len() as u64;
    }
    for (_, ids) in events {
        for &id in ids {
            o.u64(&mut f, id);
        }
    }
    f.extend_from_slice(data);
    let desc = event_desc(o, events);
    let desc_off = f.len() as u64 + 16;
    o.u64(&mut f, desc_off);
    o.u64(&mut f, desc.len() as u64);
    f.extend_from_slice(&desc);
    f
}

/// A PERF_RECORD_SAMPLE of sample_type ST, as the kernel lays it out
/// (include/uapi/linux/perf_event.h): identifier, ip, pid/tid, time, addr, weight,
/// data_src.
fn sample_record(o: Order, id: u64, pid: u32, addr: u64, data_src: u64) -> Vec<u8> {
    let mut r = Vec::new();
    // struct perf_event_header: u32 type, u16 misc, u16 size.
    o.u32(&mut r, RECORD_SAMPLE);
    o.u16(&mut r, 0);
    o.u16(&mut r, 8 + 7 * 8);
    o.u64(&mut r, id);
    o.u64(&mut r, 0x40_1000);
    o.u32(&mut r, pid);
    o.u32(&mut r, pid);
    o.u64(&mut r, 1);
    o.u64(&mut r, addr);
    o.u64(&mut r, 100);
    o.u64(&mut r, data_src);
    r
}

#[test]
fn data_sources_become_hits_and_misses_per_event_in_either_byte_order() {
    for o in [LE, BE] {
        // Two events as `perf mem record` writes them (loads and stores), told apart by id.
        let loads = (attr(o, 4, 0x1cd, ST), vec![11, 12]);
        let stores = (attr(o, 4, 0x82d0, ST), vec![21]);
        let mut data = Vec::new();
        let page = 0x7f00_0000_0000u64;
        for (id, addr, src) in [
            (11, page + 8, L3_HIT),
            (12, page + 16, DRAM),
            (11, page + 24, DRAM),
            (11, page + 0x1000, L1_HIT),
            (21, page + 0x2000, 0x04 | (0x40 | 0x02) << 5), // a store: not ranked
        ] {
            data.extend(sample_record(o, id, 42, addr, src));
        }
        data.extend(sample_record(o, 11, 7, page, DRAM)); // another process
        let bytes = file(o, &[loads, stores], &data);
        let (table, summary) =
            parse_perf_data(Path::new("mem.data"), &bytes, Some(42), 12).unwrap();
        assert_eq!(summary.big_endian, o.big);
        assert_eq!(summary.events[1].name.as_deref(), Some("event1"));
        assert!(summary.has_data_source);
        assert_eq!(summary.sample_records, 6);
        assert_eq!(summary.other_processes, 1);
        let pages = table.sorted();
        assert_eq!(pages.len(), 3);
        let c = pages[0].1;
        assert_eq!((c.hits, c.misses, c.other), (1, 2, 0));
        assert_eq!((pages[1].1.other, pages[2].1.other), (1, 1));

        // A sample whose id no attribute lists is an error, not a silent drop.
        let bad = sample_record(o, 99, 42, page, DRAM);
        let bytes = file(
            o,
            &[(attr(o, 4, 1, ST), vec![11]), (attr(o, 4, 2, ST), vec![21])],
            &bad,
        );
        let err = parse_perf_data(Path::new("x.data"), &bytes, None, 12).unwrap_err();
        assert!(err.to_string().contains("event id 99"), "{err}");
    }
}

#[test]
fn damaged_records_are_reported() {
    let data = sample_record(LE, 0, 1, 0x1000, L3_HIT);
    // Claim a size past the end of the file.
    let mut long = data.clone();
    long[6..8].copy_from_slice(&0xfff8u16.to_le_bytes());
    let bytes = file(LE, &[(attr(LE, 4, 1, ST), vec![])], &long);
    assert!(matches!(
        parse_perf_data(Path::new("d.data"), &bytes, None, 12),
        Err(PerfDataError::Truncated { .. })
    ));
    // A record whose body is shorter than its sample_type needs.
    let mut short = data.clone();
    short.truncate(short.len() - 16);
    let n = short.len() as u16;
    short[6..8].copy_from_slice(&n.to_le_bytes());
    let bytes = file(LE, &[(attr(LE, 4, 1, ST), vec![])], &short);
    let err = parse_perf_data(Path::new("d.data"), &bytes, None, 12).unwrap_err();
    assert!(err.to_string().contains("ends inside its"), "{err}");
    // A compressed record (PERF_RECORD_COMPRESSED, 81) that is not zstd data.
    let mut z = Vec::new();
    LE.u32(&mut z, 81);
    LE.u16(&mut z, 0);
    LE.u16(&mut z, 24);
    z.extend_from_slice(b"not a zstd frame");
    let bytes = file(LE, &[(attr(LE, 4, 1, ST), vec![])], &z);
    let err = parse_perf_data(Path::new("z.data"), &bytes, None, 12).unwrap_err();
    assert!(err.to_string().contains("z.data"), "{err}");
    // A file perf record did not finish: data size 0.
    let bytes = file(LE, &[(attr(LE, 4, 1, ST), vec![])], &[]);
    let err = parse_perf_data(Path::new("u.data"), &bytes, None, 12).unwrap_err();
    assert!(err.to_string().contains("did not finish"), "{err}");
}
