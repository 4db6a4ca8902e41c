//! `rocsctl sim eval --suite real --traces DIR`: the real-program suite (issue 13). Every
//! program of DIR/manifest.toml alone and every pair (two traces sharing the LLC), on each
//! machine; writes DIR/real.md
//! (or --out/real.md) with its charts.

use std::process::ExitCode;

use anyhow::Context;
use rocs_sim::closed_loop::real::{run_real, Manifest, RealSuite};

use super::eval::{
    all_machines, beside, in_parallel, journal, read_page_json, write_all, EvalArgs,
};
use super::progress::Steps;

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.from {
        let suite: RealSuite = read_page_json(
            path,
            "the real suite's JSON (real.json as `sim eval --suite real --out` writes it)",
        )?;
        write(&args, &suite, &beside(path, args.out.as_deref()))?;
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = args.config()?;
    let Some(dir) = args.traces.clone() else {
        anyhow::bail!(
            "--suite real needs --traces DIR (a directory with manifest.toml and its traces, \
             as tests/real/make-traces.sh writes it)"
        );
    };
    let manifest = Manifest::read(&dir)?;
    let traces = manifest.traces(&dir)?;
    let cases = manifest.cases(&dir, &traces);
    let machines = args.machines(&all_machines())?;
    let runs: Vec<_> = machines
        .iter()
        .flat_map(|m| cases.iter().map(move |c| (m, c)))
        .collect();
    let total = runs.len();
    let steps = Steps::new(Some(total as u64));
    let out = args.out.clone().unwrap_or_else(|| dir.clone());
    let command = args.command(&format!(" --traces {}", dir.display()));
    let journal = journal(Some(&out), "real.journal", &command, total, &steps)?;
    let rows = in_parallel(args.jobs, total, &steps, journal.as_ref(), &|i, steps| {
        let (machine, case) = runs[i];
        let prefix = format!("[{}/{total}] {} {}: ", i + 1, machine.name, case.name);
        let mut report = |what: &str| steps.step(&format!("{prefix}{what}"));
        let rows = run_real(case, machine, &cfg, args.seed, &mut report)
            .with_context(|| format!("running {} on {}", case.name, machine.name))?;
        let (window, own) = (&rows.at_window_costs, &rows.at_machine_costs);
        steps.line(&match &own.not_run {
            Some(why) => format!("{prefix}not run: {why}"),
            None => format!(
                "{prefix}done: speedup {:.3}, oracle {:.3} at the window's costs (x{}); \
                 {:.3}, {:.3} at the machine's",
                window.speedup,
                window.oracle_speedup,
                window.cost_scale,
                own.speedup,
                own.oracle_speedup
            ),
        });
        Ok(rows)
    });
    steps.finish();
    let (rows, rows_at_window_costs) = rows?
        .into_iter()
        .map(|r| (r.at_machine_costs, r.at_window_costs))
        .unzip();
    let suite = RealSuite {
        command,
        seed: args.seed,
        made: manifest.made.clone(),
        traces,
        rows,
        rows_at_window_costs,
    };
    write(&args, &suite, &out)?;
    journal.map_or(Ok(()), |j| j.remove())?;
    Ok(ExitCode::SUCCESS)
}

/// real.md, real.json and the charts into `out`; the page (or the JSON) on stdout.
fn write(args: &EvalArgs, suite: &RealSuite, out: &std::path::Path) -> anyhow::Result<()> {
    let markdown = suite.markdown();
    let mut files = vec![
        ("real.md".to_string(), markdown.clone()),
        (
            "real.json".to_string(),
            serde_json::to_string_pretty(suite)? + "\n",
        ),
    ];
    for m in suite.machines() {
        files.extend(suite.svgs(&m));
    }
    write_all(out, &files)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(suite)?);
    } else {
        print!("{markdown}");
    }
    Ok(())
}
