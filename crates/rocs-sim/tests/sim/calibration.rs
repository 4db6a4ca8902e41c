//! The built-in workloads behave, on the ppc970fx profile, like the programs of the ROCS
//! paper they are named after: per-region LLC shares and miss rates (Fig. 3, Table 2), and
//! what confining pages to the pollute buffer (1 of 16 colours) does to IPC (Fig. 8): art,
//! swim, cg and mgrid gain; mcf and twolf gain nothing.
//!
//! Runs are shortened (`scale`), which changes the numbers a little, so the bands are wide
//! enough for that but narrow enough to fail if a workload stops behaving like its program.

use rocs_core::{MissRateStack, PageProfile, Placement, Remapper, Sampler, SamplingPlan};
use rocs_sim::{Machine, MachineSpec, RunStats, Workload};

const SCALE: f64 = 0.3;

fn ppc() -> MachineSpec {
    MachineSpec::resolve("ppc970fx").unwrap()
}

fn workload(name: &str) -> Workload {
    Workload::resolve(name).unwrap().scaled(SCALE)
}

fn baseline(name: &str) -> Machine {
    let mut m = Machine::new(&ppc(), &workload(name), 1).unwrap();
    m.run_to_end().unwrap();
    m
}

/// Run with the named regions' pages confined from the start.
fn confined(name: &str, regions: &[&str]) -> RunStats {
    let mut m = Machine::new(&ppc(), &workload(name), 1).unwrap();
    let pid = m.pids()[0];
    for r in regions {
        let pages = m.region_pages(pid, r).unwrap();
        assert!(m
            .migrate(pid, &pages, Placement::Pollute)
            .unwrap()
            .iter()
            .all(|r| r.is_ok()));
    }
    m.run_to_end().unwrap();
    m.totals()
}

/// (LLC share, LLC miss rate) of a region.
fn region(m: &Machine, name: &str) -> (f64, f64) {
    let rs = m.region_stats(m.pids()[0]).unwrap();
    let total: u64 = rs.iter().map(|r| r.llc_accesses).sum();
    let r = rs.iter().find(|r| r.name == name).unwrap();
    (r.llc_accesses as f64 / total as f64, r.llc_miss_rate())
}

fn speedup(base: &RunStats, other: &RunStats) -> f64 {
    other.ipc() / base.ipc() - 1.0
}

fn in_band(what: &str, v: f64, lo: f64, hi: f64) {
    assert!(
        (lo..=hi).contains(&v),
        "{what} = {v:.3}, expected {lo}..{hi}"
    );
}

#[test]
fn art_like_regions_match_rocs_fig3_and_confining_the_weights_pays() {
    let m = baseline("art-like");
    let (share, miss) = region(&m, "weights");
    in_band("weights LLC share", share, 0.33, 0.45);
    in_band("weights miss rate", miss, 0.72, 0.92);
    let (share, miss) = region(&m, "f1_layer");
    in_band("f1_layer LLC share", share, 0.50, 0.62);
    in_band("f1_layer miss rate", miss, 0.35, 0.50);
    let gain = speedup(&m.totals(), &confined("art-like", &["weights"]));
    in_band("art-like speedup", gain, 0.15, 0.35);
}

#[test]
fn streaming_programs_gain_about_what_rocs_reports() {
    for (name, regions, lo, hi) in [
        ("swim-like", &["grids"][..], 0.20, 0.45),
        (
            "cg-like",
            &["matrix_values", "column_index"][..],
            0.08,
            0.25,
        ),
        ("mgrid-like", &["fine_grid"][..], 0.04, 0.16),
    ] {
        let base = baseline(name).totals();
        let gain = speedup(&base, &confined(name, regions));
        in_band(&format!("{name} speedup"), gain, lo, hi);
    }
    let swim = baseline("swim-like").totals();
    in_band("swim-like LLC miss rate", swim.llc_miss_rate(), 0.65, 0.85);
    let cg = baseline("cg-like").totals();
    in_band("cg-like LLC miss rate", cg.llc_miss_rate(), 0.5, 0.7);
}

/// Profile with the PMU for a while, build the miss-rate stack, confine the top `k` pages
/// (k as fractions of the stack), and return (baseline IPC, IPC with each k).
fn confine_top_of_stack(name: &str, fractions: &[f64]) -> (f64, Vec<f64>) {
    let base = baseline(name).totals().ipc();
    let mut ipcs = Vec::new();
    for &f in fractions {
        let mut m = Machine::new(&ppc(), &workload(name), 1).unwrap();
        let pid = m.pids()[0];
        m.start(
            pid,
            &SamplingPlan {
                period: 50,
                cpu_budget: 0.0,
            },
        )
        .unwrap();
        m.run_for(100_000_000);
        m.stop(pid).unwrap();
        let mut samples = Vec::new();
        m.drain(pid, &mut samples).unwrap();
        let mut profile = PageProfile::new(m.page_shift());
        profile.ingest(&samples);
        let stack = MissRateStack::from_profile(&profile);
        assert!(stack.len() > 50, "{name}: {} pages profiled", stack.len());
        let k = (stack.len() as f64 * f) as usize;
        let pages: Vec<_> = stack.top(k).collect();
        m.migrate(pid, &pages, Placement::Pollute).unwrap();
        m.run_to_end().unwrap();
        // The profile's own cost (a sample every 50 events is far denser than rocs would
        // ever sample) is not what this test is about: leave it out of the IPC.
        let t = m.totals();
        ipcs.push(t.instructions as f64 / (t.cycles - t.sampling_overhead_cycles) as f64);
    }
    (base, ipcs)
}

#[test]
fn art_like_gains_from_confining_the_top_of_its_miss_rate_stack() {
    let (base, ipcs) = confine_top_of_stack("art-like", &[0.8]);
    assert!(
        ipcs[0] > base * 1.10,
        "art-like: IPC {base:.4} -> {:.4}",
        ipcs[0]
    );
}

#[test]
fn mcf_and_twolf_like_gain_nothing_from_confining() {
    for name in ["mcf-like", "twolf-like"] {
        let (base, ipcs) = confine_top_of_stack(name, &[0.1, 0.3, 0.6]);
        for ipc in ipcs {
            assert!(ipc <= base * 1.01, "{name}: IPC {base:.4} -> {ipc:.4}");
        }
    }
}

#[test]
fn phased_alternates_between_two_distinct_phases_and_noisy_neighbour_hurts_its_victim() {
    use rocs_core::Counters;
    let mut m = Machine::new(&ppc(), &workload("phased"), 1).unwrap();
    let pid = m.pids()[0];
    let mut mpki = Vec::new();
    while m.run_for(50_000_000) {
        mpki.push(m.read(pid).unwrap().mpki());
    }
    let hi = mpki.iter().cloned().fold(0.0, f64::max);
    let lo = mpki.iter().cloned().fold(f64::MAX, f64::min);
    assert!(hi > 1.6 * lo, "window MPKI {mpki:?}");
    // The MPKI goes high, low, and high again (the phases repeat).
    let first_low = mpki.iter().position(|&v| v < 0.7 * hi).unwrap();
    assert!(mpki[first_low..].iter().any(|&v| v > 0.9 * hi), "{mpki:?}");

    let base = baseline("noisy-neighbour").totals();
    let mut m = Machine::new(&ppc(), &workload("noisy-neighbour"), 1).unwrap();
    let neighbour = m.pids()[1];
    let pages = m.region_pages(neighbour, "buffer").unwrap();
    m.migrate(neighbour, &pages, Placement::Pollute).unwrap();
    m.run_to_end().unwrap();
    let t = m.totals();
    let victim_gain = t.processes[0].ipc() / base.processes[0].ipc() - 1.0;
    in_band(
        "victim speedup with the neighbour confined",
        victim_gain,
        0.1,
        1.0,
    );
}
