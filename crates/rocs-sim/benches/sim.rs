//! Simulator throughput: simulated memory accesses per second for art-like on ppc970fx
//! (and mcf-like, whose random accesses miss the L1 far more often).
//!
//!     cargo bench -p rocs-sim --bench sim
//!
//! Criterion reports the throughput as elements (= simulated accesses) per second.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rocs_sim::{Machine, MachineProfile, Workload};

fn bench(c: &mut Criterion) {
    let profile = MachineProfile::resolve("ppc970fx").unwrap();
    let mut group = c.benchmark_group("sim");
    group.sample_size(10);
    for name in ["art-like", "mcf-like"] {
        // 5 million accesses per iteration.
        let base = Workload::resolve(name).unwrap();
        let total: u64 = base.processes.iter().map(|p| p.accesses.unwrap_or(0)).sum();
        let w = base.scaled(5e6 / total as f64);
        let mut probe = Machine::new(&profile, &w, 1).unwrap();
        probe.run_to_end().unwrap();
        group.throughput(Throughput::Elements(probe.totals().accesses));
        group.bench_function(format!("{name}/ppc970fx"), |b| {
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

criterion_group!(benches, bench);
criterion_main!(benches);
