//! The evaluation as people read it: a Markdown table and an SVG chart per machine.

use super::{EvalRow, Evaluation};

impl Evaluation {
    /// The table in Markdown, like the paper's (Fig. 8, Fig. 9, Table 3, Fig. 7).
    pub fn markdown(&self) -> String {
        use std::fmt::Write;
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
             profile (ROCS's Best Offline); of oracle = oracle cycles / rocs cycles; MPKI = LLC \
             misses per 1000 instructions, change against baseline; overhead = cycles the \
             target paid for sampling and migrating / rocs cycles (search windows spent at \
             worse `k` are in the speedup, not here).\n"
        );
        for machine in self.machines() {
            let _ = writeln!(s, "## {machine}\n");
            let _ = writeln!(s, "![speedups on {machine}](speedup-{machine}.svg)\n");
            let _ = writeln!(
                s,
                "| workload | oracle speedup (k) | rocs speedup | of oracle | MPKI change | pages confined / profiled | search windows | overhead | linear: speedup | of oracle | search windows |"
            );
            let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            let rows: Vec<&EvalRow> = self.rows.iter().filter(|r| r.machine == machine).collect();
            for r in &rows {
                let a = &r.adaptive;
                let l = &r.linear;
                let ks: Vec<String> = r.oracle_ks.iter().map(|k| k.to_string()).collect();
                let _ = writeln!(
                    s,
                    "| {} | {:.3} ({}) | {:.3} | {:.3} | {:+.1}% | {} / {} | {} | {:.2}% | {:.3} | {:.3} | {} |",
                    r.workload,
                    r.oracle_speedup,
                    if ks.is_empty() { "-".to_string() } else { ks.join(", ") },
                    a.speedup,
                    a.fraction_of_oracle,
                    a.mpki_change * 100.0,
                    a.pages_confined,
                    a.pages_profiled,
                    a.search_windows,
                    a.overhead * 100.0,
                    l.speedup,
                    l.fraction_of_oracle,
                    l.search_windows,
                );
            }
            let n = rows.len().max(1) as f64;
            let _ = writeln!(
                s,
                "| **mean** | {:.3} | {:.3} | {:.3} | {:+.1}% | | {:.1} | {:.2}% | {:.3} | {:.3} | {:.1} |\n",
                rows.iter().map(|r| r.oracle_speedup).sum::<f64>() / n,
                rows.iter().map(|r| r.adaptive.speedup).sum::<f64>() / n,
                rows.iter().map(|r| r.adaptive.fraction_of_oracle).sum::<f64>() / n,
                rows.iter().map(|r| r.adaptive.mpki_change).sum::<f64>() / n * 100.0,
                rows.iter().map(|r| r.adaptive.search_windows as f64).sum::<f64>() / n,
                rows.iter().map(|r| r.adaptive.overhead).sum::<f64>() / n * 100.0,
                rows.iter().map(|r| r.linear.speedup).sum::<f64>() / n,
                rows.iter().map(|r| r.linear.fraction_of_oracle).sum::<f64>() / n,
                rows.iter().map(|r| r.linear.search_windows as f64).sum::<f64>() / n,
            );
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

    /// A grouped bar chart of speedups on `machine`: baseline, rocs (adaptive), rocs
    /// (linear), oracle, per workload.
    pub fn svg(&self, machine: &str) -> String {
        use std::fmt::Write;
        let rows: Vec<&EvalRow> = self.rows.iter().filter(|r| r.machine == machine).collect();
        let series: [(&str, &str); 4] = [
            ("baseline", "#9e9e9e"),
            ("rocs (adaptive)", "#1f77b4"),
            ("rocs (linear)", "#7fb3e0"),
            ("oracle", "#ff7f0e"),
        ];
        let value = |r: &EvalRow, i: usize| match i {
            0 => 1.0,
            1 => r.adaptive.speedup,
            2 => r.linear.speedup,
            _ => r.oracle_speedup,
        };
        let max = rows
            .iter()
            .flat_map(|r| (0..4).map(move |i| value(r, i)))
            .fold(1.0f64, f64::max);
        let top = (max * 4.0).ceil() / 4.0 + 0.25;
        let (left, right, plot_top, plot_h, group_w, bar_w) =
            (60.0, 20.0, 50.0, 260.0, 100.0, 18.0);
        let width = left + right + group_w * rows.len().max(1) as f64;
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
            r#"<text x="{:.0}" y="20" font-size="14" text-anchor="middle">Speedup over baseline on {machine} (seed {}, scale {})</text>"#,
            width / 2.0,
            self.seed,
            self.scale
        );
        let mut v = 0.0;
        while v <= top + 1e-9 {
            let yy = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" y1="{yy:.1}" x2="{:.0}" y2="{yy:.1}" stroke="{}" stroke-width="1"/><text x="{:.0}" y="{:.1}" text-anchor="end">{v:.2}</text>"##,
                width - right,
                if (v - 1.0).abs() < 1e-9 {
                    "#555"
                } else {
                    "#e0e0e0"
                },
                left - 6.0,
                yy + 4.0
            );
            v += 0.25;
        }
        for (g, r) in rows.iter().enumerate() {
            let x0 = left + g as f64 * group_w + (group_w - 4.0 * bar_w) / 2.0;
            for (i, (name, colour)) in series.iter().enumerate() {
                let val = value(r, i);
                let x = x0 + i as f64 * bar_w;
                let _ = writeln!(
                    s,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{} {name}: {val:.3}</title></rect>"#,
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
        for (i, (name, colour)) in series.iter().enumerate() {
            let x = left + i as f64 * 130.0;
            let yy = plot_top + plot_h + 45.0;
            let _ = writeln!(
                s,
                r#"<rect x="{x:.0}" y="{:.0}" width="12" height="12" fill="{colour}"/><text x="{:.0}" y="{:.0}">{name}</text>"#,
                yy - 10.0,
                x + 16.0,
                yy
            );
        }
        s.push_str("</svg>\n");
        s
    }
}
