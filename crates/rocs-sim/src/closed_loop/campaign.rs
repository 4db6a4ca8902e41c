//! The random campaign (issue 12): baseline, rocs and the oracle on generated workloads
//! ([`random_workload`]), and the distribution that judges the controller: the worst
//! speedup, the share of runs below 0.99 of off, how close rocs comes to the oracle where
//! the oracle gains, and what the worst-treated tenant of a shared LLC paid.

use std::fmt::Write;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::random::{case_seed, random_workload};
use super::render::{table, targets};
use super::{compare, ratio, tenant_speedups, LoopConfig, LoopError, Modes, TargetCheck};
use crate::{Machine, MachineSpec, Pattern, Workload};

/// Below this (rocs cycles against off) a run counts as a loss.
pub const LOSS: f64 = 0.99;
/// The oracle gains at least this much: rocs is judged by its fraction of the oracle.
pub const GAINFUL: f64 = 1.05;
/// No tenant of a shared LLC may be slowed more than this against k = 0.
pub const TENANT_FLOOR: f64 = 0.95;
/// rocsd's measurement window on Linux (rocs-config's default `window_ms`), in seconds:
/// what a simulated controller window stands for.
const ROCSD_WINDOW_SECONDS: f64 = 0.1;

/// One generated workload on one machine.
#[derive(Clone, Debug)]
pub struct RandomCase {
    /// Its place in the campaign.
    pub index: u64,
    /// The workload's and the machine's seed.
    pub seed: u64,
    pub machine: MachineSpec,
    pub workload: Workload,
}

impl RandomCase {
    /// The workload as TOML, with how it was made and how to run it again.
    pub fn toml(&self, file: &str) -> String {
        format!(
            "# {}\n# Run again: rocsctl sim run --workload {file} --machine {} --seed {} --mode all\n{}",
            self.workload.description,
            self.machine.name,
            self.seed,
            toml::to_string(&self.workload).expect("a workload serializes")
        )
    }
}

/// The campaign's workloads: the i-th on `machines[i % machines.len()]`, from
/// [`case_seed`]`(seed, i)`.
pub fn random_cases(
    seed: u64,
    count: u64,
    machines: &[MachineSpec],
    accesses_per_llc_line: f64,
) -> Vec<RandomCase> {
    (0..count)
        .zip(machines.iter().cycle())
        .map(|(index, machine)| {
            let seed = case_seed(seed, index);
            RandomCase {
                index,
                seed,
                machine: machine.clone(),
                workload: random_workload(seed, machine, accesses_per_llc_line),
            }
        })
        .collect()
}

/// What one case gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RandomRow {
    pub index: u64,
    pub seed: u64,
    pub machine: String,
    pub workload: String,
    /// Each tenant's region patterns, e.g. "stencil+random | sequential".
    pub shape: String,
    pub tenants: usize,
    pub baseline_cycles: u64,
    /// baseline cycles / rocs cycles.
    pub speedup: f64,
    /// baseline cycles / oracle cycles.
    pub oracle_speedup: f64,
    /// oracle cycles / rocs cycles.
    pub fraction_of_oracle: f64,
    /// Each tenant's baseline cycles / its cycles under rocs, in pid order.
    pub tenant_speedups: Vec<f64>,
    pub pages_confined: usize,
    pub search_windows: u64,
    /// Cycles paid for sampling and migrating / rocs cycles.
    pub overhead: f64,
    /// Cycles the rocs run paid for sampling / baseline cycles (so that a run's loss,
    /// rocs cycles / baseline cycles - 1, splits into this, `migrations` and the rest).
    #[serde(default)]
    pub sampling: f64,
    /// Cycles the rocs run paid for page migrations / baseline cycles.
    #[serde(default)]
    pub migrations: f64,
    pub wall_seconds: f64,
    /// The factor on the machine's costs of a page move and a sample this run had
    /// ([`window_cost_scale`]; 1 at the machine's own).
    #[serde(default = "one")]
    pub cost_scale: f64,
}

pub(super) fn one() -> f64 {
    1.0
}

/// A case's runs at the machine's costs and at the costs its window stands for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RandomCaseRows {
    pub at_machine_costs: RandomRow,
    pub at_window_costs: RandomRow,
}

/// The factor that makes rocs's fixed costs (a page move, a sample) weigh against a
/// simulated window of `window_cycles` what they weigh against rocsd's window on Linux
/// (100 ms at the machine's clock), to two significant digits so that a replay given it
/// reads the same, and never above 1. The simulated runs are short only to be quick: a
/// window of 0.6 M cycles stands for one of 200 M, whose program makes 300 times the
/// accesses while a move still costs 2 µs; at the machine's costs every move weighs 300
/// times what it weighs for rocsd.
pub fn window_cost_scale(spec: &MachineSpec, window_cycles: u64) -> f64 {
    let rocsd = spec.clock_ghz * 1e9 * ROCSD_WINDOW_SECONDS;
    let ratio = (window_cycles as f64 / rocsd).min(1.0);
    if ratio <= 0.0 {
        return 1.0;
    }
    let digits = 10f64.powi(1 - ratio.log10().floor() as i32);
    (ratio * digits).round() / digits
}

impl RandomRow {
    /// rocs cycles / baseline cycles - 1: what the run lost (negative if it gained).
    pub fn loss(&self) -> f64 {
        1.0 / self.speedup - 1.0
    }

    /// The worst tenant's speedup (the run's own with one tenant).
    pub fn worst_tenant(&self) -> f64 {
        self.tenant_speedups
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }
}

fn pattern_name(p: Pattern) -> &'static str {
    match p {
        Pattern::Sequential => "sequential",
        Pattern::Strided => "strided",
        Pattern::Random => "random",
        Pattern::PointerChase => "pointer-chase",
        Pattern::Stencil => "stencil",
    }
}

/// Baseline, rocs and the oracle of one case, at the machine's costs and again at the
/// costs its window stands for ([`window_cost_scale`]).
pub fn run_case(
    case: &RandomCase,
    cfg: &LoopConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<RandomCaseRows, LoopError> {
    let at_machine_costs = run_case_at(case, 1.0, cfg, &mut |what| {
        progress(&format!("{what} (machine's costs)"))
    })?;
    let window = cfg.window_of(at_machine_costs.baseline_cycles);
    let scale = window_cost_scale(&case.machine, window);
    let at_window_costs = run_case_at(case, scale, cfg, &mut |what| {
        progress(&format!("{what} (costs x{scale})"))
    })?;
    Ok(RandomCaseRows {
        at_machine_costs,
        at_window_costs,
    })
}

/// Baseline, rocs and the oracle of one case, on its machine with costs `cost_scale`
/// times its own.
pub fn run_case_at(
    case: &RandomCase,
    cost_scale: f64,
    cfg: &LoopConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<RandomRow, LoopError> {
    let start = Instant::now();
    let (spec, cfg) = cfg.at_cost_scale(&case.machine, cost_scale)?;
    let make = || Machine::new(&spec, &case.workload, case.seed);
    let c = compare(&make, &cfg, Modes::ALL, progress)?;
    let rocs = c.rocs.as_ref().expect("asked for rocs");
    let oracle = c.oracle.as_ref().expect("asked for the oracle");
    let tenant_speedups = tenant_speedups(&c.baseline.stats, &rocs.stats);
    let shape = case
        .workload
        .processes
        .iter()
        .map(|p| {
            let names: Vec<&str> = p.regions.iter().map(|r| pattern_name(r.pattern)).collect();
            names.join("+")
        })
        .collect::<Vec<_>>()
        .join(" | ");
    Ok(RandomRow {
        index: case.index,
        seed: case.seed,
        machine: case.machine.name.clone(),
        workload: case.workload.name.clone(),
        shape,
        tenants: case.workload.processes.len(),
        baseline_cycles: c.baseline.stats.cycles,
        speedup: ratio(c.baseline.stats.cycles, rocs.stats.cycles),
        oracle_speedup: ratio(c.baseline.stats.cycles, oracle.stats.cycles),
        fraction_of_oracle: ratio(oracle.stats.cycles, rocs.stats.cycles),
        tenant_speedups,
        pages_confined: rocs.pages_confined,
        search_windows: rocs.search_windows,
        overhead: ratio(rocs.overhead_cycles, rocs.stats.cycles),
        sampling: ratio(rocs.stats.sampling_overhead_cycles, c.baseline.stats.cycles),
        migrations: ratio(
            rocs.stats.migration_overhead_cycles,
            c.baseline.stats.cycles,
        ),
        wall_seconds: start.elapsed().as_secs_f64(),
        cost_scale,
    })
}

/// The distribution over a campaign's rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RandomSummary {
    pub runs: usize,
    /// The index of the run with the lowest speedup.
    pub worst: Option<u64>,
    /// Runs below [`LOSS`] of off.
    pub losses: usize,
    /// Runs whose oracle gains at least [`GAINFUL`].
    pub gainful: usize,
    /// Fraction of oracle over the gainful runs: the median and the 90th-percentile-worst
    /// (nine runs in ten do at least this well), nearest rank.
    pub median_fraction: Option<f64>,
    pub p90_worst_fraction: Option<f64>,
    pub multi_tenant: usize,
    /// The multi-tenant run whose worst tenant fared worst, and that tenant's speedup.
    pub worst_tenant: Option<(u64, f64)>,
    /// Multi-tenant runs with a tenant below [`TENANT_FLOOR`].
    pub tenants_over_bound: usize,
}

/// The `q`-quantile (0..=1) of ascending `v` by nearest rank.
fn nearest_rank(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let rank = (q * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

impl RandomSummary {
    pub fn of(rows: &[RandomRow]) -> RandomSummary {
        let worst = rows
            .iter()
            .min_by(|a, b| a.speedup.total_cmp(&b.speedup))
            .map(|r| r.index);
        let mut fractions: Vec<f64> = rows
            .iter()
            .filter(|r| r.oracle_speedup >= GAINFUL)
            .map(|r| r.fraction_of_oracle)
            .collect();
        fractions.sort_by(f64::total_cmp);
        let shared: Vec<&RandomRow> = rows.iter().filter(|r| r.tenants > 1).collect();
        RandomSummary {
            runs: rows.len(),
            worst,
            losses: rows.iter().filter(|r| r.speedup < LOSS).count(),
            gainful: fractions.len(),
            median_fraction: nearest_rank(&fractions, 0.5),
            p90_worst_fraction: nearest_rank(&fractions, 0.1),
            multi_tenant: shared.len(),
            worst_tenant: shared
                .iter()
                .map(|r| (r.index, r.worst_tenant()))
                .min_by(|a, b| a.1.total_cmp(&b.1)),
            tenants_over_bound: shared
                .iter()
                .filter(|r| r.worst_tenant() < TENANT_FLOOR)
                .count(),
        }
    }
}

/// A whole campaign and how it was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RandomCampaign {
    pub command: String,
    pub seed: u64,
    pub accesses_per_llc_line: f64,
    pub windows_per_run: u64,
    pub oracle_grid: usize,
    /// Each case at its machine's costs.
    pub rows: Vec<RandomRow>,
    pub summary: RandomSummary,
    /// Each case at the costs its window stands for ([`window_cost_scale`]): what the
    /// targets judge.
    #[serde(default)]
    pub rows_at_window_costs: Vec<RandomRow>,
    #[serde(default)]
    pub summary_at_window_costs: RandomSummary,
}

impl RandomCampaign {
    pub fn new(
        command: String,
        seed: u64,
        accesses_per_llc_line: f64,
        cfg: &LoopConfig,
        cases: Vec<RandomCaseRows>,
    ) -> Self {
        let (rows, rows_at_window_costs): (Vec<RandomRow>, Vec<RandomRow>) = cases
            .into_iter()
            .map(|c| (c.at_machine_costs, c.at_window_costs))
            .unzip();
        RandomCampaign {
            command,
            seed,
            accesses_per_llc_line,
            windows_per_run: cfg.windows_per_run,
            oracle_grid: cfg.oracle_grid,
            summary: RandomSummary::of(&rows),
            summary_at_window_costs: RandomSummary::of(&rows_at_window_costs),
            rows,
            rows_at_window_costs,
        }
    }

    /// The campaign with its summaries made again from its rows (as the code states them
    /// now), to render a page from its JSON.
    pub fn resummed(self) -> Self {
        RandomCampaign {
            summary: RandomSummary::of(&self.rows),
            summary_at_window_costs: RandomSummary::of(&self.rows_at_window_costs),
            ..self
        }
    }

    /// The targets, judged at the window's costs, each with what it reads at the
    /// machine's.
    pub fn targets(&self) -> Vec<TargetCheck> {
        let judged = targets_of(&self.rows_at_window_costs, &self.summary_at_window_costs);
        let beside = targets_of(&self.rows, &self.summary);
        judged
            .into_iter()
            .zip(beside)
            .map(|(w, m)| TargetCheck {
                detail: format!(
                    "{}; at the machine's costs {}: {}",
                    w.detail,
                    if m.reached { "reached" } else { "not reached" },
                    m.detail
                ),
                ..w
            })
            .collect()
    }

    /// docs/evaluation/random.md: the distribution at both costs, the targets, the worst
    /// runs and how to replay them.
    pub fn markdown(&self) -> String {
        let mut s = String::from("# rocs on random workloads\n\n");
        let _ = writeln!(
            s,
            "Produced by `{}` (campaign seed {}, {} data accesses per LLC line, controller \
             window = baseline cycles / {}, oracle grid {}). Do not edit by hand: run the \
             command again. Each generated workload is written as TOML in `random/` beside \
             this page; the tables' replay commands run it again from here.\n",
            self.command,
            self.seed,
            self.accesses_per_llc_line,
            self.windows_per_run,
            self.oracle_grid
        );
        let _ = writeln!(
            s,
            "Workloads are drawn from the whole workload format (closed_loop/random.rs): one \
             to four tenants, one to four regions each of every pattern, sizes from 1/64 of \
             the LLC to 8 times it, random shares, phases for a third of the tenants; no \
             tenant is background. speedup = baseline cycles / rocs cycles; of oracle = \
             oracle cycles / rocs cycles; tenant = a tenant's baseline cycles / its cycles \
             under rocs.\n"
        );
        let window_ms = ROCSD_WINDOW_SECONDS * 1e3;
        let mut scales: Vec<f64> = self
            .rows_at_window_costs
            .iter()
            .map(|r| r.cost_scale)
            .collect();
        scales.sort_by(f64::total_cmp);
        let times = |scale: Option<f64>| scale.map_or("-".into(), |v| format!("{:.0}", 1.0 / v));
        let _ = writeln!(
            s,
            "Every case runs twice. Once at its machine's costs of a page move (2 µs) and a \
             sample; once with both times its window over rocsd's window on Linux \
             ({window_ms:.0} ms at the machine's clock; the column \"cost scale\"), rocs \
             sampling as rocsd does a window that long (its sample period times the cost \
             scale, its CPU budget). A simulated run is {} windows this short only so that \
             it is quick: it stands for a program of as many windows of {window_ms:.0} ms, \
             each making more accesses (here a median {} times as many, from {} to {} \
             times) while a move still costs 2 µs. At the machine's costs every move and \
             sample weighs that many times what it weighs for rocsd, and rocs samples at \
             the simulator's period and budget. The targets are judged at the \
             window's costs, with the machine's beside them; both are in every table and in \
             random.json.\n",
            self.windows_per_run,
            times(nearest_rank(&scales, 0.5)),
            times(scales.last().copied()),
            times(scales.first().copied()),
        );
        s += "## Per machine\n\n";
        let mut machines: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !machines.contains(&r.machine.as_str()) {
                machines.push(&r.machine);
            }
        }
        let at_both = self.at_both_costs();
        let mut cells: Vec<Vec<String>> = Vec::new();
        for m in machines.iter().copied().chain(["**all**"]) {
            for (costs, rows, _) in at_both {
                let rows: Vec<RandomRow> = rows
                    .iter()
                    .filter(|r| m == "**all**" || r.machine == m)
                    .cloned()
                    .collect();
                cells.push(summary_cells(m, costs, &rows));
            }
        }
        let header: Vec<&str> = std::iter::once("machine").chain(SUMMARY_COLUMNS).collect();
        s += &table(&header, "llrrrrrrrr", &cells);
        s += &self.by_tenants();
        s += &targets(&self.targets());
        s += &self.where_losses_go(&machines);
        for (costs, rows, summary) in at_both {
            let _ = writeln!(s, "\n## The worst runs at the {costs} costs\n");
            let mut worst: Vec<&RandomRow> = rows.iter().collect();
            worst.sort_by(|a, b| a.speedup.total_cmp(&b.speedup));
            let shown: Vec<Vec<String>> = worst
                .iter()
                .take(10.max(summary.losses))
                .map(|r| row_cells(r))
                .collect();
            s += &table(&ROW_HEADER, ROW_ALIGN, &shown);
        }
        for (costs, rows, _) in at_both {
            let mut tenants: Vec<&RandomRow> = rows.iter().filter(|r| r.tenants > 1).collect();
            if tenants.is_empty() {
                continue;
            }
            tenants.sort_by(|a, b| a.worst_tenant().total_cmp(&b.worst_tenant()));
            let _ = writeln!(s, "## The worst-treated tenants at the {costs} costs\n");
            let shown: Vec<Vec<String>> = tenants.iter().take(5).map(|r| row_cells(r)).collect();
            s += &table(&ROW_HEADER, ROW_ALIGN, &shown);
        }
        s
    }

    /// The per-machine table's figures by how many tenants share the LLC: a target alone
    /// is judged by its own windows; a shared LLC's searches take turns, score the group
    /// and start again when a sharer starts or stops, and its oracle, offline, knows
    /// when each will.
    fn by_tenants(&self) -> String {
        let mut counts: Vec<usize> = self.rows.iter().map(|r| r.tenants).collect();
        counts.sort_unstable();
        counts.dedup();
        let mut cells = Vec::new();
        for n in counts {
            for (costs, rows, _) in self.at_both_costs() {
                let rows: Vec<RandomRow> =
                    rows.iter().filter(|r| r.tenants == n).cloned().collect();
                let mut row = summary_cells(&n.to_string(), costs, &rows);
                row.pop(); // seconds per run: the per-machine table has them
                cells.push(row);
            }
        }
        let mut s = String::from(
            "## By tenants sharing the LLC\n\nA target alone is judged by its own windows; \
             the tenants of a shared LLC take turns to search, are judged as a group, and \
             start again when one of them starts or stops, while the oracle knows offline \
             when each will.\n\n",
        );
        let columns = &SUMMARY_COLUMNS[..SUMMARY_COLUMNS.len() - 1];
        let header: Vec<&str> = std::iter::once("tenants")
            .chain(columns.iter().copied())
            .collect();
        s += &table(&header, "rlrrrrrrr", &cells);
        s
    }

    /// The runs at the window's costs, then at the machine's, each with its label and
    /// summary: the order of every table's rows.
    fn at_both_costs(&self) -> [(&'static str, &[RandomRow], &RandomSummary); 2] {
        [
            (
                "window's",
                &self.rows_at_window_costs,
                &self.summary_at_window_costs,
            ),
            ("machine's", &self.rows, &self.summary),
        ]
    }

    /// Per machine and costs, what the runs below [`LOSS`] lost on average, split into
    /// sampling, page moves and the rest.
    fn where_losses_go(&self, machines: &[&str]) -> String {
        let mut cells = Vec::new();
        for m in machines.iter().copied().chain(["**all**"]) {
            for (costs, rows, _) in self.at_both_costs() {
                let below: Vec<&RandomRow> = rows
                    .iter()
                    .filter(|r| (m == "**all**" || r.machine == m) && r.speedup < LOSS)
                    .collect();
                if below.is_empty() {
                    continue;
                }
                let mean = |f: &dyn Fn(&RandomRow) -> f64| {
                    below.iter().map(|r| f(r)).sum::<f64>() / below.len() as f64
                };
                let (loss, sampling, moves) = (
                    mean(&|r| r.loss()),
                    mean(&|r| r.sampling),
                    mean(&|r| r.migrations),
                );
                let mut windows: Vec<f64> = below
                    .iter()
                    .map(|r| r.baseline_cycles as f64 / self.windows_per_run.max(1) as f64)
                    .collect();
                windows.sort_by(f64::total_cmp);
                // The built-in machine's clock; none for the whole campaign or a machine
                // file.
                let rocsd_window = MachineSpec::resolve(m).ok().map_or("-".into(), |spec| {
                    format!("{:.0} M", spec.clock_ghz * 1e9 * ROCSD_WINDOW_SECONDS / 1e6)
                });
                cells.push(vec![
                    m.to_string(),
                    costs.to_string(),
                    below.len().to_string(),
                    percent(loss),
                    percent(sampling),
                    percent(moves),
                    percent(loss - sampling - moves),
                    format!("{:.2} M", nearest_rank(&windows, 0.5).unwrap_or(0.0) / 1e6),
                    rocsd_window,
                ]);
            }
        }
        if cells.is_empty() {
            return String::new();
        }
        let mut s = String::from("\n## Where the runs below 0.99 lose\n\n");
        let window_ms = ROCSD_WINDOW_SECONDS * 1e3;
        let _ = writeln!(
            s,
            "Each run's loss (rocs cycles / baseline cycles - 1) splits into what the rocs \
             run paid for sampling, what it paid for page migrations (both over the \
             baseline's cycles) and the rest: what probes at worse placements and the \
             placements kept cost or won. Means over the runs below 0.99, with the median \
             length of their controller windows beside rocsd's window on Linux \
             ({window_ms:.0} ms) at the machine's clock. At the machine's costs, to gather \
             in windows this short the samples a real profile gathers, the simulated \
             profile may spend a quarter of its windows' cycles on sampling (rocsd: 1%).\n"
        );
        s += &table(
            &[
                "machine",
                "costs",
                "runs below 0.99",
                "loss",
                "sampling",
                "page moves",
                "the rest",
                "controller window (cycles)",
                "rocsd's window (cycles)",
            ],
            "llrrrrrrr",
            &cells,
        );
        s
    }
}

/// The targets, checked over `rows` (summarised as `s`).
fn targets_of(rows: &[RandomRow], s: &RandomSummary) -> Vec<TargetCheck> {
    let worst = s.worst.and_then(|i| rows.iter().find(|r| r.index == i));
    let fraction = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    vec![
        TargetCheck {
            target: format!("no run below {LOSS} of off ({} runs)", s.runs),
            reached: s.losses == 0 && s.runs > 0,
            detail: worst.map_or("no runs".into(), |r| {
                format!(
                    "{} below; worst {:.3}: {} on {}",
                    s.losses, r.speedup, r.workload, r.machine
                )
            }),
        },
        TargetCheck {
            target: format!(
                "where the oracle gains ≥ 5% ({} runs): median fraction of oracle ≥ 0.95",
                s.gainful
            ),
            reached: s.median_fraction.is_some_and(|v| v >= 0.95),
            detail: format!("median {}", fraction(s.median_fraction)),
        },
        TargetCheck {
            target: "where the oracle gains ≥ 5%: 90th-percentile-worst fraction ≥ 0.90".into(),
            reached: s.p90_worst_fraction.is_some_and(|v| v >= 0.90),
            detail: format!("90th-percentile-worst {}", fraction(s.p90_worst_fraction)),
        },
        TargetCheck {
            target: format!(
                "no tenant of a shared LLC below {TENANT_FLOOR} of its speed at k = 0 ({} runs)",
                s.multi_tenant
            ),
            reached: s.tenants_over_bound == 0,
            detail: s
                .worst_tenant
                .map_or("no multi-tenant runs".into(), |(i, v)| {
                    let n = s.tenants_over_bound;
                    let runs = if n == 1 { "run" } else { "runs" };
                    format!("{n} {runs} over the bound; worst tenant {v:.3} (run {i})")
                }),
        },
    ]
}

fn percent(v: f64) -> String {
    format!("{:.2}%", 100.0 * v)
}

const ROW_HEADER: [&str; 13] = [
    "run",
    "machine",
    "seed",
    "tenants: regions",
    "speedup",
    "oracle",
    "of oracle",
    "worst tenant",
    "pages confined",
    "sampling",
    "page moves",
    "cost scale",
    "replay",
];
const ROW_ALIGN: &str = "rlrlrrrrrrrrl";

fn row_cells(r: &RandomRow) -> Vec<String> {
    let costs = if r.cost_scale == 1.0 {
        String::new()
    } else {
        format!(" --cost-scale {}", r.cost_scale)
    };
    vec![
        r.index.to_string(),
        r.machine.clone(),
        format!("{:#x}", r.seed),
        r.shape.clone(),
        format!("{:.3}", r.speedup),
        format!("{:.3}", r.oracle_speedup),
        format!("{:.3}", r.fraction_of_oracle),
        format!("{:.3}", r.worst_tenant()),
        r.pages_confined.to_string(),
        percent(r.sampling),
        percent(r.migrations),
        format!("{}", r.cost_scale),
        format!(
            "`rocsctl sim run --workload random/{}.toml --machine {}{costs} --seed {} --mode all`",
            r.workload, r.machine, r.seed
        ),
    ]
}

/// The columns of [`summary_cells`] after its label.
const SUMMARY_COLUMNS: [&str; 9] = [
    "costs",
    "runs",
    "worst speedup",
    "below 0.99",
    "oracle gains ≥ 5%",
    "median of oracle",
    "90th-pct-worst of oracle",
    "worst tenant (shared runs)",
    "seconds per run",
];

fn summary_cells(label: &str, costs: &str, rows: &[RandomRow]) -> Vec<String> {
    let s = RandomSummary::of(rows);
    let worst = rows.iter().map(|r| r.speedup).fold(f64::INFINITY, f64::min);
    let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    vec![
        label.to_string(),
        costs.to_string(),
        s.runs.to_string(),
        if rows.is_empty() {
            "-".into()
        } else {
            format!("{worst:.3}")
        },
        format!(
            "{} ({:.1}%)",
            s.losses,
            100.0 * s.losses as f64 / s.runs.max(1) as f64
        ),
        s.gainful.to_string(),
        opt(s.median_fraction),
        opt(s.p90_worst_fraction),
        opt(s.worst_tenant.map(|(_, v)| v)),
        format!(
            "{:.1}",
            rows.iter().map(|r| r.wall_seconds).sum::<f64>() / rows.len().max(1) as f64
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: u64, speedup: f64, oracle: f64, tenants: Vec<f64>) -> RandomRow {
        RandomRow {
            index,
            seed: index,
            machine: "tiny".into(),
            workload: format!("w{index}"),
            shape: String::new(),
            tenants: tenants.len(),
            baseline_cycles: 1,
            speedup,
            oracle_speedup: oracle,
            fraction_of_oracle: speedup / oracle,
            tenant_speedups: tenants,
            pages_confined: 0,
            search_windows: 0,
            overhead: 0.0,
            sampling: 0.0,
            migrations: 0.0,
            wall_seconds: 0.0,
            cost_scale: 1.0,
        }
    }

    /// A case that read `machine` at the machine's costs and `window` at the window's.
    fn case(machine: RandomRow, window: RandomRow) -> RandomCaseRows {
        RandomCaseRows {
            at_machine_costs: machine,
            at_window_costs: RandomRow {
                cost_scale: 0.003,
                ..window
            },
        }
    }

    #[test]
    fn the_summary_finds_the_worst_and_the_quantiles() {
        let mut rows = vec![
            row(0, 0.98, 1.0, vec![0.98]),
            row(1, 1.0, 1.0, vec![1.02, 0.93]),
            row(2, 1.2, 1.25, vec![1.2, 1.01]),
        ];
        // Ten gainful runs at 1.0..1.9 of speedup against an oracle of 2: fractions 0.5..0.95.
        rows.extend((0..10).map(|i| row(10 + i, 1.0 + i as f64 / 10.0, 2.0, vec![1.0])));
        let s = RandomSummary::of(&rows);
        assert_eq!(s.runs, 13);
        assert_eq!(s.worst, Some(0));
        assert_eq!(s.losses, 1);
        assert_eq!(s.gainful, 11);
        assert_eq!(s.p90_worst_fraction, Some(0.55));
        assert_eq!(s.median_fraction, Some(0.75));
        assert_eq!(s.multi_tenant, 2);
        assert_eq!(s.worst_tenant, Some((1, 0.93)));
        assert_eq!(s.tenants_over_bound, 1);
    }

    #[test]
    fn the_page_splits_what_the_losing_runs_lost() {
        let mut losing = row(0, 0.98, 1.0, vec![0.98]);
        losing.baseline_cycles = 200_000_000;
        (losing.sampling, losing.migrations) = (0.01, 0.005);
        let mut even = row(1, 1.0, 1.0, vec![1.0]);
        even.sampling = 0.5;
        let page = RandomCampaign::new(
            "test".into(),
            1,
            2000.0,
            &LoopConfig::default(),
            vec![
                case(losing.clone(), losing),
                case(even.clone(), row(1, 1.0, 1.0, vec![1.0])),
            ],
        )
        .markdown();
        // 1 / 0.98 - 1 = 2.04%: 1% sampling, 0.5% moves, 0.54% the rest; 200 windows of
        // 1 M cycles; the run at 1.0 is not among them.
        for costs in ["window's", "machine's"] {
            let line = format!("| tiny | {costs} | 1 | 2.04% | 1.00% | 0.50% | 0.54% | 1.00 M |");
            assert!(page.contains(&line), "{page}");
            assert!(
                page.contains(&format!("| **all** | {costs} | 1 | 2.04% |")),
                "{page}"
            );
        }
    }

    #[test]
    fn the_page_shows_the_runs_by_how_many_tenants_share_the_llc() {
        // A target alone that loses at the machine's costs, and a pair whose second
        // tenant pays at both.
        let alone = row(0, 0.97, 1.0, vec![0.97]);
        let pair = row(1, 1.1, 1.2, vec![1.3, 0.9]);
        let page = RandomCampaign::new(
            "test".into(),
            1,
            2000.0,
            &LoopConfig::default(),
            vec![
                case(alone, row(0, 1.0, 1.0, vec![1.0])),
                case(pair.clone(), pair),
            ],
        )
        .markdown();
        for line in [
            "| 1 | window's | 1 | 1.000 | 0 (0.0%) | 0 | - | - | - |",
            "| 1 | machine's | 1 | 0.970 | 1 (100.0%) | 0 | - | - | - |",
            "| 2 | window's | 1 | 1.100 | 0 (0.0%) | 1 | 0.917 | 0.917 | 0.900 |",
            "| 2 | machine's | 1 | 1.100 | 0 (0.0%) | 1 | 0.917 | 0.917 | 0.900 |",
        ] {
            assert!(page.contains(line), "{line} not in:\n{page}");
        }
    }

    #[test]
    fn the_targets_judge_the_window_costs_and_show_the_machine_costs_beside() {
        // Run 0 loses at the machine's costs and not at the window's.
        let c = RandomCampaign::new(
            "test".into(),
            1,
            2000.0,
            &LoopConfig::default(),
            vec![
                case(row(0, 0.97, 1.0, vec![0.97]), row(0, 1.0, 1.0, vec![1.0])),
                case(row(1, 1.1, 1.1, vec![1.1]), row(1, 1.1, 1.1, vec![1.1])),
            ],
        );
        let first = &c.targets()[0];
        assert!(first.reached, "{first:?}");
        assert!(
            first.detail.contains("0 below")
                && first
                    .detail
                    .contains("at the machine's costs not reached: 1 below; worst 0.970"),
            "{first:?}"
        );
        let page = c.markdown();
        assert!(
            page.contains("(here a median 333 times as many, from 333 to 333 times)"),
            "{page}"
        );
        // The replay of a run at the window's costs gives its scale.
        assert!(
            page.contains("--machine tiny --cost-scale 0.003 --seed 0 --mode all"),
            "{page}"
        );
        assert!(
            page.contains("| tiny | machine's | 2 | 0.970 | 1 (50.0%) |"),
            "{page}"
        );
        assert!(
            page.contains("| tiny | window's | 2 | 1.000 | 0 (0.0%) |"),
            "{page}"
        );
    }

    #[test]
    fn a_window_stands_for_rocsds_at_two_significant_digits() {
        let ppc = MachineSpec::resolve("ppc970fx").unwrap();
        // rocsd's 100 ms at 2.3 GHz: 230 M cycles.
        assert_eq!(window_cost_scale(&ppc, 660_000), 0.0029);
        assert_eq!(window_cost_scale(&ppc, 23_000_000), 0.1);
        assert_eq!(window_cost_scale(&ppc, 2_300_000_000), 1.0);
    }

    #[test]
    fn cases_go_round_the_machines_and_replay_from_their_seed() {
        let machines: Vec<MachineSpec> = ["tiny", "ppc970fx"]
            .iter()
            .map(|m| MachineSpec::resolve(m).unwrap())
            .collect();
        let cases = random_cases(5, 4, &machines, 10.0);
        let names: Vec<&str> = cases.iter().map(|c| c.machine.name.as_str()).collect();
        assert_eq!(names, ["tiny", "ppc970fx", "tiny", "ppc970fx"]);
        let c = &cases[3];
        assert_eq!(c.workload, random_workload(c.seed, &machines[1], 10.0));
        let text = c.toml("x.toml");
        assert!(text.contains("--machine ppc970fx --seed"), "{text}");
        assert_eq!(Workload::from_toml("x.toml", &text).unwrap(), c.workload);
    }
}
