//! The modern suite as people read it (docs/evaluation/modern.md): per machine, rocs
//! against its oracle and against CAT, a chart, and a verdict per workload.

use std::fmt::Write;

use super::{EvalRow, Evaluation};

/// (series name, colour, value of a row).
type Series = (&'static str, &'static str, fn(&EvalRow) -> f64);

const SERIES: [Series; 5] = [
    ("baseline", "#9e9e9e", |_| 1.0),
    ("rocs", "#1f77b4", |r| r.adaptive.speedup),
    ("oracle-rocs", "#ff7f0e", |r| r.oracle_speedup),
    ("oracle-CAT", "#2ca02c", |r| {
        r.cat.as_ref().map_or(1.0, |c| c.speedup)
    }),
    ("both", "#9467bd", |r| {
        r.cat.as_ref().map_or(1.0, |c| c.both_speedup)
    }),
];

/// Within 1% counts as a tie.
const TIE: f64 = 0.01;

/// What rocs does against oracle-CAT on one workload.
fn verdict(r: &EvalRow) -> &'static str {
    let Some(cat) = &r.cat else { return "-" };
    let rocs = r.adaptive.speedup;
    if cat.both_speedup > rocs.max(cat.speedup) + TIE {
        "adds to CAT"
    } else if rocs > cat.speedup + TIE {
        "beats CAT"
    } else if cat.speedup > rocs + TIE {
        "loses to CAT"
    } else {
        "ties"
    }
}

impl Evaluation {
    /// docs/evaluation/modern.md.
    pub fn modern_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# rocs on modern machines: against its oracle and against CAT\n"
        );
        let _ = writeln!(
            s,
            "Produced by `{}` (seed {}, controller window = baseline cycles / {}). Do not edit \
             by hand: run the command again.\n",
            self.command, self.seed, self.windows_per_run
        );
        let _ = writeln!(
            s,
            "speedup = baseline cycles / cycles; rocs = the controller online (adaptive search; \
             the L2 prefetcher off while it profiles); rocs, pf on = the same profiling with \
             the prefetcher left on; oracle-rocs = the best offline `k` for rocs's profile; \
             oracle-CAT = the best resctrl way masks found offline (one per process: `masks`, \
             process order); both = rocs online on the oracle-CAT masks. The pollute buffer is \
             1/16 of the LLC's colours. Verdict: within 1% is a tie.\n"
        );
        for machine in self.machines() {
            let rows: Vec<&EvalRow> = self.rows.iter().filter(|r| r.machine == machine).collect();
            let _ = writeln!(s, "## {machine}\n");
            let _ = writeln!(s, "![speedups on {machine}](modern-{machine}.svg)\n");
            let _ = writeln!(
                s,
                "| workload | baseline MPKI | oracle-rocs (k) | rocs | of oracle | rocs, pf on | pages confined / profiled | oracle-CAT (masks) | both | rocs vs CAT |"
            );
            let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
            for r in &rows {
                let ks: Vec<String> = r.oracle_ks.iter().map(|k| k.to_string()).collect();
                let (cat, masks, both) = r.cat.as_ref().map_or(
                    (String::from("-"), String::new(), String::from("-")),
                    |c| {
                        let m: Vec<String> = c.masks.iter().map(|m| format!("{m:#x}")).collect();
                        (
                            format!("{:.3}", c.speedup),
                            m.join(", "),
                            format!("{:.3}", c.both_speedup),
                        )
                    },
                );
                let _ = writeln!(
                    s,
                    "| {} | {:.2} | {:.3} ({}) | {:.3} | {:.3} | {} | {} / {} | {cat} ({masks}) | {both} | {} |",
                    r.workload,
                    r.baseline_mpki,
                    r.oracle_speedup,
                    if ks.is_empty() { "-".into() } else { ks.join(", ") },
                    r.adaptive.speedup,
                    r.adaptive.fraction_of_oracle,
                    r.prefetch_on_speedup
                        .map_or("-".into(), |v| format!("{v:.3}")),
                    r.adaptive.pages_confined,
                    r.adaptive.pages_profiled,
                    verdict(r),
                );
            }
            let _ = writeln!(s);
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

    /// A grouped bar chart of the modern suite's speedups on `machine`.
    pub fn modern_svg(&self, machine: &str) -> String {
        let rows: Vec<&EvalRow> = self.rows.iter().filter(|r| r.machine == machine).collect();
        let max = rows
            .iter()
            .flat_map(|r| SERIES.iter().map(move |(_, _, v)| v(r)))
            .fold(1.0f64, f64::max);
        let top = (max * 4.0).ceil() / 4.0 + 0.25;
        let (left, right, plot_top, plot_h, group_w, bar_w) =
            (60.0, 20.0, 50.0, 260.0, 130.0, 20.0);
        let width = (left + right + group_w * rows.len().max(1) as f64).max(700.0);
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
            r#"<text x="{:.0}" y="20" font-size="14" text-anchor="middle">Speedup over baseline on {machine} (seed {})</text>"#,
            width / 2.0,
            self.seed
        );
        let mut v = 0.0;
        while v <= top + 1e-9 {
            let yy = y(v);
            let stroke = if (v - 1.0f64).abs() < 1e-9 {
                "#555"
            } else {
                "#e0e0e0"
            };
            let _ = writeln!(
                s,
                r#"<line x1="{left}" y1="{yy:.1}" x2="{:.0}" y2="{yy:.1}" stroke="{stroke}"/><text x="{:.0}" y="{:.1}" text-anchor="end">{v:.2}</text>"#,
                width - right,
                left - 6.0,
                yy + 4.0
            );
            v += 0.25;
        }
        for (g, r) in rows.iter().enumerate() {
            let x0 = left + g as f64 * group_w + (group_w - SERIES.len() as f64 * bar_w) / 2.0;
            for (i, (name, colour, value)) in SERIES.iter().enumerate() {
                let val = value(r);
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{} {name}: {val:.3}</title></rect>"#,
                    x0 + i as f64 * bar_w,
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
        for (i, (name, colour, _)) in SERIES.iter().enumerate() {
            let x = left + i as f64 * 120.0;
            let yy = plot_top + plot_h + 45.0;
            let _ = writeln!(
                s,
                r#"<rect x="{x:.0}" y="{:.0}" width="12" height="12" fill="{colour}"/><text x="{:.0}" y="{yy:.0}">{name}</text>"#,
                yy - 10.0,
                x + 16.0
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CatRun, EvalMode};
    use super::*;

    fn row(rocs: f64, cat: f64, both: f64) -> EvalRow {
        let mode = EvalMode {
            search: "adaptive".into(),
            cycles: 1,
            speedup: rocs,
            fraction_of_oracle: 1.0,
            llc_mpki: 1.0,
            mpki_change: 0.0,
            pages_confined: 0,
            pages_profiled: 0,
            search_windows: 0,
            migrations: 0,
            overhead_cycles: 0,
            overhead: 0.0,
            profiles: 1,
            phase_changes: 0,
            phase_changes_profiled: 0,
            chosen: Vec::new(),
        };
        EvalRow {
            machine: "m".into(),
            workload: "w".into(),
            window_cycles: 1,
            baseline_cycles: 1,
            baseline_mpki: 1.0,
            oracle_cycles: 1,
            oracle_ks: Vec::new(),
            oracle_speedup: rocs,
            adaptive: mode.clone(),
            linear: mode,
            cat: Some(CatRun {
                masks: vec![0xffff],
                speedup: cat,
                both_speedup: both,
                both_pages_confined: 0,
                candidates: Vec::new(),
                stats: Default::default(),
                wall_seconds: 0.0,
            }),
            prefetch_on_speedup: None,
        }
    }

    #[test]
    fn verdicts_tie_within_one_percent() {
        assert_eq!(verdict(&row(1.20, 1.00, 1.20)), "beats CAT");
        assert_eq!(verdict(&row(1.00, 1.15, 1.15)), "loses to CAT");
        assert_eq!(verdict(&row(1.10, 1.10, 1.25)), "adds to CAT");
        assert_eq!(verdict(&row(1.000, 1.005, 1.008)), "ties");
    }
}
