//! Sample ingest: parse a ring of perf records in place and count each sample against its
//! page. Goal: <= 50 ns per sample (>= 20 M samples/s per core).
//!
//! The ring holds what the kernel writes for rocs's plans: Intel PEBS load-retired
//! samples of two events (L3 miss / L3 hit, told apart by sample id), with IDENTIFIER,
//! TID, TIME, ADDR, WEIGHT, DATA_SRC (56-byte records); and the page-fault plan's
//! IDENTIFIER, TID, TIME, ADDR (40-byte records). Addresses: 70% from a reused set of 2k
//! pages, 30% streaming over 1 GiB, like a program with a hot structure and a scan. The
//! ring is drained from a point near its end, so records wrap around. A LOST and a
//! THROTTLE record every 10k samples.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rocs_core::{DataSource, MemSample, PageProfile};
use rocs_linux::decode::{Decoded, Decoder, EventKind};
use rocs_linux::perf_abi::*;
use rocs_linux::plan::SourceRule;
use rocs_linux::record::{encode_sample, Sample, SampleFormat};
use rocs_linux::ring::drain_records;

const RING: usize = 1 << 20;

struct RingImage {
    data: Vec<u8>,
    tail: u64,
    head: u64,
    samples: u64,
}

fn ring_image(sample_type: u64, ids: &[u64]) -> RingImage {
    let mut records = Vec::new();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut samples = 0;
    let hot_base = 0x5555_0000_0000u64;
    let scan_base = 0x7f00_0000_0000u64;
    let mut scan = 0u64;
    loop {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let addr = if x % 10 < 7 {
            hot_base + (x >> 8) % (2048 * 4096)
        } else {
            scan = (scan + 64) % (1 << 30);
            scan_base + scan
        };
        let s = Sample {
            id: ids[(x >> 20) as usize % ids.len()],
            pid: 4242,
            tid: 4242 + (x >> 30) as u32 % 4,
            time: samples * 1000,
            addr: Some(addr),
            weight: 40 + (x >> 40) % 300,
            data_src: Some(0x02 | (0x40 | 0x02) << 5 | 3 << 33),
            phys_addr: None,
            raw: None,
        };
        let before = records.len();
        encode_sample(sample_type, &s, &mut records);
        samples += 1;
        if samples % 10_000 == 0 {
            for (t, body) in [(RECORD_LOST, 16), (RECORD_THROTTLE, 24)] {
                records.extend_from_slice(&t.to_le_bytes());
                records.extend_from_slice(&0u16.to_le_bytes());
                records.extend_from_slice(&(8 + body as u16).to_le_bytes());
                records.extend(std::iter::repeat_n(0u8, body));
            }
        }
        if records.len() > RING - 256 {
            records.truncate(before);
            samples -= 1;
            break;
        }
    }
    // Place the records so that they start 3/4 into the ring and wrap.
    let start = (RING * 3 / 4) as u64;
    let mut data = vec![0u8; RING];
    for (i, b) in records.iter().enumerate() {
        data[(start as usize + i) % RING] = *b;
    }
    RingImage {
        data,
        tail: start,
        head: start + records.len() as u64,
        samples,
    }
}

fn decoder(sample_type: u64, ids: &[u64], sources: &[SourceRule]) -> Decoder {
    let mut d = Decoder::new();
    for (&id, &source) in ids.iter().zip(sources) {
        let k = d.add_kind(EventKind {
            format: SampleFormat::simple(sample_type),
            source,
            drop_kernel_addresses: false,
        });
        d.add_id(id, k);
    }
    d
}

fn ingest(c: &mut Criterion) {
    let pebs_type = SAMPLE_IDENTIFIER
        | SAMPLE_TID
        | SAMPLE_TIME
        | SAMPLE_ADDR
        | SAMPLE_WEIGHT
        | SAMPLE_DATA_SRC;
    let pf_type = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR;
    let cases = [
        (
            "pebs_load_retired_2_events",
            pebs_type,
            vec![1001u64, 2002],
            vec![
                SourceRule::Fixed(DataSource::LlcMiss),
                SourceRule::Fixed(DataSource::LlcHit),
            ],
        ),
        (
            "load_latency_data_src",
            pebs_type,
            vec![7],
            vec![SourceRule::DataSrc],
        ),
        ("page_faults", pf_type, vec![7], vec![SourceRule::None]),
    ];
    let mut g = c.benchmark_group("ingest");
    for (name, st, ids, sources) in cases {
        let img = ring_image(st, &ids);
        let dec = decoder(st, &ids, &sources);
        let mut scratch = Box::new([0u8; 65536]);
        g.throughput(Throughput::Elements(img.samples));
        // Ring parse + per-page aggregation straight into the profile (what record,
        // profile and the import do).
        g.bench_with_input(BenchmarkId::new("page_profile", name), &img, |b, img| {
            let mut table = PageProfile::new(12);
            b.iter(|| {
                let tail = drain_records(&img.data, img.tail, img.head, &mut scratch, |rec| {
                    if let Ok(Decoded::Sample(s)) = dec.decode(rec, Some(4242)) {
                        table.record(s.vaddr, s.source);
                    }
                });
                assert_eq!(tail, img.head);
            });
            assert!(table.samples_total() > 0);
        });
        // The same through a batch of MemSamples (the Sampler trait path).
        g.bench_with_input(BenchmarkId::new("via_memsample", name), &img, |b, img| {
            let mut profile = PageProfile::new(12);
            let mut batch: Vec<MemSample> = Vec::with_capacity(img.samples as usize);
            b.iter(|| {
                batch.clear();
                drain_records(&img.data, img.tail, img.head, &mut scratch, |rec| {
                    if let Ok(Decoded::Sample(s)) = dec.decode(rec, Some(4242)) {
                        batch.push(s);
                    }
                });
                profile.ingest(&batch);
            });
        });
    }
    g.finish();

    // Memory per tracked page, printed for the record (asserted <= 32 B in the tests).
    let mut table = PageProfile::new(12);
    for n in [1_000u64, 100_000, 1_000_000] {
        while (table.len() as u64) < n {
            let p = table.len() as u64;
            table.record(p << 12, DataSource::Other);
        }
        eprintln!(
            "page profile: {} pages, {:.1} bytes per tracked page",
            table.len(),
            table.bytes_per_page()
        );
    }
}

criterion_group!(benches, ingest);
criterion_main!(benches);
