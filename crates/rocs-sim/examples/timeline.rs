//! Print the controller's timeline on a simulated run: one line per window (state, IPC,
//! MPKI) and every event, to see where a run spends its windows:
//!
//!     ROCS_KNOBS='profile_windows = 6' \
//!     cargo run --release -p rocs-sim --example timeline -- phased ppc970fx [seed] [scale] [windows]

use rocs_core::{
    Action, ColourReport, Controller, Counters, MigrationReport, Observation, Remapper, Sampler,
};
use rocs_sim::closed_loop::{run_baseline, sim_knobs};
use rocs_sim::{Machine, MachineProfile, Workload};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let w = Workload::resolve(args.first().map_or("phased", |s| s)).unwrap();
    let p = MachineProfile::resolve(args.get(1).map_or("ppc970fx", |s| s)).unwrap();
    let seed: u64 = args.get(2).map_or(1, |s| s.parse().unwrap());
    let scale: f64 = args.get(3).map_or(1.0, |s| s.parse().unwrap());
    let windows: u64 = args.get(4).map_or(200, |s| s.parse().unwrap());
    let w = w.scaled(scale);
    let make = || Machine::new(&p, &w, seed);
    let base = run_baseline(&make).unwrap();
    let window = (base.stats.cycles / windows).max(10_000);
    let mut m = make().unwrap();
    // Knobs to try: the evaluation's, overlaid with the TOML in ROCS_KNOBS (if set).
    let mut knobs = sim_knobs();
    if let Ok(extra) = std::env::var("ROCS_KNOBS") {
        let mut table = toml::Value::try_from(&knobs).unwrap();
        let extra: toml::Table = extra.parse().unwrap();
        table.as_table_mut().unwrap().extend(extra);
        knobs = table.try_into().unwrap();
    }
    let colours = m.llc_geometry().colours();
    let mut ctrls: Vec<Controller> = m
        .pids()
        .into_iter()
        .map(|pid| Controller::new(pid, knobs.clone(), m.page_shift(), colours).unwrap())
        .collect();
    m.set_pollute_colours(ctrls[0].pollute_colours()).unwrap();
    let mut samples = Vec::new();
    let mut n = 0;
    loop {
        let more = m.run_for_checked(window).unwrap();
        n += 1;
        for c in &mut ctrls {
            let pid = c.pid();
            samples.clear();
            let loss = m.drain(pid, &mut samples).unwrap();
            let mut q: std::collections::VecDeque<Action> =
                c.on(Observation::Samples(&samples)).into();
            q.extend(c.on(Observation::SampleLoss(loss)));
            let d = m.read(pid).unwrap();
            println!(
                "w{n:4} pid {pid} {:>7} IPC {:.4} MPKI {:6.2} missrate {:.3} confined {}",
                c.state().to_string(),
                d.ipc(),
                d.mpki(),
                d.llc_misses as f64 / d.llc_references.max(1) as f64,
                c.confined().len()
            );
            q.extend(if more || d.instructions > 0 {
                c.on(Observation::Window(d))
            } else {
                c.on(Observation::TargetExited)
            });
            while let Some(a) = q.pop_front() {
                match a {
                    Action::StartSampling(plan) => m.start(pid, &plan).unwrap(),
                    Action::StopSampling => m.stop(pid).unwrap(),
                    Action::Migrate { pages, to } => {
                        println!("      migrate {} {to:?}", pages.len());
                        let results = m.migrate(pid, &pages, to).unwrap();
                        q.extend(c.on(Observation::Migrated(MigrationReport {
                            to,
                            pages,
                            results,
                        })));
                    }
                    Action::Query { pages } => {
                        let results = m.query(pid, &pages).unwrap();
                        q.extend(c.on(Observation::Colours(ColourReport { pages, results })));
                    }
                    Action::Report(e) => println!("      {:?}", e.kind),
                }
            }
        }
        if !more {
            break;
        }
    }
    let t = m.totals();
    println!(
        "baseline {} rocs {} speedup {:.4}",
        base.stats.cycles,
        t.cycles,
        base.stats.cycles as f64 / t.cycles as f64
    );
}
