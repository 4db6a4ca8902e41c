//! `rocsctl sim eval`: the evaluation suites. `paper` and `modern` run the built-in
//! workloads (here), `random` generated ones ([`super::random`]), `real` real programs'
//! traces ([`super::real`]). What they share: the arguments, running independent cases on
//! `--jobs` threads with progress shown, and writing the pages.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::Context;
use clap::Args;
use rocs_sim::closed_loop::{
    self, EvalRow, Evaluation, KeepError, KeptRuns, LoopConfig, NothingKept,
};
use rocs_sim::RunStats;
use rocs_sim::{builtin_machines, builtin_workloads, Machine, MachineSpec, Scale, Workload};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::journal::{this_build, Journal};
use super::progress::Steps;
use super::{LoopArgs, Mode, SearchArg};

#[derive(Args)]
pub struct EvalArgs {
    /// The set of workloads: `paper` (the built-ins modelled on the ROCS paper's programs),
    /// `modern` (art-like, cg-like, noisy-neighbour and mcf-like against CAT, written to
    /// modern.md), `random` (--count generated workloads, written to random.md) or `real`
    /// (the programs and pairs of --traces DIR/manifest.toml, written to DIR/real.md).
    #[arg(long, default_value = "paper")]
    pub suite: String,
    /// Machines to evaluate on [default: paper: ppc970fx,xeon-like; modern: zen4-like,
    /// spr-like,neoverse-like; random and real: every built-in machine].
    #[arg(long, alias = "machine", value_delimiter = ',')]
    pub machines: Option<Vec<String>>,
    /// paper and modern: evaluate only these of the suite's workloads (built-in names or
    /// TOML files) [default: the suite's own].
    #[arg(long, value_delimiter = ',')]
    pub workloads: Option<Vec<String>>,
    /// Multiply the workloads' length, or `auto` (sizes relative to each machine's LLC,
    /// lengths in proportion) or `auto:N` (that, lengths times N). Paper and modern only.
    #[arg(long, default_value = "1")]
    pub scale: Scale,
    /// Seed of everything random (random: of the campaign; each workload's own seed
    /// follows from it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// random: how many workloads (spread over the machines in turn).
    #[arg(long, default_value_t = 20)]
    pub count: u64,
    /// random: data accesses per line of the machine's LLC (all tenants together): the
    /// run's length.
    #[arg(long, default_value_t = closed_loop::random::DEFAULT_ACCESSES_PER_LLC_LINE)]
    pub length: f64,
    /// real: the directory of manifest.toml and its traces.
    #[arg(long)]
    pub traces: Option<PathBuf>,
    /// Controller windows per baseline run.
    #[arg(long, default_value_t = LoopConfig::default().windows_per_run)]
    pub windows: u64,
    /// Oracle: evenly spaced candidate k per profile.
    #[arg(long, default_value_t = LoopConfig::default().oracle_grid)]
    pub oracle_grid: usize,
    /// Cases evaluated at the same time (each on its own thread), and as many runs at a
    /// time within a case where they do not depend on each other (the oracle's candidates
    /// of a round, CAT's masks), so that a suite's last case keeps every core busy. The
    /// results do not depend on it.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Write the page (README.md, modern.md, random.md, real.md), its SVG charts and its
    /// JSON here. While it runs, the finished cases are kept here too (SUITE.journal; the
    /// paper and modern suites also keep each finished run of the cases still running):
    /// the same command, run again after a stop, runs only what is left.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// paper, modern, real and random: run nothing; render the page again from an
    /// evaluation's JSON (evaluation.json, modern.json, real.json, random.json), its targets
    /// checked as the code states them now.
    /// The page keeps the command that produced the figures, so the options that choose
    /// what to run are refused with it.
    #[arg(long, value_name = "JSON", conflicts_with_all = [
        "machines", "workloads", "scale", "seed", "count", "length", "traces", "windows",
        "oracle_grid", "jobs",
    ])]
    pub from: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

impl EvalArgs {
    /// The closed loop's configuration (adaptive search).
    pub fn config(&self) -> anyhow::Result<LoopConfig> {
        if self.jobs == 0 {
            anyhow::bail!("--jobs must be at least 1");
        }
        let mut cfg = LoopArgs {
            search: SearchArg::Adaptive,
            windows: self.windows,
            oracle_grid: self.oracle_grid,
            timeline: false,
            timeline_svg: None,
            pollute_colours: None,
        }
        .config(Mode::All)?;
        cfg.threads = self.jobs;
        Ok(cfg)
    }

    /// The machines asked for, or `default`.
    pub fn machines(&self, default: &[&str]) -> anyhow::Result<Vec<MachineSpec>> {
        let names: Vec<String> = self
            .machines
            .clone()
            .unwrap_or_else(|| default.iter().map(|m| m.to_string()).collect());
        Ok(names
            .iter()
            .map(|m| MachineSpec::resolve(m))
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// The command line that made a page, as people would type it again: the arguments
    /// that differ from their defaults, in a fixed order, then `extra`.
    pub fn command(&self, extra: &str) -> String {
        let d = LoopConfig::default();
        let mut c = format!("rocsctl sim eval --suite {}", self.suite);
        if let Some(m) = &self.machines {
            c += &format!(" --machines {}", m.join(","));
        }
        if let Some(w) = &self.workloads {
            c += &format!(" --workloads {}", w.join(","));
        }
        if self.scale != Scale::Length(1.0) {
            c += &format!(" --scale {}", self.scale);
        }
        if self.seed != 1 {
            c += &format!(" --seed {}", self.seed);
        }
        if self.windows != d.windows_per_run {
            c += &format!(" --windows {}", self.windows);
        }
        if self.oracle_grid != d.oracle_grid {
            c += &format!(" --oracle-grid {}", self.oracle_grid);
        }
        c += extra;
        if let Some(dir) = &self.out {
            c += &format!(" --out {}", dir.display());
        }
        c
    }
}

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    if args.workloads.is_some() && !matches!(args.suite.as_str(), "paper" | "modern") {
        anyhow::bail!(
            "--workloads chooses among the built-in workloads of the paper and modern suites; \
             the {} suite makes its own (leave --workloads out)",
            args.suite
        );
    }
    if args.from.is_some() && !matches!(args.suite.as_str(), "paper" | "modern" | "real" | "random")
    {
        anyhow::bail!(
            "--from renders the paper, modern, real or random suite's page from its JSON; the \
             {} suite's page is rendered only by running it",
            args.suite
        );
    }
    match args.suite.as_str() {
        "paper" => builtins(args, builtin_workloads(), false),
        "modern" => builtins(
            args,
            vec!["art-like", "cg-like", "noisy-neighbour", "mcf-like"],
            true,
        ),
        "random" => super::random::run(args),
        "real" => super::real::run(args),
        other => {
            anyhow::bail!("unknown suite {other:?}; known suites: paper, modern, random, real")
        }
    }
}

/// Run `case(i, steps)` for every `i < total` on `jobs` threads, each case deterministic
/// by itself; the results in case order. Cases the journal holds are taken from it, and
/// each case that ends is added to it.
pub fn in_parallel<T: Send + Serialize + DeserializeOwned>(
    jobs: usize,
    total: usize,
    steps: &Steps,
    journal: Option<&Journal<T>>,
    case: &(dyn Fn(usize, &Steps) -> anyhow::Result<T> + Sync),
) -> anyhow::Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<T>>>> =
        Mutex::new((0..total).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, total.max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let result = match journal.map(|j| (j, j.take(i))) {
                    Some((_, Some(row))) => Ok(row),
                    Some((j, None)) => case(i, steps).and_then(|row| {
                        j.record(i, &row)?;
                        Ok(row)
                    }),
                    None => case(i, steps),
                };
                steps.inc();
                results.lock().expect("no thread panicked")[i] = Some(result);
            });
        }
    });
    results
        .into_inner()
        .expect("no thread panicked")
        .into_iter()
        .map(|r| r.expect("every case ran"))
        .collect()
}

/// The journal of an evaluation whose page goes to `dir` (none without one): `dir/NAME`,
/// for `command` (the page's, without `--jobs`) over `cases` cases.
pub fn journal<T: Serialize + DeserializeOwned>(
    dir: Option<&Path>,
    name: &str,
    command: &str,
    cases: usize,
    steps: &Steps,
) -> anyhow::Result<Option<Journal<T>>> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    let build = this_build()?;
    Journal::open(&dir.join(name), command, &build, cases, &|s| steps.line(s)).map(Some)
}

/// A page's JSON read back (`what` names it in the error: "the real suite's JSON (...)").
pub fn read_page_json<T: DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not {what}", path.display()))
}

/// Where a page rendered from `json` goes: --out, or the JSON's own directory.
pub fn beside(json: &Path, out: Option<&Path>) -> PathBuf {
    out.map(Path::to_path_buf).unwrap_or_else(|| {
        json.parent()
            .map_or_else(|| ".".into(), |dir| dir.to_path_buf())
    })
}

/// Write `files` (name, text) into `dir`.
pub fn write_all(dir: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, text) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("wrote {}", dir.display());
    Ok(())
}

/// The paper and modern suites: built-in workloads on each machine (or, with `--from`,
/// the rows of an earlier run).
fn builtins(args: EvalArgs, workloads: Vec<&str>, modern: bool) -> anyhow::Result<ExitCode> {
    let (evaluation, journal) = match &args.from {
        Some(path) => (stored(path, modern)?, None),
        None => run_builtins(&args, workloads, modern)?,
    };
    let code = write_builtins(&args, &evaluation, modern)?;
    journal.map_or(Ok(()), Journal::remove)?;
    Ok(code)
}

/// An evaluation read back from its JSON, its targets checked again.
fn stored(path: &Path, modern: bool) -> anyhow::Result<Evaluation> {
    let evaluation: Evaluation = read_page_json(
        path,
        "an evaluation's JSON (evaluation.json or modern.json as `sim eval --out` writes them)",
    )?;
    // The modern suite's rows carry CAT; the paper suite's carry linear search.
    let is_modern = evaluation.rows.iter().all(|r| r.cat.is_some());
    if evaluation.rows.is_empty() || is_modern != modern {
        anyhow::bail!(
            "{}: not the {} suite's evaluation (use --suite {})",
            path.display(),
            if modern { "modern" } else { "paper" },
            if is_modern { "modern" } else { "paper" }
        );
    }
    Ok(evaluation.rechecked())
}

/// Run the paper or modern suite; its journal, to remove once the page is written.
fn run_builtins(
    args: &EvalArgs,
    workloads: Vec<&str>,
    modern: bool,
) -> anyhow::Result<(Evaluation, Option<Journal<EvalRow>>)> {
    let cfg = args.config()?;
    let machines = args.machines(if modern {
        &["zen4-like", "spr-like", "neoverse-like"]
    } else {
        &["ppc970fx", "xeon-like"]
    })?;
    let workloads: Vec<&str> = match &args.workloads {
        Some(chosen) => chosen.iter().map(String::as_str).collect(),
        None => workloads,
    };
    let loaded = workloads
        .iter()
        .map(|w| Workload::resolve(w))
        .collect::<Result<Vec<_>, _>>()?;
    let pairs: Vec<(&MachineSpec, Workload)> = machines
        .iter()
        .flat_map(|m| loaded.iter().map(move |w| Ok((m, args.scale.apply(w, m)?))))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let total = pairs.len();
    let steps = Steps::new(Some(total as u64));
    let name = if modern {
        "modern.journal"
    } else {
        "paper.journal"
    };
    let journal = journal(args.out.as_deref(), name, &args.command(""), total, &steps)?;
    let evaluate = if modern {
        closed_loop::evaluate_modern
    } else {
        closed_loop::evaluate
    };
    let rows = in_parallel(args.jobs, total, &steps, journal.as_ref(), &|i, steps| {
        let (machine, workload) = &pairs[i];
        let make = || Machine::new(machine, workload, args.seed);
        let prefix = format!("[{}/{total}] {} {}: ", i + 1, machine.name, workload.name);
        let mut report = |what: &str| steps.step(&format!("{prefix}{what}"));
        let kept: &dyn KeptRuns = match &journal {
            Some(journal) => &CaseRuns { journal, case: i },
            None => &NothingKept,
        };
        let row: EvalRow = evaluate(
            &machine.name,
            &workload.name,
            &make,
            &cfg,
            kept,
            &mut report,
        )
        .with_context(|| format!("evaluating {} on {}", workload.name, machine.name))?;
        let linear = row
            .linear
            .as_ref()
            .map_or(String::new(), |l| format!(" (linear {:.3})", l.speedup));
        steps.line(&format!(
            "{prefix}done: speedup {:.3}{linear}, oracle {:.3}",
            row.adaptive.speedup, row.oracle_speedup
        ));
        Ok(row)
    });
    steps.finish();
    let length = match args.scale {
        Scale::Length(v) | Scale::Auto { length: v } => v,
    };
    let evaluation = Evaluation::new(args.command(""), args.seed, length, args.windows, rows?);
    Ok((evaluation, journal))
}

/// The runs of case `case` of an evaluation, kept in its journal.
struct CaseRuns<'a> {
    journal: &'a Journal<EvalRow>,
    case: usize,
}

impl KeptRuns for CaseRuns<'_> {
    fn recall(&self, what: &str) -> Option<RunStats> {
        self.journal.recall_run(self.case, what)
    }

    fn keep(&self, what: &str, stats: &RunStats) -> Result<(), KeepError> {
        Ok(self.journal.record_run(self.case, what, stats)?)
    }
}

/// Write the page, its JSON and its charts to `--out`, and print the page (or its JSON).
fn write_builtins(
    args: &EvalArgs,
    evaluation: &Evaluation,
    modern: bool,
) -> anyhow::Result<ExitCode> {
    let markdown = if modern {
        evaluation.modern_markdown()
    } else {
        evaluation.markdown()
    };
    if let Some(dir) = &args.out {
        let (page, json, prefix) = if modern {
            ("modern.md", "modern.json", "modern")
        } else {
            ("README.md", "evaluation.json", "speedup")
        };
        let mut files = vec![
            (page.to_string(), markdown.clone()),
            (
                json.to_string(),
                serde_json::to_string_pretty(evaluation)? + "\n",
            ),
        ];
        for m in evaluation.machines() {
            let svg = if modern {
                evaluation.modern_svg(&m)
            } else {
                evaluation.svg(&m)
            };
            files.push((format!("{prefix}-{m}.svg"), svg));
        }
        write_all(dir, &files)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(evaluation)?);
    } else {
        print!("{markdown}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Every built-in machine (the random and real suites' default).
pub fn all_machines() -> Vec<&'static str> {
    builtin_machines()
}
