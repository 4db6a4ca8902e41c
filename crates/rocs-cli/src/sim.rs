//! `rocsctl sim`: the simulated machine. List what is built in, run a workload in one or
//! more modes, replay a valgrind lackey trace.
//!
//! Each mode is one function returning a serializable [`ModeReport`]; adding a mode is
//! adding a variant to [`Mode`] and a branch in [`run_mode`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use rocs_sim::{
    builtin_machines, builtin_workloads, Machine, MachineProfile, RunStats, TraceFormat,
    TraceInput, TraceSpec, Workload,
};
use serde::Serialize;

#[derive(Subcommand)]
pub enum SimCommand {
    /// List the built-in machine profiles and workloads.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Run a workload on a simulated machine.
    Run(RunArgs),
    /// Replay a memory trace (valgrind lackey --trace-mem=yes) on a simulated machine.
    Trace(TraceArgs),
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
    /// Multiply the workload's length (e.g. 0.1 for a quick run).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    #[arg(long)]
    pub json: bool,
}

/// How a workload is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No rocs: pages stay on the frames the allocator gave them.
    Baseline,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
        }
    }
}

#[derive(Args)]
pub struct TraceArgs {
    /// Trace format.
    #[arg(long, value_enum, default_value_t = TraceFormatArg::Lackey)]
    pub format: TraceFormatArg,
    /// Trace file, or - for standard input.
    pub file: String,
    /// Built-in machine name or a machine .toml file.
    #[arg(long, default_value = "ppc970fx")]
    pub machine: String,
    /// Use virtual addresses as physical (compare with cachegrind).
    #[arg(long)]
    pub identity_map: bool,
    /// Replay the trace this many times (a file only).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum TraceFormatArg {
    Lackey,
}

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
        }
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
    }
}

pub fn run(cmd: SimCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SimCommand::List { json } => list(json),
        SimCommand::Run(args) => run_workload(args),
        SimCommand::Trace(args) => run_trace(args),
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
            let p = MachineProfile::resolve(n)?;
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
    profile: &MachineProfile,
    workload: &Workload,
    seed: u64,
) -> anyhow::Result<ModeReport> {
    match mode {
        Mode::Baseline => run_baseline(profile, workload, seed),
    }
}

fn run_baseline(
    profile: &MachineProfile,
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
    let profile = MachineProfile::resolve(&args.machine)?;
    let mut workload = Workload::resolve(&args.workload)?;
    if !(args.scale.is_finite() && args.scale > 0.0) {
        anyhow::bail!("--scale must be a positive number, got {}", args.scale);
    }
    workload = workload.scaled(args.scale);
    let report = run_mode(args.mode, &profile, &workload, args.seed)?;
    let report = RunReport::new(
        workload.name.clone(),
        profile.name.clone(),
        args.seed,
        vec![(args.mode.name().to_string(), report)],
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report.print();
    }
    Ok(ExitCode::SUCCESS)
}

fn run_trace(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let profile = MachineProfile::resolve(&args.machine)?;
    let input = if args.file == "-" {
        TraceInput::Stdin
    } else {
        TraceInput::File(PathBuf::from(&args.file))
    };
    let TraceFormatArg::Lackey = args.format;
    let spec = TraceSpec {
        input,
        format: TraceFormat::Lackey,
        repeat: args.repeat,
        identity_map: args.identity_map,
    };
    let mut m = Machine::from_trace(&profile, spec, args.seed)?;
    let start = Instant::now();
    m.run_to_end()
        .with_context(|| format!("replaying {}", args.file))?;
    let mode = ModeReport::from_stats(m.totals(), start.elapsed().as_secs_f64());
    let report = RunReport::new(
        m.workload_name().to_string(),
        profile.name.clone(),
        args.seed,
        vec![(Mode::Baseline.name().to_string(), mode)],
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report.print();
    }
    Ok(ExitCode::SUCCESS)
}
