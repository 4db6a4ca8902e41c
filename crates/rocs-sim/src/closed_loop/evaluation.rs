//! The evaluation: baseline, rocs in both search modes and the oracle, per workload and
//! machine, and the targets the project holds itself to.

use serde::{Deserialize, Serialize};

use rocs_core::Knobs;

use crate::RunStats;

use super::kept::{made_or_recalled, KeptRuns};
use super::{
    ratio, run_baseline, run_cat, run_oracle, run_rocs, BaselineRun, CatRun, LoopConfig, LoopError,
    MachineFactory, RocsRun,
};

/// One search mode's rocs run in an evaluation row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One workload on one machine: baseline, rocs in both search modes, oracle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    pub machine: String,
    pub workload: String,
    pub window_cycles: u64,
    pub baseline_cycles: u64,
    pub baseline_mpki: f64,
    pub oracle_cycles: u64,
    /// The oracle's best `k` of each profile.
    pub oracle_ks: Vec<usize>,
    /// Pages those `k` asked to confine that could not be moved: the pollute buffer was
    /// full, or the page not mapped (0, and left out of the JSON, where every page moved).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub oracle_pages_not_confined: u64,
    /// baseline cycles / oracle cycles.
    pub oracle_speedup: f64,
    pub adaptive: EvalMode,
    /// The paper suite's only: the modern suite shows adaptive search alone, and linear
    /// search's runs were a quarter of its time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linear: Option<EvalMode>,
    /// Modern suite: CAT as the rival (oracle-CAT, and rocs on its masks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<CatRun>,
    /// Modern suite, machines with a prefetcher: rocs (adaptive) profiling with the
    /// prefetcher left on (baseline cycles / its cycles).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch_on_speedup: Option<f64>,
}

/// Evaluate one workload: baseline, rocs with `adaptive` and `linear` search, and the
/// oracle over the adaptive run's profiles (both searches start from the same profile:
/// the runs are identical until the search begins). The baseline and the oracle's runs
/// `kept` has are recalled, and each one made is kept there; rocs's runs are always made
/// (the oracle needs their stacks).
pub fn evaluate(
    machine: &str,
    workload: &str,
    make: &MachineFactory<'_>,
    cfg: &LoopConfig,
    kept: &dyn KeptRuns,
    progress: &mut dyn FnMut(&str),
) -> Result<EvalRow, LoopError> {
    evaluate_searches(machine, workload, make, cfg, true, kept, progress).map(|(row, _)| row)
}

/// [`evaluate`], with linear search or without; the row and its baseline run.
fn evaluate_searches(
    machine: &str,
    workload: &str,
    make: &MachineFactory<'_>,
    cfg: &LoopConfig,
    with_linear: bool,
    kept: &dyn KeptRuns,
    progress: &mut dyn FnMut(&str),
) -> Result<(EvalRow, RunStats), LoopError> {
    let (stats, recalled) = made_or_recalled(kept, "baseline", || {
        progress("baseline");
        Ok(run_baseline(make)?.stats)
    })?;
    if recalled {
        progress("baseline (made before)");
    }
    let baseline = BaselineRun {
        stats,
        wall_seconds: 0.0,
    };
    let window = cfg.window_for(&baseline);
    let run = |search: rocs_core::SearchMode, progress: &mut dyn FnMut(&str)| {
        progress(&format!("rocs, {search} search"));
        let knobs = Knobs {
            search,
            ..cfg.knobs.clone()
        };
        run_rocs(make, &knobs, window)
    };
    let adaptive = run(rocs_core::SearchMode::Adaptive, progress)?;
    let linear = match with_linear {
        true => Some(run(rocs_core::SearchMode::Linear, progress)?),
        false => None,
    };
    let colours = make()?.llc_geometry().colours();
    let pollute = cfg.knobs.pollute_colours.resolve(colours)?;
    let oracle = run_oracle(
        make,
        &adaptive,
        cfg,
        &pollute,
        Some(&baseline.stats),
        kept,
        progress,
    )?;
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
    let row = EvalRow {
        machine: machine.to_string(),
        workload: workload.to_string(),
        window_cycles: window,
        baseline_cycles: b.cycles,
        baseline_mpki: b.llc_mpki(),
        oracle_cycles: oracle.stats.cycles,
        oracle_ks: oracle.ks.clone(),
        oracle_pages_not_confined: oracle.pages_not_confined,
        oracle_speedup: ratio(b.cycles, oracle.stats.cycles),
        adaptive: mode(&adaptive),
        linear: linear.as_ref().map(mode),
        cat: None,
        prefetch_on_speedup: None,
    };
    Ok((row, baseline.stats))
}

/// The modern suite's evaluation of one workload: [`evaluate`] without linear search, with
/// a pollute buffer of 1/16 of the LLC's colours (ROCS's 1 of the 970FX's 16: one colour of
/// a 512-colour LLC is 64 KB) and the oracle tried coarse first (its runs are long: where k = 0, the
/// quarters of the stack and rocs's choice lie within 1%, the curve is flat and the grid
/// is skipped), then CAT as the rival ([`run_cat`]; for a process alone, every way:
/// [`CatRun::alone`]) and, where the machine has a prefetcher switched off while
/// profiling, rocs profiling with it left on. Runs are kept and recalled as [`evaluate`]
/// keeps them, CAT's mask runs and rocs's with the prefetcher on too.
pub fn evaluate_modern(
    machine: &str,
    workload: &str,
    make: &MachineFactory<'_>,
    cfg: &LoopConfig,
    kept: &dyn KeptRuns,
    progress: &mut dyn FnMut(&str),
) -> Result<EvalRow, LoopError> {
    let probe = make()?;
    let colours = probe.llc_geometry().colours();
    let mut cfg = cfg.clone();
    cfg.knobs.pollute_colours = rocs_core::PolluteColours::Count((colours / 16).max(1));
    cfg.oracle_coarse_first = true;
    let (mut row, baseline) =
        evaluate_searches(machine, workload, make, &cfg, false, kept, progress)?;
    let knobs = Knobs {
        search: rocs_core::SearchMode::Adaptive,
        ..cfg.knobs.clone()
    };
    row.cat = Some(if probe.pids().len() == 1 {
        CatRun::alone(
            probe.llc_ways(),
            row.adaptive.speedup,
            row.adaptive.pages_confined,
        )
    } else {
        run_cat(
            make,
            &baseline,
            &knobs,
            row.window_cycles,
            cfg.threads,
            kept,
            progress,
        )?
    });
    if probe
        .spec()
        .prefetch
        .as_ref()
        .is_some_and(|p| p.off_while_sampling)
    {
        let what = "rocs, prefetcher left on while profiling";
        let (stats, recalled) = made_or_recalled(kept, what, || {
            progress(what);
            let prefetch_on = || {
                let mut m = make()?;
                m.set_prefetch_off_while_sampling(false);
                Ok(m)
            };
            Ok(run_rocs(&prefetch_on, &knobs, row.window_cycles)?.stats)
        })?;
        if recalled {
            progress(&format!("{what} (made before)"));
        }
        row.prefetch_on_speedup = Some(ratio(row.baseline_cycles, stats.cycles));
    }
    Ok(row)
}

/// A whole evaluation: rows for every machine and workload, and how to show them. Read
/// back from its JSON, its targets are checked again ([`Evaluation::rechecked`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub command: String,
    pub seed: u64,
    pub scale: f64,
    pub windows_per_run: u64,
    pub rows: Vec<EvalRow>,
    /// Each target of the issue, checked.
    #[serde(skip_deserializing)]
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

/// The linear search's run of a row of the paper suite, which always has one.
pub(super) fn linear(r: &EvalRow) -> &EvalMode {
    r.linear
        .as_ref()
        .expect("only the paper suite's rows are checked against linear search, and it runs it")
}

/// The target that every row of `rows` reaches `floor` in `value`. Its detail: the lowest
/// value where all do, the rows that do not (after `failing`) otherwise, and with no row
/// to check, that the target holds only for that reason (`why_none`).
fn floor_check(
    target: String,
    rows: &[&EvalRow],
    value: impl Fn(&EvalRow) -> f64,
    floor: f64,
    failing: &str,
    why_none: &str,
) -> TargetCheck {
    let under: Vec<String> = rows
        .iter()
        .filter(|r| value(r) < floor)
        .map(|r| format!("{} on {}: {:.3}", r.workload, r.machine, value(r)))
        .collect();
    let detail = if rows.is_empty() {
        format!("holds only because there is nothing to check: {why_none}")
    } else if under.is_empty() {
        let lowest = rows.iter().map(|r| value(r)).fold(f64::INFINITY, f64::min);
        format!("lowest {lowest:.3}")
    } else {
        format!("{failing}: {}", under.join("; "))
    };
    TargetCheck {
        target,
        reached: under.is_empty(),
        detail,
    }
}

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

    /// The same rows with their targets checked again: a page rendered anew from its JSON
    /// (the figures as they were, the targets as the code states them now).
    pub fn rechecked(self) -> Self {
        Evaluation::new(
            self.command,
            self.seed,
            self.scale,
            self.windows_per_run,
            self.rows,
        )
    }

    fn check_targets(&self) -> Vec<TargetCheck> {
        let mut out = Vec::new();
        let with_linear = self.rows.iter().all(|r| r.linear.is_some());
        out.extend(self.check_mode("adaptive", |r| &r.adaptive));
        if with_linear {
            out.extend(self.check_mode("linear", linear));
        }
        out.push(self.check_never_worse());
        out.extend(self.check_no_loss());
        if with_linear {
            out.extend(self.check_search_cost());
        }
        out.extend(self.check_phased());
        out
    }

    /// One search mode: close to the oracle where it gains, no loss where nothing can be
    /// gained (the paper's programs with nothing to gain, where the suite runs them).
    fn check_mode(&self, name: &str, pick: fn(&EvalRow) -> &EvalMode) -> Vec<TargetCheck> {
        let mut out = Vec::new();
        let gainful: Vec<&EvalRow> = self
            .rows
            .iter()
            .filter(|r| r.oracle_speedup >= 1.05)
            .collect();
        out.push(floor_check(
            format!(
                "{name}: fraction_of_oracle ≥ 0.95 where the oracle gains ≥ 5% ({} workloads)",
                gainful.len()
            ),
            &gainful,
            |r| pick(r).fraction_of_oracle,
            0.95,
            "short",
            "the oracle gains less than 5% on every workload here",
        ));
        let flat: Vec<&EvalRow> = self
            .rows
            .iter()
            .filter(|r| NOTHING_TO_GAIN.contains(&r.workload.as_str()))
            .collect();
        if flat.is_empty() {
            // The suite does not run them: the wider check (`check_never_worse`) stands.
            return out;
        }
        let lost: Vec<String> = flat
            .iter()
            .filter(|r| pick(r).speedup < 0.99)
            .map(|r| format!("{} on {}: {:.3}", r.workload, r.machine, pick(r).speedup))
            .collect();
        out.push(TargetCheck {
            target: format!(
                "{name}: speedup ≥ 0.99 where there is nothing to gain ({})",
                NOTHING_TO_GAIN.join(", ")
            ),
            reached: lost.is_empty(),
            detail: if lost.is_empty() {
                flat.iter()
                    .map(|r| format!("{} on {}: {:.3}", r.workload, r.machine, pick(r).speedup))
                    .collect::<Vec<_>>()
                    .join("; ")
            } else {
                format!("below: {}", lost.join("; "))
            },
        });
        out
    }

    fn check_never_worse(&self) -> TargetCheck {
        // Never worse than not running, wherever there is nothing to gain (the oracle gains
        // under 1%: e.g. every workload that fits xeon-like's LLC), not only on the two
        // programs the paper lists.
        let flat: Vec<&EvalRow> = self
            .rows
            .iter()
            .filter(|r| r.oracle_speedup < 1.01)
            .collect();
        floor_check(
            format!(
                "adaptive: speedup ≥ 0.99 wherever the oracle gains < 1% ({} workloads)",
                flat.len()
            ),
            &flat,
            |r| r.adaptive.speedup,
            0.99,
            "below",
            "the oracle gains 1% or more on every workload here",
        )
    }

    /// Modern suite: nothing loses more than 1%, anywhere.
    fn check_no_loss(&self) -> Option<TargetCheck> {
        if self.rows.iter().all(|r| r.cat.is_none()) {
            return None;
        }
        let all: Vec<&EvalRow> = self.rows.iter().collect();
        Some(floor_check(
            format!(
                "adaptive: nothing loses more than 1% ({} workloads)",
                self.rows.len()
            ),
            &all,
            |r| r.adaptive.speedup,
            0.99,
            "below",
            "there is no workload here",
        ))
    }

    /// The adaptive search against the linear one: fewer windows, not slower.
    fn check_search_cost(&self) -> [TargetCheck; 2] {
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
            .map(|r| linear(r).search_windows as f64)
            .sum::<f64>()
            / n;
        let windows = TargetCheck {
            target: "adaptive needs fewer search windows than linear on average".into(),
            reached: win_a < win_l,
            detail: format!("adaptive {win_a:.1}, linear {win_l:.1} windows per workload"),
        };
        let g_a = geomean(self.rows.iter().map(|r| r.adaptive.speedup));
        let g_l = geomean(self.rows.iter().map(|r| linear(r).speedup));
        let speed = TargetCheck {
            target: "adaptive is not slower than linear (geometric mean speedup)".into(),
            reached: g_a >= g_l,
            detail: format!("adaptive {g_a:.4}, linear {g_l:.4}"),
        };
        [windows, speed]
    }

    fn check_phased(&self) -> Vec<TargetCheck> {
        let mut out = Vec::new();
        for r in self.rows.iter().filter(|r| r.workload == "phased") {
            // A phase change is worth a profile only if the new phase misses enough (the
            // controller's thresholds); one that does not goes back to Observe, which
            // profiles as soon as the program misses enough again. The target: the changes
            // are seen, and each one worth profiling is followed by a profile. A run that
            // never profiles (no window missed enough once the LLC had filled) has no phase
            // watch; with nothing to gain that is right.
            let m = &r.adaptive;
            let quiet = m.phase_changes - m.phase_changes_profiled.min(m.phase_changes);
            let ok = if m.profiles == 0 {
                r.oracle_speedup < 1.01
            } else {
                m.phase_changes >= 1 && m.profiles > m.phase_changes_profiled
            };
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
            oracle_pages_not_confined: 0,
            oracle_speedup: oracle,
            linear: Some(adaptive.clone()),
            adaptive,
            cat: None,
            prefetch_on_speedup: None,
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
            // Never profiled (the LLC never filled), with nothing to gain; and with a gain
            // missed.
            row("quiet", "phased", 1.0, mode(1.0, 0, 0, 0)),
            row("missed", "phased", 1.2, mode(1.0, 0, 0, 0)),
        ];
        let e = Evaluation::new(String::new(), 1, 1.0, 200, rows);
        assert!(check(&e, "phased on ppc970fx").reached);
        let x = check(&e, "phased on xeon-like");
        assert!(x.reached, "{x:?}");
        assert!(x.detail.contains("0 worth profiling"), "{}", x.detail);
        assert!(!check(&e, "phased on other").reached);
        assert!(check(&e, "phased on quiet").reached);
        assert!(!check(&e, "phased on missed").reached);
    }

    #[test]
    fn nothing_to_gain_means_anywhere_the_oracle_gains_under_1_percent() {
        let rows = vec![
            row("xeon-like", "cg-like", 1.0, mode(0.994, 0, 0, 1)),
            row("ppc970fx", "art-like", 1.22, mode(0.9, 0, 0, 1)),
        ];
        let e = Evaluation::new(String::new(), 1, 1.0, 200, rows.clone());
        assert!(check(&e, "adaptive: speedup ≥ 0.99 wherever").reached);
        // With nothing to check, the page says so rather than "lowest inf".
        let e = Evaluation::new(String::new(), 1, 1.0, 200, rows[1..].to_vec());
        let t = check(&e, "adaptive: speedup ≥ 0.99 wherever");
        assert!(
            t.reached && t.detail.contains("nothing to check"),
            "{}",
            t.detail
        );
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
