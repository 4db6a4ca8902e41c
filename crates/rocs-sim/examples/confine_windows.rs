//! Window by window (a 200th of the baseline run each), a workload's first process with
//! nothing confined beside the same run with the pages of some of its regions moved to the
//! pollute colours at a given window: what confining those regions does, without a
//! controller's profile or search in the way.
//!
//!     cargo run --release -p rocs-sim --example confine_windows -- WORKLOAD MACHINE SCALE REGIONS FROM_WINDOW[..UNTIL]
//!
//! e.g. `cg-like neoverse-like auto:0.2 x_vector 5`. SCALE as `rocsctl sim run --scale`;
//! REGIONS comma-separated region names of the first process; FROM_WINDOW `N` (confined
//! from window N on) or `N..M` (confined at window N, moved back at window M, as a search's
//! probe that ends at k = 0).

use rocs_core::{Colour, Counters, Placement, Remapper};
use rocs_sim::{Machine, MachineSpec, Scale, Workload};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [workload, machine, scale, regions, from] = args.as_slice() else {
        eprintln!("usage: confine_windows WORKLOAD MACHINE SCALE REGIONS FROM_WINDOW[..UNTIL]");
        std::process::exit(2);
    };
    let spec = MachineSpec::resolve(machine).expect("machine");
    let scale: Scale = scale.parse().expect("scale");
    let w = scale
        .apply(&Workload::resolve(workload).expect("workload"), &spec)
        .expect("sizing");
    let (from, until) = match from.split_once("..") {
        Some((a, b)) => (a.parse().expect("FROM"), b.parse().expect("UNTIL")),
        None => (from.parse().expect("FROM_WINDOW"), u64::MAX),
    };
    let mut baseline = Machine::new(&spec, &w, 1).expect("machine");
    baseline.run_to_end().expect("run");
    let window = baseline.totals().cycles / 200;
    let mut runs = [
        Machine::new(&spec, &w, 1).expect("machine"),
        Machine::new(&spec, &w, 1).expect("machine"),
    ];
    let pid = runs[0].pids()[0];
    runs[1].set_pollute_colours(&[Colour(0)]).expect("colour 0");
    println!(
        "window  nothing confined: IPC, MPKI  {regions} confined from window {from}{}: IPC, MPKI",
        if until == u64::MAX {
            String::new()
        } else {
            format!(" until {until}")
        }
    );
    for i in 0.. {
        let to = if i == from {
            Some(Placement::Pollute)
        } else if i == until {
            Some(Placement::Restore)
        } else {
            None
        };
        if let Some(to) = to {
            let mut pages = Vec::new();
            for r in regions.split(',') {
                pages.extend(runs[1].region_pages(pid, r).expect("region"));
            }
            runs[1].migrate(pid, &pages, to).expect("migrate");
        }
        let mut more = false;
        let mut line = format!("{i:6}");
        for m in runs.iter_mut() {
            more |= m.run_for(window);
            let d = m.read(pid).expect("counters");
            line += &format!("  {:.4} {:7.2}", d.ipc(), d.mpki());
        }
        println!("{line}");
        if !more {
            break;
        }
    }
    let (a, b) = (runs[0].totals().cycles, runs[1].totals().cycles);
    println!("cycles {a} and {b}: speedup {:.4}", a as f64 / b as f64);
}
