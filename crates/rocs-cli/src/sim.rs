//! `rocsctl sim`: the simulated machine. List what is built in, run a workload in one or
//! more modes, replay, record or convert a real program's trace (`trace`).
//!
//! Each mode is one function returning a serializable [`ModeReport`]; adding a mode is
//! adding a variant to [`Mode`] and a branch in [`run_mode`].

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use rocs_core::{PolluteColours, SearchMode};
use rocs_sim::closed_loop::{
    self, Comparison, LoopConfig, MachineFactory, Modes, OracleRun, RocsRun,
};
use rocs_sim::machine::Counts;
use rocs_sim::{
    builtin_machines, builtin_workloads, Machine, MachineSpec, RunStats, Scale, Workload,
};
use serde::Serialize;

mod eval;
mod journal;
mod progress;
mod random;
mod real;
mod timeline;
mod trace;

use progress::Steps;
use timeline::TimelineReport;

#[derive(Subcommand)]
pub enum SimCommand {
    /// List the built-in machine specs and workloads.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Run a workload on a simulated machine.
    Run(RunArgs),
    /// Replay a real program's memory trace (valgrind lackey --trace-mem=yes, or rocs's binary
    /// format) on a simulated machine, record one (--record -- PROGRAM ARGS...), or convert
    /// one to the binary format (`sim trace convert IN OUT`).
    Trace(trace::TraceCommand),
    /// Evaluate rocs on a suite: the ROCS paper's programs (paper), modern machines against
    /// CAT (modern), generated workloads (random) or real programs' traces (real): baseline,
    /// rocs and the oracle, written as Markdown with SVG charts.
    Eval(eval::EvalArgs),
}

/// How rocs runs in the closed loop.
#[derive(Args, Clone)]
pub struct LoopArgs {
    /// How the controller searches for k.
    #[arg(long, value_enum, default_value_t = SearchArg::Adaptive)]
    pub search: SearchArg,
    /// Controller windows per baseline run (window = baseline cycles / this).
    #[arg(long, default_value_t = LoopConfig::default().windows_per_run)]
    pub windows: u64,
    /// Oracle: evenly spaced candidate k per profile (plus region boundaries, rocs's choice
    /// and a refinement around the best).
    #[arg(long, default_value_t = LoopConfig::default().oracle_grid)]
    pub oracle_grid: usize,
    /// Also print the rocs run window by window: each process's IPC, LLC MPKI, state and
    /// pages confined, and the controllers' events (profiles, search steps, state changes)
    /// in the words of `rocsctl history`.
    #[arg(long)]
    pub timeline: bool,
    /// Draw the rocs run window by window (each process's IPC, its controller's state, the
    /// pages it confined) as an SVG picture in this file.
    #[arg(long, value_name = "FILE")]
    pub timeline_svg: Option<std::path::PathBuf>,
    /// Colours of the pollute buffer (the highest N of the LLC's). Default: the policy
    /// knob's, one colour (1/16 of ppc970fx's LLC); the modern suite gives it 1/16 of the
    /// LLC's colours (32 on zen4-like), so give that to run a modern.md row again.
    #[arg(long, value_name = "N")]
    pub pollute_colours: Option<u32>,
}

impl LoopArgs {
    fn config(&self, mode: Mode) -> anyhow::Result<LoopConfig> {
        if (self.timeline || self.timeline_svg.is_some()) && !matches!(mode, Mode::Rocs | Mode::All)
        {
            anyhow::bail!(
                "--timeline and --timeline-svg show the rocs run window by window: give \
                 --mode rocs or --mode all"
            );
        }
        if self.windows == 0 {
            anyhow::bail!("--windows must be at least 1");
        }
        if self.oracle_grid == 0 {
            anyhow::bail!("--oracle-grid must be at least 1");
        }
        let mut cfg = LoopConfig {
            windows_per_run: self.windows,
            oracle_grid: self.oracle_grid,
            ..LoopConfig::default()
        };
        cfg.knobs.search = match self.search {
            SearchArg::Linear => SearchMode::Linear,
            SearchArg::Adaptive => SearchMode::Adaptive,
        };
        if let Some(n) = self.pollute_colours {
            cfg.knobs.pollute_colours = PolluteColours::Count(n);
        }
        Ok(cfg)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SearchArg {
    /// ROCS Algorithm 1.
    Linear,
    /// Coarse-to-fine over k, k = 0 always a candidate.
    Adaptive,
}

#[derive(Args)]
pub struct RunArgs {
    /// Built-in workload name or a workload .toml file.
    #[arg(long)]
    pub workload: String,
    /// Built-in machine name or a machine .toml file.
    #[arg(long, default_value = "ppc970fx")]
    pub machine: String,
    /// Seed of everything random (same seed, same numbers).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// What to run.
    #[arg(long, value_enum, default_value_t = Mode::Baseline)]
    pub mode: Mode,
    /// Multiply the workload's length (e.g. 0.1 for a quick run), or `auto` (sizes relative
    /// to the machine's LLC, lengths in proportion) or `auto:N` (that, lengths times N).
    #[arg(long, default_value = "1")]
    pub scale: Scale,
    #[command(flatten)]
    pub closed_loop: LoopArgs,
    /// rocs on these resctrl way masks (hex, one per process in pid order, e.g.
    /// 0xffff,0x1), judged against the baseline with every way: modern.md's "both" column
    /// (give the masks of its oracle-CAT column). --mode rocs only.
    #[arg(long, value_delimiter = ',', value_parser = parse_way_mask, value_name = "MASKS")]
    pub cat_masks: Option<Vec<u64>>,
    /// rocs profiling with the L2 prefetcher left on, on a machine that switches it off
    /// while sampling: modern.md's "rocs, pf on" column. --mode rocs only.
    #[arg(long)]
    pub prefetch_on_while_profiling: bool,
    /// The machine with its costs of a page migration and a sample F times its own
    /// (random.md's "cost scale": the costs a short simulated window stands for); below
    /// 1, rocs samples as rocsd does a window 1/F times as long (its sample period times
    /// F, its CPU budget).
    #[arg(long, default_value_t = 1.0, value_name = "F")]
    pub cost_scale: f64,
    #[arg(long)]
    pub json: bool,
}

fn parse_way_mask(s: &str) -> Result<u64, String> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(digits, 16)
        .map_err(|e| format!("{s:?} is not a way mask in hex (e.g. 0xffff): {e}"))
}

/// How a workload is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No rocs: pages stay on the frames the allocator gave them.
    Baseline,
    /// rocs's controller online (the baseline runs too: it sets the window and the
    /// speedup).
    Rocs,
    /// The best offline k for rocs's own profile (ROCS's Best Offline): the workload run
    /// once per candidate k, candidates on a grid over that profile's region boundaries
    /// (--oracle-grid); runs baseline and rocs too, whose profile it uses. Progress lines
    /// 'oracle profile i/n' are its runs for rocs's i-th profile of n. Like rocs, it may not
    /// choose a k that slows any process by more than max_slowdown against the run with
    /// nothing confined.
    Oracle,
    /// Baseline, rocs and oracle.
    All,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::Rocs => "rocs",
            Mode::Oracle => "oracle",
            Mode::All => "all",
        }
    }
}

/// What the oracle's numbers mean, under them.
const ORACLE_MEANS: &str =
    "  (the oracle: the best k for rocs's own profile, found offline by running the workload once
   per candidate k on a grid over the profile's region boundaries, --oracle-grid; above 1,
   rocs's online choice did better than every k the oracle tried)";

/// The numbers of one mode's run: the machine's counts as it declares them, and what
/// follows from them.
#[derive(Clone, Debug, Serialize)]
pub struct ModeReport {
    #[serde(flatten)]
    pub counts: Counts,
    pub ipc: f64,
    pub llc_miss_rate: f64,
    pub llc_mpki: f64,
    /// Memory references simulated (data and instruction fetches); for the oracle, over
    /// every candidate run.
    pub sim_accesses: u64,
    pub wall_seconds: f64,
    pub processes: Vec<rocs_sim::ProcessStats>,
    /// rocs only: what the controller did.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub rocs: Option<RocsRun>,
    /// oracle only: the best k.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleRun>,
}

impl ModeReport {
    fn from_stats(t: RunStats, wall_seconds: f64) -> Self {
        ModeReport {
            counts: t.counts,
            ipc: t.ipc(),
            llc_miss_rate: t.llc_miss_rate(),
            llc_mpki: t.llc_mpki(),
            sim_accesses: t.accesses,
            wall_seconds,
            processes: t.processes,
            rocs: None,
            oracle: None,
        }
    }
}

/// The report of `sim run` / `sim trace`.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub workload: String,
    pub machine: String,
    pub seed: u64,
    /// Simulated memory references per wall-clock second (all modes together).
    pub sim_accesses_per_sec: f64,
    /// One entry per mode run, keyed by mode name.
    pub modes: std::collections::BTreeMap<String, ModeReport>,
    /// baseline cycles / rocs cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// baseline cycles / oracle cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_speedup: Option<f64>,
    /// oracle cycles / rocs cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction_of_oracle: Option<f64>,
    /// The rocs run window by window (`--timeline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<TimelineReport>,
}

impl RunReport {
    fn new(workload: String, machine: String, seed: u64, modes: Vec<(String, ModeReport)>) -> Self {
        let accesses: u64 = modes.iter().map(|(_, m)| m.sim_accesses).sum();
        let wall: f64 = modes.iter().map(|(_, m)| m.wall_seconds).sum();
        RunReport {
            workload,
            machine,
            seed,
            sim_accesses_per_sec: if wall > 0.0 {
                accesses as f64 / wall
            } else {
                0.0
            },
            modes: modes.into_iter().collect(),
            speedup: None,
            oracle_speedup: None,
            fraction_of_oracle: None,
            timeline: None,
        }
    }

    /// The report of a closed-loop comparison; with the rocs run's timeline if asked.
    fn from_comparison(
        workload: String,
        machine: String,
        seed: u64,
        c: Comparison,
        timeline: bool,
    ) -> Self {
        let timeline = c.rocs.as_ref().filter(|_| timeline).map(TimelineReport::of);
        let mut modes = vec![(
            "baseline".to_string(),
            ModeReport::from_stats(c.baseline.stats, c.baseline.wall_seconds),
        )];
        if let Some(r) = c.rocs {
            let mut m = ModeReport::from_stats(r.stats.clone(), r.wall_seconds);
            m.rocs = Some(r);
            modes.push(("rocs".into(), m));
        }
        if let Some(o) = c.oracle {
            let mut m = ModeReport::from_stats(o.stats.clone(), o.wall_seconds);
            // The oracle's wall time went into every candidate run, not only the best.
            m.sim_accesses = o.simulated_accesses;
            m.oracle = Some(o);
            modes.push(("oracle".into(), m));
        }
        let mut r = RunReport::new(workload, machine, seed, modes);
        r.speedup = c.speedup;
        r.oracle_speedup = c.oracle_speedup;
        r.fraction_of_oracle = c.fraction_of_oracle;
        r.timeline = timeline;
        r
    }

    /// The report of a closed-loop run, its timeline drawn if asked, then emitted.
    fn emit_closed_loop(
        workload: String,
        machine: String,
        seed: u64,
        c: Comparison,
        args: &LoopArgs,
        json: bool,
    ) -> anyhow::Result<()> {
        let keep = args.timeline || args.timeline_svg.is_some();
        let mut report = RunReport::from_comparison(workload, machine, seed, c, keep);
        if let (Some(path), Some(t)) = (&args.timeline_svg, &report.timeline) {
            let title = format!(
                "{} on {}, seed {}: rocs window by window{}",
                report.workload,
                report.machine,
                report.seed,
                report
                    .speedup
                    .map(|x| format!(" (speedup {x:.3})"))
                    .unwrap_or_default()
            );
            std::fs::write(path, t.svg(&title))
                .with_context(|| format!("writing the timeline picture {}", path.display()))?;
            eprintln!("wrote the timeline picture {}", path.display());
        }
        if !args.timeline {
            report.timeline = None;
        }
        report.emit(json)
    }

    /// On standard output: JSON, or text for people.
    fn emit(&self, json: bool) -> anyhow::Result<()> {
        if json {
            println!("{}", serde_json::to_string_pretty(self)?);
        } else {
            self.print();
        }
        Ok(())
    }

    fn print(&self) {
        println!(
            "workload {}  machine {}  seed {}  ({:.1}M simulated accesses/s)",
            self.workload,
            self.machine,
            self.seed,
            self.sim_accesses_per_sec / 1e6
        );
        for (name, m) in &self.modes {
            let c = &m.counts;
            println!(
                "{name:>10}: {} instructions, {} cycles, IPC {:.4}, LLC {} accesses {} misses ({:.1}%), MPKI {:.2}, L1D {} accesses {} misses",
                c.instructions,
                c.cycles,
                m.ipc,
                c.llc_accesses,
                c.llc_misses,
                m.llc_miss_rate * 100.0,
                m.llc_mpki,
                c.l1d_accesses,
                c.l1d_misses
            );
            if c.l1i_accesses > 0 {
                println!(
                    "{:>10}  L1I {} accesses {} misses; LLC data misses {}",
                    "", c.l1i_accesses, c.l1i_misses, c.llc_data_misses
                );
            }
            if let Some(r) = &m.rocs {
                println!(
                    "{:>10}  {} search: {} pages confined of {} profiled, {} search windows, {} pages migrated, overhead {} cycles, {} profiles, {} phase changes",
                    "",
                    r.search,
                    r.pages_confined,
                    r.pages_profiled,
                    r.search_windows,
                    r.migrations,
                    r.overhead_cycles,
                    r.profiles,
                    r.phase_changes
                );
            }
            if let Some(o) = &m.oracle {
                // Each count is said only where it is not 0.
                let clause = |n: usize, what: &str| {
                    if n == 0 {
                        String::new()
                    } else {
                        format!("; {n} {what}")
                    }
                };
                println!(
                    "{:>10}  best k = {} ({} candidates tried{}{}{})",
                    "",
                    o.k,
                    o.candidates.len(),
                    clause(
                        o.pages_not_confined as usize,
                        "of its placements' pages could not be moved: the pollute buffer \
                         full, or not mapped"
                    ),
                    clause(
                        o.refused.len(),
                        "refused: they slowed a tenant beyond max_slowdown"
                    ),
                    clause(
                        o.given_up.len(),
                        "given up once slower than a placement within that bound"
                    ),
                );
            }
            if m.processes.len() > 1 {
                for p in &m.processes {
                    println!(
                        "{:>10}  pid {} {}: IPC {:.4}, LLC misses {}",
                        "",
                        p.pid,
                        p.name,
                        p.ipc(),
                        p.llc_misses
                    );
                }
            }
        }
        if let Some(x) = self.speedup {
            println!("speedup {x:.4}");
        }
        if let (Some(o), Some(f)) = (self.oracle_speedup, self.fraction_of_oracle) {
            println!(
                "oracle speedup {o:.4}, fraction of oracle {f:.4} (oracle cycles / rocs cycles)"
            );
            println!("{ORACLE_MEANS}");
        }
        if let Some(t) = &self.timeline {
            print!("\n{}", t.text());
        }
    }
}

pub fn run(cmd: SimCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SimCommand::List { json } => list(json),
        SimCommand::Run(args) => run_workload(args),
        SimCommand::Trace(cmd) => trace::run(cmd),
        SimCommand::Eval(args) => eval::run(args),
    }
}

#[derive(Serialize)]
struct Listed {
    name: String,
    description: String,
}

fn list(json: bool) -> anyhow::Result<ExitCode> {
    let machines: Vec<Listed> = builtin_machines()
        .into_iter()
        .map(|n| {
            let p = MachineSpec::resolve(n)?;
            Ok(Listed {
                name: n.into(),
                description: p.description,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let workloads: Vec<Listed> = builtin_workloads()
        .into_iter()
        .map(|n| {
            let w = Workload::resolve(n)?;
            Ok(Listed {
                name: n.into(),
                description: w.description,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "machines": machines,
                "workloads": workloads,
            }))?
        );
    } else {
        println!("machines:");
        for m in &machines {
            println!("  {:<16} {}", m.name, m.description);
        }
        println!("workloads:");
        for w in &workloads {
            println!("  {:<16} {}", w.name, w.description);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `workload` on `profile` in `mode`.
pub fn run_mode(
    mode: Mode,
    profile: &MachineSpec,
    workload: &Workload,
    seed: u64,
) -> anyhow::Result<ModeReport> {
    match mode {
        Mode::Baseline => run_baseline(profile, workload, seed),
        Mode::Rocs | Mode::Oracle | Mode::All => {
            anyhow::bail!("mode {} runs through the closed loop", mode.name())
        }
    }
}

fn modes_of(mode: Mode) -> Modes {
    Modes {
        rocs: matches!(mode, Mode::Rocs | Mode::All),
        oracle: matches!(mode, Mode::Oracle | Mode::All),
    }
}

fn run_baseline(
    profile: &MachineSpec,
    workload: &Workload,
    seed: u64,
) -> anyhow::Result<ModeReport> {
    let mut m = Machine::new(profile, workload, seed).context("building the machine")?;
    let start = Instant::now();
    m.run_to_end()?;
    Ok(ModeReport::from_stats(
        m.totals(),
        start.elapsed().as_secs_f64(),
    ))
}

/// The machine rocs runs on if it is not `make`'s: that, with the way masks and the
/// prefetcher as asked (checked here, so that a bad mask is reported before the baseline
/// runs).
fn rocs_machine<'a>(
    args: &'a RunArgs,
    spec: &MachineSpec,
    workload: &Workload,
    make: &'a MachineFactory<'a>,
) -> anyhow::Result<Option<impl Fn() -> Result<Machine, rocs_sim::SimError> + 'a>> {
    let variant = args.cat_masks.is_some() || args.prefetch_on_while_profiling;
    if variant && args.mode != Mode::Rocs {
        anyhow::bail!(
            "--cat-masks and --prefetch-on-while-profiling set up rocs's machine, judged \
             against the baseline as modern.md's columns are: give --mode rocs"
        );
    }
    if args.prefetch_on_while_profiling
        && !spec.prefetch.as_ref().is_some_and(|p| p.off_while_sampling)
    {
        anyhow::bail!(
            "{} does not switch a prefetcher off while profiling ([prefetch] \
             off_while_sampling): there is nothing to leave on",
            spec.name
        );
    }
    if let Some(masks) = &args.cat_masks {
        if masks.len() != workload.processes.len() {
            anyhow::bail!(
                "--cat-masks gives {} masks; {} has {} processes (one mask each, in pid order)",
                masks.len(),
                workload.name,
                workload.processes.len()
            );
        }
    }
    let set_up = move || {
        let mut m = make()?;
        if args.prefetch_on_while_profiling {
            m.set_prefetch_off_while_sampling(false);
        }
        for (pid, &mask) in m.pids().into_iter().zip(args.cat_masks.iter().flatten()) {
            m.set_way_mask(pid, mask)?;
        }
        Ok(m)
    };
    if !variant {
        return Ok(None);
    }
    set_up().context("setting up rocs's machine")?;
    Ok(Some(set_up))
}

fn run_workload(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (profile, cfg) = args
        .closed_loop
        .config(args.mode)?
        .at_cost_scale(&MachineSpec::resolve(&args.machine)?, args.cost_scale)
        .context("--cost-scale")?;
    let workload = args
        .scale
        .apply(&Workload::resolve(&args.workload)?, &profile)?;
    let make = || Machine::new(&profile, &workload, args.seed);
    let make_rocs = rocs_machine(&args, &profile, &workload, &make)?;
    if args.mode == Mode::Baseline {
        let report = run_mode(args.mode, &profile, &workload, args.seed)?;
        RunReport::new(
            workload.name.clone(),
            profile.name.clone(),
            args.seed,
            vec![(args.mode.name().to_string(), report)],
        )
        .emit(args.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let steps = Steps::new(None);
    let c = closed_loop::compare_on(
        &make,
        make_rocs.as_ref().map(|m| m as &MachineFactory<'_>),
        &cfg,
        modes_of(args.mode),
        &mut |what: &str| steps.step(&format!("{}: {what}", workload.name)),
    )
    .with_context(|| format!("running {} in mode {}", workload.name, args.mode.name()));
    steps.finish();
    RunReport::emit_closed_loop(
        workload.name.clone(),
        profile.name.clone(),
        args.seed,
        c?,
        &args.closed_loop,
        args.json,
    )?;
    Ok(ExitCode::SUCCESS)
}
