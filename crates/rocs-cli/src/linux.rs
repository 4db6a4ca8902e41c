//! rocsctl commands about the real machine: doctor, geometry, record, profile.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use rocs_linux::doctor::{self, Status};
use rocs_linux::geometry::{detect_geometry, page_size};
use rocs_linux::CpuInfo;

#[derive(Subcommand)]
pub enum LinuxCommand {
    /// What this machine can do for rocs: PMU, precise events, permissions, THP, shim.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The cache geometry found in /sys and the page colours it gives.
    Geometry {
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: LinuxCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        LinuxCommand::Doctor { json } => doctor_cmd(json),
        LinuxCommand::Geometry { json } => geometry_cmd(json),
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
    let cpu = CpuInfo::detect().context("reading /proc/cpuinfo")?;
    let g = detect_geometry(Path::new("/sys"), &cpu, page_size(), None)
        .context("detecting the cache geometry")?;
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
