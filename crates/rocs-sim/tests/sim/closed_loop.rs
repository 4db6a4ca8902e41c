//! The closed loop on the simulated machine: rocs's controller against the paper's
//! programs, judged against baseline and the offline-best oracle, as the issue sets it.
//!
//! Workloads run at the evaluation's scale and window count (docs/evaluation, `rocsctl sim
//! eval`): about a minute and a half of CPU for the file. A scaled-down proxy (0.3 of the
//! length, 100 windows) judged cg-like at 0.939 of its oracle where the evaluation reads
//! 0.962: a search's windows and moves weigh more in a shorter run, and the proxy failed
//! the target the evaluation meets.

use rocs_core::SearchMode;
use rocs_sim::closed_loop::{
    compare, evaluate, run_baseline, run_rocs, Comparison, EvalRow, LoopConfig, Modes, NothingKept,
    RocsRun,
};
use rocs_sim::{Machine, MachineSpec, RunStats, Workload};

fn config() -> LoopConfig {
    LoopConfig {
        // A coarser oracle grid than the evaluation's, to keep the test short; region
        // boundaries, rocs's own choice and the refinement are still tried.
        oracle_grid: 6,
        ..LoopConfig::default()
    }
}

fn eval(workload: &str) -> EvalRow {
    let machine = MachineSpec::resolve("ppc970fx").unwrap();
    let w = Workload::resolve(workload).unwrap();
    let make = || Machine::new(&machine, &w, 1);
    evaluate(
        "ppc970fx",
        workload,
        &make,
        &config(),
        &NothingKept,
        &mut |_| {},
    )
    .unwrap()
}

/// rocs (adaptive search, default knobs, the evaluation's window) on `w`: its speedup over
/// the baseline, and the run.
fn rocs_alone(machine: &MachineSpec, w: &Workload, seed: u64) -> (f64, RocsRun) {
    let make = || Machine::new(machine, w, seed);
    let cfg = LoopConfig::default();
    let base = run_baseline(&make).unwrap();
    let run = run_rocs(&make, &cfg.knobs, cfg.window_for(&base)).unwrap();
    (base.stats.cycles as f64 / run.stats.cycles as f64, run)
}

/// Baseline, rocs and the oracle (on a grid of `oracle_grid` candidates per profile) of
/// `w`, at the evaluation's window.
fn with_oracle(machine: &MachineSpec, w: &Workload, seed: u64, oracle_grid: usize) -> Comparison {
    let make = || Machine::new(machine, w, seed);
    let cfg = LoopConfig {
        oracle_grid,
        ..LoopConfig::default()
    };
    compare(&make, &cfg, Modes::ALL, &mut |_| {}).unwrap()
}

/// A workload of docs/evaluation/random.md: the one the campaign generated for `machine`
/// from `seed` (the hex in its name).
fn random_md_workload(machine: &str, seed: u64) -> (MachineSpec, Workload) {
    use rocs_sim::closed_loop::random::{random_workload, DEFAULT_ACCESSES_PER_LLC_LINE};
    let spec = MachineSpec::resolve(machine).unwrap();
    let w = random_workload(seed, &spec, DEFAULT_ACCESSES_PER_LLC_LINE);
    assert_eq!(w.name, format!("random-{machine}-{seed:016x}"));
    (spec, w)
}

/// Baseline and rocs in both search modes (no oracle: with nothing to gain the target is
/// "lose at most 1%"), at the evaluation's window count.
struct NoGain {
    speedup_adaptive: f64,
    windows_adaptive: u64,
    windows_linear: u64,
    cycles_adaptive: u64,
    cycles_linear: u64,
}

fn no_gain(workload: &str, scale: f64) -> NoGain {
    let machine = MachineSpec::resolve("ppc970fx").unwrap();
    let w = Workload::resolve(workload).unwrap().scaled(scale);
    let make = || Machine::new(&machine, &w, 1);
    let cfg = LoopConfig::default();
    let base = run_baseline(&make).unwrap();
    let window = cfg.window_for(&base);
    let run = |search| {
        let knobs = rocs_core::Knobs {
            search,
            ..cfg.knobs.clone()
        };
        run_rocs(&make, &knobs, window).unwrap()
    };
    let (a, l) = (run(SearchMode::Adaptive), run(SearchMode::Linear));
    NoGain {
        speedup_adaptive: base.stats.cycles as f64 / a.stats.cycles as f64,
        windows_adaptive: a.search_windows,
        windows_linear: l.search_windows,
        cycles_adaptive: a.stats.cycles,
        cycles_linear: l.stats.cycles,
    }
}

#[test]
fn paper_figures_on_art_cg_and_mcf() {
    // Three runs of half a minute or more each, side by side.
    let (rows, mcf) = std::thread::scope(|scope| {
        let art = scope.spawn(|| eval("art-like"));
        let cg = scope.spawn(|| eval("cg-like"));
        // mcf has nothing to gain. (Its run is long in cycles: at the scale of the others
        // the search would be a larger share of it than in the paper.)
        let mcf = scope.spawn(|| no_gain("mcf-like", 0.6));
        let paper = [art, cg].map(|run| run.join().expect("a run panicked"));
        (paper.to_vec(), mcf.join().expect("a run panicked"))
    });
    let linear = |r: &EvalRow| {
        r.linear
            .clone()
            .expect("the paper suite runs linear search")
    };
    for r in &rows {
        eprintln!(
            "{}: oracle {:.3} (k {:?}); adaptive {:.3} ({:.3} of oracle, {} windows); linear {:.3} ({:.3}, {} windows)",
            r.workload,
            r.oracle_speedup,
            r.oracle_ks,
            r.adaptive.speedup,
            r.adaptive.fraction_of_oracle,
            r.adaptive.search_windows,
            linear(r).speedup,
            linear(r).fraction_of_oracle,
            linear(r).search_windows
        );
    }
    // art and cg have something to gain; rocs gets within 5% of the offline best.
    for r in &rows {
        assert!(
            r.oracle_speedup >= 1.05,
            "{}: oracle {}",
            r.workload,
            r.oracle_speedup
        );
        assert!(
            r.adaptive.fraction_of_oracle >= 0.95,
            "{}: adaptive reaches {:.3} of the oracle",
            r.workload,
            r.adaptive.fraction_of_oracle
        );
        assert!(r.adaptive.pages_confined > 0);
    }
    // mcf: rocs loses at most 1%.
    eprintln!(
        "mcf-like: adaptive {:.4} ({} windows), linear {} windows",
        mcf.speedup_adaptive, mcf.windows_adaptive, mcf.windows_linear
    );
    assert!(
        mcf.speedup_adaptive >= 0.99,
        "mcf-like: adaptive speedup {:.4}",
        mcf.speedup_adaptive
    );
    // Adaptive needs fewer search windows than linear, and is not slower.
    let wa: u64 =
        rows.iter().map(|r| r.adaptive.search_windows).sum::<u64>() + mcf.windows_adaptive;
    let wl: u64 = rows.iter().map(|r| linear(r).search_windows).sum::<u64>() + mcf.windows_linear;
    assert!(wa < wl, "adaptive {wa} search windows, linear {wl}");
    let ca: u64 = rows.iter().map(|r| r.adaptive.cycles).sum::<u64>() + mcf.cycles_adaptive;
    let cl: u64 = rows.iter().map(|r| linear(r).cycles).sum::<u64>() + mcf.cycles_linear;
    assert!(ca <= cl, "adaptive {ca} cycles, linear {cl}");
}

/// The phased workload at full length (its phases must each be long enough for a profile
/// and a search): its baseline and rocs's run.
fn phased() -> (RunStats, RocsRun) {
    let machine = MachineSpec::resolve("ppc970fx").unwrap();
    let w = Workload::resolve("phased").unwrap();
    let make = || Machine::new(&machine, &w, 1);
    let cfg = LoopConfig::default();
    let base = run_baseline(&make).unwrap();
    let run = run_rocs(&make, &cfg.knobs, cfg.window_for(&base)).unwrap();
    (base.stats, run)
}

#[test]
fn the_phased_workload_reprofiles_after_each_phase_change() {
    let (_, run) = phased();
    // Two repetitions of two phases: three changes. The first streaming phase confines its
    // stream; the scratch phase after it gains little: at most a few of its pages in the
    // pollute colours, idle while the stream does not run (the oracle's best, 8-14 of its
    // 145 pages).
    let summary: Vec<_> = run
        .profile_points
        .iter()
        .map(|p| (p.instructions, p.stack_pages, p.chosen_k))
        .collect();
    assert_eq!(run.phase_changes, 3, "{summary:?}");
    assert!(run.profiles >= 3, "{summary:?}");
    let first = run.profile_points[0].chosen_k.unwrap_or(0);
    assert!(first > 0, "{summary:?}");
    assert!(
        run.profile_points[1].chosen_k.is_some_and(|k| k <= 14),
        "{summary:?}"
    );
    // The second streaming phase finds its stream still confined (the scratch phase never
    // touched it): its reused data hits, so its profile promises nothing more and no
    // search moves a page; the stream stays confined to the end.
    let again = run.profile_points[2].search_windows.unwrap_or(0);
    assert!(
        again <= 2,
        "second streaming phase searched {again} windows"
    );
    assert!(run.pages_confined >= first, "{summary:?}");
}

#[test]
fn the_phased_workload_reaches_the_oracle() {
    let (base, run) = phased();
    // Within 5% of the offline best. The oracle takes minutes on this workload (one run
    // per candidate k of each of 4 profiles), too long for this file; its figure is the
    // paper suite's (docs/evaluation/README.md: `rocsctl sim eval --suite paper
    // --oracle-grid 8`, made at 4714c93; rocs reads 1.336 there, this run).
    const ORACLE_SPEEDUP: f64 = 1.271;
    let speedup = base.cycles as f64 / run.stats.cycles as f64;
    assert!(
        speedup >= 0.95 * ORACLE_SPEEDUP,
        "phased: speedup {speedup:.4}, {:.3} of the oracle's {ORACLE_SPEEDUP}",
        speedup / ORACLE_SPEEDUP
    );
}

#[test]
fn with_nothing_to_gain_on_xeon_like_rocs_loses_under_1_percent() {
    // xeon-like's 12 MB LLC holds these programs: only their cold start misses, and every
    // probe at k > 0 also squeezes the physically indexed L2. rocs must notice that k = 0
    // no longer misses and stop there. (Scale 0.5: at 0.3 cg-like is all cold start.)
    let machine = MachineSpec::resolve("xeon-like").unwrap();
    for workload in ["cg-like", "art-like"] {
        let w = Workload::resolve(workload).unwrap().scaled(0.5);
        let (speedup, run) = rocs_alone(&machine, &w, 1);
        assert!(
            speedup >= 0.99,
            "{workload} on xeon-like: speedup {speedup:.4} ({} search windows, {} pages moved)",
            run.search_windows,
            run.migrations
        );
    }
}

#[test]
fn the_closed_loop_is_deterministic_for_a_seed() {
    let machine = MachineSpec::resolve("ppc970fx").unwrap();
    let w = Workload::resolve("art-like").unwrap().scaled(0.1);
    let run = |seed| {
        let make = || Machine::new(&machine, &w, seed);
        let knobs = rocs_core::Knobs {
            search: SearchMode::Adaptive,
            ..config().knobs
        };
        let r = run_rocs(&make, &knobs, 1_000_000).unwrap();
        (
            r.stats.cycles,
            r.pages_confined,
            r.search_windows,
            r.migrations,
        )
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7).0, run(8).0, "the seed matters");
}

#[test]
fn noisy_neighbour_tenants_take_turns_and_reach_the_oracle() {
    // Two tenants share the LLC: the victim reuses a table, the neighbour streams. The
    // gain is the victim's, from confining the neighbour's stream: only a search judged by
    // both tenants' throughput finds it. Full length (the stream's profile needs it; rocs
    // runs in about a second), with a coarse oracle grid to keep the oracle short.
    let machine = MachineSpec::resolve("ppc970fx").unwrap();
    let w = Workload::resolve("noisy-neighbour").unwrap();
    let c = with_oracle(&machine, &w, 1, 4);
    let rocs = c.rocs.as_ref().unwrap();
    let oracle = c.oracle.as_ref().unwrap();
    assert!(
        c.oracle_speedup.unwrap() >= 1.05,
        "the oracle gains: {:.3}",
        c.oracle_speedup.unwrap()
    );
    // The neighbour's own IPC does not gain from confining its stream: only the group's
    // score shows the victim's gain.
    let pids: Vec<_> = rocs.profile_points.iter().map(|p| p.pid).collect();
    assert!(pids.contains(&1001), "the neighbour profiled: {pids:?}");
    // Judged against the oracle's best placement of the neighbour's profile, the victim's
    // pages left where they are. The victim profiles too once its neighbour's stream is
    // confined (5% of its LLC loads miss, at MPKI 6.7), and there the oracle finds one
    // page of its own whose confinement gains 12% more; rocs's search of the victim
    // measures that page within the scatter of its k = 0 windows and keeps k = 0 (an
    // open gap of issue 12, not what this test is about).
    let profile = pids.iter().position(|&p| p == 1001).unwrap();
    let best_for_neighbour = oracle
        .candidates
        .iter()
        .filter(|&&(i, _, _)| i == profile)
        .map(|&(_, _, cycles)| cycles)
        .min()
        .unwrap();
    let of_neighbours_oracle = best_for_neighbour as f64 / rocs.stats.cycles as f64;
    eprintln!(
        "noisy-neighbour: rocs {:.3}, oracle {:.3} (k {:?}), {of_neighbours_oracle:.3} of the \
         oracle's best for the neighbour's profile, {} search windows",
        c.speedup.unwrap(),
        c.oracle_speedup.unwrap(),
        oracle.ks,
        rocs.search_windows
    );
    assert!(
        of_neighbours_oracle >= 0.95,
        "fraction of the oracle for the neighbour's profile {of_neighbours_oracle:.3}"
    );
    let neighbour = rocs.profile_points.iter().find(|p| p.pid == 1001).unwrap();
    assert!(
        neighbour.chosen_k.unwrap_or(0) > 0,
        "the neighbour's stream is confined"
    );
}

#[test]
fn a_tenant_that_runs_to_its_end_exits_then() {
    // The neighbour streams for a tenth of the victim's run. rocsd sees a process exit
    // when it ends, and so must the simulated machine: a tenant that had only stopped
    // running kept its controller in the engine, and one holding the LLC's turn kept it,
    // counting search windows, while the others waited for it to the end of the run.
    let machine = MachineSpec::resolve("ppc970fx").unwrap();
    let mut w = Workload::resolve("noisy-neighbour").unwrap();
    let victim_accesses = w.processes[0].accesses.unwrap();
    w.processes[1].accesses = Some(victim_accesses / 10);
    let make = || Machine::new(&machine, &w, 1);
    let cfg = LoopConfig::default();
    let base = run_baseline(&make).unwrap();
    let rocs = run_rocs(&make, &cfg.knobs, cfg.window_for(&base)).unwrap();
    let (pid, at) = *rocs
        .exits
        .first()
        .unwrap_or_else(|| panic!("no exit seen before the end: {:?}", rocs.final_states));
    assert_eq!((pid, rocs.exits.len()), (1001, 1), "{:?}", rocs.exits);
    assert!(
        at < rocs.stats.cycles / 2,
        "the neighbour exited at {at} of {} cycles",
        rocs.stats.cycles
    );
}

#[test]
fn the_oracle_judges_a_profile_the_controller_declined_to_search() {
    // Random run 224 of docs/evaluation/random.md (tiny): a stencil over 1.57 times the
    // LLC. Every page misses on every pass, and confining most of the stack lets the rest
    // fit (1.36x). The profile samples each page once, so the loop cannot be told from a
    // stream that never comes back: it promises nothing, and the controller makes no
    // search. The oracle must still try that profile's stack, or a gain the controller
    // declines would never show beside its speedup.
    let (machine, w) = random_md_workload("tiny", 0x7a04_123d_1f08_13aa);
    let c = with_oracle(&machine, &w, 8_792_172_426_256_978_858, 8);
    let rocs = c.rocs.as_ref().unwrap();
    assert_eq!(rocs.search_windows, 0, "the controller made no search");
    assert_eq!(rocs.profile_points.len(), 1, "it profiled once");
    assert_eq!(
        rocs.profile_points[0].chosen_k,
        Some(0),
        "its choice: k = 0"
    );
    let oracle = c.oracle.as_ref().unwrap();
    assert!(
        c.oracle_speedup.unwrap() > 1.2,
        "the oracle finds the gain on that profile: {:.3} (k {:?}, {} candidates)",
        c.oracle_speedup.unwrap(),
        oracle.ks,
        oracle.candidates.len()
    );
}

/// Random run 308 of random.md (tiny): a strided sweep of 0.7 of the LLC beside a small
/// table read at random. Some of the sweep's pages miss on every pass (their colours are
/// over-full) while the rest hit; the profile promised 1.8%, under min_promise (pages that
/// never hit look like a stream), and the controller made no search (0.999 of off; its
/// oracle 1.40). The colour report shows the over-full colours: the controller searches
/// their pages and keeps them confined.
#[test]
fn a_sweep_over_full_colours_is_searched_though_its_profile_promised_under_the_minimum() {
    let text = r#"
        name = "declined"
        [[process]]
        name = "t0"
        accesses = 8192000
        [[process.region]]
        name = "sweep"
        size_llc = 0.6964721683494423
        pattern = "strided"
        share = 0.762900734300544
        elem = 4
        stride = "256B"
        instructions_per_access = 1.8437190377517838
        mlp = 3.6762836337655407
        [[process.region]]
        name = "table"
        size_llc = 0.0591205583929592
        pattern = "random"
        share = 0.8534069903509885
        elem = 8
        instructions_per_access = 0.6900069803792112
        mlp = 1.0867708250950532
    "#;
    let machine = MachineSpec::resolve("tiny").unwrap();
    let w = Workload::from_toml("declined.toml", text).unwrap();
    let (speedup, rocs) = rocs_alone(&machine, &w, 11370307417682222775);
    assert!(
        speedup > 1.3,
        "speedup {speedup:.3}, {} pages confined, {} search windows",
        rocs.pages_confined,
        rocs.search_windows
    );
}

/// A reused array of half the LLC (random.md's run 207, one tenant on ppc970fx) whose
/// frames put eleven of its pages on the pollute colour, which holds eight: those pages
/// miss on every pass while the rest hit. The profile's stack merges them with the
/// array's other pages, and the search's first probe was the region's boundary, 54 pages
/// in a buffer of 8, which lost (0.984 of off, the oracle 2.958). Over-full colours are
/// relieved first: one page confined moves the others out of the buffer.
#[test]
fn pages_that_over_fill_their_colour_are_relieved_first() {
    let (machine, w) = random_md_workload("ppc970fx", 0x5d66_1213_e73f_2e68);
    let (speedup, rocs) = rocs_alone(&machine, &w, 6_730_086_569_845_141_096);
    assert!(
        speedup > 2.0,
        "speedup {speedup:.3}, {} pages confined",
        rocs.pages_confined
    );
}

/// An over-full colour is found even when the profile promises nothing. Random run 404 of
/// random.md (tiny) has a reused strided array of 0.4 of the LLC, six of whose pages the
/// allocator put on a colour of four ways: those miss on every pass and the rest always
/// hit, so the profile read a stream beside data that hits, promised 0.0%, and rocs never
/// searched (0.999 of off; its oracle, two pages confined, 2.2). The colour report shows
/// the over-full colour, whose pages are loaded as often as the array's pages that hit:
/// the search goes on for them.
#[test]
fn an_over_full_colour_is_relieved_when_the_profile_promises_nothing() {
    let (machine, w) = random_md_workload("tiny", 0xd81f_dd47_1877_deb3);
    let (speedup, rocs) = rocs_alone(&machine, &w, 15_573_409_333_893_390_003);
    assert!(
        speedup > 1.8,
        "speedup {speedup:.3}, {} pages confined, {} search windows",
        rocs.pages_confined,
        rocs.search_windows
    );
}

/// A stream's pages over-fill colours too, by chance, but they are loaded on one pass
/// only: random run 315 of random.md (ppc970fx) streams and reuses nothing, and a search
/// for its over-full colours (before their pages had to look reused) probed up to its
/// whole stack of 108 pages and lost 2.4%.
#[test]
fn a_stream_over_filling_colours_is_not_searched() {
    let (machine, w) = random_md_workload("ppc970fx", 0x4a23_2b0b_bfec_ad36);
    let (speedup, rocs) = rocs_alone(&machine, &w, 5_342_160_912_456_133_942);
    assert_eq!(rocs.search_windows, 0, "speedup {speedup:.3}");
    assert!(speedup > 0.99, "speedup {speedup:.3}");
}

/// Random run 117 of random.md (ppc970fx, one tenant): a strided loop over 0.86 of the
/// LLC beside three small regions, 1.1 times the LLC in all. Every page misses on most
/// passes; confining part of the loop lets the rest fit (the oracle: k = 47 of a stack of
/// 132, 1.31x). No region boundary lies there: the stack's boundaries are at 8 and 119,
/// and probing them alone the search found nothing and lost 3% (0.970). The search also
/// probes the fit point.
#[test]
fn a_loop_larger_than_the_cache_is_confined_in_part() {
    let (machine, w) = random_md_workload("ppc970fx", 0xf2ca_b167_415e_de19);
    let (speedup, rocs) = rocs_alone(&machine, &w, 17_494_990_759_510_597_145);
    assert!(
        speedup > 1.15,
        "speedup {speedup:.3}, {} pages confined, {} search windows",
        rocs.pages_confined,
        rocs.search_windows
    );
}
