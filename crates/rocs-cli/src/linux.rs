//! rocsctl commands about the real machine: doctor, geometry, record, profile.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use rocs_core::{MissRateStack, PageProfile, Sampler, SamplingPlan};
use rocs_linux::doctor::{self, Status};
use rocs_linux::geometry::page_size;
use rocs_linux::plan::software_page_fault_plan;
use rocs_linux::{
    detect_geometry_here, machine_plan, read_perf_data, EventChoice, ImportSummary, LinuxSampler,
    SamplingStats,
};
use serde::Serialize;

use crate::render;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum EventArg {
    /// The CPU's precise memory sampling (PEBS, IBS, SPE); falls back to page faults,
    /// with a warning, where the machine has none.
    Auto,
    /// Software page-fault events: which pages are touched, not cache misses.
    PageFaults,
}

#[derive(Subcommand)]
pub enum LinuxCommand {
    /// What this machine can do for rocs: PMU, precise events, permissions, THP, shim.
    Doctor,
    /// The cache geometry found in /sys and the page colours it gives.
    Geometry,
    /// Sample a running process live and print its page profile.
    Record {
        /// The process to sample (all of its threads, and threads it creates).
        #[arg(long)]
        pid: u32,
        /// How long to sample, in seconds (stops early when the process exits).
        #[arg(long)]
        duration: f64,
        #[arg(long, value_enum, default_value = "auto")]
        event: EventArg,
        /// Sample period in events (default: the plan's).
        #[arg(long)]
        period: Option<u64>,
        /// Largest share of one core sampling may cost; the period rises to stay under it.
        #[arg(long, default_value_t = 0.01)]
        cpu_budget: f64,
        /// Write the pictures (miss-rate histogram, address map) to this SVG file.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Read a perf.data file (`perf record -d`, `perf mem record`) into a page profile.
    /// Reached through `rocsctl profile --perf-data FILE` (client.rs owns `profile`, which
    /// otherwise asks rocsd about a target).
    #[command(skip)]
    Profile {
        #[arg(long = "perf-data")]
        perf_data: PathBuf,
        /// Keep only this process's samples.
        #[arg(long)]
        pid: Option<u32>,
        /// Write the pictures to this SVG file.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
}

/// Run `cmd`; `json` is the global `--json`.
pub fn run(cmd: LinuxCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        LinuxCommand::Doctor => doctor_cmd(json),
        LinuxCommand::Geometry => geometry_cmd(json),
        LinuxCommand::Record {
            pid,
            duration,
            event,
            period,
            cpu_budget,
            svg,
        } => record_cmd(pid, duration, event, period, cpu_budget, json, svg),
        LinuxCommand::Profile {
            perf_data,
            pid,
            svg,
        } => profile_cmd(&perf_data, pid, json, svg),
    }
}

fn doctor_cmd(json: bool) -> anyhow::Result<ExitCode> {
    let report = doctor::run(Path::new("/sys"));
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    for c in &report.checks {
        let tag = match c.status {
            Status::Yes => "yes ",
            Status::No => "NO  ",
            Status::Warn => "warn",
            Status::Info => "    ",
        };
        println!("{tag} {:<20} {}", c.name, c.detail);
        if let Some(fix) = &c.fix {
            println!("     {:<20} -> {fix}", "");
        }
    }
    println!(
        "\nprecise memory sampling: {}",
        if report.precise_sampling {
            "available"
        } else {
            "NOT available here (the page-fault plan still works: --event page-faults)"
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn geometry_cmd(json: bool) -> anyhow::Result<ExitCode> {
    let g = detect_geometry_here(None).context("detecting the cache geometry")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&g)?);
        return Ok(ExitCode::SUCCESS);
    }
    for l in &g.levels {
        println!(
            "L{} {:<11} {:>8} KiB {:>3}-way {:>4} B lines {:>7} sets  shared by {} cpu(s)",
            l.level,
            l.kind,
            l.size >> 10,
            l.ways,
            l.line_size,
            l.sets,
            l.shared_cpus.len()
        );
    }
    let llc = g.llc;
    println!(
        "LLC for colouring: {} KiB, {}-way, {} B lines, {} slice(s) ({}), {} sets per slice",
        llc.size() >> 10,
        llc.ways,
        llc.line_size,
        llc.slices,
        g.slices_from,
        llc.sets_per_slice
    );
    println!(
        "colours: {} (sets_per_slice x line / page = {} x {} / {})",
        g.colours, llc.sets_per_slice, llc.line_size, llc.page_size
    );
    for n in &g.notes {
        println!("note: {n}");
    }
    Ok(ExitCode::SUCCESS)
}

/// One page of a profile as `--json` prints it.
#[derive(Serialize)]
pub struct PageOut {
    pub vaddr: u64,
    pub samples: u64,
    pub hits: Option<u64>,
    pub misses: Option<u64>,
    pub miss_rate: Option<f64>,
}

/// A page profile as `record --json` and `profile --json` print it.
#[derive(Serialize)]
pub struct ProfileOut {
    pub source: String,
    pub measures_llc: bool,
    pub samples_total: u64,
    pub page_size: u64,
    pub pages: Vec<PageOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub import: Option<ImportSummary>,
}

pub fn profile_out(table: &PageProfile, source: String, measures_llc: bool) -> ProfileOut {
    let pages = table
        .sorted()
        .into_iter()
        .map(|(page, c)| PageOut {
            vaddr: page.addr(table.page_shift()),
            samples: c.samples(),
            hits: measures_llc.then_some(c.hits as u64),
            misses: measures_llc.then_some(c.misses as u64),
            miss_rate: if measures_llc { c.miss_rate() } else { None },
        })
        .collect();
    ProfileOut {
        source,
        measures_llc,
        samples_total: table.samples_total(),
        page_size: 1 << table.page_shift(),
        pages,
        sampling: None,
        import: None,
    }
}

/// Print a profile (JSON, or text with terminal pictures), and draw it in an SVG file when
/// asked.
pub fn emit_profile(
    profile: &PageProfile,
    out: ProfileOut,
    json: bool,
    svg: Option<&Path>,
) -> anyhow::Result<()> {
    let stack = MissRateStack::from_profile(profile);
    if let Some(path) = svg {
        let doc = render::profile_svg(profile, &stack, &Default::default(), &out.source);
        std::fs::write(path, doc).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("{}", out.source);
    println!(
        "{} on {}{}",
        crate::client::count(out.samples_total as usize, "sample", "samples"),
        crate::client::count(out.pages.len(), "page", "pages"),
        if out.measures_llc {
            ""
        } else {
            " (no data source: miss rates unknown)"
        }
    );
    if let Some(s) = &out.sampling {
        println!(
            "lost {} records, throttled {} times, period {} ({} changes for the CPU budget), {} samples without address, {} of other processes",
            s.lost, s.throttled, s.period, s.period_changes, s.without_address, s.other_processes
        );
    }
    println!();
    print!("{}", render::histogram_text(&stack, 10, 40));
    println!();
    print!("{}", render::address_map_text(profile, 100, 6));
    println!();
    let mut top: Vec<&PageOut> = out.pages.iter().collect();
    top.sort_by(|a, b| {
        b.miss_rate
            .unwrap_or(-1.0)
            .total_cmp(&a.miss_rate.unwrap_or(-1.0))
            .then(b.samples.cmp(&a.samples))
    });
    println!(
        "{:>18} {:>9} {:>9} {:>9} {:>9}",
        "page", "samples", "hits", "misses", "miss rate"
    );
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for p in top.iter().take(20) {
        println!(
            "{:>#18x} {:>9} {:>9} {:>9} {:>9}",
            p.vaddr,
            p.samples,
            opt(p.hits),
            opt(p.misses),
            p.miss_rate
                .map_or("-".to_string(), |r| format!("{:.1}%", r * 100.0))
        );
    }
    if out.pages.len() > 20 {
        println!("({} more pages: --json lists all)", out.pages.len() - 20);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn record_cmd(
    pid: u32,
    duration: f64,
    event: EventArg,
    period: Option<u64>,
    cpu_budget: f64,
    json: bool,
    svg: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    if !(duration > 0.0 && duration.is_finite()) {
        bail!("--duration must be a positive number of seconds, got {duration}");
    }
    if !(0.0..=1.0).contains(&cpu_budget) {
        bail!("--cpu-budget is a share of one core between 0 and 1, got {cpu_budget}");
    }
    let plan = match event {
        EventArg::PageFaults => software_page_fault_plan(),
        EventArg::Auto => match machine_plan(EventChoice::Auto) {
            Ok(p) if p.live_unsupported.is_none() => p,
            Ok(p) => {
                eprintln!(
                    "rocsctl: warning: {}; using the page-fault plan instead",
                    p.live_unsupported.unwrap_or_default()
                );
                software_page_fault_plan()
            }
            Err(e) => {
                eprintln!("rocsctl: warning: {}; using the page-fault plan, which does NOT measure cache misses", e.why);
                software_page_fault_plan()
            }
        },
    };
    let measures_llc = plan.measures_llc;
    let label = plan.label.clone();
    let mut sampler = LinuxSampler::new(plan);
    let requested = SamplingPlan {
        period: period.unwrap_or(0),
        cpu_budget,
    };
    sampler
        .start(pid, &requested)
        .with_context(|| format!("starting to sample pid {pid}"))?;
    let mut table = PageProfile::new(page_size().trailing_zeros());
    let start = Instant::now();
    let total = Duration::from_secs_f64(duration);
    let mut next_progress = Duration::from_secs(1);
    let mut exited_at = None;
    loop {
        sampler
            .drain_with(pid, |s| table.record(s.vaddr, s.source))
            .with_context(|| format!("reading the samples of pid {pid}"))?;
        let now = start.elapsed();
        if sampler.target_exited(pid) {
            exited_at = Some(now);
            break;
        }
        if now >= total {
            break;
        }
        if now >= next_progress {
            let st = sampler.stats(pid).unwrap_or_default();
            eprintln!(
                "record: {:>4.0} s  {} samples  {} pages  lost {}  throttled {}  period {}",
                now.as_secs_f64(),
                st.samples,
                table.len(),
                st.lost,
                st.throttled,
                st.period
            );
            next_progress += Duration::from_secs(1);
        }
        std::thread::sleep(Duration::from_millis(20).min(total.saturating_sub(now)));
    }
    let stats = sampler.stats(pid).unwrap_or_default();
    sampler.stop(pid).ok();
    if table.is_empty() {
        let why = match exited_at {
            Some(t) => format!("pid {pid} exited after {:.1} s", t.as_secs_f64()),
            None => format!("pid {pid} made no sampled accesses in {duration} s"),
        };
        bail!(
            "no samples recorded: {why} (events seen: {}, without address {}, of other processes {}); sample a busier process or a longer time",
            stats.samples, stats.without_address, stats.other_processes
        );
    }
    let mut out = profile_out(
        &table,
        format!("live recording of pid {pid}: {label}"),
        measures_llc,
    );
    out.sampling = Some(stats);
    emit_profile(&table, out, json, svg.as_deref())?;
    if let Some(t) = exited_at {
        if t < total {
            eprintln!(
                "rocsctl: pid {pid} exited after {:.1} s of the {duration} s asked for: the profile covers its run until then",
                t.as_secs_f64()
            );
            return Ok(ExitCode::from(2));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn profile_cmd(
    path: &Path,
    pid: Option<u32>,
    json: bool,
    svg: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let (table, summary) = read_perf_data(path, pid, page_size().trailing_zeros())?;
    let measures_llc = summary.has_data_source;
    let what = if measures_llc {
        "samples with data sources"
    } else {
        "samples without data sources (no LLC hit/miss information)"
    };
    let filter = pid.map(|p| format!(", pid {p}")).unwrap_or_default();
    let mut out = profile_out(
        &table,
        format!("{}{filter}: {what}", path.display()),
        measures_llc,
    );
    if !json && (summary.without_address > 0 || summary.lost > 0) {
        eprintln!(
            "rocsctl: note: {} without a data address left out; {} lost while recording",
            crate::client::count(summary.without_address as usize, "sample", "samples"),
            crate::client::count(summary.lost as usize, "sample", "samples")
        );
    }
    out.import = Some(summary);
    emit_profile(&table, out, json, svg.as_deref())?;
    Ok(ExitCode::SUCCESS)
}
