//! Calibration aid: run a workload as is and with some regions' pages confined to the
//! pollute colour from the start, and print per-region LLC behaviour and the speedup.
//!
//!     cargo run --release -p rocs-sim --example calibrate -- art-like ppc970fx weights
//!
//! (arguments: workload, machine, then the regions to confine, as `region` for process 0
//! or `process:region`).

use rocs_core::Placement;
use rocs_core::Remapper;
use rocs_sim::{Machine, MachineSpec, RunStats, Workload};

fn show(label: &str, m: &Machine, t: &RunStats) {
    println!(
        "{label}: IPC {:.4} MPKI {:.2} LLC miss {:.1}% ({} acc) cycles {}",
        t.ipc(),
        t.llc_mpki(),
        t.llc_miss_rate() * 100.0,
        t.llc_accesses,
        t.cycles
    );
    for pid in m.pids() {
        let rs = m.region_stats(pid).unwrap();
        let total: u64 = rs.iter().map(|r| r.llc_accesses).sum();
        for r in rs {
            println!(
                "   pid {pid} {:<14} pages {:>5}  LLC share {:5.1}%  miss {:5.1}%",
                r.name,
                r.pages,
                r.llc_accesses as f64 * 100.0 / total.max(1) as f64,
                r.llc_miss_rate() * 100.0
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let w = Workload::resolve(&args[0]).unwrap();
    let scale: f64 = std::env::var("SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let w = w.scaled(scale);
    let p = MachineSpec::resolve(args.get(1).map_or("ppc970fx", |s| s)).unwrap();
    let t0 = std::time::Instant::now();
    let mut base = Machine::new(&p, &w, 1).unwrap();
    base.run_to_end().unwrap();
    let bt = base.totals();
    let secs = t0.elapsed().as_secs_f64();
    show("baseline", &base, &bt);
    println!(
        "   {:.1}M accesses/s, {:.2}s",
        bt.accesses as f64 / secs / 1e6,
        secs
    );
    if args.len() > 2 {
        let mut m = Machine::new(&p, &w, 1).unwrap();
        let pids = m.pids();
        for spec in &args[2..] {
            let (pi, region) = match spec.split_once(':') {
                Some((a, b)) => (a.parse::<usize>().unwrap(), b),
                None => (0, spec.as_str()),
            };
            let (region, pct) = match region.split_once('%') {
                Some((r, p)) => (r, p.parse::<usize>().unwrap()),
                None => (region, 100),
            };
            let mut pages = m.region_pages(pids[pi], region).unwrap();
            pages.truncate(pages.len() * pct / 100);
            let res = m.migrate(pids[pi], &pages, Placement::Pollute).unwrap();
            assert!(res.iter().all(|r| r.is_ok()));
        }
        m.run_to_end().unwrap();
        let ct = m.totals();
        show("confined", &m, &ct);
        println!(
            "speedup {:+.1}%",
            (bt.cycles as f64 / ct.cycles as f64 - 1.0) * 100.0
        );
        for (a, b) in bt.processes.iter().zip(&ct.processes) {
            println!(
                "   pid {} {}: IPC {:.4} -> {:.4} ({:+.1}%)",
                a.pid,
                a.name,
                a.ipc(),
                b.ipc(),
                (b.ipc() / a.ipc() - 1.0) * 100.0
            );
        }
    }
}
