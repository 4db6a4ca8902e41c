//! The trace replay's speed on one machine, in M references per CPU second of this thread,
//! the best of REPS runs: what `tests/bench/replay_ab.py` measures with rocsctl, without
//! building it (docs/simulator-speed.md). IDENTITY 1 replays the trace identity-mapped
//! (virtual addresses as physical, machines without a TLB), 0 through the machine's frames.
//!
//!     cargo run --release -p rocs-sim --example replay_speed -- TRACE MACHINE IDENTITY [REPS]

#[path = "../benches/common/mod.rs"]
#[allow(dead_code)]
mod common;

use rocs_sim::{Machine, MachineSpec, TraceSpec};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [trace, machine, identity, rest @ ..] = args.as_slice() else {
        eprintln!("usage: replay_speed TRACE MACHINE 0|1 [REPS]");
        std::process::exit(2);
    };
    let reps: usize = rest.first().map_or(3, |r| r.parse().expect("REPS"));
    let spec = MachineSpec::resolve(machine).expect("machine");
    let mut best = 0.0f64;
    for _ in 0..reps {
        let mut t = TraceSpec::file(trace);
        t.identity_map = identity == "1";
        let mut m = Machine::from_trace(&spec, t, 7).expect("trace");
        let start = common::thread_cpu_time();
        m.run_to_end().expect("replay");
        let seconds = (common::thread_cpu_time() - start).as_secs_f64();
        best = best.max(m.totals().accesses as f64 / seconds / 1e6);
    }
    println!("{best:.2}");
}
