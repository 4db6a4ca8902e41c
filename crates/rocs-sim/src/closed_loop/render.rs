//! The evaluations as people read them, with one renderer for every suite: a grouped bar
//! chart in SVG ([`BarChart`]), Markdown tables and the list of targets. The paper suite
//! (docs/evaluation/README.md), the modern suite (modern.md), the random campaign
//! (random.md) and the real-program suite (real.md) are pages built from these.

use std::fmt::Write;

use super::evaluation::linear;
use super::{EvalRow, Evaluation, TargetCheck};

/// A grouped bar chart: one group per label, one bar per series.
pub struct BarChart<'a> {
    pub title: String,
    /// (name, colour) of each series.
    pub series: &'a [(&'a str, &'a str)],
    /// (label, one value per series) of each group.
    pub groups: Vec<(String, Vec<f64>)>,
    /// Draw the line at 1 darker (speedups).
    pub unit_line: bool,
}

/// A tick step that gives at most 8 ticks up to `top`: 0.25, 0.5, 1, 2, 5, 10, 20, ...
fn tick_step(top: f64) -> f64 {
    let mut steps = [0.25, 0.5]
        .into_iter()
        .chain((0..).flat_map(|e: i32| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e))));
    steps
        .find(|step| top / step <= 8.0)
        .expect("the steps grow without end")
}

impl BarChart<'_> {
    pub fn svg(&self) -> String {
        let max = self
            .groups
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(if self.unit_line { 1.0 } else { 0.0 }, f64::max);
        let step = tick_step(max.max(1e-9));
        let top = (max / step).floor() * step + step;
        let bar_w = 18.0;
        let group_w = (bar_w * self.series.len() as f64 + 28.0).max(90.0);
        let (left, right, plot_top, plot_h) = (60.0, 20.0, 50.0, 260.0);
        let legend_w = 150.0;
        let width = (left + right + group_w * self.groups.len().max(1) as f64)
            .max(left + legend_w * self.series.len() as f64);
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
            r#"<text x="{:.0}" y="20" font-size="14" text-anchor="middle">{}</text>"#,
            width / 2.0,
            escape(&self.title)
        );
        let ticks = (top / step).round() as usize;
        for i in 0..=ticks {
            let v = i as f64 * step;
            let yy = y(v);
            let stroke = if self.unit_line && (v - 1.0).abs() < 1e-9 {
                "#555"
            } else {
                "#e0e0e0"
            };
            let _ = writeln!(
                s,
                r#"<line x1="{left}" y1="{yy:.1}" x2="{:.0}" y2="{yy:.1}" stroke="{stroke}" stroke-width="1"/><text x="{:.0}" y="{:.1}" text-anchor="end">{}</text>"#,
                width - right,
                left - 6.0,
                yy + 4.0,
                tick_label(v, step)
            );
        }
        for (g, (label, values)) in self.groups.iter().enumerate() {
            let x0 = left + g as f64 * group_w + (group_w - self.series.len() as f64 * bar_w) / 2.0;
            for (i, ((name, colour), val)) in self.series.iter().zip(values).enumerate() {
                let val = if val.is_finite() { val.max(0.0) } else { 0.0 };
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{} {name}: {val:.3}</title></rect>"#,
                    x0 + i as f64 * bar_w,
                    y(val),
                    bar_w - 2.0,
                    y(0.0) - y(val),
                    escape(label)
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                left + g as f64 * group_w + group_w / 2.0,
                plot_top + plot_h + 16.0,
                escape(label)
            );
        }
        for (i, (name, colour)) in self.series.iter().enumerate() {
            let x = left + i as f64 * legend_w;
            let yy = plot_top + plot_h + 45.0;
            let _ = writeln!(
                s,
                r#"<rect x="{x:.0}" y="{:.0}" width="12" height="12" fill="{colour}"/><text x="{:.0}" y="{yy:.0}">{}</text>"#,
                yy - 10.0,
                x + 16.0,
                escape(name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

fn tick_label(v: f64, step: f64) -> String {
    if step < 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Markdown table: the header row, the alignment row (`l` or `r` per column), the rows.
pub fn table(header: &[&str], align: &str, rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|", header.join(" | "));
    for a in align.chars() {
        s += if a == 'r' { "---:|" } else { "---|" };
    }
    s.push('\n');
    for r in rows {
        // A '|' inside a cell would end it.
        let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(s, "| {} |", cells.join(" | "));
    }
    s.push('\n');
    s
}

/// The targets, one line each.
pub fn targets(targets: &[TargetCheck]) -> String {
    let mut s = String::from("## Targets\n\n");
    for t in targets {
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

const PAPER_SERIES: [(&str, &str); 4] = [
    ("baseline", "#9e9e9e"),
    ("rocs (adaptive)", "#1f77b4"),
    ("rocs (linear)", "#7fb3e0"),
    ("oracle", "#ff7f0e"),
];

const MODERN_SERIES: [(&str, &str); 5] = [
    ("baseline", "#9e9e9e"),
    ("rocs", "#1f77b4"),
    ("oracle-rocs", "#ff7f0e"),
    ("oracle-CAT", "#2ca02c"),
    ("both", "#9467bd"),
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
    fn rows_on(&self, machine: &str) -> Vec<&EvalRow> {
        self.rows.iter().filter(|r| r.machine == machine).collect()
    }

    /// The paper suite's table in Markdown, like the paper's (Fig. 8, Fig. 9, Table 3,
    /// Fig. 7).
    pub fn markdown(&self) -> String {
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
             profile (ROCS's Best Offline) among those that slow no tenant by more than \
             `max_slowdown` (5% by default) against k = 0; of oracle = oracle cycles / rocs \
             cycles; MPKI = LLC misses per 1000 instructions, change against baseline; \
             overhead = cycles the target paid for sampling and migrating / rocs cycles \
             (search windows spent at worse `k` are in the speedup, not here).\n"
        );
        for machine in self.machines() {
            let _ = writeln!(s, "## {machine}\n");
            let _ = writeln!(s, "![speedups on {machine}](speedup-{machine}.svg)\n");
            let rows = self.rows_on(&machine);
            let mut cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    let (a, l) = (&r.adaptive, linear(r));
                    vec![
                        r.workload.clone(),
                        oracle_cell(r),
                        format!("{:.3}", a.speedup),
                        format!("{:.3}", a.fraction_of_oracle),
                        format!("{:+.1}%", a.mpki_change * 100.0),
                        format!("{} / {}", a.pages_confined, a.pages_profiled),
                        a.search_windows.to_string(),
                        format!("{:.2}%", a.overhead * 100.0),
                        format!("{:.3}", l.speedup),
                        format!("{:.3}", l.fraction_of_oracle),
                        l.search_windows.to_string(),
                    ]
                })
                .collect();
            let n = rows.len().max(1) as f64;
            let mean = |f: &dyn Fn(&EvalRow) -> f64| rows.iter().map(|r| f(r)).sum::<f64>() / n;
            cells.push(vec![
                "**mean**".into(),
                format!("{:.3}", mean(&|r| r.oracle_speedup)),
                format!("{:.3}", mean(&|r| r.adaptive.speedup)),
                format!("{:.3}", mean(&|r| r.adaptive.fraction_of_oracle)),
                format!("{:+.1}%", mean(&|r| r.adaptive.mpki_change) * 100.0),
                String::new(),
                format!("{:.1}", mean(&|r| r.adaptive.search_windows as f64)),
                format!("{:.2}%", mean(&|r| r.adaptive.overhead) * 100.0),
                format!("{:.3}", mean(&|r| linear(r).speedup)),
                format!("{:.3}", mean(&|r| linear(r).fraction_of_oracle)),
                format!("{:.1}", mean(&|r| linear(r).search_windows as f64)),
            ]);
            s += &table(
                &[
                    "workload",
                    "oracle speedup (k)",
                    "rocs speedup",
                    "of oracle",
                    "MPKI change",
                    "pages confined / profiled",
                    "search windows",
                    "overhead",
                    "linear: speedup",
                    "of oracle",
                    "search windows",
                ],
                "lrrrrrrrrrr",
                &cells,
            );
        }
        s += &targets(&self.targets);
        s
    }

    /// The paper suite's chart on `machine`: baseline, rocs (adaptive), rocs (linear),
    /// oracle, per workload.
    pub fn svg(&self, machine: &str) -> String {
        BarChart {
            title: format!(
                "Speedup over baseline on {machine} (seed {}, scale {})",
                self.seed, self.scale
            ),
            series: &PAPER_SERIES,
            groups: self
                .rows_on(machine)
                .iter()
                .map(|r| {
                    let v = vec![1.0, r.adaptive.speedup, linear(r).speedup, r.oracle_speedup];
                    (r.workload.clone(), v)
                })
                .collect(),
            unit_line: true,
        }
        .svg()
    }

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
             process order; neither oracle may slow a tenant by more than `max_slowdown`, 5% \
             by default, against k = 0 or no CAT; a process alone gets every way: CAT splits processes, and one \
             alone keeps its stream and its reused data under one mask); both = rocs online \
             on the oracle-CAT masks. The pollute buffer is 1/16 of the LLC's colours. The \
             oracle tries k = 0, the quarters of the stack and rocs's choice first and stops \
             there when they lie within 1% (a flat curve). Verdict: within 1% is a tie.\n"
        );
        let _ = writeln!(
            s,
            "rocsd switches the L2 prefetchers off while profiling on Intel and AMD cores \
             (`prefetchers_off_while_profiling`: MSR 0x1A4, MSRC000_0108); Linux offers no \
             switch for Arm's, so on a Neoverse \"rocs, pf on\" is what rocsd gives.\n"
        );
        let _ = writeln!(
            s,
            "A row's rocs columns again, one run each: `rocsctl sim run --workload W --machine \
             M --scale S --mode rocs --pollute-colours N` (N = the LLC's colours / 16: \
             zen4-like 32, spr-like and neoverse-like 2), with `--prefetch-on-while-profiling` \
             for \"rocs, pf on\" and `--cat-masks` and the row's masks for \"both\".\n"
        );
        for machine in self.machines() {
            let _ = writeln!(s, "## {machine}\n");
            let _ = writeln!(s, "![speedups on {machine}](modern-{machine}.svg)\n");
            let cells: Vec<Vec<String>> = self
                .rows_on(&machine)
                .iter()
                .map(|r| {
                    let (cat, both) = r.cat.as_ref().map_or(("-".into(), "-".into()), |c| {
                        let m: Vec<String> = c.masks.iter().map(|m| format!("{m:#x}")).collect();
                        (
                            format!("{:.3} ({})", c.speedup, m.join(", ")),
                            format!("{:.3}", c.both_speedup),
                        )
                    });
                    vec![
                        r.workload.clone(),
                        format!("{:.2}", r.baseline_mpki),
                        oracle_cell(r),
                        format!("{:.3}", r.adaptive.speedup),
                        format!("{:.3}", r.adaptive.fraction_of_oracle),
                        r.prefetch_on_speedup
                            .map_or("-".into(), |v| format!("{v:.3}")),
                        format!(
                            "{} / {}",
                            r.adaptive.pages_confined, r.adaptive.pages_profiled
                        ),
                        cat,
                        both,
                        verdict(r).into(),
                    ]
                })
                .collect();
            s += &table(
                &[
                    "workload",
                    "baseline MPKI",
                    "oracle-rocs (k)",
                    "rocs",
                    "of oracle",
                    "rocs, pf on",
                    "pages confined / profiled",
                    "oracle-CAT (masks)",
                    "both",
                    "rocs vs CAT",
                ],
                "lrrrrrrrrl",
                &cells,
            );
        }
        s += &self.little_to_give();
        s += &targets(&self.targets);
        s
    }

    /// The modern page's rows where page colouring's oracle gains less than 5%, with the
    /// oracle-CAT beside them, and where the notes say why.
    fn little_to_give(&self) -> String {
        let little: Vec<&EvalRow> = self
            .rows
            .iter()
            .filter(|r| r.oracle_speedup < 1.05)
            .collect();
        if little.is_empty() {
            return String::new();
        }
        let mut s = String::from("## Where page colouring has little to give\n\n");
        let _ = writeln!(
            s,
            "Here the best offline `k` gains less than 5%. Why, with figures, is in \
             [NOTES.md](NOTES.md) (for noisy-neighbour, \"Why page colouring's oracle shows \
             nothing for noisy-neighbour\": what CAT gains there is a whole process kept to \
             a way, which page colouring gives only as far as its profile tells the \
             neighbour's pages from the victim's).\n"
        );
        for r in little {
            let cat = r
                .cat
                .as_ref()
                .map_or(String::new(), |c| format!(", oracle-CAT {:.3}", c.speedup));
            let _ = writeln!(
                s,
                "- {} on {}: oracle-rocs {:.3}, rocs {:.3}{cat}",
                r.workload, r.machine, r.oracle_speedup, r.adaptive.speedup
            );
        }
        s.push('\n');
        s
    }

    /// The modern suite's chart on `machine`.
    pub fn modern_svg(&self, machine: &str) -> String {
        BarChart {
            title: format!("Speedup over baseline on {machine} (seed {})", self.seed),
            series: &MODERN_SERIES,
            groups: self
                .rows_on(machine)
                .iter()
                .map(|r| {
                    let cat = r.cat.as_ref();
                    let v = vec![
                        1.0,
                        r.adaptive.speedup,
                        r.oracle_speedup,
                        cat.map_or(1.0, |c| c.speedup),
                        cat.map_or(1.0, |c| c.both_speedup),
                    ];
                    (r.workload.clone(), v)
                })
                .collect(),
            unit_line: true,
        }
        .svg()
    }
}

/// The oracle's speedup and its `k`s, with the pages it could not move.
fn oracle_cell(r: &EvalRow) -> String {
    let mut cell = format!("{:.3} ({}", r.oracle_speedup, ks(&r.oracle_ks));
    match r.oracle_pages_not_confined {
        0 => {}
        1 => cell += "; 1 page not moved",
        n => {
            let _ = write!(cell, "; {n} pages not moved");
        }
    }
    cell + ")"
}

/// The chosen k of each profile, or "-".
pub fn ks(ks: &[usize]) -> String {
    if ks.is_empty() {
        return "-".into();
    }
    ks.iter()
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join(", ")
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
            oracle_pages_not_confined: 0,
            oracle_speedup: rocs,
            adaptive: mode,
            linear: None,
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

    #[test]
    fn the_oracle_cell_says_how_many_pages_it_could_not_move() {
        let mut r = row(1.155, 1.0, 1.0);
        r.oracle_ks = vec![80928, 190185];
        assert_eq!(oracle_cell(&r), "1.155 (80928, 190185)");
        r.oracle_pages_not_confined = 59919;
        assert_eq!(
            oracle_cell(&r),
            "1.155 (80928, 190185; 59919 pages not moved)"
        );
    }

    #[test]
    fn ticks_stay_few_whatever_the_range() {
        assert_eq!(tick_step(1.5), 0.25);
        assert_eq!(tick_step(3.0), 0.5);
        for top in [0.1, 1.0, 7.0, 80.0, 1234.0, 5e6] {
            let n = top / tick_step(top);
            assert!(n <= 8.0, "{top}: {n} ticks");
        }
    }

    #[test]
    fn the_chart_has_a_bar_per_series_and_group() {
        let svg = BarChart {
            title: "pages <confined>".into(),
            series: &[("a", "#000"), ("b", "#111")],
            groups: vec![("x".into(), vec![1.0, 2.0]), ("y".into(), vec![3.0, 40.0])],
            unit_line: false,
        }
        .svg();
        assert_eq!(svg.matches("<rect x=").count(), 4 + 2, "bars and legend");
        assert!(svg.contains("pages &lt;confined&gt;"));
    }

    #[test]
    fn a_bar_inside_a_cell_stays_inside_it() {
        let t = table(&["a", "b"], "lr", &[vec!["x | y".into(), "1".into()]]);
        assert_eq!(t.lines().nth(2), Some("| x \\| y | 1 |"));
    }
}
