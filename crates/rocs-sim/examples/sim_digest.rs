//! Every counter of every built-in machine running every built-in workload, and replaying
//! generated traces, for a fixed number of accesses, with PMU sampling, page migrations
//! (both ways), counter reads and, where the LLC allows it, CAT way masks on the way: a
//! change meant only to make the simulator faster must print the same lines, bit for bit.
//!
//!     cargo run --release -p rocs-sim --example sim_digest > before.txt
//!     ... change ...
//!     cargo run --release -p rocs-sim --example sim_digest > after.txt && cmp before.txt after.txt
//!
//! Extra arguments are trace files, each replayed on every machine as well.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Cursor;

use rocs_core::{Counters, Pid, Placement, Remapper, Sampler, SamplingPlan, VirtPage};
use rocs_sim::{
    builtin_machines, builtin_workloads, BinaryWriter, Machine, MachineSpec, Policy, Scale,
    TraceEvent, TraceFormat, TraceInput, TraceKind, TraceSpec, Workload,
};

/// Accesses per generated workload run.
const ACCESSES: f64 = 1_500_000.0;
/// Simulated cycles between two steps of the script.
const WINDOW: u64 = 100_000;

/// What a run saw besides its final counts, folded into one number.
struct Digest(DefaultHasher);

impl Digest {
    fn add(&mut self, v: impl Hash) {
        v.hash(&mut self.0);
    }
}

/// Run `m` to its end in windows, sampling, migrating and reading counters on the way;
/// print its counts, its regions and the digest of the rest.
fn drive(label: &str, mut m: Machine) {
    let pids = m.pids();
    let first = pids[0];
    let mut d = Digest(DefaultHasher::new());
    let mut confined: Vec<VirtPage> = Vec::new();
    let can_mask = m.llc_geometry().ways >= 4 && m.spec().llc.policy != Policy::Lru;
    let mut window = 0u64;
    loop {
        let more = match m.run_for_checked(WINDOW) {
            Ok(more) => more,
            Err(e) => {
                println!("{label}: stopped: {e}");
                false
            }
        };
        for &pid in &pids {
            d.add(format!("{:?}", m.read(pid).expect("counters")));
        }
        match window {
            2 => m
                .start(
                    first,
                    &SamplingPlan {
                        period: 37,
                        cpu_budget: 0.02,
                    },
                )
                .expect("sampling starts"),
            3 if can_mask && pids.len() > 1 => {
                let half = (1u64 << (m.llc_ways() / 2)) - 1;
                m.set_way_mask(pids[1], half).expect("mask");
            }
            4 => {
                // Every fifth page of the process, up to 64 of them, to the pollute buffer.
                let pages = m.pages(first).expect("pages");
                confined = pages.iter().step_by(5).take(64).copied().collect();
                migrate(&mut m, &mut d, first, &confined, Placement::Pollute);
            }
            7 => drain(&mut m, &mut d, first),
            9 => {
                let half = confined.len() / 2;
                migrate(&mut m, &mut d, first, &confined[..half], Placement::Restore);
            }
            11 => {
                drain(&mut m, &mut d, first);
                m.stop(first).expect("sampling stops");
            }
            _ => {}
        }
        window += 1;
        if !more {
            break;
        }
    }
    drain(&mut m, &mut d, first);
    println!("{label}: now {} digest {:016x}", m.now(), d.0.finish());
    let totals = m.totals();
    for p in &totals.processes {
        println!("  {} {:?}", p.pid, p.counts);
        for r in m.region_stats(p.pid).expect("regions") {
            println!(
                "    {} acc {} llc {} miss {}",
                r.name, r.accesses, r.llc_accesses, r.llc_misses
            );
        }
    }
}

fn migrate(m: &mut Machine, d: &mut Digest, pid: Pid, pages: &[VirtPage], to: Placement) {
    let results = m.migrate(pid, pages, to).expect("migrate");
    d.add(format!("{results:?}"));
    d.add(format!("{:?}", m.query(pid, pages).expect("query")));
}

fn drain(m: &mut Machine, d: &mut Digest, pid: Pid) {
    let mut samples = Vec::new();
    let loss = m.drain(pid, &mut samples).expect("drain");
    d.add(format!("{loss:?} {samples:?}"));
}

/// A generated trace of a program-like mix: straight-line code with jumps, a stack walked
/// field by field, a large array streamed, a heap touched at random, sizes from 1 to 32
/// bytes so that some accesses straddle lines and some cross pages.
fn synthetic_trace(seed: u64, events: usize) -> Vec<u8> {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 11
    };
    let mut w = BinaryWriter::new(Vec::new());
    let (mut pc, mut stream) = (0x40_0000u64, 0x1000_0000u64);
    for _ in 0..events {
        let r = next();
        let ev = if r % 3 != 0 {
            pc = if r % 97 == 0 {
                0x40_0000 + (next() % (1 << 20))
            } else {
                pc + 1 + r % 7
            };
            TraceEvent {
                kind: TraceKind::Instr,
                addr: pc,
                size: 1 + r % 8,
            }
        } else {
            let kind =
                [TraceKind::Load, TraceKind::Store, TraceKind::Modify][(r >> 8) as usize % 3];
            let size = [1, 2, 4, 8, 16, 32][(r >> 12) as usize % 6];
            let addr = match (r >> 16) % 4 {
                0 => 0x7fff_0000 + (next() % 256),
                1 => {
                    stream += 8;
                    stream
                }
                2 => 0x2000_0000 + next() % (24 << 20),
                _ => 0x3000_0000 + next() % (64 << 10),
            };
            TraceEvent { kind, addr, size }
        };
        w.write(&ev).expect("in memory");
    }
    w.finish().expect("in memory")
}

fn in_memory(bytes: &[u8], identity_map: bool) -> TraceSpec {
    TraceSpec {
        input: TraceInput::Reader(Box::new(Cursor::new(bytes.to_vec()))),
        format: TraceFormat::Detect,
        repeat: 1,
        length: None,
        identity_map,
    }
}

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    let traces = [synthetic_trace(1, 300_000), synthetic_trace(2, 200_000)];
    for machine in builtin_machines() {
        let spec = MachineSpec::resolve(machine).expect("built in");
        for name in builtin_workloads() {
            let workload = Workload::resolve(name).expect("built in");
            for scale in [Scale::Length(1.0), Scale::Auto { length: 1.0 }] {
                let Ok(sized) = scale.apply(&workload, &spec) else {
                    println!("{machine} {name} {scale:?}: does not fit");
                    continue;
                };
                let total: u64 = sized.processes.iter().filter_map(|p| p.accesses).sum();
                let w = sized.scaled(ACCESSES / (total as f64 * sized.scale));
                match Machine::new(&spec, &w, 7) {
                    Ok(m) => drive(&format!("{machine} {name} {scale:?}"), m),
                    Err(e) => println!("{machine} {name} {scale:?}: {e}"),
                }
            }
        }
        let one = Machine::from_trace(&spec, in_memory(&traces[0], false), 7).expect("trace");
        drive(&format!("{machine} trace"), one);
        if spec.tlb.is_none() {
            let id = Machine::from_trace(&spec, in_memory(&traces[0], true), 7).expect("trace");
            drive(&format!("{machine} trace identity"), id);
        }
        let pair = [in_memory(&traces[0], false), in_memory(&traces[1], false)];
        let two = Machine::from_traces(&spec, pair.into(), 7).expect("traces");
        drive(&format!("{machine} two traces"), two);
        for f in &files {
            let m = Machine::from_trace(&spec, TraceSpec::file(f), 7).expect("trace file");
            drive(&format!("{machine} {f}"), m);
        }
    }
}
