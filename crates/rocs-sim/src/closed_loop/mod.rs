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
//!   Like the controller, it may not choose a `k` that slows any process by more than
//!   `max_slowdown` against the run with nothing confined (unless background): the best placement the policy
//!   allows, not the fastest at any tenant's expense.
//!
//! Everything is deterministic for a seed.

mod campaign;
mod evaluation;
mod kept;
mod oracle;
pub mod random;
pub mod real;
mod render;
mod rival;

use std::collections::BTreeSet;
use std::time::Instant;

use rocs_core::{
    Controller, CounterDelta, Driver, DriverError, Engine, EventKind, KnobError, Knobs, Outcome,
    Pid, State, VirtPage,
};

pub use campaign::{
    random_cases, run_case, run_case_at, window_cost_scale, RandomCampaign, RandomCase,
    RandomCaseRows, RandomRow, RandomSummary,
};
pub use evaluation::{evaluate, evaluate_modern, EvalMode, EvalRow, Evaluation, TargetCheck};
pub use kept::{KeepError, KeptRuns, NothingKept};
pub use oracle::{run_oracle, run_with_placements};
pub use rival::{run_cat, CatRun};
use serde::Serialize;
use thiserror::Error;

use crate::{Machine, MachineSpec, RunStats, SimError};

/// Why a closed-loop run failed.
#[derive(Debug, Error)]
pub enum LoopError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("controller knobs")]
    Knobs(#[from] KnobError),
    #[error("the simulated machine: {0}")]
    Platform(DriverError),
    #[error("the workload ran no instructions: nothing to compare")]
    Empty,
    #[error("keeping the finished run {what:?} to resume from")]
    Keep {
        what: String,
        #[source]
        source: KeepError,
    },
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
    /// Oracle: try k = 0, quarters of the stack and rocs's choice first, and stop there
    /// if they all lie within 1% of each other (a flat curve: nothing for the full grid
    /// to find). The modern suite's, whose runs are long.
    pub oracle_coarse_first: bool,
    /// Runs of one case that do not depend on each other (the oracle's candidates of one
    /// round, CAT's masks) are made this many at a time. Every run is deterministic, so
    /// the results do not depend on it; a suite's last case, alone, no longer leaves the
    /// other cores idle for hours.
    pub threads: usize,
}

impl LoopConfig {
    /// The configuration of a run at `cost_scale` times its machine's costs of a page move
    /// and a sample. Below 1 the run stands for rocsd's window ([`window_cost_scale`]):
    /// each simulated window for one making 1/`cost_scale` times the accesses, which
    /// rocsd samples at its own period and CPU budget ([`Knobs::default`]). So the profile
    /// samples every `cost_scale` times rocsd's period events, as many samples a window as
    /// rocsd takes, and pays for them the share of a core rocsd does. With the
    /// simulator's own period and budget ([`sim_knobs`]), made for windows as short as the
    /// simulated ones, such a run sampled 2000 x `cost_scale` / 100 times as densely as
    /// rocsd (on random.md a median 1/17, from 1/100 to about as densely) and paid as
    /// many times less (NOTES.md, session 46).
    ///
    /// Returns the machine at those costs ([`MachineSpec::with_costs_scaled`]) with the
    /// configuration: the two always go together.
    pub fn at_cost_scale(
        &self,
        spec: &MachineSpec,
        cost_scale: f64,
    ) -> Result<(MachineSpec, LoopConfig), SimError> {
        let spec = spec.with_costs_scaled(cost_scale)?;
        let mut cfg = self.clone();
        if cost_scale < 1.0 {
            let rocsd = Knobs::default();
            cfg.knobs.sample_period =
                ((rocsd.sample_period as f64 * cost_scale).round() as u64).max(1);
            cfg.knobs.sample_cpu_budget = rocsd.sample_cpu_budget;
        }
        Ok((spec, cfg))
    }

    /// The controller window for a workload whose baseline run is `baseline`.
    pub fn window_for(&self, baseline: &BaselineRun) -> u64 {
        self.window_of(baseline.stats.cycles)
    }

    /// The controller window for a workload whose baseline run took `baseline_cycles`.
    pub fn window_of(&self, baseline_cycles: u64) -> u64 {
        (baseline_cycles / self.windows_per_run.max(1)).max(10_000)
    }
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            windows_per_run: 200,
            knobs: sim_knobs(),
            oracle_grid: 16,
            oracle_coarse_first: false,
            threads: 1,
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
    /// The `k` the search chose, 0 if the controller judged the profile not worth a search
    /// (None if the run ended first, or dry run).
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
    /// Samples the controllers received (the machine's own count is `samples` in its
    /// counts, beside which this is reported).
    #[serde(rename = "samples_received")]
    pub samples: u64,
    pub samples_lost: u64,
    pub profile_points: Vec<ProfilePoint>,
    /// The controllers' states at the end, by pid.
    pub final_states: Vec<(Pid, State)>,
    /// The processes seen to exit before the machine finished, with the machine's cycle
    /// count at the end of the window that saw it.
    pub exits: Vec<(Pid, u64)>,
    /// Window by window, what each controller measured and what it did (`rocsctl sim run
    /// --timeline` prints it; left out of the run's JSON otherwise).
    #[serde(skip)]
    pub timeline: Timeline,
}

/// What the controllers measured and did, window by window: the figures behind a run's
/// speedup, in the words rocsd's history uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timeline {
    /// One row per window and attached process, in order.
    pub windows: Vec<WindowRow>,
    /// The controllers' events, in the order they happened.
    pub events: Vec<TimelineEvent>,
}

/// One process's window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WindowRow {
    /// The window's index in the run, from 0.
    pub window: u64,
    /// The machine's cycle count when the window ended.
    pub end_cycle: u64,
    pub pid: Pid,
    /// The process's counts in this window.
    pub instructions: u64,
    pub cycles: u64,
    pub llc_misses: u64,
    pub llc_references: u64,
    /// The controller's state once it had seen the window.
    pub state: State,
    /// Pages in the pollute buffer once it had seen the window.
    pub confined: usize,
}

/// A controller event, and the window whose end produced it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineEvent {
    pub window: u64,
    pub pid: Pid,
    #[serde(flatten)]
    pub kind: EventKind,
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
    /// Every candidate tried: (profile index, k, cycles; for one given up, its cycles
    /// then).
    pub candidates: Vec<(usize, usize, u64)>,
    /// Candidates not chosen whatever their cycles because they slowed a tenant by more
    /// than `max_slowdown` against the run with nothing confined: (profile index, k).
    pub refused: Vec<(usize, usize)>,
    /// Candidates given up once slower than one within that bound: (profile index, k).
    pub given_up: Vec<(usize, usize)>,
    /// Pages the best `ks` asked to confine that could not be moved (a full pollute
    /// buffer, or not mapped).
    pub pages_not_confined: u64,
}

/// A machine built afresh for every run (from several threads at once: see
/// [`LoopConfig::threads`]).
pub type MachineFactory<'a> = dyn Fn() -> Result<Machine, SimError> + Sync + 'a;

/// `run` applied to every item, up to `threads` at a time; `finished` is told of each result
/// as it comes, on the calling thread (progress lines need no locking). The results in
/// item order.
pub(super) fn in_threads<T: Sync, R: Send>(
    threads: usize,
    items: &[T],
    run: impl Fn(&T) -> R + Sync,
    mut finished: impl FnMut(&T, &R),
) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut out: Vec<Option<R>> = items.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            let tx = tx.clone();
            let (next, run) = (&next, &run);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= items.len() || tx.send((i, run(&items[i]))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            finished(&items[i], &r);
            out[i] = Some(r);
        }
    });
    out.into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

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

pub(crate) fn instructions_of(m: &Machine, pid: Pid) -> u64 {
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
    let llc = m.llc_geometry();
    let colours = llc.colours();
    // The controller is told what a page migration costs on this machine, as an operator
    // would set it for theirs.
    let knobs = Knobs {
        migration_cost_cycles: m.migration_cycles(),
        ..knobs.clone()
    };
    let mut engine = Engine::new();
    for pid in m.pids() {
        let mut ctrl = Controller::new(pid, knobs.clone(), m.page_shift(), colours)?;
        ctrl.set_llc(&llc);
        ctrl.set_sampling_pauses_prefetch(m.pauses_prefetch_while_sampling());
        if engine.is_empty() {
            m.set_pollute_colours(ctrl.pollute_colours())?;
        }
        engine.attach(ctrl);
    }
    let mut driver = Driver::new();
    let mut points: Vec<ProfilePoint> = Vec::new();
    let mut profiled: BTreeSet<(Pid, VirtPage)> = BTreeSet::new();
    let mut outcomes = Vec::new();
    let mut exits = Vec::new();
    let mut timeline = Timeline::default();
    for window in 0.. {
        let more = m.run_for_checked(window_cycles)?;
        // A process that has run to its end and ran nothing in this window is gone, as
        // rocsd sees a process exit on Linux. Until then it is a sharer that stopped
        // running: its controller would keep the LLC's turn, and every other target would
        // wait for it until the last process ended.
        let finished = m.finished_pids();
        let exited = |pid: Pid, d: &CounterDelta| finished.contains(&pid) && d.instructions == 0;
        let counted = driver.end_window(&mut engine, &mut m, &exited, &mut outcomes);
        for (pid, d) in counted {
            let Some(c) = engine.controller(pid) else {
                continue;
            };
            timeline.windows.push(WindowRow {
                window,
                end_cycle: m.now(),
                pid,
                instructions: d.instructions,
                cycles: d.cycles,
                llc_misses: d.llc_misses,
                llc_references: d.llc_references,
                state: c.state(),
                confined: c.confined().len(),
            });
        }
        for outcome in outcomes.drain(..) {
            let (pid, event) = match outcome {
                Outcome::Event { pid, event } => (pid, event),
                Outcome::Failed { error, .. } => return Err(LoopError::Platform(error)),
                // The machine's own counts say what sampling cost.
                Outcome::SamplingCost { .. } => continue,
            };
            if more
                && matches!(
                    event.kind,
                    EventKind::Transition {
                        to: State::Exited,
                        ..
                    }
                )
            {
                exits.push((pid, m.now()));
            }
            let c = engine
                .controller(pid)
                .expect("the engine keeps exited controllers");
            note_event(&mut points, &mut profiled, &m, c, &event.kind);
            timeline.events.push(TimelineEvent {
                window,
                pid,
                kind: event.kind,
            });
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
        exits,
        timeline,
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
        // A profile the controller judged not worth a search (nothing to win, too noisy to
        // tell) ends with k = 0 as surely as a search that chose it: the oracle judges it
        // too, or a gain the controller declined would never show.
        EventKind::Transition { from, to, .. }
            if matches!(from, State::Profile | State::Search)
                && matches!(to, State::Steady | State::Observe)
                && !c.knobs().dry_run =>
        {
            if let Some(p) = points.iter_mut().rev().find(|p| p.pid == c.pid()) {
                p.chosen_k.get_or_insert(0);
            }
        }
        _ => {}
    }
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

impl Modes {
    /// Baseline, rocs and the oracle: what every suite compares.
    pub const ALL: Modes = Modes {
        rocs: true,
        oracle: true,
    };
}

/// Run baseline (always: it sets the window), then rocs and the oracle as asked. The
/// oracle needs a rocs run for its profiles, so asking for it runs rocs too.
pub fn compare(
    make: &MachineFactory<'_>,
    cfg: &LoopConfig,
    modes: Modes,
    progress: &mut dyn FnMut(&str),
) -> Result<Comparison, LoopError> {
    compare_on(make, None, cfg, modes, progress)
}

/// [`compare`] with rocs and the oracle on machines from `make_rocs` if given (the same
/// machine set up otherwise: CAT's way masks, the prefetcher left on while profiling),
/// judged against the baseline from `make`, as the modern suite's columns are.
pub fn compare_on(
    make: &MachineFactory<'_>,
    make_rocs: Option<&MachineFactory<'_>>,
    cfg: &LoopConfig,
    modes: Modes,
    progress: &mut dyn FnMut(&str),
) -> Result<Comparison, LoopError> {
    let same_machine = make_rocs.is_none();
    let make_rocs = make_rocs.unwrap_or(make);
    // Knobs the controller would refuse are refused before the baseline runs, which takes
    // minutes on a modern machine at `--scale auto`.
    let colours = make_rocs()?.llc_geometry().colours();
    if modes.rocs || modes.oracle {
        cfg.knobs.validate(colours)?;
    }
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
        let rocs = run_rocs(make_rocs, &cfg.knobs, window)?;
        out.speedup = Some(ratio(out.baseline.stats.cycles, rocs.stats.cycles));
        if modes.oracle {
            let pollute = cfg.knobs.pollute_colours.resolve(colours)?;
            // Only the baseline's own machine runs as the oracle's k = 0 does.
            let nothing_confined = same_machine.then_some(&out.baseline.stats);
            let oracle = run_oracle(
                make_rocs,
                &rocs,
                cfg,
                &pollute,
                nothing_confined,
                &NothingKept,
                progress,
            )?;
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

/// Whether `candidate` keeps every process within the policy's bound on slowdown against
/// `reference`, the same run with nothing confined: what the controller's group search
/// allows (each tenant at least `1 - max_slowdown` of its pace, unless background), and so
/// what the offline oracles may choose. An oracle that slowed one tenant by 17% to speed
/// the pair up by 6% is a placement rocs must refuse, not one it should reach.
fn within_slowdown_bound(reference: &RunStats, candidate: &RunStats, knobs: &Knobs) -> bool {
    knobs.background
        || tenant_speedups(reference, candidate)
            .iter()
            .all(|&s| s >= 1.0 - knobs.max_slowdown)
}

/// Of `runs` (a candidate and its counts), the fastest within the slowdown bound against
/// `reference`; the same choice for both offline oracles.
fn fastest_within_bound<'a, K>(
    runs: impl IntoIterator<Item = (K, &'a RunStats)>,
    reference: &RunStats,
    knobs: &Knobs,
) -> Option<K> {
    runs.into_iter()
        .filter(|(_, s)| within_slowdown_bound(reference, s, knobs))
        .min_by_key(|(_, s)| s.cycles)
        .map(|(k, _)| k)
}

/// Each tenant's speedup under rocs: its baseline cycles over its cycles in `rocs` (0 for a
/// tenant missing from `rocs`).
fn tenant_speedups(baseline: &crate::RunStats, rocs: &crate::RunStats) -> Vec<f64> {
    baseline
        .processes
        .iter()
        .map(|b| {
            let under_rocs = rocs.processes.iter().find(|p| p.pid == b.pid);
            ratio(b.cycles, under_rocs.map_or(0, |p| p.cycles))
        })
        .collect()
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::in_threads;

    #[test]
    fn runs_made_on_threads_come_back_in_item_order_each_reported_once() {
        let items: Vec<u64> = (0..23).collect();
        for threads in [0, 1, 4, 64] {
            let mut reported = Vec::new();
            // Later items finish first: results must still line up with their items.
            let out = in_threads(
                threads,
                &items,
                |&i| {
                    std::thread::sleep(std::time::Duration::from_micros(200 * (23 - i)));
                    i * i
                },
                |&i, &r| reported.push((i, r)),
            );
            assert_eq!(out, items.iter().map(|i| i * i).collect::<Vec<_>>());
            reported.sort();
            assert_eq!(
                reported,
                items.iter().map(|&i| (i, i * i)).collect::<Vec<_>>()
            );
        }
        assert!(in_threads(2, &[] as &[u64], |&i| i, |_, _| {}).is_empty());
    }
}
