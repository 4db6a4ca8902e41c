//! The modern suite's path (`rocsctl sim eval --suite modern`), small: a machine shaped
//! like the modern built-ins (a private L2, an exclusive victim LLC with DRRIP, an L2
//! prefetcher switched off while sampling, a TLB) but with a 256 KB LLC, running the
//! built-in workloads sized to it (`--scale auto`), through `evaluate_modern` and the page
//! it renders.

use rocs_core::PolluteColours;
use std::collections::BTreeMap;
use std::sync::Mutex;

use rocs_sim::closed_loop::{
    evaluate_modern, run_baseline, run_with_placements, Evaluation, KeepError, KeptRuns,
    LoopConfig, NothingKept,
};
use rocs_sim::RunStats;
use rocs_sim::{Machine, MachineSpec, Scale, Workload};

fn small_modern() -> MachineSpec {
    let text = "name = \"small-modern\"\nclock_ghz = 3.0\nbase_cpi = 0.4\npage_size = \"4KiB\"\n\
                memory = \"256MiB\"\nmemory_latency = 300\n\
                [l1d]\nsize = \"8KiB\"\nline = 64\nways = 8\n\
                [l2]\nsize = \"32KiB\"\nline = 64\nways = 8\nlatency = 14\n\
                [llc]\nsize = \"256KiB\"\nline = 64\nways = 16\nlatency = 50\npolicy = \"drrip\"\nfill = \"exclusive-victim\"\n\
                [prefetch]\nstreams = 16\ndegree = 2\ndistance = 20\noff_while_sampling = true\n\
                [tlb]\nentries = 256\nways = 8\nwalk_cycles = 30\n\
                [pmu]\nsample_cost_cycles = 400\n";
    MachineSpec::from_toml("small-modern.toml", text).unwrap()
}

/// The built-in workload `name` sized to `spec` by `scale` (`auto:F`).
fn sized(spec: &MachineSpec, scale: &str, name: &str) -> Workload {
    let scale: Scale = scale.parse().unwrap();
    scale
        .apply(&Workload::resolve(name).unwrap(), spec)
        .unwrap()
}

fn config() -> LoopConfig {
    LoopConfig {
        oracle_grid: 4,
        windows_per_run: 100,
        ..LoopConfig::default()
    }
}

/// Runs kept in memory, counting those made.
#[derive(Default)]
struct Kept {
    runs: Mutex<BTreeMap<String, RunStats>>,
    made: Mutex<usize>,
}

impl KeptRuns for Kept {
    fn recall(&self, what: &str) -> Option<RunStats> {
        self.runs.lock().unwrap().get(what).cloned()
    }
    fn keep(&self, what: &str, stats: &RunStats) -> Result<(), KeepError> {
        *self.made.lock().unwrap() += 1;
        let old = self.runs.lock().unwrap().insert(what.into(), stats.clone());
        assert!(old.is_none(), "{what} made twice");
        Ok(())
    }
}

#[test]
fn a_case_made_several_runs_at_a_time_reads_as_made_one_at_a_time() {
    let spec = small_modern();
    let w = sized(&spec, "auto:0.03", "noisy-neighbour");
    let make = || Machine::new(&spec, &w, 1);
    let evaluate = |threads: usize, kept: &Kept, lines: &mut Vec<String>| {
        let cfg = LoopConfig {
            threads,
            ..config()
        };
        let mut row = evaluate_modern(&spec.name, "noisy-neighbour", &make, &cfg, kept, &mut |l| {
            lines.push(l.to_string())
        })
        .unwrap();
        // The one figure that is the host's, not the simulation's.
        row.cat.as_mut().expect("CAT ran").wall_seconds = 0.0;
        row
    };
    let (one, three) = (Kept::default(), Kept::default());
    let (mut lines_one, mut lines_three) = (Vec::new(), Vec::new());
    let row = evaluate(1, &one, &mut lines_one);
    assert_eq!(evaluate(3, &three, &mut lines_three), row);
    assert_eq!(*one.runs.lock().unwrap(), *three.runs.lock().unwrap());
    let made = *three.made.lock().unwrap();
    assert!(made > 10, "the oracle's and CAT's runs are kept: {made}");
    // Every run is reported as it ends, in whatever order the threads finish them.
    lines_one.sort();
    lines_three.sort();
    assert_eq!(lines_one, lines_three);
    // Run again, every kept run is recalled, none made.
    let mut again = Vec::new();
    assert_eq!(evaluate(3, &three, &mut again), row);
    assert_eq!(*three.made.lock().unwrap(), made);
    assert!(again.iter().any(|l| l.ends_with("(made before)")));
}

#[test]
fn one_workload_per_kind_through_the_modern_suite() {
    let spec = small_modern();
    let mut rows = Vec::new();
    for name in ["noisy-neighbour", "mcf-like"] {
        let w = sized(&spec, "auto:0.03", name);
        let make = || Machine::new(&spec, &w, 1);
        let row = evaluate_modern(
            &spec.name,
            name,
            &make,
            &config(),
            &NothingKept,
            &mut |_| {},
        )
        .unwrap();
        let cat = row.cat.as_ref().expect("the modern suite runs CAT");
        eprintln!(
            "{name}: rocs {:.3}, oracle {:.3} ({} candidates), CAT {:.3} {:x?}, both {:.3}, pf on {:?}",
            row.adaptive.speedup,
            row.oracle_speedup,
            row.oracle_ks.len(),
            cat.speedup,
            cat.masks,
            cat.both_speedup,
            row.prefetch_on_speedup
        );
        assert_eq!(cat.masks.len(), w.processes.len());
        assert!(
            row.linear.is_none(),
            "modern.md shows adaptive search alone"
        );
        assert!(
            row.prefetch_on_speedup.is_some(),
            "the prefetcher is off while sampling: the suite compares with it left on"
        );
        for v in [row.adaptive.speedup, row.oracle_speedup, cat.speedup] {
            assert!(v.is_finite() && v > 0.5, "{name}: {v}");
        }
        if w.processes.len() == 1 {
            // CAT has nothing to split: every way, no runs, and rocs on it is rocs.
            assert_eq!(cat.speedup, 1.0);
            assert!(cat.candidates.is_empty());
            assert_eq!(cat.both_speedup, row.adaptive.speedup);
        } else {
            assert!(
                cat.candidates.len() > 1,
                "masks tried: {:?}",
                cat.candidates
            );
            assert!(cat.speedup >= 1.0, "no CAT is a candidate: {}", cat.speedup);
        }
        rows.push(row);
    }
    let e = Evaluation::new("test".into(), 1, 0.03, 100, rows);
    let page = e.modern_markdown();
    assert!(page.contains("## small-modern"), "{page}");
    for name in ["noisy-neighbour", "mcf-like"] {
        assert!(page.contains(&format!("| {name} |")), "{page}");
    }
    // A row whose oracle gains less than 5% is listed where the page says why.
    for r in &e.rows {
        let listed = page.contains(&format!("- {} on {}: oracle-rocs", r.workload, r.machine));
        assert_eq!(listed, r.oracle_speedup < 1.05, "{}: {page}", r.workload);
    }
    let svg = e.modern_svg("small-modern");
    // Five bars per workload, five legend boxes.
    assert_eq!(svg.matches("<rect x=").count(), 2 * 5 + 5, "{svg}");
}

/// The suites take the baseline run for two runs they no longer make: the oracle's k = 0
/// (the pollute colours set, nothing confined, run in windows) and oracle-CAT's first
/// assignment (every process may use every way). That holds only while those runs are
/// exactly the baseline, for several tenants too.
#[test]
fn the_baseline_stands_for_the_oracles_k_0_and_for_no_cat() {
    let spec = small_modern();
    let w = sized(&spec, "auto:0.02", "noisy-neighbour");
    assert!(w.processes.len() > 1);
    let make = || Machine::new(&spec, &w, 1);
    let baseline = run_baseline(&make).unwrap().stats;

    let colours = make().unwrap().llc_geometry().colours();
    let pollute = PolluteColours::Count((colours / 16).max(1))
        .resolve(colours)
        .unwrap();
    let step = baseline.cycles / 100;
    let k0 = run_with_placements(&make, &[], &[], step, &pollute, None).unwrap();
    assert_eq!(k0, baseline, "the oracle's k = 0 is the baseline");

    let mut no_cat = make().unwrap();
    let all_ways = (1u64 << no_cat.llc_ways()) - 1;
    for pid in no_cat.pids() {
        no_cat.set_way_mask(pid, all_ways).unwrap();
    }
    no_cat.run_to_end().unwrap();
    assert_eq!(
        no_cat.totals(),
        baseline,
        "every way to every process is the baseline"
    );
}
