//! CAT as the rival: per-process LLC way masks (resctrl capacity bitmasks), the best masks
//! found offline (oracle-CAT), and rocs running on top of them (both).
//!
//! The masks tried: every process with all ways (no CAT), and for each process in turn a
//! few widths of low ways, the others either sharing every way or holding the rest (the
//! isolation an administrator would set up for a noisy tenant). CAT can only split whole
//! processes: one process alone can gain nothing from it. Like rocs's placements, the
//! masks chosen may slow no process by more than the policy's `max_slowdown` against no
//! CAT, unless it is background.

use std::time::Instant;

use rocs_core::Knobs;
use serde::{Deserialize, Serialize};

use super::kept::{made_or_recalled, KeptRuns};
use super::oracle::given_up;
use super::{
    fastest_within_bound, in_threads, ratio, run_rocs, LoopError, MachineFactory, RocsRun,
};
use crate::{Machine, RunStats, SimError};

/// The oracle-CAT run and the run of rocs on its masks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CatRun {
    /// The best masks, one per process in pid order.
    pub masks: Vec<u64>,
    /// baseline cycles / oracle-CAT cycles.
    pub speedup: f64,
    /// baseline cycles / cycles of rocs running with the oracle-CAT masks.
    pub both_speedup: f64,
    /// Pages rocs confined on top of the masks.
    pub both_pages_confined: usize,
    /// Every assignment tried: (masks, cycles). One slower than no CAT was given up there:
    /// its cycles are those it had run then, over the baseline's.
    pub candidates: Vec<(Vec<u64>, u64)>,
    #[serde(skip)]
    pub stats: RunStats,
    #[serde(skip)]
    pub wall_seconds: f64,
}

impl CatRun {
    /// CAT for a process alone: no run needed. CAT partitions processes, and a process
    /// alone keeps its stream and its reused data under one mask, so fewer ways only take
    /// cache from both: the best mask is every way (the baseline), and rocs on it is rocs.
    pub fn alone(ways: u32, rocs_speedup: f64, rocs_pages_confined: usize) -> CatRun {
        let all = if ways >= 64 {
            u64::MAX
        } else {
            (1u64 << ways) - 1
        };
        CatRun {
            masks: vec![all],
            speedup: 1.0,
            both_speedup: rocs_speedup,
            both_pages_confined: rocs_pages_confined,
            candidates: Vec::new(),
            stats: RunStats::default(),
            wall_seconds: 0.0,
        }
    }
}

/// Machines of `make` with process i given `masks[i]`.
fn with_masks<'a>(
    make: &'a MachineFactory<'a>,
    masks: &'a [u64],
) -> impl Fn() -> Result<Machine, SimError> + 'a {
    move || {
        let mut m = make()?;
        for (pid, &mask) in m.pids().into_iter().zip(masks) {
            m.set_way_mask(pid, mask)?;
        }
        Ok(m)
    }
}

/// The mask assignments oracle-CAT tries for `processes` processes and `ways` ways.
fn assignments(processes: usize, ways: u32) -> Vec<Vec<u64>> {
    let all = if ways >= 64 {
        u64::MAX
    } else {
        (1u64 << ways) - 1
    };
    let mut widths: Vec<u32> = vec![1, 2, 4, ways / 2];
    widths.retain(|&w| w >= 1 && w < ways);
    widths.dedup();
    let mut out = vec![vec![all; processes]];
    for i in 0..processes {
        for &w in &widths {
            let low = (1u64 << w) - 1;
            out.push(
                (0..processes)
                    .map(|j| if j == i { low } else { all })
                    .collect(),
            );
            if processes > 1 {
                out.push(
                    (0..processes)
                        .map(|j| if j == i { low } else { all & !low })
                        .collect(),
                );
            }
        }
    }
    out
}

/// Oracle-CAT (the best masks, run by run) and rocs with `knobs` on those masks.
/// `baseline` is `make`'s run, which is also the first assignment's (no CAT: every
/// process may use every way), not run again. Mask runs `kept` has are recalled, and each
/// one made is kept there; they are made `threads` at a time. No CAT is within the bound,
/// so an assignment slower than it cannot be the best: its run is given up once it is
/// (on spr-like, a noisy neighbour's victim squeezed to two ways ran 2.7 times as long).
pub fn run_cat(
    make: &MachineFactory<'_>,
    baseline: &RunStats,
    knobs: &Knobs,
    window_cycles: u64,
    threads: usize,
    kept: &dyn KeptRuns,
    progress: &mut dyn FnMut(&str),
) -> Result<CatRun, LoopError> {
    let start = Instant::now();
    let probe = make()?;
    let tried = assignments(probe.pids().len(), probe.llc_ways());
    let numbered: Vec<(usize, &Vec<u64>)> = tried.iter().enumerate().skip(1).collect();
    let made = in_threads(
        threads,
        &numbered,
        |&(_, masks)| {
            made_or_recalled(kept, &format!("CAT {masks:x?}"), || {
                let mut m = with_masks(make, masks)()?;
                while m.run_for_checked(window_cycles)? {
                    if m.totals().cycles > baseline.cycles {
                        break;
                    }
                }
                Ok(m.totals())
            })
        },
        |&(n, masks), made| {
            if let Ok((stats, recalled)) = made {
                progress(&format!(
                    "oracle-CAT {}/{}: masks {masks:x?} -> {} cycles{}",
                    n + 1,
                    tried.len(),
                    stats.cycles,
                    if *recalled { " (made before)" } else { "" }
                ));
            }
        },
    );
    let mut runs: Vec<RunStats> = vec![baseline.clone()];
    for made in made {
        runs.push(made?.0);
    }
    // The first assignment is no CAT: every other is judged against it, and may slow no
    // process beyond the policy's bound (as rocs's placements may not).
    let finished = runs
        .iter()
        .enumerate()
        .filter(|(_, s)| !given_up(s, baseline));
    let best = fastest_within_bound(finished, &runs[0], knobs)
        .expect("no CAT is within the bound against itself");
    let candidates = tried
        .iter()
        .cloned()
        .zip(runs.iter().map(|s| s.cycles))
        .collect();
    let (masks, stats) = (tried[best].clone(), runs.swap_remove(best));
    progress("rocs on the oracle-CAT masks");
    let both: RocsRun = run_rocs(&with_masks(make, &masks), knobs, window_cycles)?;
    Ok(CatRun {
        speedup: ratio(baseline.cycles, stats.cycles),
        both_speedup: ratio(baseline.cycles, both.stats.cycles),
        both_pages_confined: both.pages_confined,
        masks,
        candidates,
        stats,
        wall_seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::closed_loop::NothingKept;

    /// A tenant reusing a table beside a neighbour streaming through four times the LLC.
    const PAIR: &str = r#"
name = "pair"
[[process]]
name = "victim"
accesses = 150_000
[[process.region]]
name = "table"
size_llc = 0.5
pattern = "random"
share = 1.0
[[process]]
name = "neighbour"
accesses = 150_000
[[process.region]]
name = "stream"
size_llc = 4.0
pattern = "sequential"
share = 1.0
"#;

    #[test]
    fn an_assignment_slower_than_no_cat_is_given_up_and_the_others_run_as_they_would_whole() {
        let mut spec = crate::MachineSpec::resolve("tiny").unwrap();
        spec.llc.policy = crate::cache::Policy::Srrip; // way masks need an RRIP policy
        let w = crate::Workload::from_toml("pair.toml", PAIR).unwrap();
        let make = || Machine::new(&spec, &w, 1);
        let whole = |masks: &[u64]| {
            let mut m = with_masks(&make, masks)().unwrap();
            m.run_to_end().unwrap();
            m.totals()
        };
        let baseline = whole(&[]);
        let knobs = Knobs::default();
        let cat = run_cat(
            &make,
            &baseline,
            &knobs,
            100_000,
            2,
            &NothingKept,
            &mut |_| {},
        )
        .unwrap();
        let mut given_up = 0;
        for (masks, cycles) in cat.candidates.iter().skip(1) {
            let full = whole(masks);
            if full.cycles <= baseline.cycles {
                assert_eq!(*cycles, full.cycles, "{masks:x?} ran whole");
            } else {
                assert!(
                    *cycles > baseline.cycles && *cycles < full.cycles,
                    "{masks:x?}"
                );
                given_up += 1;
            }
        }
        assert!(
            given_up > 0,
            "squeezing the victim to one way is slower than no CAT"
        );
        assert!(
            cat.speedup > 1.0,
            "isolating the stream pays: {:.3}",
            cat.speedup
        );
    }

    #[test]
    fn one_process_tries_widths_two_processes_also_isolation() {
        let one = assignments(1, 16);
        assert_eq!(one.len(), 5);
        assert_eq!(one[0], vec![0xffff]);
        assert!(one.contains(&vec![0x00ff]));
        let two = assignments(2, 15);
        assert_eq!(two.len(), 1 + 2 * 4 * 2);
        assert!(two.contains(&vec![0x7fff, 0x0001]));
        assert!(two.contains(&vec![0x7ffe, 0x0001]), "isolated");
    }
}
