//! The simulator's speed on one bench case, in M accesses per CPU second of this thread:
//! the "probe" figures of docs/simulator-speed.md. The workload is sized as benches/sim.rs
//! sizes it (5 M accesses by default); the best of REPS runs is printed.
//!
//!     cargo run --release -p rocs-sim --example sim_speed -- WORKLOAD MACHINE own|auto [ACCESSES] [REPS]

#[path = "../benches/common/mod.rs"]
#[allow(dead_code)]
mod common;

use rocs_sim::{Machine, MachineSpec, Scale, Workload};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [workload, machine, sizing, rest @ ..] = args.as_slice() else {
        eprintln!("usage: sim_speed WORKLOAD MACHINE own|auto [ACCESSES] [REPS]");
        std::process::exit(2);
    };
    let scale = match sizing.as_str() {
        "auto" => Scale::Auto { length: 1.0 },
        _ => Scale::Length(1.0),
    };
    let accesses: f64 = rest.first().map_or(5e6, |a| a.parse().expect("ACCESSES"));
    let reps: usize = rest.get(1).map_or(3, |r| r.parse().expect("REPS"));
    let spec = MachineSpec::resolve(machine).expect("machine");
    let sized = scale
        .apply(&Workload::resolve(workload).expect("workload"), &spec)
        .expect("sizing");
    let total: u64 = sized
        .processes
        .iter()
        .map(|p| p.accesses.unwrap_or(0))
        .sum();
    let w = sized.scaled(accesses / (total as f64 * sized.scale));
    let mut best = 0.0f64;
    for _ in 0..reps {
        let mut m = Machine::new(&spec, &w, 1).expect("machine");
        let start = common::thread_cpu_time();
        m.run_to_end().expect("run");
        let seconds = (common::thread_cpu_time() - start).as_secs_f64();
        best = best.max(m.totals().accesses as f64 / seconds / 1e6);
    }
    println!("{best:.2}");
}
