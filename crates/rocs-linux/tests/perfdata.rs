//! The perf.data reader on files written here byte by byte: several events told apart by
//! sample id, data sources classified into LLC hits and misses, damaged records.

use std::path::Path;

use rocs_linux::abi::*;
use rocs_linux::perfdata::parse_perf_data;
use rocs_linux::record::{encode_sample, Sample};
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

fn attr(type_: u32, config: u64, sample_type: u64) -> Vec<u8> {
    let mut a = vec![0u8; 128];
    a[0..4].copy_from_slice(&type_.to_le_bytes());
    a[4..8].copy_from_slice(&128u32.to_le_bytes());
    a[8..16].copy_from_slice(&config.to_le_bytes());
    a[16..24].copy_from_slice(&2003u64.to_le_bytes());
    a[24..32].copy_from_slice(&sample_type.to_le_bytes());
    a[40..48].copy_from_slice(&ATTR_FLAG_SAMPLE_ID_ALL.to_le_bytes());
    a
}

/// A perf.data file: events (attr, ids) and the data section.
fn file(events: &[(Vec<u8>, Vec<u64>)], data: &[u8]) -> Vec<u8> {
    let attr_size = 128 + 16;
    let attrs_off = 104u64;
    let ids_off = attrs_off + (events.len() * attr_size) as u64;
    let n_ids: usize = events.iter().map(|e| e.1.len()).sum();
    let data_off = ids_off + 8 * n_ids as u64;
    let mut f = Vec::new();
    f.extend_from_slice(b"PERFILE2");
    for v in [
        104u64,
        attr_size as u64,
        attrs_off,
        (events.len() * attr_size) as u64,
        data_off,
        data.len() as u64,
        0,
        0,
    ] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f.extend_from_slice(&[0; 32]);
    let mut id_at = ids_off;
    for (a, ids) in events {
        f.extend_from_slice(a);
        f.extend_from_slice(&id_at.to_le_bytes());
        f.extend_from_slice(&(8 * ids.len() as u64).to_le_bytes());
        id_at += 8 * ids.len() as u64;
    }
    for (_, ids) in events {
        for id in ids {
            f.extend_from_slice(&id.to_le_bytes());
        }
    }
    f.extend_from_slice(data);
    f
}

fn sample(id: u64, pid: u32, addr: u64, data_src: u64) -> Sample<'static> {
    Sample {
        id,
        pid,
        tid: pid,
        time: 1,
        addr: Some(addr),
        weight: 100,
        data_src: Some(data_src),
        phys_addr: None,
        raw: None,
    }
}

#[test]
fn data_sources_become_hits_and_misses_per_event() {
    // Two events as `perf mem record` writes them (loads and stores), told apart by id.
    let loads = (attr(4, 0x1cd, ST), vec![11, 12]);
    let stores = (attr(4, 0x82d0, ST), vec![21]);
    let mut data = Vec::new();
    let page = 0x7f00_0000_0000u64;
    for (id, addr, src) in [
        (11, page + 8, L3_HIT),
        (12, page + 16, DRAM),
        (11, page + 24, DRAM),
        (11, page + 0x1000, L1_HIT),
        (21, page + 0x2000, 0x04 | (0x40 | 0x02) << 5), // a store: not ranked
    ] {
        encode_sample(ST, &sample(id, 42, addr, src), &mut data);
    }
    encode_sample(ST, &sample(11, 7, page, DRAM), &mut data); // another process
    let bytes = file(&[loads, stores], &data);
    let (table, summary) = parse_perf_data(Path::new("mem.data"), &bytes, Some(42), 12).unwrap();
    assert!(summary.has_data_source);
    assert_eq!(summary.sample_records, 6);
    assert_eq!(summary.other_processes, 1);
    let pages = table.sorted();
    assert_eq!(pages.len(), 3);
    let c = pages[0].1;
    assert_eq!((c.hits, c.misses, c.other), (1, 2, 0));
    assert_eq!((pages[1].1.other, pages[2].1.other), (1, 1));

    // A sample whose id no attribute lists is an error, not a silent drop.
    let mut bad = Vec::new();
    encode_sample(ST, &sample(99, 42, page, DRAM), &mut bad);
    let bytes = file(
        &[(attr(4, 1, ST), vec![11]), (attr(4, 2, ST), vec![21])],
        &bad,
    );
    let err = parse_perf_data(Path::new("x.data"), &bytes, None, 12).unwrap_err();
    assert!(err.to_string().contains("event id 99"), "{err}");
}

#[test]
fn damaged_records_are_reported_with_their_offset() {
    let mut data = Vec::new();
    encode_sample(ST, &sample(0, 1, 0x1000, L3_HIT), &mut data);
    // Claim a size past the end of the data section.
    let mut long = data.clone();
    long[6..8].copy_from_slice(&200u16.to_le_bytes());
    let bytes = file(&[(attr(4, 1, ST), vec![])], &long);
    match parse_perf_data(Path::new("d.data"), &bytes, None, 12) {
        Err(PerfDataError::Truncated { offset, .. }) => assert!(offset >= 104),
        other => panic!("{other:?}"),
    }
    // A record whose body is shorter than its sample_type needs.
    let mut short = data.clone();
    short.truncate(short.len() - 16);
    let n = short.len() as u16;
    short[6..8].copy_from_slice(&n.to_le_bytes());
    let bytes = file(&[(attr(4, 1, ST), vec![])], &short);
    let err = parse_perf_data(Path::new("d.data"), &bytes, None, 12).unwrap_err();
    assert!(err.to_string().contains("ends inside its"), "{err}");
    // Big-endian files are refused by name.
    let mut be = file(&[(attr(4, 1, ST), vec![])], &data);
    be[..8].copy_from_slice(b"2ELIFREP");
    assert!(matches!(
        parse_perf_data(Path::new("b"), &be, None, 12),
        Err(PerfDataError::BigEndian { .. })
    ));
    // Compressed records are refused with the way out.
    let mut z = vec![0u8; 16];
    z[0..4].copy_from_slice(&RECORD_COMPRESSED.to_le_bytes());
    z[6..8].copy_from_slice(&16u16.to_le_bytes());
    let bytes = file(&[(attr(4, 1, ST), vec![])], &z);
    let err = parse_perf_data(Path::new("z.data"), &bytes, None, 12).unwrap_err();
    assert!(err.to_string().contains("perf inject"), "{err}");
}
