//! The closed loop: rocs's controller driving the simulated machine, and the two runs it is
//! judged against.
//!
//! - `baseline`: the workload alone, no controller.
//! - `rocs`: the controller online, one per process, windows of `window_cycles`. Its actions
//!   go to the machine through the platform traits and the results come back as
//!   observations; the run pays for sampling, migrations and the windows spent searching.
//! - `oracle`: the paper's "Best Offline". It takes the stacks the rocs run profiled, at the
//!   same points of the program (measured in retired instructions), and runs the workload
//!   once per candidate `k` with the top `k` pages confined from that point on, keeping the
//!   best. With several profiles (phases) it chooses each profile's `k` in turn, holding the
//!   earlier ones at their best. It pays for migrations but not for sampling or searching.
//!
//! Everything is deterministic for a seed.

use std::collections::BTreeSet;
use std::time::Instant;

use rocs_core::{
    Controller, CounterDelta, Driver, DriverError, Engine, EventKind, KnobError, Knobs, Outcome,
    Pid, Placement, Remapper, State, VirtPage,
};
use serde::Serialize;
use thiserror::Error;

use crate::{Machine, RunStats, SimError};

/// Why a closed-loop run failed.
#[derive(Debug, Error)]
pub enum LoopError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("controller knobs: {0}")]
    Knobs(#[from] KnobError),
    #[error("the simulated machine: {0}")]
    Platform(DriverError),
    #[error("the workload ran no instructions: nothing to compare")]
    Empty,
}

/// How the closed loop runs.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopConfig {
    /// Controller windows per baseline run: the window is the baseline's cycles divided by
    /// this (ROCS used 1e9-cycle windows on runs of 1e11 cycles and more).
    pub windows_per_run: u64,
    /// The controller's knobs (the search mode among them).
    pub knobs: Knobs,
    /// Oracle: evenly spaced candidates per profile, besides k = 0, region boundaries,
    /// rocs's own choice and the refinement around the best.
    pub oracle_grid: usize,
}

impl LoopConfig {
    /// The controller window for a workload whose baseline run is `baseline`.
    pub fn window_for(&self, baseline: &BaselineRun) -> u64 {
        (baseline.stats.cycles / self.windows_per_run.max(1)).max(10_000)
    }
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            windows_per_run: 200,
            knobs: sim_knobs(),
            oracle_grid: 16,
        }
    }
}

/// The knobs the simulated evaluation uses: the defaults, except that profiling may use
/// a quarter of the core while it lasts (ROCS profiled at one sample per 5K cycles, paying
/// 15-65%, for short periods; on the 970FX model a sample costs 1500 cycles), and the
/// profile takes 3 to 10 windows.
pub fn sim_knobs() -> Knobs {
    Knobs {
        sample_period: 100,
        sample_cpu_budget: 0.25,
        profile_windows: 3,
        profile_max_windows: 10,
        ..Knobs::default()
    }
}

/// One profile the controller took, and what its search chose.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProfilePoint {
    pub pid: Pid,
    /// The process's retired instructions when the profile ended.
    pub instructions: u64,
    /// Pages with samples.
    pub pages_profiled: usize,
    /// The stack, top first.
    #[serde(skip)]
    pub stack: Vec<VirtPage>,
    pub stack_pages: usize,
    /// Stack positions where the miss rate changes.
    #[serde(skip)]
    pub boundaries: Vec<usize>,
    /// The `k` the search chose (None if the run ended first, or dry run).
    pub chosen_k: Option<usize>,
    /// Windows the search took.
    pub search_windows: Option<u64>,
    /// The search's measured windows: (k, what it recorded: the IPC, or the LLC group's
    /// score when the processes' controllers took turns), in order.
    pub steps: Vec<(usize, f64)>,
}

/// What the rocs run did, besides its counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RocsRun {
    /// The run's counts (reported with the other modes' counts, not here).
    #[serde(skip)]
    pub stats: RunStats,
    #[serde(skip)]
    pub wall_seconds: f64,
    pub search: String,
    pub window_cycles: u64,
    /// Distinct pages sampled, over all profiles.
    pub pages_profiled: usize,
    /// Pages in the pollute buffer at the end.
    pub pages_confined: usize,
    pub search_windows: u64,
    /// Pages moved (either way).
    pub migrations: u64,
    pub migrations_failed: u64,
    /// Cycles the target paid for sampling and migrating.
    pub overhead_cycles: u64,
    pub profiles: u64,
    pub phase_changes: u64,
    /// Phase changes whose new phase missed enough to be profiled.
    pub phase_changes_profiled: u64,
    pub samples: u64,
    pub samples_lost: u64,
    pub profile_points: Vec<ProfilePoint>,
    /// The controllers' states at the end, by pid.
    pub final_states: Vec<(Pid, State)>,
}

/// What the oracle found.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OracleRun {
    /// The best run's counts (reported with the other modes' counts, not here).
    #[serde(skip)]
    pub stats: RunStats,
    #[serde(skip)]
    pub wall_seconds: f64,
    /// Memory references simulated over every candidate run (what the wall time bought).
    #[serde(skip)]
    pub simulated_accesses: u64,
    /// The best `k` of the first profile (the paper's single number).
    pub k: usize,
    /// The best `k` of every profile, in order.
    pub ks: Vec<usize>,
    /// Every candidate tried: (profile index, k, cycles).
    pub candidates: Vec<(usize, usize, u64)>,
}

/// A machine built afresh for every run.
pub type MachineFactory<'a> = dyn Fn() -> Result<Machine, SimError> + 'a;

/// The workload alone.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BaselineRun {
    pub stats: RunStats,
    pub wall_seconds: f64,
}

/// Run the workload alone.
pub fn run_baseline(make: &MachineFactory<'_>) -> Result<BaselineRun, LoopError> {
    let start = Instant::now();
    let mut m = make()?;
    m.run_to_end()?;
    let stats = m.totals();
    if stats.instructions == 0 {
        return Err(LoopError::Empty);
    }
    Ok(BaselineRun {
        stats,
        wall_seconds: start.elapsed().as_secs_f64(),
    })
}

fn instructions_of(m: &Machine, pid: Pid) -> u64 {
    m.totals()
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .map_or(0, |p| p.instructions)
}

/// Run the workload with a controller per process, windows of `window_cycles`. Every
/// process of the machine shares its LLC: one engine owns their controllers, and the
/// driver runs its windows on the machine, as rocsd does.
pub fn run_rocs(
    make: &MachineFactory<'_>,
    knobs: &Knobs,
    window_cycles: u64,
) -> Result<RocsRun, LoopError> {
    let start = Instant::now();
    let mut m = make()?;
    let colours = m.llc_geometry().colours();
    let mut engine = Engine::new();
    for pid in m.pids() {
        let ctrl = Controller::new(pid, knobs.clone(), m.page_shift(), colours)?;
        if engine.is_empty() {
            m.set_pollute_colours(ctrl.pollute_colours())?;
        }
        engine.attach(ctrl);
    }
    let mut driver = Driver::new();
    let mut points: Vec<ProfilePoint> = Vec::new();
    let mut profiled: BTreeSet<(Pid, VirtPage)> = BTreeSet::new();
    let mut outcomes = Vec::new();
    loop {
        let more = m.run_for_checked(window_cycles)?;
        // A process that ran nothing once the machine has finished is gone.
        let exited = |_: Pid, d: &CounterDelta| !more && d.instructions == 0;
        driver.end_window(&mut engine, &mut m, &exited, &mut outcomes);
        for outcome in outcomes.drain(..) {
            let (pid, event) = match outcome {
                Outcome::Event { pid, event } => (pid, event),
                Outcome::Failed { error, .. } => return Err(LoopError::Platform(error)),
            };
            let c = engine
                .controller(pid)
                .expect("the engine keeps exited controllers");
            note_event(&mut points, &mut profiled, &m, c, &event.kind);
        }
        if !more {
            break;
        }
    }
    let t = m.totals();
    let mut run = RocsRun {
        search: knobs.search.to_string(),
        window_cycles,
        overhead_cycles: t.sampling_overhead_cycles + t.migration_overhead_cycles,
        stats: t,
        wall_seconds: start.elapsed().as_secs_f64(),
        pages_profiled: profiled.len(),
        profile_points: points,
        ..RocsRun::default()
    };
    for c in engine.controllers() {
        let s = c.stats();
        run.pages_confined += c.confined().len();
        run.search_windows += s.search_windows;
        run.migrations += s.pages_migrated;
        run.migrations_failed += s.migrations_failed;
        run.profiles += s.profiles;
        run.phase_changes += s.phase_changes;
        run.phase_changes_profiled += s.phase_changes_profiled;
        run.samples += s.samples;
        run.samples_lost += s.samples_lost;
        run.final_states.push((c.pid(), c.state()));
    }
    Ok(run)
}

/// What the oracle needs of the rocs run's events: each profile's stack, where in the
/// program it was taken, and what its search measured and chose.
fn note_event(
    points: &mut Vec<ProfilePoint>,
    profiled: &mut BTreeSet<(Pid, VirtPage)>,
    m: &Machine,
    c: &Controller,
    e: &EventKind,
) {
    match e {
        EventKind::Profiled { .. } => {
            let stack: Vec<VirtPage> = c.stack().top(usize::MAX).collect();
            let boundaries = c.stack().boundaries();
            profiled.extend(c.profile().iter().map(|(p, _)| (c.pid(), p)));
            points.push(ProfilePoint {
                pid: c.pid(),
                instructions: instructions_of(m, c.pid()),
                pages_profiled: c.profile().len(),
                stack_pages: stack.len(),
                stack,
                boundaries,
                chosen_k: None,
                search_windows: None,
                steps: Vec::new(),
            });
        }
        EventKind::SearchStep {
            k,
            ipc,
            group_score,
            ..
        } => {
            if let Some(p) = points.iter_mut().rev().find(|p| p.pid == c.pid()) {
                p.steps.push((*k, group_score.unwrap_or(*ipc)));
            }
        }
        EventKind::SearchDone { k, windows, .. } => {
            if let Some(p) = points.iter_mut().rev().find(|p| p.pid == c.pid()) {
                p.chosen_k = Some(*k);
                p.search_windows = Some(*windows);
            }
        }
        _ => {}
    }
}

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

/// The paper's Best Offline over the rocs run's profiles.
pub fn run_oracle(
    make: &MachineFactory<'_>,
    rocs: &RocsRun,
    grid: usize,
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
        for k in candidates(p, grid) {
            eval(k, &mut results)?;
        }
        // Refine twice around the best: the midpoints to its neighbours.
        for _ in 0..2 {
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

/// Baseline, rocs and oracle of one workload, and how they compare.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub baseline: BaselineRun,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rocs: Option<RocsRun>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleRun>,
    /// baseline cycles / rocs cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// baseline cycles / oracle cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_speedup: Option<f64>,
    /// oracle cycles / rocs cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction_of_oracle: Option<f64>,
}

/// Which runs to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modes {
    pub rocs: bool,
    pub oracle: bool,
}

/// Run baseline (always: it sets the window), then rocs and the oracle as asked. The
/// oracle needs a rocs run for its profiles, so asking for it runs rocs too.
pub fn compare(
    make: &MachineFactory<'_>,
    cfg: &LoopConfig,
    modes: Modes,
    progress: &mut dyn FnMut(&str),
) -> Result<Comparison, LoopError> {
    progress("baseline");
    let baseline = run_baseline(make)?;
    let window = cfg.window_for(&baseline);
    let mut out = Comparison {
        baseline,
        rocs: None,
        oracle: None,
        speedup: None,
        oracle_speedup: None,
        fraction_of_oracle: None,
    };
    if modes.rocs || modes.oracle {
        progress(&format!("rocs ({} search)", cfg.knobs.search));
        let rocs = run_rocs(make, &cfg.knobs, window)?;
        out.speedup = Some(ratio(out.baseline.stats.cycles, rocs.stats.cycles));
        if modes.oracle {
            let colours = make()?.llc_geometry().colours();
            let pollute = cfg.knobs.pollute_colours.resolve(colours)?;
            let oracle = run_oracle(make, &rocs, cfg.oracle_grid, &pollute, progress)?;
            out.oracle_speedup = Some(ratio(out.baseline.stats.cycles, oracle.stats.cycles));
            out.fraction_of_oracle = Some(ratio(oracle.stats.cycles, rocs.stats.cycles));
            out.oracle = Some(oracle);
        }
        if modes.rocs {
            out.rocs = Some(rocs);
        } else {
            out.speedup = None;
        }
    }
    Ok(out)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// One search mode's rocs run in an evaluation row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvalMode {
    pub search: String,
    pub cycles: u64,
    /// baseline cycles / rocs cycles.
    pub speedup: f64,
    /// oracle cycles / rocs cycles.
    pub fraction_of_oracle: f64,
    pub llc_mpki: f64,
    /// rocs MPKI / baseline MPKI - 1.
    pub mpki_change: f64,
    pub pages_confined: usize,
    pub pages_profiled: usize,
    pub search_windows: u64,
    pub migrations: u64,
    pub overhead_cycles: u64,
    /// overhead cycles / rocs cycles.
    pub overhead: f64,
    pub profiles: u64,
    pub phase_changes: u64,
    /// Phase changes whose new phase missed enough to be profiled (the others went back to
    /// Observe: nothing to gain there).
    pub phase_changes_profiled: u64,
    /// The `k` each search chose.
    pub chosen: Vec<Option<usize>>,
}

/// One workload on one machine: baseline, rocs in both search modes, oracle.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvalRow {
    pub machine: String,
    pub workload: String,
    pub window_cycles: u64,
    pub baseline_cycles: u64,
    pub baseline_mpki: f64,
    pub oracle_cycles: u64,
    /// The oracle's best `k` of each profile.
    pub oracle_ks: Vec<usize>,
    /// baseline cycles / oracle cycles.
    pub oracle_speedup: f64,
    pub adaptive: EvalMode,
    pub linear: EvalMode,
}

/// Evaluate one workload: baseline, rocs with `adaptive` and `linear` search, and the
/// oracle over the adaptive run's profiles (both searches start from the same profile:
/// the runs are identical until the search begins).
pub fn evaluate(
    machine: &str,
    workload: &str,
    make: &MachineFactory<'_>,
    cfg: &LoopConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<EvalRow, LoopError> {
    progress("baseline");
    let baseline = run_baseline(make)?;
    let window = cfg.window_for(&baseline);
    let mut runs = Vec::new();
    for search in [
        rocs_core::SearchMode::Adaptive,
        rocs_core::SearchMode::Linear,
    ] {
        progress(&format!("rocs, {search} search"));
        let knobs = Knobs {
            search,
            ..cfg.knobs.clone()
        };
        runs.push(run_rocs(make, &knobs, window)?);
    }
    let linear = runs.pop().expect("two runs");
    let adaptive = runs.pop().expect("two runs");
    let colours = make()?.llc_geometry().colours();
    let pollute = cfg.knobs.pollute_colours.resolve(colours)?;
    let oracle = run_oracle(make, &adaptive, cfg.oracle_grid, &pollute, progress)?;
    let b = &baseline.stats;
    let mode = |r: &RocsRun| EvalMode {
        search: r.search.clone(),
        cycles: r.stats.cycles,
        speedup: ratio(b.cycles, r.stats.cycles),
        fraction_of_oracle: ratio(oracle.stats.cycles, r.stats.cycles),
        llc_mpki: r.stats.llc_mpki(),
        mpki_change: if b.llc_mpki() > 0.0 {
            r.stats.llc_mpki() / b.llc_mpki() - 1.0
        } else {
            0.0
        },
        pages_confined: r.pages_confined,
        pages_profiled: r.pages_profiled,
        search_windows: r.search_windows,
        migrations: r.migrations,
        overhead_cycles: r.overhead_cycles,
        overhead: ratio(r.overhead_cycles, r.stats.cycles),
        profiles: r.profiles,
        phase_changes: r.phase_changes,
        phase_changes_profiled: r.phase_changes_profiled,
        chosen: r.profile_points.iter().map(|p| p.chosen_k).collect(),
    };
    Ok(EvalRow {
        machine: machine.to_string(),
        workload: workload.to_string(),
        window_cycles: window,
        baseline_cycles: b.cycles,
        baseline_mpki: b.llc_mpki(),
        oracle_cycles: oracle.stats.cycles,
        oracle_ks: oracle.ks.clone(),
        oracle_speedup: ratio(b.cycles, oracle.stats.cycles),
        adaptive: mode(&adaptive),
        linear: mode(&linear),
    })
}

/// A whole evaluation: rows for every machine and workload, and how to show them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evaluation {
    pub command: String,
    pub seed: u64,
    pub scale: f64,
    pub windows_per_run: u64,
    pub rows: Vec<EvalRow>,
    /// Each target of the issue, checked.
    pub targets: Vec<TargetCheck>,
}

/// One target and whether the evaluation reaches it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TargetCheck {
    pub target: String,
    pub reached: bool,
    /// What fell short, or the figures that show it holds.
    pub detail: String,
}

/// Workloads where there is nothing to gain: rocs must not lose more than 1%.
const NOTHING_TO_GAIN: &[&str] = &["mcf-like", "twolf-like"];

fn geomean(v: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for x in v {
        sum += x.max(1e-12).ln();
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        (sum / n as f64).exp()
    }
}

impl Evaluation {
    pub fn new(
        command: String,
        seed: u64,
        scale: f64,
        windows_per_run: u64,
        rows: Vec<EvalRow>,
    ) -> Self {
        let mut e = Evaluation {
            command,
            seed,
            scale,
            windows_per_run,
            rows,
            targets: Vec::new(),
        };
        e.targets = e.check_targets();
        e
    }

    fn check_targets(&self) -> Vec<TargetCheck> {
        let mut out = Vec::new();
        for (name, pick) in [
            (
                "adaptive",
                (|r: &EvalRow| &r.adaptive) as fn(&EvalRow) -> &EvalMode,
            ),
            ("linear", |r: &EvalRow| &r.linear),
        ] {
            let gainful: Vec<&EvalRow> = self
                .rows
                .iter()
                .filter(|r| r.oracle_speedup >= 1.05)
                .collect();
            let short: Vec<String> = gainful
                .iter()
                .filter(|r| pick(r).fraction_of_oracle < 0.95)
                .map(|r| {
                    format!(
                        "{} on {}: {:.3}",
                        r.workload,
                        r.machine,
                        pick(r).fraction_of_oracle
                    )
                })
                .collect();
            out.push(TargetCheck {
                target: format!(
                    "{name}: fraction_of_oracle ≥ 0.95 where the oracle gains ≥ 5% ({} workloads)",
                    gainful.len()
                ),
                reached: short.is_empty(),
                detail: if short.is_empty() {
                    format!(
                        "lowest {:.3}",
                        gainful
                            .iter()
                            .map(|r| pick(r).fraction_of_oracle)
                            .fold(f64::INFINITY, f64::min)
                    )
                } else {
                    format!("short: {}", short.join("; "))
                },
            });
            let flat: Vec<&EvalRow> = self
                .rows
                .iter()
                .filter(|r| NOTHING_TO_GAIN.contains(&r.workload.as_str()))
                .collect();
            let lost: Vec<String> = flat
                .iter()
                .filter(|r| pick(r).speedup < 0.99)
                .map(|r| format!("{} on {}: {:.3}", r.workload, r.machine, pick(r).speedup))
                .collect();
            out.push(TargetCheck {
                target: format!(
                    "{name}: speedup ≥ 0.99 where there is nothing to gain (mcf-like, twolf-like)"
                ),
                reached: lost.is_empty() && !flat.is_empty(),
                detail: if lost.is_empty() {
                    flat.iter()
                        .map(|r| format!("{} on {}: {:.3}", r.workload, r.machine, pick(r).speedup))
                        .collect::<Vec<_>>()
                        .join("; ")
                } else {
                    format!("below: {}", lost.join("; "))
                },
            });
        }
        // Never worse than not running, wherever there is nothing to gain (the oracle gains
        // under 1%: e.g. every workload that fits xeon-like's LLC), not only on the two
        // programs the paper lists.
        let flat: Vec<&EvalRow> = self
            .rows
            .iter()
            .filter(|r| r.oracle_speedup < 1.01)
            .collect();
        let lost: Vec<String> = flat
            .iter()
            .filter(|r| r.adaptive.speedup < 0.99)
            .map(|r| format!("{} on {}: {:.3}", r.workload, r.machine, r.adaptive.speedup))
            .collect();
        out.push(TargetCheck {
            target: format!(
                "adaptive: speedup ≥ 0.99 wherever the oracle gains < 1% ({} workloads)",
                flat.len()
            ),
            reached: lost.is_empty() && !flat.is_empty(),
            detail: if lost.is_empty() {
                format!(
                    "lowest {:.3}",
                    flat.iter()
                        .map(|r| r.adaptive.speedup)
                        .fold(f64::INFINITY, f64::min)
                )
            } else {
                format!("below: {}", lost.join("; "))
            },
        });
        let n = self.rows.len().max(1) as f64;
        let win_a = self
            .rows
            .iter()
            .map(|r| r.adaptive.search_windows as f64)
            .sum::<f64>()
            / n;
        let win_l = self
            .rows
            .iter()
            .map(|r| r.linear.search_windows as f64)
            .sum::<f64>()
            / n;
        out.push(TargetCheck {
            target: "adaptive needs fewer search windows than linear on average".into(),
            reached: win_a < win_l,
            detail: format!("adaptive {win_a:.1}, linear {win_l:.1} windows per workload"),
        });
        let g_a = geomean(self.rows.iter().map(|r| r.adaptive.speedup));
        let g_l = geomean(self.rows.iter().map(|r| r.linear.speedup));
        out.push(TargetCheck {
            target: "adaptive is not slower than linear (geometric mean speedup)".into(),
            reached: g_a >= g_l,
            detail: format!("adaptive {g_a:.4}, linear {g_l:.4}"),
        });
        for r in self.rows.iter().filter(|r| r.workload == "phased") {
            // A phase change is worth a profile only if the new phase misses enough (the
            // controller's thresholds); one that does not goes back to Observe, which
            // profiles as soon as the program misses enough again. The target: the changes
            // are seen, and each one worth profiling is followed by a profile.
            let m = &r.adaptive;
            let quiet = m.phase_changes - m.phase_changes_profiled.min(m.phase_changes);
            let ok = m.phase_changes >= 1 && m.profiles > m.phase_changes_profiled;
            out.push(TargetCheck {
                target: format!(
                    "phased on {}: re-profiles after each phase change worth profiling",
                    r.machine
                ),
                reached: ok,
                detail: format!(
                    "{} phase changes ({} worth profiling, {} into a phase that misses too little), {} profiles, fraction of oracle {:.3}",
                    m.phase_changes,
                    m.phase_changes_profiled,
                    quiet,
                    m.profiles,
                    m.fraction_of_oracle
                ),
            });
        }
        out
    }

    /// The machines, in the order they were evaluated.
    pub fn machines(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in &self.rows {
            if !v.contains(&r.machine) {
                v.push(r.machine.clone());
            }
        }
        v
    }

    /// The table in Markdown, like the paper's (Fig. 8, Fig. 9, Table 3, Fig. 7).
    pub fn markdown(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# rocs in simulation: speedup, MPKI, pages confined, search, overhead\n"
        );
        let _ = writeln!(
            s,
            "Produced by `{}` (seed {}, workload scale {}, controller window = baseline cycles / {}). \
             Do not edit by hand: run the command again.\n",
            self.command, self.seed, self.scale, self.windows_per_run
        );
        let _ = writeln!(
            s,
            "speedup = baseline cycles / rocs cycles; oracle = the best offline `k` for the same \
             profile (ROCS's Best Offline); of oracle = oracle cycles / rocs cycles; MPKI = LLC \
             misses per 1000 instructions, change against baseline; overhead = cycles the \
             target paid for sampling and migrating / rocs cycles (search windows spent at \
             worse `k` are in the speedup, not here).\n"
        );
        for machine in self.machines() {
            let _ = writeln!(s, "## {machine}\n");
            let _ = writeln!(s, "![speedups on {machine}](speedup-{machine}.svg)\n");
            let _ = writeln!(
                s,
                "| workload | oracle speedup (k) | rocs speedup | of oracle | MPKI change | pages confined / profiled | search windows | overhead | linear: speedup | of oracle | search windows |"
            );
            let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            let rows: Vec<&EvalRow> = self.rows.iter().filter(|r| r.machine == machine).collect();
            for r in &rows {
                let a = &r.adaptive;
                let l = &r.linear;
                let ks: Vec<String> = r.oracle_ks.iter().map(|k| k.to_string()).collect();
                let _ = writeln!(
                    s,
                    "| {} | {:.3} ({}) | {:.3} | {:.3} | {:+.1}% | {} / {} | {} | {:.2}% | {:.3} | {:.3} | {} |",
                    r.workload,
                    r.oracle_speedup,
                    if ks.is_empty() { "-".to_string() } else { ks.join(", ") },
                    a.speedup,
                    a.fraction_of_oracle,
                    a.mpki_change * 100.0,
                    a.pages_confined,
                    a.pages_profiled,
                    a.search_windows,
                    a.overhead * 100.0,
                    l.speedup,
                    l.fraction_of_oracle,
                    l.search_windows,
                );
            }
            let n = rows.len().max(1) as f64;
            let _ = writeln!(
                s,
                "| **mean** | {:.3} | {:.3} | {:.3} | {:+.1}% | | {:.1} | {:.2}% | {:.3} | {:.3} | {:.1} |\n",
                rows.iter().map(|r| r.oracle_speedup).sum::<f64>() / n,
                rows.iter().map(|r| r.adaptive.speedup).sum::<f64>() / n,
                rows.iter().map(|r| r.adaptive.fraction_of_oracle).sum::<f64>() / n,
                rows.iter().map(|r| r.adaptive.mpki_change).sum::<f64>() / n * 100.0,
                rows.iter().map(|r| r.adaptive.search_windows as f64).sum::<f64>() / n,
                rows.iter().map(|r| r.adaptive.overhead).sum::<f64>() / n * 100.0,
                rows.iter().map(|r| r.linear.speedup).sum::<f64>() / n,
                rows.iter().map(|r| r.linear.fraction_of_oracle).sum::<f64>() / n,
                rows.iter().map(|r| r.linear.search_windows as f64).sum::<f64>() / n,
            );
        }
        let _ = writeln!(s, "## Targets\n");
        for t in &self.targets {
            let _ = writeln!(
                s,
                "- {} **{}**: {}",
                if t.reached { "reached" } else { "NOT reached" },
                t.target,
                t.detail
            );
        }
        s
    }

    /// A grouped bar chart of speedups on `machine`: baseline, rocs (adaptive), rocs
    /// (linear), oracle, per workload.
    pub fn svg(&self, machine: &str) -> String {
        use std::fmt::Write;
        let rows: Vec<&EvalRow> = self.rows.iter().filter(|r| r.machine == machine).collect();
        let series: [(&str, &str); 4] = [
            ("baseline", "#9e9e9e"),
            ("rocs (adaptive)", "#1f77b4"),
            ("rocs (linear)", "#7fb3e0"),
            ("oracle", "#ff7f0e"),
        ];
        let value = |r: &EvalRow, i: usize| match i {
            0 => 1.0,
            1 => r.adaptive.speedup,
            2 => r.linear.speedup,
            _ => r.oracle_speedup,
        };
        let max = rows
            .iter()
            .flat_map(|r| (0..4).map(move |i| value(r, i)))
            .fold(1.0f64, f64::max);
        let top = (max * 4.0).ceil() / 4.0 + 0.25;
        let (left, right, plot_top, plot_h, group_w, bar_w) =
            (60.0, 20.0, 50.0, 260.0, 100.0, 18.0);
        let width = left + right + group_w * rows.len().max(1) as f64;
        let height = plot_top + plot_h + 90.0;
        let y = |v: f64| plot_top + plot_h * (1.0 - v / top);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{:.0}" y="20" font-size="14" text-anchor="middle">Speedup over baseline on {machine} (seed {}, scale {})</text>"#,
            width / 2.0,
            self.seed,
            self.scale
        );
        let mut v = 0.0;
        while v <= top + 1e-9 {
            let yy = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" y1="{yy:.1}" x2="{:.0}" y2="{yy:.1}" stroke="{}" stroke-width="1"/><text x="{:.0}" y="{:.1}" text-anchor="end">{v:.2}</text>"##,
                width - right,
                if (v - 1.0).abs() < 1e-9 {
                    "#555"
                } else {
                    "#e0e0e0"
                },
                left - 6.0,
                yy + 4.0
            );
            v += 0.25;
        }
        for (g, r) in rows.iter().enumerate() {
            let x0 = left + g as f64 * group_w + (group_w - 4.0 * bar_w) / 2.0;
            for (i, (name, colour)) in series.iter().enumerate() {
                let val = value(r, i);
                let x = x0 + i as f64 * bar_w;
                let _ = writeln!(
                    s,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{} {name}: {val:.3}</title></rect>"#,
                    y(val),
                    bar_w - 2.0,
                    y(0.0) - y(val),
                    r.workload
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                left + g as f64 * group_w + group_w / 2.0,
                plot_top + plot_h + 16.0,
                r.workload
            );
        }
        for (i, (name, colour)) in series.iter().enumerate() {
            let x = left + i as f64 * 130.0;
            let yy = plot_top + plot_h + 45.0;
            let _ = writeln!(
                s,
                r#"<rect x="{x:.0}" y="{:.0}" width="12" height="12" fill="{colour}"/><text x="{:.0}" y="{:.0}">{name}</text>"#,
                yy - 10.0,
                x + 16.0,
                yy
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(speedup: f64, phase_changes: u64, profiled: u64, profiles: u64) -> EvalMode {
        EvalMode {
            search: "adaptive".into(),
            cycles: 1,
            speedup,
            fraction_of_oracle: 1.0,
            llc_mpki: 1.0,
            mpki_change: 0.0,
            pages_confined: 0,
            pages_profiled: 0,
            search_windows: 0,
            migrations: 0,
            overhead_cycles: 0,
            overhead: 0.0,
            profiles,
            phase_changes,
            phase_changes_profiled: profiled,
            chosen: Vec::new(),
        }
    }

    fn row(machine: &str, workload: &str, oracle: f64, adaptive: EvalMode) -> EvalRow {
        EvalRow {
            machine: machine.into(),
            workload: workload.into(),
            window_cycles: 1,
            baseline_cycles: 1,
            baseline_mpki: 1.0,
            oracle_cycles: 1,
            oracle_ks: Vec::new(),
            oracle_speedup: oracle,
            linear: adaptive.clone(),
            adaptive,
        }
    }

    fn check<'a>(e: &'a Evaluation, starts: &str) -> &'a TargetCheck {
        e.targets
            .iter()
            .find(|t| t.target.starts_with(starts))
            .unwrap_or_else(|| panic!("no target {starts:?}: {:#?}", e.targets))
    }

    #[test]
    fn phase_changes_into_quiet_phases_need_no_profile() {
        let rows = vec![
            // Three changes, each worth a profile: 4 profiles.
            row("ppc970fx", "phased", 1.25, mode(1.2, 3, 3, 4)),
            // One change into a phase that misses too little: back to Observe, 1 profile.
            row("xeon-like", "phased", 1.0, mode(1.0, 1, 0, 1)),
            // A change worth a profile that never got one.
            row("other", "phased", 1.0, mode(1.0, 2, 2, 2)),
        ];
        let e = Evaluation::new(String::new(), 1, 1.0, 200, rows);
        assert!(check(&e, "phased on ppc970fx").reached);
        let x = check(&e, "phased on xeon-like");
        assert!(x.reached, "{x:?}");
        assert!(x.detail.contains("0 worth profiling"), "{}", x.detail);
        assert!(!check(&e, "phased on other").reached);
    }

    #[test]
    fn nothing_to_gain_means_anywhere_the_oracle_gains_under_1_percent() {
        let rows = vec![
            row("xeon-like", "cg-like", 1.0, mode(0.994, 0, 0, 1)),
            row("ppc970fx", "art-like", 1.22, mode(0.9, 0, 0, 1)),
        ];
        let e = Evaluation::new(String::new(), 1, 1.0, 200, rows.clone());
        assert!(check(&e, "adaptive: speedup ≥ 0.99 wherever").reached);
        let mut rows = rows;
        rows[0].adaptive.speedup = 0.904;
        let e = Evaluation::new(String::new(), 1, 1.0, 200, rows);
        let t = check(&e, "adaptive: speedup ≥ 0.99 wherever");
        assert!(!t.reached);
        assert!(
            t.detail.contains("cg-like on xeon-like: 0.904"),
            "{}",
            t.detail
        );
    }
}
