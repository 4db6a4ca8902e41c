//! `rocsctl sim eval --suite random`: the random campaign (issue 12). Each generated
//! workload is written into --out as TOML, so that any run, the worst first, can be
//! replayed with `rocsctl sim run --workload DIR/random/NAME.toml --machine M --seed S`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use rocs_sim::closed_loop::{random_cases, run_case, RandomCampaign};

use super::eval::{
    all_machines, beside, in_parallel, journal, read_page_json, write_all, EvalArgs,
};
use super::progress::Steps;

/// The subdirectory of --out that holds the generated workloads.
const WORKLOADS: &str = "random";

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.from {
        return render_stored(&args, path);
    }
    let cfg = args.config()?;
    if args.count == 0 {
        anyhow::bail!("--count must be at least 1");
    }
    if !(args.length.is_finite() && args.length > 0.0) {
        anyhow::bail!("--length must be a positive number of accesses per LLC line");
    }
    let machines = args.machines(&all_machines())?;
    let cases = random_cases(args.seed, args.count, &machines, args.length);
    let total = cases.len();
    let steps = Steps::new(Some(total as u64));
    let mut extra = format!(" --count {}", args.count);
    if args.length != closed_loop_default_length() {
        extra += &format!(" --length {}", args.length);
    }
    let command = args.command(&extra);
    let journal = journal(
        args.out.as_deref(),
        "random.journal",
        &command,
        total,
        &steps,
    )?;
    let rows = in_parallel(args.jobs, total, &steps, journal.as_ref(), &|i, steps| {
        let case = &cases[i];
        let prefix = format!(
            "[{}/{total}] {} {}: ",
            i + 1,
            case.machine.name,
            case.workload.name
        );
        let mut report = |what: &str| steps.step(&format!("{prefix}{what}"));
        let rows = run_case(case, &cfg, &mut report).with_context(|| {
            format!(
                "running {} on {} (seed {})",
                case.workload.name, case.machine.name, case.seed
            )
        })?;
        let (w, m) = (&rows.at_window_costs, &rows.at_machine_costs);
        steps.line(&format!(
            "{prefix}done: speedup {:.3}, oracle {:.3}, worst tenant {:.3} (costs x{}); \
             at the machine's costs {:.3}, {:.3}, {:.3}",
            w.speedup,
            w.oracle_speedup,
            w.worst_tenant(),
            w.cost_scale,
            m.speedup,
            m.oracle_speedup,
            m.worst_tenant()
        ));
        Ok(rows)
    });
    steps.finish();
    if args.jobs > 1 {
        extra += &format!(" --jobs {}", args.jobs);
    }
    let campaign = RandomCampaign::new(args.command(&extra), args.seed, args.length, &cfg, rows?);
    let workloads: Vec<(String, String)> = match &args.out {
        Some(dir) => cases
            .iter()
            .map(|case| {
                let name = format!("{WORKLOADS}/{}.toml", case.workload.name);
                let shown = dir.join(&name).display().to_string();
                (name, case.toml(&shown))
            })
            .collect(),
        None => Vec::new(),
    };
    write_page(&args, &campaign, args.out.as_deref(), workloads)?;
    journal.map_or(Ok(()), |j| j.remove())?;
    Ok(ExitCode::SUCCESS)
}

/// `--from random.json`: the page rendered again from a campaign's JSON, its summaries and
/// targets made again from its rows; written beside the JSON unless --out says where.
fn render_stored(args: &EvalArgs, path: &Path) -> anyhow::Result<ExitCode> {
    let campaign: RandomCampaign = read_page_json(
        path,
        "the random suite's JSON (random.json as `sim eval --suite random --out` writes it)",
    )?;
    if campaign.rows_at_window_costs.len() != campaign.rows.len() {
        anyhow::bail!(
            "{}: made before each case also ran at the window's costs; make the page again \
             with its command",
            path.display()
        );
    }
    let dir = beside(path, args.out.as_deref());
    write_page(args, &campaign.resummed(), Some(&dir), Vec::new())?;
    Ok(ExitCode::SUCCESS)
}

/// random.md, random.json and `more` files into `dir` if given; the page (or with --json
/// the campaign) on standard output.
fn write_page(
    args: &EvalArgs,
    campaign: &RandomCampaign,
    dir: Option<&Path>,
    more: Vec<(String, String)>,
) -> anyhow::Result<()> {
    let markdown = campaign.markdown();
    if let Some(dir) = dir {
        let mut files = vec![
            ("random.md".to_string(), markdown.clone()),
            (
                "random.json".to_string(),
                serde_json::to_string_pretty(campaign)? + "\n",
            ),
        ];
        files.extend(more);
        write_all(dir, &files)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(campaign)?);
    } else {
        print!("{markdown}");
    }
    Ok(())
}

fn closed_loop_default_length() -> f64 {
    rocs_sim::closed_loop::random::DEFAULT_ACCESSES_PER_LLC_LINE
}
