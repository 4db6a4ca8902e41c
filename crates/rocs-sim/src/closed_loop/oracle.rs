//! The paper's Best Offline: the workload run once per candidate `k` with the rocs run's
//! stacks confined from where they were profiled, keeping the best.

use std::collections::BTreeSet;
use std::time::Instant;

use rocs_core::{Pid, Placement, Remapper, VirtPage};

use super::{
    instructions_of, LoopConfig, LoopError, MachineFactory, OracleRun, ProfilePoint, RocsRun,
};
use crate::RunStats;

/// Run the workload with, for each profile point, the top `ks[i]` pages of its stack
/// confined from that point on (pages of the previous point of the same process that are
/// not in the new set are restored). Steps of `step` cycles; a point applies at the first
/// step boundary at which its process has retired the point's instructions.
pub fn run_with_placements(
    make: &MachineFactory<'_>,
    points: &[ProfilePoint],
    ks: &[usize],
    step: u64,
    pollute: &[rocs_core::Colour],
) -> Result<RunStats, LoopError> {
    let mut m = make()?;
    m.set_pollute_colours(pollute)?;
    let mut next = 0;
    let mut confined: std::collections::HashMap<Pid, BTreeSet<VirtPage>> = Default::default();
    loop {
        // Apply every point that is due (the first may be due at once).
        while next < ks.len() {
            let p = &points[next];
            if instructions_of(&m, p.pid) < p.instructions {
                break;
            }
            let want: BTreeSet<VirtPage> = p.stack.iter().take(ks[next]).copied().collect();
            let have = confined.entry(p.pid).or_default();
            // As the controller does: with k > 0 the buffer is reserved, and stack pages
            // the allocator put in the pollute colours count as confined, so that the ones
            // not wanted there move out; k = 0 leaves everything as it is.
            if !want.is_empty() {
                let colours = m.query(p.pid, &p.stack)?;
                for (page, c) in p.stack.iter().zip(colours) {
                    if c.is_ok_and(|c| pollute.contains(&c)) {
                        have.insert(*page);
                    }
                }
            }
            let restore: Vec<VirtPage> = have.difference(&want).copied().collect();
            let pollute: Vec<VirtPage> = want.difference(have).copied().collect();
            if !restore.is_empty() {
                m.migrate(p.pid, &restore, Placement::Restore)?;
            }
            if !pollute.is_empty() {
                m.migrate(p.pid, &pollute, Placement::Pollute)?;
            }
            *have = want;
            next += 1;
        }
        if !m.run_for_checked(step)? {
            break;
        }
    }
    Ok(m.totals())
}

/// Candidates for one profile: k = 0, an even grid, the region boundaries that matter,
/// and what rocs chose.
fn candidates(p: &ProfilePoint, grid: usize) -> BTreeSet<usize> {
    let n = p.stack.len();
    let mut c: BTreeSet<usize> = (0..=grid.max(1)).map(|i| n * i / grid.max(1)).collect();
    // Region boundaries that split off at least 1/32 of the stack (as the adaptive search
    // sees them), at most 8 of them, evenly chosen.
    let min_gap = n.div_ceil(32).max(1);
    let mut last = 0;
    let mut significant = Vec::new();
    for &b in &p.boundaries {
        if b - last >= min_gap && n - b >= min_gap {
            significant.push(b);
            last = b;
        }
    }
    let every = significant.len().div_ceil(8).max(1);
    c.extend(significant.iter().step_by(every));
    if let Some(k) = p.chosen_k {
        c.insert(k.min(n));
    }
    c
}

/// A curve whose candidates all lie within this of each other is flat.
const FLAT: f64 = 0.01;

/// The coarse candidates tried first when `oracle_coarse_first`: k = 0, the quarters of
/// the stack and rocs's choice.
fn coarse(p: &ProfilePoint) -> BTreeSet<usize> {
    let n = p.stack.len();
    let mut c: BTreeSet<usize> = (0..=4).map(|i| n * i / 4).collect();
    if let Some(k) = p.chosen_k {
        c.insert(k.min(n));
    }
    c
}

/// The paper's Best Offline over the rocs run's profiles (`cfg.oracle_grid` candidates
/// per profile; with `cfg.oracle_coarse_first`, only the coarse ones where they are flat).
pub fn run_oracle(
    make: &MachineFactory<'_>,
    rocs: &RocsRun,
    cfg: &LoopConfig,
    pollute: &[rocs_core::Colour],
    progress: &mut dyn FnMut(&str),
) -> Result<OracleRun, LoopError> {
    // Only profiles whose search finished: the others never changed the placement.
    let points: Vec<ProfilePoint> = rocs
        .profile_points
        .iter()
        .filter(|p| p.chosen_k.is_some() && !p.stack.is_empty())
        .cloned()
        .collect();
    let step = rocs.window_cycles;
    let start = Instant::now();
    if points.is_empty() {
        let stats = run_with_placements(make, &[], &[], step, pollute)?;
        return Ok(OracleRun {
            simulated_accesses: stats.accesses,
            stats,
            wall_seconds: start.elapsed().as_secs_f64(),
            ..OracleRun::default()
        });
    }
    let mut ks: Vec<usize> = Vec::new();
    let mut tried: Vec<(usize, usize, u64)> = Vec::new();
    let mut best_stats = None;
    let mut simulated_accesses = 0;
    for (j, p) in points.iter().enumerate() {
        let mut results: std::collections::BTreeMap<usize, (u64, RunStats)> = Default::default();
        let mut eval = |k: usize,
                        results: &mut std::collections::BTreeMap<usize, (u64, RunStats)>|
         -> Result<(), LoopError> {
            if results.contains_key(&k) {
                return Ok(());
            }
            let mut trial = ks.clone();
            trial.push(k);
            let t = run_with_placements(make, &points[..=j], &trial, step, pollute)?;
            simulated_accesses += t.accesses;
            progress(&format!(
                "oracle profile {}/{}: k = {k} -> {} cycles",
                j + 1,
                points.len(),
                t.cycles
            ));
            results.insert(k, (t.cycles, t));
            Ok(())
        };
        let mut flat = false;
        if cfg.oracle_coarse_first {
            for k in coarse(p) {
                eval(k, &mut results)?;
            }
            let cycles = results.values().map(|(c, _)| *c as f64);
            let (lo, hi) = cycles.fold((f64::INFINITY, 0.0f64), |(lo, hi), c| {
                (lo.min(c), hi.max(c))
            });
            flat = hi <= lo * (1.0 + FLAT);
        }
        let grid = if flat {
            BTreeSet::new()
        } else {
            candidates(p, cfg.oracle_grid)
        };
        for k in grid {
            eval(k, &mut results)?;
        }
        // Refine twice around the best: the midpoints to its neighbours.
        for _ in 0..if flat { 0 } else { 2 } {
            let best = *results
                .iter()
                .min_by_key(|(_, (c, _))| *c)
                .expect("tried")
                .0;
            let keys: Vec<usize> = results.keys().copied().collect();
            let i = keys.iter().position(|&k| k == best).expect("present");
            if i > 0 {
                eval((keys[i - 1] + best) / 2, &mut results)?;
            }
            if i + 1 < keys.len() {
                eval((best + keys[i + 1]) / 2, &mut results)?;
            }
        }
        let (&best, (_, stats)) = results.iter().min_by_key(|(_, (c, _))| *c).expect("tried");
        tried.extend(results.iter().map(|(&k, (c, _))| (j, k, *c)));
        ks.push(best);
        best_stats = Some(stats.clone());
    }
    let stats = best_stats.expect("at least one point");
    Ok(OracleRun {
        stats,
        wall_seconds: start.elapsed().as_secs_f64(),
        simulated_accesses,
        k: ks[0],
        ks,
        candidates: tried,
    })
}
