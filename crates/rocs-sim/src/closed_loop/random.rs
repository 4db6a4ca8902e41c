//! Random workloads for the campaign that judges rocs on programs nobody tuned it for
//! (issue 12): drawn from the whole space of the workload format, sized to the machine's
//! LLC, and fixed by a seed so that any run can be replayed.
//!
//! What is drawn: one to four tenants; one to four regions per tenant, each of any pattern
//! the format has (sequential, strided, random, pointer-chase, stencil), from 1/64 of the
//! LLC to 8 times it (`size_llc`, log-uniform), with a random share, element size, write
//! fraction, instructions per access and memory-level parallelism; a third of the tenants
//! run two or three phases with their own mixes. The controller's `background` flag is a
//! policy, not part of a workload: it is never set, so every tenant is protected by the
//! slowdown bound.

use std::collections::BTreeMap;

use crate::rng::{splitmix64, Rng};
use crate::workload::{elements, Pattern, PhaseSpec, ProcessSpec, RegionSpec, Workload};
use crate::{ByteSize, MachineSpec};

/// How long generated workloads run: data accesses (all tenants together) per line of the
/// machine's LLC. The controller's window is a fixed share of the run, so this sets how
/// many samples a profile gets per page and how long the chosen placement lasts.
pub const DEFAULT_ACCESSES_PER_LLC_LINE: f64 = 2000.0;

const PATTERNS: [Pattern; 5] = [
    Pattern::Sequential,
    Pattern::Strided,
    Pattern::Random,
    Pattern::PointerChase,
    Pattern::Stencil,
];

/// The seed of the `index`-th workload of a campaign seeded with `campaign_seed`: what
/// `rocsctl sim eval --suite random` reports beside each run, and what
/// [`random_workload`] takes to make that workload again.
pub fn case_seed(campaign_seed: u64, index: u64) -> u64 {
    let mut s = campaign_seed ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    splitmix64(&mut s)
}

/// The workload of `seed` for `spec`: the same seed and machine give the same workload.
pub fn random_workload(seed: u64, spec: &MachineSpec, accesses_per_llc_line: f64) -> Workload {
    let mut rng = Rng::new(seed);
    let llc = spec.llc.size.0;
    let tenants = 1 + rng.below(4) as usize;
    let weights: Vec<f64> = (0..tenants).map(|_| 0.5 + rng.unit()).collect();
    let total_weight: f64 = weights.iter().sum();
    let llc_lines = llc / spec.llc.line.0.max(1);
    let accesses = (accesses_per_llc_line * llc_lines as f64).max(1000.0);
    let mut processes: Vec<ProcessSpec> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let n = (accesses * w / total_weight).round().max(100.0) as u64;
            random_process(&mut rng, i, llc, n)
        })
        .collect();
    fit_in_memory(&mut processes, llc, spec.memory.0);
    Workload {
        name: format!("random-{}-{seed:016x}", spec.name),
        description: format!(
            "generated for {} from seed {seed:#018x} ({tenants} tenant{})",
            spec.name,
            if tenants == 1 { "" } else { "s" }
        ),
        scale: 1.0,
        designed_for_llc: None,
        processes,
    }
}

/// Log-uniform in [lo, hi).
fn log_uniform(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    (lo.ln() + rng.unit() * (hi.ln() - lo.ln())).exp()
}

fn pick<T: Copy>(rng: &mut Rng, from: &[T]) -> T {
    from[rng.below(from.len() as u64) as usize]
}

fn random_process(rng: &mut Rng, index: usize, llc: u64, accesses: u64) -> ProcessSpec {
    let count = 1 + rng.below(4) as usize;
    let regions: Vec<RegionSpec> = (0..count)
        .map(|j| random_region(rng, format!("r{j}"), llc))
        .collect();
    let mut p = ProcessSpec {
        name: format!("t{index}"),
        accesses: Some(accesses),
        repeat: 1,
        regions,
        phases: Vec::new(),
    };
    if rng.below(3) == 0 {
        let phases = 2 + rng.below(2);
        let repeat = 1 + rng.below(2);
        let per_phase = (accesses / (phases * repeat)).max(1);
        p.accesses = None;
        p.repeat = repeat as u32;
        p.phases = (0..phases)
            .map(|k| {
                // Each phase uses a non-empty subset of the regions, with its own shares.
                let mut shares = BTreeMap::new();
                for r in &p.regions {
                    if rng.below(2) == 0 {
                        shares.insert(r.name.clone(), 0.05 + rng.unit());
                    }
                }
                if shares.is_empty() {
                    let r = &p.regions[rng.below(p.regions.len() as u64) as usize];
                    shares.insert(r.name.clone(), 1.0);
                }
                PhaseSpec {
                    name: Some(format!("p{k}")),
                    accesses: per_phase,
                    shares,
                }
            })
            .collect();
    }
    p
}

fn random_region(rng: &mut Rng, name: String, llc: u64) -> RegionSpec {
    let pattern = pick(rng, &PATTERNS);
    let elem: u32 = pick(rng, &[4, 8, 8, 8, 16, 64]);
    // A pointer chase keeps a 4-byte link per element on the host: at most twice the LLC.
    let max_llc = if pattern == Pattern::PointerChase {
        2.0
    } else {
        8.0
    };
    let size_llc = log_uniform(rng, 1.0 / 64.0, max_llc);
    // The size the machine will give it (what stride and offsets must fit in).
    let size = elements(size_llc * llc as f64, elem);
    let e = elem as u64;
    let stride = (pattern == Pattern::Strided).then(|| {
        let s = e << (1 + rng.below(6));
        ByteSize(if s <= size { s } else { e })
    });
    let offsets = if pattern == Pattern::Stencil {
        // The current element and up to two rows around it, rows well inside the region.
        let mut v = vec![0i64];
        for _ in 0..1 + rng.below(2) {
            let row = (e << (4 + rng.below(6))).min(size / 2 / e * e).max(e);
            let sign = if rng.below(2) == 0 { -1 } else { 1 };
            if row < size {
                v.push(sign * row as i64);
            }
        }
        v
    } else {
        Vec::new()
    };
    RegionSpec {
        name,
        size: ByteSize(0),
        size_llc: Some(size_llc),
        pattern,
        share: 0.05 + rng.unit(),
        elem,
        stride,
        offsets,
        write_fraction: if rng.below(2) == 0 {
            0.0
        } else {
            rng.unit() * 0.5
        },
        instructions_per_access: log_uniform(rng, 0.5, 4.0),
        mlp: if pattern == Pattern::PointerChase {
            1.0
        } else {
            1.0 + rng.unit() * 3.0
        },
    }
}

/// Shrink every region alike if the workload would take more than a quarter of the
/// machine's memory (the allocator needs room for the pollute colours and migrations).
fn fit_in_memory(processes: &mut [ProcessSpec], llc: u64, memory: u64) {
    let regions = || processes.iter().flat_map(|p| p.regions.iter());
    let total: f64 = regions().filter_map(|r| r.size_llc).sum::<f64>() * llc as f64;
    let room = memory as f64 / 4.0;
    if total <= room {
        return;
    }
    let factor = room / total;
    for r in processes.iter_mut().flat_map(|p| p.regions.iter_mut()) {
        r.size_llc = r.size_llc.map(|s| s * factor);
        // Offsets and strides were drawn for the larger size: keep them inside.
        let size = elements(r.size_llc.unwrap_or(0.0) * llc as f64, r.elem);
        r.offsets.retain(|o| o.unsigned_abs() < size);
        if let Some(s) = r.stride {
            if s.0 > size {
                r.stride = Some(ByteSize(r.elem as u64));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Machine;

    #[test]
    fn same_seed_same_workload_and_its_toml_reads_back() {
        let spec = MachineSpec::resolve("tiny").unwrap();
        let a = random_workload(7, &spec, 50.0);
        assert_eq!(a, random_workload(7, &spec, 50.0));
        assert_ne!(a, random_workload(8, &spec, 50.0));
        let text = toml::to_string(&a).unwrap();
        let back = Workload::from_toml("generated.toml", &text).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn the_whole_space_is_drawn_and_every_draw_builds() {
        let spec = MachineSpec::resolve("tiny").unwrap();
        let mut patterns = std::collections::BTreeSet::new();
        let mut tenants = std::collections::BTreeSet::new();
        let mut phased = 0;
        for i in 0..300 {
            let w = random_workload(case_seed(1, i), &spec, 1.0);
            tenants.insert(w.processes.len());
            phased += w.processes.iter().filter(|p| !p.phases.is_empty()).count();
            for r in w.processes.iter().flat_map(|p| &p.regions) {
                patterns.insert(format!("{:?}", r.pattern));
                assert!(r.size_llc.is_some_and(|s| s > 0.0 && s <= 8.0), "{r:?}");
            }
            Machine::new(&spec, &w, 1).unwrap_or_else(|e| panic!("seed {i}: {e}\n{w:#?}"));
        }
        assert_eq!(patterns.len(), PATTERNS.len(), "{patterns:?}");
        assert_eq!(tenants, (1..=4).collect());
        assert!(phased > 50, "{phased} phased tenants");
    }

    #[test]
    fn large_workloads_fit_the_machines_memory() {
        let spec = MachineSpec::resolve("zen4-like").unwrap();
        for i in 0..200 {
            let w = random_workload(case_seed(3, i), &spec, 1.0).sized_for(spec.llc.size.0);
            let bytes: u64 = w
                .processes
                .iter()
                .flat_map(|p| &p.regions)
                .map(|r| r.size.0)
                .sum();
            assert!(bytes <= spec.memory.0 / 4 + 4096 * 16, "seed {i}: {bytes}");
        }
    }
}
