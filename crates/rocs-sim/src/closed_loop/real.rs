//! The real-program suite (issue 13): programs' memory traces, alone and in pairs sharing
//! the LLC, replayed under baseline, rocs and the oracle. The traces and their manifest
//! are made by tests/real/make-traces.sh:
//!
//! ```toml
//! made = "valgrind 1:3.19.0-1, ...; Linux 6.1.0 x86_64; ..."   # optional: what made them
//! [[program]]
//! name = "sqlite3-join"          # unique
//! trace = "sqlite3-join.rtrace"  # rocs-sim's binary trace, relative to the manifest
//! what = "sqlite3 joining two generated tables"
//! [[pair]]
//! name = "sqlite3-join+xz"
//! tenants = ["sqlite3-join", "xz-compress"]
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::campaign::{one, window_cost_scale};
use super::render::{table, BarChart};
use super::{compare, ratio, tenant_speedups, LoopConfig, LoopError, Modes};
use crate::spec::{parse_toml, read_file};
use crate::trace::TraceReader;
use crate::{Machine, MachineSpec, SimError, TraceFormat, TraceSpec};

/// How many times a program's trace is replayed in a run (a steady state needs its
/// accesses more than once); a pair's tenants each replay in a loop to this many times the
/// longer one's references, so that they share the LLC to the end.
pub const REPEAT: u32 = 3;

/// DIR/manifest.toml.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// What made the traces (tools and their versions, kernel, CPU): traces made
    /// elsewhere may differ.
    #[serde(default)]
    pub made: Option<String>,
    #[serde(rename = "program")]
    pub programs: Vec<Program>,
    #[serde(rename = "pair", default)]
    pub pairs: Vec<Pair>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    pub name: String,
    pub trace: PathBuf,
    pub what: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    pub name: String,
    pub tenants: Vec<String>,
}

/// A program alone or a pair: what one row of the suite runs.
#[derive(Clone, Debug, PartialEq)]
pub struct RealCase {
    pub name: String,
    pub what: String,
    /// One trace per tenant.
    pub traces: Vec<PathBuf>,
    /// References (trace events) in one pass of each trace.
    pub events: Vec<u64>,
}

/// A program's trace as the suite ran it: its references (events) in one pass. Traces
/// made again with the same packages, kernel and CPU (the manifest's `made`) have as many
/// references, and differ in at most a few bytes (at start the dynamic loader scans a few
/// bytes at the top of the stack that differ from run to run).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceInfo {
    pub program: String,
    pub events: u64,
}

impl TraceInfo {
    fn of(program: &str, path: &Path) -> Result<TraceInfo, SimError> {
        let file = std::fs::File::open(path).map_err(|reason| SimError::Io {
            path: path.to_path_buf(),
            reason,
        })?;
        let mut reader = TraceReader::new(
            Box::new(std::io::BufReader::with_capacity(1 << 20, file)),
            TraceFormat::Detect,
        )?;
        let mut events = 0;
        while reader.next_event()?.is_some() {
            events += 1;
        }
        Ok(TraceInfo {
            program: program.to_string(),
            events,
        })
    }
}

impl Manifest {
    /// Read and check `dir`/manifest.toml: names unique, pairs of known programs, traces
    /// present.
    pub fn read(dir: &Path) -> Result<Manifest, SimError> {
        let path = dir.join("manifest.toml");
        let file = path.display().to_string();
        let m: Manifest = parse_toml(&file, &read_file(&file)?)?;
        let invalid = |message: String| SimError::Invalid {
            file: file.clone(),
            message,
        };
        if m.programs.is_empty() {
            return Err(invalid("no [[program]]: nothing to run".into()));
        }
        let mut names: Vec<&str> = Vec::new();
        for name in m
            .programs
            .iter()
            .map(|p| &p.name)
            .chain(m.pairs.iter().map(|p| &p.name))
        {
            if names.contains(&name.as_str()) {
                return Err(invalid(format!("the name '{name}' is given twice")));
            }
            names.push(name);
        }
        for p in &m.programs {
            let trace = dir.join(&p.trace);
            if !trace.is_file() {
                return Err(invalid(format!(
                    "program '{}': its trace {} is missing (run tests/real/make-traces.sh)",
                    p.name,
                    trace.display()
                )));
            }
        }
        for pair in &m.pairs {
            if pair.tenants.len() < 2 {
                return Err(invalid(format!("pair '{}': give two tenants", pair.name)));
            }
            if let Some(t) = pair
                .tenants
                .iter()
                .find(|t| !m.programs.iter().any(|p| &&p.name == t))
            {
                return Err(invalid(format!(
                    "pair '{}': '{t}' is not a [[program]] of the manifest",
                    pair.name
                )));
            }
        }
        Ok(m)
    }

    /// Each program's trace in `dir`, counted, in the manifest's order.
    pub fn traces(&self, dir: &Path) -> Result<Vec<TraceInfo>, SimError> {
        self.programs
            .iter()
            .map(|p| TraceInfo::of(&p.name, &dir.join(&p.trace)))
            .collect()
    }

    /// The programs alone, then the pairs, with the events of `traces` (see
    /// [`Manifest::traces`]).
    pub fn cases(&self, dir: &Path, traces: &[TraceInfo]) -> Vec<RealCase> {
        let events: std::collections::BTreeMap<&str, u64> = traces
            .iter()
            .map(|t| (t.program.as_str(), t.events))
            .collect();
        let case = |name: &str, what: String, tenants: &[&Program]| RealCase {
            name: name.to_string(),
            what,
            traces: tenants.iter().map(|p| dir.join(&p.trace)).collect(),
            events: tenants.iter().map(|p| events[p.name.as_str()]).collect(),
        };
        let program = |name: &str| {
            self.programs
                .iter()
                .find(|p| p.name == name)
                .expect("checked")
        };
        let alone = self
            .programs
            .iter()
            .map(|p| case(&p.name, p.what.clone(), &[p]));
        let pairs = self.pairs.iter().map(|pair| {
            let tenants: Vec<&Program> = pair.tenants.iter().map(|t| program(t)).collect();
            let what = format!("{} sharing the LLC", pair.tenants.join(" and "));
            case(&pair.name, what, &tenants)
        });
        alone.chain(pairs).collect()
    }
}

/// A machine replaying `case`: a program alone [`REPEAT`] times, a pair's tenants each
/// in a loop to [`REPEAT`] times the longer one's references.
pub fn machine_for(case: &RealCase, spec: &MachineSpec, seed: u64) -> Result<Machine, SimError> {
    let common = case.events.iter().max().copied().unwrap_or(0) * REPEAT as u64;
    let alone = case.traces.len() == 1;
    let traces = case
        .traces
        .iter()
        .map(|path| TraceSpec {
            repeat: if alone { REPEAT } else { 1 },
            length: (!alone).then_some(common),
            ..TraceSpec::file(path)
        })
        .collect();
    Machine::from_traces(spec, traces, seed)
}

/// What one case gave on one machine, or why it did not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealRow {
    pub machine: String,
    pub case: String,
    pub what: String,
    pub tenants: usize,
    /// Why the case did not run on this machine (then the figures are 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
    /// LLC misses per thousand instructions without rocs (all tenants together): whether
    /// the case misses at all.
    pub baseline_mpki: f64,
    pub speedup: f64,
    pub oracle_speedup: f64,
    pub fraction_of_oracle: f64,
    /// Each tenant's baseline cycles / its cycles under rocs.
    pub tenant_speedups: Vec<f64>,
    pub search_windows: u64,
    pub pages_confined: usize,
    pub pages_profiled: usize,
    /// Cycles paid for sampling and migrating / rocs cycles.
    pub overhead: f64,
    /// The factor on the machine's costs of a page move and a sample this run had
    /// ([`window_cost_scale`]; 1 at the machine's own).
    #[serde(default = "one")]
    pub cost_scale: f64,
}

/// A case's runs at the machine's costs and at the costs its window stands for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealCaseRows {
    pub at_machine_costs: RealRow,
    pub at_window_costs: RealRow,
}

/// Baseline, rocs and the oracle of `case` on `spec`, at the machine's costs and again at
/// the costs its window stands for ([`window_cost_scale`]), as the random campaign runs
/// its cases: a trace's run is as many windows as a long program's, each far shorter
/// than rocsd's. A machine that cannot replay the case gives rows that say why.
pub fn run_real(
    case: &RealCase,
    spec: &MachineSpec,
    cfg: &LoopConfig,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<RealCaseRows, LoopError> {
    let (at_machine_costs, baseline_cycles) =
        run_real_at(case, spec, 1.0, cfg, seed, &mut |what| {
            progress(&format!("{what} (machine's costs)"))
        })?;
    if at_machine_costs.not_run.is_some() {
        return Ok(RealCaseRows {
            at_window_costs: at_machine_costs.clone(),
            at_machine_costs,
        });
    }
    let scale = window_cost_scale(spec, cfg.window_of(baseline_cycles));
    let (at_window_costs, _) = run_real_at(case, spec, scale, cfg, seed, &mut |what| {
        progress(&format!("{what} (costs x{scale})"))
    })?;
    Ok(RealCaseRows {
        at_machine_costs,
        at_window_costs,
    })
}

/// Baseline, rocs and the oracle of `case` on `spec` with its costs `cost_scale` times
/// its own; the row and the baseline's cycles.
fn run_real_at(
    case: &RealCase,
    spec: &MachineSpec,
    cost_scale: f64,
    cfg: &LoopConfig,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<(RealRow, u64), LoopError> {
    let (spec, cfg) = cfg.at_cost_scale(spec, cost_scale)?;
    let mut row = RealRow {
        machine: spec.name.clone(),
        case: case.name.clone(),
        what: case.what.clone(),
        tenants: case.traces.len(),
        not_run: None,
        baseline_mpki: 0.0,
        speedup: 0.0,
        oracle_speedup: 0.0,
        fraction_of_oracle: 0.0,
        tenant_speedups: Vec::new(),
        search_windows: 0,
        pages_confined: 0,
        pages_profiled: 0,
        overhead: 0.0,
        cost_scale,
    };
    if let Err(SimError::Unsupported(why)) = machine_for(case, &spec, seed) {
        row.not_run = Some(why);
        return Ok((row, 0));
    }
    let make = || machine_for(case, &spec, seed);
    let c = compare(&make, &cfg, Modes::ALL, progress)?;
    let rocs = c.rocs.as_ref().expect("asked for rocs");
    let oracle = c.oracle.as_ref().expect("asked for the oracle");
    row.baseline_mpki = c.baseline.stats.llc_mpki();
    row.speedup = ratio(c.baseline.stats.cycles, rocs.stats.cycles);
    row.oracle_speedup = ratio(c.baseline.stats.cycles, oracle.stats.cycles);
    row.fraction_of_oracle = ratio(oracle.stats.cycles, rocs.stats.cycles);
    row.tenant_speedups = tenant_speedups(&c.baseline.stats, &rocs.stats);
    row.search_windows = rocs.search_windows;
    row.pages_confined = rocs.pages_confined;
    row.pages_profiled = rocs.pages_profiled;
    row.overhead = ratio(rocs.overhead_cycles, rocs.stats.cycles);
    Ok((row, c.baseline.stats.cycles))
}

/// The whole suite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealSuite {
    pub command: String,
    pub seed: u64,
    /// The manifest's `made`: what made the traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made: Option<String>,
    /// The traces the suite ran.
    #[serde(default)]
    pub traces: Vec<TraceInfo>,
    /// Each case at its machine's costs.
    pub rows: Vec<RealRow>,
    /// Each case at the costs its window stands for ([`window_cost_scale`]): what the
    /// page judges. Empty in a suite run before they were.
    #[serde(default)]
    pub rows_at_window_costs: Vec<RealRow>,
}

/// Colours of a measure at the costs the page judges, then at the other (lighter).
const ROCS_COLOURS: [&str; 2] = ["#1f77b4", "#aec7e8"];
const ORACLE_COLOURS: [&str; 2] = ["#ff7f0e", "#ffbb78"];
const PROFILED_COLOURS: [&str; 2] = ["#9e9e9e", "#e0e0e0"];

impl RealSuite {
    pub fn machines(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in &self.rows {
            if !v.contains(&r.machine) {
                v.push(r.machine.clone());
            }
        }
        v
    }

    /// The runs at the window's costs (if the suite has them), then at the machine's,
    /// each with its label: the first are what the page judges.
    fn at_both_costs(&self) -> Vec<(&'static str, &[RealRow])> {
        [
            ("window's", self.rows_at_window_costs.as_slice()),
            ("machine's", self.rows.as_slice()),
        ]
        .into_iter()
        .filter(|(_, rows)| !rows.is_empty())
        .collect()
    }

    /// The cases of `machine` that ran, each with its row at each costs (labelled as
    /// [`RealSuite::at_both_costs`]).
    fn ran_on(&self, machine: &str) -> Vec<(String, Vec<(&'static str, &RealRow)>)> {
        self.rows
            .iter()
            .filter(|r| r.machine == machine && r.not_run.is_none())
            .map(|r| (r.case.clone(), self.at_each_costs(r)))
            .collect()
    }

    /// `row`'s case on its machine at each costs.
    fn at_each_costs(&self, row: &RealRow) -> Vec<(&'static str, &RealRow)> {
        self.at_both_costs()
            .into_iter()
            .filter_map(|(costs, rows)| {
                rows.iter()
                    .find(|r| r.machine == row.machine && r.case == row.case)
                    .map(|r| (costs, r))
            })
            .collect()
    }

    /// The charts of `machine`: (file name, SVG) of the speedups, the search's cost and
    /// the pages confined, each bar at both costs.
    pub fn svgs(&self, machine: &str) -> Vec<(String, String)> {
        let ran = self.ran_on(machine);
        let both = self.at_both_costs();
        // A measure: its name, its colours at the judged and the other costs, and its
        // value; each gives one series per costs.
        type Measure<'a> = (&'a str, [&'a str; 2], &'a dyn Fn(&RealRow) -> f64);
        let chart = |title: String, first: Option<(&str, f64)>, measures: &[Measure], unit| {
            let mut names: Vec<(String, &str)> = Vec::new();
            if let Some((name, _)) = first {
                names.push((name.to_string(), "#9e9e9e"));
            }
            for (name, colours, _) in measures {
                // The judged costs (the first) dark, the other light.
                for (i, (costs, _)) in both.iter().enumerate() {
                    let colour = colours[i];
                    let label = if both.len() > 1 {
                        format!("{name}, {costs} costs")
                    } else {
                        name.to_string()
                    };
                    names.push((label, colour));
                }
            }
            let series: Vec<(&str, &str)> = names.iter().map(|(n, c)| (n.as_str(), *c)).collect();
            let groups = ran
                .iter()
                .map(|(case, rows)| {
                    let mut v: Vec<f64> = first.iter().map(|(_, value)| *value).collect();
                    for (_, _, value) in measures {
                        v.extend(rows.iter().map(|(_, r)| value(r)));
                    }
                    (case.clone(), v)
                })
                .collect();
            BarChart {
                title,
                series: &series,
                groups,
                unit_line: unit,
            }
            .svg()
        };
        vec![
            (
                format!("real-speedup-{machine}.svg"),
                chart(
                    format!("Speedup over baseline on {machine}"),
                    Some(("baseline", 1.0)),
                    &[
                        ("rocs", ROCS_COLOURS, &|r| r.speedup),
                        ("oracle", ORACLE_COLOURS, &|r| r.oracle_speedup),
                    ],
                    true,
                ),
            ),
            (
                format!("real-search-{machine}.svg"),
                chart(
                    format!("Search windows on {machine}"),
                    None,
                    &[("search windows", ROCS_COLOURS, &|r| r.search_windows as f64)],
                    false,
                ),
            ),
            (
                format!("real-pages-{machine}.svg"),
                chart(
                    format!("Pages confined and profiled on {machine}"),
                    None,
                    &[
                        ("confined", ROCS_COLOURS, &|r| r.pages_confined as f64),
                        ("profiled", PROFILED_COLOURS, &|r| r.pages_profiled as f64),
                    ],
                    false,
                ),
            ),
        ]
    }

    /// real.md.
    pub fn markdown(&self) -> String {
        use std::fmt::Write;
        let mut s = String::from("# rocs on real programs\n\n");
        let _ = writeln!(
            s,
            "Produced by `{}` (seed {}). Do not edit by hand: run the command again. Each \
             program's trace is replayed {REPEAT} times; a pair's two programs share the LLC, \
             each replayed in a loop to {REPEAT} times the longer one's references. \
             speedup = baseline cycles / rocs cycles; oracle = the best offline `k` for \
             rocs's profile among those that slow no tenant by more than `max_slowdown` (5% \
             by default) against k = 0; of oracle = oracle cycles / rocs cycles; tenants = \
             each tenant's baseline cycles / its cycles under rocs.\n",
            self.command, self.seed
        );
        if !self.rows_at_window_costs.is_empty() {
            s += "Every case runs twice, as in random.md: at its machine's costs of a page \
                  move and a sample, and with both times its window over rocsd's window on \
                  Linux (100 ms at the machine's clock; the column \"costs\" gives the \
                  factor), rocs sampling there as rocsd does a window that long (its \
                  sample period times the factor, its CPU budget). A trace is replayed in \
                  as many windows as a long program runs, each far shorter than rocsd's, \
                  so at the machine's costs every move and sample weighs that many times \
                  what it weighs for rocsd. The page judges at the window's costs, with \
                  the machine's beside them in every table and chart and in real.json.\n\n";
        }
        s += &self.traces_section();
        let both = self.at_both_costs();
        for machine in self.machines() {
            let _ = writeln!(s, "## {machine}\n");
            if !self.ran_on(&machine).is_empty() {
                for (file, _) in self.svgs(&machine) {
                    let _ = writeln!(s, "![{file}]({file})\n");
                }
            }
            let cells: Vec<Vec<String>> = self
                .rows
                .iter()
                .filter(|r| r.machine == machine)
                .flat_map(|r| self.at_each_costs(r))
                .map(|(costs, r)| row_cells(costs, r))
                .collect();
            s += &table(
                &[
                    "program",
                    "what",
                    "costs",
                    "rocs speedup",
                    "oracle",
                    "of oracle",
                    "tenants",
                    "search windows",
                    "pages confined / profiled",
                    "overhead",
                ],
                "lllrrrrrrr",
                &cells,
            );
        }
        let Some((judged, judged_rows)) = both.first() else {
            return s;
        };
        let ran: Vec<&RealRow> = judged_rows.iter().filter(|r| r.not_run.is_none()).collect();
        s += &self.why(judged, &ran);
        s += "## Never below 0.99 of off\n\n";
        for (costs, rows) in &both {
            let ran: Vec<&RealRow> = rows.iter().filter(|r| r.not_run.is_none()).collect();
            let below: Vec<String> = ran
                .iter()
                .filter(|r| r.speedup < 0.99)
                .map(|r| format!("{} on {}: {:.4}", r.case, r.machine, r.speedup))
                .collect();
            let _ = writeln!(
                s,
                "- At the {costs} costs: {} of {} runs below: {}.",
                below.len(),
                ran.len(),
                if below.is_empty() {
                    "none".into()
                } else {
                    below.join("; ")
                }
            );
        }
        s.push('\n');
        s
    }

    /// The traces the page ran, so that traces made again can be checked against them.
    fn traces_section(&self) -> String {
        if self.traces.is_empty() {
            return String::new();
        }
        let mut s = String::from(
            "## Traces\n\n`tests/real/make-traces.sh` makes them. Made again with the same \
             packages, kernel and CPU, a trace has as many references and differs in at \
             most a few bytes (at start the dynamic loader scans a few bytes at the top of \
             the stack that differ from run to run); traces with other counts give other \
             figures.",
        );
        if let Some(made) = &self.made {
            s += &format!(" These were made with {made}.");
        }
        s += "\n\n";
        let cells: Vec<Vec<String>> = self
            .traces
            .iter()
            .map(|t| vec![t.program.clone(), t.events.to_string()])
            .collect();
        s + &table(&["program", "references"], "lr", &cells)
    }

    /// Which cases gain, which do not, and why, per machine: a case gains if its oracle
    /// does by [`GAIN`]; one that does not either misses too little for any placement to
    /// matter (baseline MPKI under [`MISSES`]: the LLC holds what it reuses), or misses on
    /// data that no prefix of its miss-rate stack protects.
    fn why(&self, costs: &str, ran: &[&RealRow]) -> String {
        use std::fmt::Write;
        let mut s = format!(
            "## Which gain, which do not, and why\n\n\
             At the {costs} costs. A case *gains* if its oracle runs at least {:.0}% faster than the baseline: \
             confining the top of its miss-rate stack then protects data it reuses, and the \
             row says how much of that rocs finds online. A case that does not either \
             *fits*: its LLC misses per thousand instructions without rocs (MPKI) are under \
             {MISSES}, so the LLC already holds what it reuses and nothing is left to protect; \
             or it *misses what no placement saves*: its misses are on data it does not reuse \
             within the LLC's reach (a stream through its input, memory touched once), and \
             confining any prefix of its stack gains under {:.0}%.\n\n",
            (GAIN - 1.0) * 100.0,
            (GAIN - 1.0) * 100.0
        );
        let case = |r: &RealRow| format!("{} (MPKI {:.2})", r.case, r.baseline_mpki);
        for machine in self.machines() {
            let rows: Vec<&&RealRow> = ran.iter().filter(|r| r.machine == machine).collect();
            if rows.is_empty() {
                continue;
            }
            let gains: Vec<String> = rows
                .iter()
                .filter(|r| r.oracle_speedup >= GAIN)
                .map(|r| {
                    format!(
                        "{}: oracle {:.3}, rocs {:.3}, {:.2} of it",
                        case(r),
                        r.oracle_speedup,
                        r.speedup,
                        r.fraction_of_oracle
                    )
                })
                .collect();
            let fits: Vec<String> = rows
                .iter()
                .filter(|r| r.oracle_speedup < GAIN && r.baseline_mpki < MISSES)
                .map(|r| case(r))
                .collect();
            let unsaved: Vec<String> = rows
                .iter()
                .filter(|r| r.oracle_speedup < GAIN && r.baseline_mpki >= MISSES)
                .map(|r| case(r))
                .collect();
            let list = |v: Vec<String>| {
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.join("; ")
                }
            };
            let _ = writeln!(
                s,
                "- **{machine}**: gain: {}. Fit: {}. Miss what no placement saves: {}.",
                list(gains),
                list(fits),
                list(unsaved)
            );
        }
        s.push('\n');
        s
    }
}

/// One row of a machine's table: `r` at the `costs` it ran at.
fn row_cells(costs: &str, r: &RealRow) -> Vec<String> {
    let costs = if r.cost_scale == 1.0 {
        costs.to_string()
    } else {
        format!("{costs} (x{})", r.cost_scale)
    };
    if let Some(why) = &r.not_run {
        let mut c = vec![
            r.case.clone(),
            r.what.clone(),
            costs,
            format!("not run: {why}"),
        ];
        c.resize(10, String::new());
        return c;
    }
    let tenants: Vec<String> = r
        .tenant_speedups
        .iter()
        .map(|t| format!("{t:.3}"))
        .collect();
    vec![
        r.case.clone(),
        r.what.clone(),
        costs,
        format!("{:.3}", r.speedup),
        format!("{:.3}", r.oracle_speedup),
        format!("{:.3}", r.fraction_of_oracle),
        tenants.join(", "),
        r.search_windows.to_string(),
        format!("{} / {}", r.pages_confined, r.pages_profiled),
        format!("{:.2}%", r.overhead * 100.0),
    ]
}

/// The oracle's speedup from which a case counts as one that gains.
const GAIN: f64 = 1.01;

/// LLC misses per thousand instructions under which a case counts as one that fits.
const MISSES: f64 = 1.0;

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, manifest: &str) {
        std::fs::write(dir.join("manifest.toml"), manifest).unwrap();
    }

    fn row(machine: &str, case: &str, mpki: f64, oracle: f64, rocs: f64) -> RealRow {
        RealRow {
            machine: machine.into(),
            case: case.into(),
            what: String::new(),
            tenants: 1,
            not_run: None,
            baseline_mpki: mpki,
            speedup: rocs,
            oracle_speedup: oracle,
            fraction_of_oracle: rocs / oracle,
            tenant_speedups: vec![rocs],
            search_windows: 0,
            pages_confined: 0,
            pages_profiled: 0,
            overhead: 0.0,
            cost_scale: 1.0,
        }
    }

    #[test]
    fn the_page_says_which_cases_gain_which_fit_and_which_miss_what_nothing_saves() {
        let suite = RealSuite {
            command: "rocsctl sim eval --suite real".into(),
            seed: 1,
            made: None,
            traces: Vec::new(),
            rows_at_window_costs: Vec::new(),
            rows: vec![
                row("tiny", "bzip2", 12.0, 1.018, 0.999),
                row("tiny", "xz", 0.4, 1.004, 1.0),
                row("tiny", "sort", 3.5, 1.002, 0.997),
                row("zen4-like", "xz", 0.01, 1.0, 1.0),
            ],
        };
        let page = suite.markdown();
        assert!(
            page.contains(
                "- **tiny**: gain: bzip2 (MPKI 12.00): oracle 1.018, rocs 0.999, 0.98 of it. \
                 Fit: xz (MPKI 0.40). Miss what no placement saves: sort (MPKI 3.50)."
            ),
            "{page}"
        );
        assert!(
            page.contains(
                "- **zen4-like**: gain: none. Fit: xz (MPKI 0.01). Miss what no placement \
                 saves: none."
            ),
            "{page}"
        );
    }

    #[test]
    fn the_page_judges_at_the_window_s_costs_and_shows_the_machine_s_beside() {
        let at_window = RealRow {
            cost_scale: 0.0029,
            ..row("tiny", "xz", 3.7, 1.001, 0.999)
        };
        let suite = RealSuite {
            command: "rocsctl sim eval --suite real".into(),
            seed: 1,
            made: None,
            traces: Vec::new(),
            rows: vec![row("tiny", "xz", 3.7, 1.02, 0.985)],
            rows_at_window_costs: vec![at_window],
        };
        let page = suite.markdown();
        assert!(
            page.contains(
                "| xz |  | window's (x0.0029) | 0.999 | 1.001 | 0.998 | 0.999 | 0 | 0 / 0 | 0.00% |\n\
                 | xz |  | machine's | 0.985 | 1.020 | 0.966 | 0.985 | 0 | 0 / 0 | 0.00% |"
            ),
            "{page}"
        );
        // Judged at the window's costs: there the oracle gains under 1%.
        assert!(page.contains("At the window's costs. "), "{page}");
        assert!(page.contains("- **tiny**: gain: none."), "{page}");
        assert!(
            page.contains(
                "- At the window's costs: 0 of 1 runs below: none.\n\
                 - At the machine's costs: 1 of 1 runs below: xz on tiny: 0.9850."
            ),
            "{page}"
        );
        let speedups = &suite.svgs("tiny")[0].1;
        assert!(
            speedups.contains("rocs, window's costs")
                && speedups.contains("oracle, machine's costs"),
            "{speedups}"
        );
    }

    #[test]
    fn the_page_lists_each_trace_by_its_references_and_what_made_them() {
        let dir = std::env::temp_dir().join(format!("rocs-real-made-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Four events in lackey's text: three data references and an instruction fetch.
        let lackey = " L 04001000,8\n S 04001040,4\nI  00400000,3\n M 04002000,8\n";
        std::fs::write(dir.join("a.lackey"), lackey).unwrap();
        write(
            &dir,
            "made = \"valgrind 1:3.19.0-1\"\n[[program]]\nname = \"a\"\ntrace = \"a.lackey\"\n\
             what = \"A\"\n",
        );
        let m = Manifest::read(&dir).unwrap();
        let traces = m.traces(&dir).unwrap();
        assert_eq!(
            traces,
            vec![TraceInfo {
                program: "a".into(),
                events: 4
            }]
        );
        assert_eq!(m.cases(&dir, &traces)[0].events, vec![4]);
        let suite = RealSuite {
            command: "rocsctl sim eval --suite real".into(),
            seed: 1,
            made: m.made.clone(),
            traces,
            rows: Vec::new(),
            rows_at_window_costs: Vec::new(),
        };
        let page = suite.markdown();
        assert!(page.contains("| a | 4 |"), "{page}");
        assert!(
            page.contains("These were made with valgrind 1:3.19.0-1."),
            "{page}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_manifest_is_checked_and_says_where() {
        let dir = std::env::temp_dir().join(format!("rocs-real-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.rtrace"), b"x").unwrap();
        std::fs::write(dir.join("b.rtrace"), b"x").unwrap();
        let programs = "[[program]]\nname = \"a\"\ntrace = \"a.rtrace\"\nwhat = \"A\"\n\
                        [[program]]\nname = \"b\"\ntrace = \"b.rtrace\"\nwhat = \"B\"\n";
        write(
            &dir,
            &format!("{programs}[[pair]]\nname = \"a+b\"\ntenants = [\"a\", \"b\"]\n"),
        );
        let m = Manifest::read(&dir).unwrap();
        assert!(m.traces(&dir).is_err(), "not traces: refused when counted");
        write(
            &dir,
            &format!("{programs}[[pair]]\nname = \"a+c\"\ntenants = [\"a\", \"c\"]\n"),
        );
        let e = Manifest::read(&dir).unwrap_err().to_string();
        assert!(e.contains("'c' is not a [[program]]"), "{e}");
        write(&dir, &programs.replace("b.rtrace", "missing.rtrace"));
        let e = Manifest::read(&dir).unwrap_err().to_string();
        assert!(e.contains("missing.rtrace is missing"), "{e}");
        write(
            &dir,
            &format!("{programs}[[program]]\nname = \"a\"\ntrace = \"a.rtrace\"\nwhat = \"\"\n"),
        );
        assert!(Manifest::read(&dir)
            .unwrap_err()
            .to_string()
            .contains("'a' is given twice"));
        write(
            &dir,
            "[[program]]\nname = \"a\"\ntrace = \"a.rtrace\"\nwhat = \"A\"\nsize = 3\n",
        );
        let e = Manifest::read(&dir).unwrap_err().to_string();
        assert!(e.contains("manifest.toml:5"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
