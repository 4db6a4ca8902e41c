//! Trace readers alone, from memory: lackey text lines per second and binary events per
//! second in every version of the format, one at a time and fed to a sink as the replay is
//! fed (criterion's elements = lines or events), per second of the benchmark thread's CPU
//! time.
//!
//!     cargo bench -p rocs-sim --bench traces
//!
//! The text imitates a real lackey trace: runs of straight-line instruction fetches, loads
//! and stores on a stack and a heap, 8 to 12 hex digits per address.

mod common;

use common::ThreadCpuTime;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rocs_sim::trace::EventSink;
use rocs_sim::{BinaryReader, BinaryWriter, LackeyReader, SimError, TraceEvent, TraceKind};

const LINES: u64 = 1_000_000;

fn events() -> Vec<TraceEvent> {
    let mut pc = 0x0401_0000u64;
    (0..LINES)
        .map(|i| {
            let (kind, addr, size) = match i % 10 {
                0..=5 => {
                    // Straight-line code, with a jump now and then.
                    let (addr, size) = (pc + (i % 37 == 0) as u64 * 64, 1 + i % 7);
                    pc = addr + size;
                    (TraceKind::Instr, addr, size)
                }
                6 | 7 => (TraceKind::Load, 0x1f_feff_f000 + (i % 512) * 8, 8),
                8 => (TraceKind::Store, 0x0422_0000 + (i * 24) % (1 << 20), 4),
                _ => (TraceKind::Modify, 0x0422_8000 + (i % 64) * 16, 16),
            };
            TraceEvent { kind, addr, size }
        })
        .collect()
}

fn lackey_text(events: &[TraceEvent]) -> Vec<u8> {
    let mut t = String::new();
    for e in events {
        let k = match e.kind {
            TraceKind::Instr => "I ",
            TraceKind::Load => " L",
            TraceKind::Store => " S",
            TraceKind::Modify => " M",
        };
        t.push_str(&format!("{k} {:08x},{}\n", e.addr, e.size));
    }
    t.into_bytes()
}

/// Sums the addresses of the events fed to it: the replay's decoding loop (a sink fused
/// with the reader's loop) without the replay.
struct Sum(u64);

impl EventSink for Sum {
    fn wants(&self) -> bool {
        true
    }

    fn event(&mut self, ev: TraceEvent) -> Result<(), SimError> {
        self.0 = self.0.wrapping_add(ev.addr);
        Ok(())
    }
}

fn bench(c: &mut Criterion<ThreadCpuTime>) {
    let events = events();
    let text = lackey_text(&events);
    let binary = [1, 2, 3, 4, 5].map(|version| {
        let mut w = BinaryWriter::with_version(Vec::new(), version).unwrap();
        for e in &events {
            w.write(e).unwrap();
        }
        w.finish().unwrap()
    });
    let mut group = c.benchmark_group("trace-read");
    group.sample_size(20);
    group.throughput(Throughput::Elements(LINES));
    group.bench_function("lackey", |b| {
        b.iter(|| {
            let mut r = LackeyReader::new(&text[..]);
            let mut sum = 0u64;
            while let Some(e) = r.next_event().unwrap() {
                sum = sum.wrapping_add(e.addr);
            }
            sum
        })
    });
    for (version, binary) in (1..).zip(&binary) {
        if version >= 5 {
            // Blocks: every event one by one, and the group heads alone (what a replay of
            // whole blocks decodes).
            group.bench_function(format!("binary-v{version}"), |b| {
                b.iter(|| {
                    let mut r = BinaryReader::new(&binary[..]).unwrap().into_columns();
                    let mut sum = 0u64;
                    while let Some(e) = r.next_event().unwrap() {
                        sum = sum.wrapping_add(e.addr);
                    }
                    sum
                })
            });
            group.bench_function(format!("binary-v{version}-heads"), |b| {
                b.iter(|| {
                    let mut r = BinaryReader::new(&binary[..]).unwrap().into_columns();
                    let mut sum = 0u64;
                    while let Some(block) = r.peek_block().unwrap() {
                        for s in 0..2 {
                            let mut heads = block.heads(s);
                            for _ in 0..block.groups[s] {
                                let h = heads.read().unwrap();
                                sum = sum.wrapping_add(h.line ^ h.count);
                            }
                        }
                        r.take_block();
                    }
                    sum
                })
            });
            continue;
        }
        group.bench_function(format!("binary-v{version}"), |b| {
            b.iter(|| {
                let mut r = BinaryReader::new(&binary[..]).unwrap();
                let mut sum = 0u64;
                while let Some(e) = r.next_event().unwrap() {
                    sum = sum.wrapping_add(e.addr);
                }
                sum
            })
        });
        group.bench_function(format!("binary-v{version}-feed"), |b| {
            b.iter(|| {
                let mut r = BinaryReader::new(&binary[..]).unwrap();
                let mut sum = Sum(0);
                while r.feed(&mut sum).unwrap() {}
                sum.0
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime { wall: WallTime });
    targets = bench
}
criterion_main!(benches);
