//! Print window IPC and MPKI of a workload (default windows of 1e8 cycles), the way the
//! controller's observe phase sees them:
//!
//!     cargo run --release -p rocs-sim --example windows -- phased ppc970fx 100000000

use rocs_core::Counters;
use rocs_sim::{Machine, MachineSpec, Workload};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let w = Workload::resolve(args.first().map_or("phased", |s| s)).unwrap();
    let p = MachineSpec::resolve(args.get(1).map_or("ppc970fx", |s| s)).unwrap();
    let window: u64 = args.get(2).map_or(100_000_000, |s| s.parse().unwrap());
    let mut m = Machine::new(&p, &w, 1).unwrap();
    let pids = m.pids();
    loop {
        let more = m.run_for(window);
        for &pid in &pids {
            let d = m.read(pid).unwrap();
            print!("pid {pid}: IPC {:.4} MPKI {:6.2}   ", d.ipc(), d.mpki());
        }
        println!();
        if !more {
            break;
        }
    }
}
