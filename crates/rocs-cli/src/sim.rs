//! `rocsctl sim`: the simulated machine. List what is built in, run a workload in one or
//! more modes, replay, record or convert a real program's trace (`trace`).
//!
//! Each mode is one function returning a serializable [`ModeReport`]; adding a mode is
//! adding a variant to [`Mode`] and a branch in [`run_mode`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use rocs_core::SearchMode;
use rocs_sim::closed_loop::{self, Comparison, LoopConfig, Modes, OracleRun, RocsRun};
use rocs_sim::{
    builtin_machines, builtin_workloads, Machine, MachineSpec, RunStats, Scale, Workload,
};
use serde::Serialize;

mod progress;
mod trace;

use progress::Steps;

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
    /// Evaluate rocs like the ROCS paper: every workload of a suite, on ppc970fx and
    /// xeon-like, baseline / rocs (adaptive and linear search) / oracle. Writes a Markdown
    /// table and SVG charts.
    Eval(EvalArgs),
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
}

impl LoopArgs {
    fn config(&self) -> anyhow::Result<LoopConfig> {
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
pub struct EvalArgs {
    /// The set of workloads: `paper` (the built-ins modelled on the ROCS paper's programs)
    /// or `modern` (art-like, cg-like, noisy-neighbour and mcf-like against CAT, written
    /// to modern.md).
    #[arg(long, default_value = "paper")]
    pub suite: String,
    /// Machines to evaluate on [default: ppc970fx,xeon-like; modern: zen4-like,spr-like,
    /// neoverse-like].
    #[arg(long, value_delimiter = ',')]
    pub machines: Option<Vec<String>>,
    /// Multiply the workloads' length, or `auto` (sizes relative to each machine's LLC,
    /// lengths in proportion) or `auto:N` (that, lengths times N).
    #[arg(long, default_value = "1")]
    pub scale: Scale,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Controller windows per baseline run.
    #[arg(long, default_value_t = LoopConfig::default().windows_per_run)]
    pub windows: u64,
    /// Oracle: evenly spaced candidate k per profile.
    #[arg(long, default_value_t = LoopConfig::default().oracle_grid)]
    pub oracle_grid: usize,
    /// Workloads evaluated at the same time (each on its own thread).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Write README.md (the table), speedup-MACHINE.svg and evaluation.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
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
    #[arg(long)]
    pub json: bool,
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
    /// 'oracle profile i/n' are its runs for rocs's i-th profile of n.
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

/// The numbers of one mode's run.
#[derive(Clone, Debug, Serialize)]
pub struct ModeReport {
    pub instructions: u64,
    pub cycles: u64,
    pub ipc: f64,
    pub llc_accesses: u64,
    pub llc_misses: u64,
    pub llc_miss_rate: f64,
    pub llc_mpki: f64,
    pub l1d_accesses: u64,
    pub l1d_misses: u64,
    pub l1i_accesses: u64,
    pub l1i_misses: u64,
    pub llc_data_misses: u64,
    pub sampling_overhead_cycles: u64,
    pub migration_overhead_cycles: u64,
    /// Memory references simulated (data and instruction fetches).
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
            instructions: t.instructions,
            cycles: t.cycles,
            ipc: t.ipc(),
            llc_accesses: t.llc_accesses,
            llc_misses: t.llc_misses,
            llc_miss_rate: t.llc_miss_rate(),
            llc_mpki: t.llc_mpki(),
            l1d_accesses: t.l1d_accesses,
            l1d_misses: t.l1d_misses,
            l1i_accesses: t.l1i_accesses,
            l1i_misses: t.l1i_misses,
            llc_data_misses: t.llc_data_misses,
            sampling_overhead_cycles: t.sampling_overhead_cycles,
            migration_overhead_cycles: t.migration_overhead_cycles,
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
        }
    }

    /// The report of a closed-loop comparison.
    fn from_comparison(workload: String, machine: String, seed: u64, c: Comparison) -> Self {
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
        r
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
            println!(
                "{name:>10}: {} instructions, {} cycles, IPC {:.4}, LLC {} accesses {} misses ({:.1}%), MPKI {:.2}, L1D {} accesses {} misses",
                m.instructions,
                m.cycles,
                m.ipc,
                m.llc_accesses,
                m.llc_misses,
                m.llc_miss_rate * 100.0,
                m.llc_mpki,
                m.l1d_accesses,
                m.l1d_misses
            );
            if m.l1i_accesses > 0 {
                println!(
                    "{:>10}  L1I {} accesses {} misses; LLC data misses {}",
                    "", m.l1i_accesses, m.l1i_misses, m.llc_data_misses
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
                println!(
                    "{:>10}  best k = {} ({} candidates tried)",
                    "",
                    o.k,
                    o.candidates.len()
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
    }
}

pub fn run(cmd: SimCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SimCommand::List { json } => list(json),
        SimCommand::Run(args) => run_workload(args),
        SimCommand::Trace(cmd) => trace::run(cmd),
        SimCommand::Eval(args) => eval(args),
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

fn run_workload(args: RunArgs) -> anyhow::Result<ExitCode> {
    let profile = MachineSpec::resolve(&args.machine)?;
    let workload = args
        .scale
        .apply(&Workload::resolve(&args.workload)?, &profile)?;
    let report = if args.mode == Mode::Baseline {
        let report = run_mode(args.mode, &profile, &workload, args.seed)?;
        RunReport::new(
            workload.name.clone(),
            profile.name.clone(),
            args.seed,
            vec![(args.mode.name().to_string(), report)],
        )
    } else {
        let cfg = args.closed_loop.config()?;
        let make = || Machine::new(&profile, &workload, args.seed);
        let steps = Steps::new(None);
        let c = closed_loop::compare(&make, &cfg, modes_of(args.mode), &mut |what: &str| {
            steps.step(&format!("{}: {what}", workload.name))
        })
        .with_context(|| format!("running {} in mode {}", workload.name, args.mode.name()));
        steps.finish();
        RunReport::from_comparison(workload.name.clone(), profile.name.clone(), args.seed, c?)
    };
    report.emit(args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The workloads of an evaluation suite.
fn suite(name: &str) -> anyhow::Result<Vec<&'static str>> {
    match name {
        // The paper's programs, our two programs with nothing to gain, phases, two tenants.
        "paper" => Ok(builtin_workloads()),
        // What page colouring can do (art, cg, two tenants) and a program with nothing to
        // gain, on machines of today, against CAT.
        "modern" => Ok(vec!["art-like", "cg-like", "noisy-neighbour", "mcf-like"]),
        other => anyhow::bail!("unknown suite {other:?}; known suites: paper, modern"),
    }
}

fn eval(args: EvalArgs) -> anyhow::Result<ExitCode> {
    if args.jobs == 0 {
        anyhow::bail!("--jobs must be at least 1");
    }
    let workloads = suite(&args.suite)?;
    let cfg = LoopArgs {
        search: SearchArg::Adaptive,
        windows: args.windows,
        oracle_grid: args.oracle_grid,
    }
    .config()?;
    let modern = args.suite == "modern";
    let default_machines: &[&str] = if modern {
        &["zen4-like", "spr-like", "neoverse-like"]
    } else {
        &["ppc970fx", "xeon-like"]
    };
    let machine_names = args
        .machines
        .clone()
        .unwrap_or_else(|| default_machines.iter().map(|m| m.to_string()).collect());
    let machines = machine_names
        .iter()
        .map(|m| MachineSpec::resolve(m))
        .collect::<Result<Vec<_>, _>>()?;
    let loaded = workloads
        .iter()
        .map(|w| Workload::resolve(w))
        .collect::<Result<Vec<_>, _>>()?;
    // Every (machine, workload) pair is independent: run them on `jobs` threads, each pair
    // deterministic by itself, and keep the rows in suite order.
    let pairs: Vec<(&MachineSpec, Workload)> = machines
        .iter()
        .flat_map(|m| loaded.iter().map(move |w| Ok((m, args.scale.apply(w, m)?))))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let total = pairs.len();
    let steps = Steps::new(Some(total as u64));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<anyhow::Result<closed_loop::EvalRow>>>> =
        std::sync::Mutex::new((0..total).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..args.jobs.min(total) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((machine, workload)) = pairs.get(i) else {
                    break;
                };
                let make = || Machine::new(machine, workload, args.seed);
                let prefix = format!("[{}/{total}] {} {}: ", i + 1, machine.name, workload.name);
                let mut report = |what: &str| steps.step(&format!("{prefix}{what}"));
                let evaluate = if modern {
                    closed_loop::evaluate_modern
                } else {
                    closed_loop::evaluate
                };
                let row = evaluate(&machine.name, &workload.name, &make, &cfg, &mut report)
                    .with_context(|| format!("evaluating {} on {}", workload.name, machine.name));
                if let Ok(r) = &row {
                    steps.line(&format!(
                        "{prefix}done: speedup {:.3} (linear {:.3}), oracle {:.3}",
                        r.adaptive.speedup, r.linear.speedup, r.oracle_speedup
                    ));
                }
                steps.inc();
                results.lock().expect("no thread panicked")[i] = Some(row);
            });
        }
    });
    steps.finish();
    let rows = results
        .into_inner()
        .expect("no thread panicked")
        .into_iter()
        .map(|r| r.expect("every pair ran"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut command = format!("rocsctl sim eval --suite {}", args.suite);
    if let Some(m) = &args.machines {
        command += &format!(" --machines {}", m.join(","));
    }
    if args.scale != Scale::Length(1.0) {
        command += &format!(" --scale {}", args.scale);
    }
    if args.seed != 1 {
        command += &format!(" --seed {}", args.seed);
    }
    if args.windows != LoopConfig::default().windows_per_run {
        command += &format!(" --windows {}", args.windows);
    }
    if args.oracle_grid != LoopConfig::default().oracle_grid {
        command += &format!(" --oracle-grid {}", args.oracle_grid);
    }
    if let Some(dir) = &args.out {
        command += &format!(" --out {}", dir.display());
    }
    let length = match args.scale {
        Scale::Length(v) | Scale::Auto { length: v } => v,
    };
    let evaluation = closed_loop::Evaluation::new(command, args.seed, length, args.windows, rows);
    let markdown = if modern {
        evaluation.modern_markdown()
    } else {
        evaluation.markdown()
    };
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let write = |name: String, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
        };
        let (page, json, svg): (&str, &str, fn(&closed_loop::Evaluation, &str) -> String) =
            if modern {
                (
                    "modern.md",
                    "modern.json",
                    closed_loop::Evaluation::modern_svg,
                )
            } else {
                ("README.md", "evaluation.json", closed_loop::Evaluation::svg)
            };
        write(page.into(), &markdown)?;
        for m in evaluation.machines() {
            let prefix = if modern { "modern" } else { "speedup" };
            write(format!("{prefix}-{m}.svg"), &svg(&evaluation, &m))?;
        }
        write(
            json.into(),
            &(serde_json::to_string_pretty(&evaluation)? + "\n"),
        )?;
        eprintln!("wrote {}", dir.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&evaluation)?);
    } else {
        print!("{markdown}");
    }
    Ok(ExitCode::SUCCESS)
}
