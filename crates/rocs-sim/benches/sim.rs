//! Simulator throughput: simulated memory accesses per second for art-like on ppc970fx
//! (and mcf-like, whose random accesses miss the L1 far more often), art-like on xeon-like
//! (the DRRIP LLC, models off), art-like at its own sizes on spr-like (every model on:
//! prefetcher, TLB, victim L3; what the models cost) and art-like sized to zen4-like's LLC
//! (`--scale auto`, every model on: 128 MiB streamed past a 32 MiB LLC, whose tags no longer
//! fit the host's caches), art-like sized to neoverse-like's sliced 32 MiB system-level cache
//! (every model on, LLC filled on miss) and art-like on tiny.
//!
//!     cargo bench -p rocs-sim --bench sim
//!
//! Criterion reports the throughput as elements (= simulated accesses) per second, twice:
//! `sim/...` per wall-clock second, and `sim-cpu/...` per second of the benchmark thread's
//! own CPU time, which stays meaningful on a machine busy with other work (the wall-clock
//! figure then counts time the thread spent waiting for a core).

mod common;

use common::ThreadCpuTime;
use criterion::measurement::{Measurement, WallTime};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rocs_sim::{Machine, MachineSpec, Scale, Workload};

/// (workload, machine, how it is sized).
const CASES: &[(&str, &str, Scale)] = &[
    ("art-like", "ppc970fx", Scale::Length(1.0)),
    ("mcf-like", "ppc970fx", Scale::Length(1.0)),
    ("art-like", "xeon-like", Scale::Length(1.0)),
    ("art-like", "spr-like", Scale::Length(1.0)),
    ("art-like", "zen4-like", Scale::Auto { length: 1.0 }),
    ("art-like", "neoverse-like", Scale::Auto { length: 1.0 }),
    ("art-like", "tiny", Scale::Length(1.0)),
];

fn bench_with<M: Measurement>(c: &mut Criterion<M>, group_name: &str) {
    let mut group = c.benchmark_group(group_name);
    group.sample_size(10);
    for (name, machine, scale) in CASES {
        let Ok(profile) = MachineSpec::resolve(machine) else {
            eprintln!("{machine}: not built in here, skipped");
            continue;
        };
        // 5 million accesses per iteration.
        let sized = scale
            .apply(&Workload::resolve(name).unwrap(), &profile)
            .unwrap();
        let total: u64 = sized
            .processes
            .iter()
            .map(|p| p.accesses.unwrap_or(0))
            .sum();
        let w = sized.scaled(5e6 / (total as f64 * sized.scale));
        let mut probe = Machine::new(&profile, &w, 1).unwrap();
        probe.run_to_end().unwrap();
        group.throughput(Throughput::Elements(probe.totals().accesses));
        group.bench_function(format!("{name}/{machine}"), |b| {
            b.iter_batched(
                || Machine::new(&profile, &w, 1).unwrap(),
                |mut m| {
                    m.run_to_end().unwrap();
                    m
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn wall(c: &mut Criterion) {
    bench_with(c, "sim");
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    bench_with(c, "sim-cpu");
}

criterion_group!(wall_clock, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpuTime { wall: WallTime });
    targets = cpu
}
criterion_main!(wall_clock, cpu_time);
