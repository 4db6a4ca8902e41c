//! The random campaign, small and fast (issue 12): generated workloads on the `tiny`
//! machine, each run alone and under rocs at the costs its window stands for (as random.md
//! judges its targets: `window_cost_scale`). rocs must never make a run slower than 0.99
//! of off, nor slow any tenant of a shared LLC below 0.95 of its own speed at k = 0.
//!
//! A fixed list of seeds, plus (with --ignored, until issue 12 is done) a few drawn afresh
//! on every run; every failing seed is printed with the command that replays it.

use std::hash::{BuildHasher, Hasher};

use rocs_sim::closed_loop::random::{random_workload, DEFAULT_ACCESSES_PER_LLC_LINE};
use rocs_sim::closed_loop::{
    run_baseline, run_rocs, window_cost_scale, BaselineRun, LoopConfig, RocsRun,
};
use rocs_sim::{Machine, MachineSpec, Workload};

const FIXED_SEEDS: [u64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
const FRESH_SEEDS: usize = 2;

/// Seeds that differ from one test run to the next (std's hasher keys are random).
fn fresh_seeds() -> Vec<u64> {
    let state = std::collections::hash_map::RandomState::new();
    (0..FRESH_SEEDS as u64)
        .map(|i| {
            let mut h = state.build_hasher();
            h.write_u64(i);
            h.finish()
        })
        .collect()
}

/// `workload` run alone and under rocs at the window's costs, with `seed`: the baseline,
/// the rocs run and the cost scale.
fn run_at_window_costs(
    spec: &MachineSpec,
    workload: &Workload,
    seed: u64,
) -> (BaselineRun, RocsRun, f64) {
    let make = || Machine::new(spec, workload, seed);
    let cfg = LoopConfig::default();
    let base = run_baseline(&make).unwrap();
    let window = cfg.window_for(&base);
    let scale = window_cost_scale(spec, window);
    let (scaled, cfg) = cfg.at_cost_scale(spec, scale).unwrap();
    let rocs = run_rocs(
        &|| Machine::new(&scaled, workload, seed),
        &cfg.knobs,
        window,
    )
    .unwrap();
    (base, rocs, scale)
}

fn speedup(base: &BaselineRun, rocs: &RocsRun) -> f64 {
    base.stats.cycles as f64 / rocs.stats.cycles as f64
}

/// Asserts that the workload generated for `machine` from `workload_seed`, run with `seed`
/// at the window's costs, runs faster than `least` times its speed without rocs.
fn assert_speedup_above(machine: &str, workload_seed: u64, seed: u64, least: f64) {
    let spec = MachineSpec::resolve(machine).unwrap();
    let w = random_workload(workload_seed, &spec, DEFAULT_ACCESSES_PER_LLC_LINE);
    let (base, rocs, _) = run_at_window_costs(&spec, &w, seed);
    let speedup = speedup(&base, &rocs);
    assert!(
        speedup > least,
        "{}: speedup {speedup:.3} with {} pages confined",
        w.name,
        rocs.pages_confined
    );
}

/// What went wrong with `seed`'s workload, if anything.
fn check(spec: &MachineSpec, seed: u64) -> Option<String> {
    let w = random_workload(seed, spec, DEFAULT_ACCESSES_PER_LLC_LINE);
    let (base, rocs, scale) = run_at_window_costs(spec, &w, seed);
    let run_speedup = speedup(&base, &rocs);
    let mut wrong = Vec::new();
    if run_speedup < 0.99 {
        wrong.push(format!("speedup {run_speedup:.3} < 0.99"));
    }
    if w.processes.len() > 1 {
        for b in &base.stats.processes {
            let r = rocs
                .stats
                .processes
                .iter()
                .find(|p| p.pid == b.pid)
                .unwrap();
            let tenant = b.cycles as f64 / r.cycles as f64;
            if tenant < 0.95 {
                wrong.push(format!("tenant {} at {tenant:.3} < 0.95", b.name));
            }
        }
    }
    eprintln!(
        "seed {seed:#x}: {} tenants, speedup {run_speedup:.3}, {} pages confined",
        w.processes.len(),
        rocs.pages_confined
    );
    (!wrong.is_empty()).then(|| {
        // Written where it can be replayed from.
        let file = std::env::temp_dir().join(format!("{}.toml", w.name));
        std::fs::write(&file, toml::to_string(&w).unwrap()).unwrap();
        format!(
            "seed {seed}: {}; replay: rocsctl sim run --workload {} --machine tiny \
             --cost-scale {scale} --seed {seed} --mode all",
            wrong.join(", "),
            file.display()
        )
    })
}

/// Fails listing every seed of `seeds` that broke a bound, with how to replay it.
fn assert_none_breaks_a_bound(seeds: &[u64]) {
    let spec = MachineSpec::resolve("tiny").unwrap();
    let failures: Vec<String> = seeds.iter().filter_map(|&s| check(&spec, s)).collect();
    assert!(
        failures.is_empty(),
        "{} of {} generated workloads broke a bound:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
}

#[test]
fn rocs_never_loses_on_the_fixed_generated_workloads() {
    assert_none_breaks_a_bound(&FIXED_SEEDS);
}

#[test]
#[ignore = "issue 12 is not done: about one fresh seed in twenty breaks a bound (a run at \
            0.990, tenants at 0.935-0.947; NOTES session 44); run with --ignored"]
fn rocs_never_loses_on_fresh_generated_workloads() {
    assert_none_breaks_a_bound(&fresh_seeds());
}

/// At the window's costs a simulated window stands for one of rocsd's with hundreds of
/// times the accesses, and rocs samples it as densely as rocsd would. Sampled at the
/// simulator's own period instead, this workload's profile (one tenant, random.md's run 4)
/// saw too few of its pages' reuses to tell its stream from its reused data, and rocs
/// confined nothing (0.998 of off, where its oracle gains 19%).
#[test]
fn at_the_windows_costs_rocs_samples_as_densely_as_rocsd() {
    assert_speedup_above(
        "tiny",
        0xa57c_8b9c_03eb_78f0,
        11_924_559_415_567_153_392,
        1.1,
    );
}

/// A program's LLC may serve most of its loads and still miss often: this one (one
/// tenant, random.md's run 468) missed 8.5% of its LLC loads at MPKI 18. Gated at a 10%
/// miss rate, rocs found it missing too little to be worth a search and confined nothing
/// (1.000 of off, where its oracle gains 34%).
#[test]
fn a_program_whose_llc_serves_most_loads_but_misses_often_is_searched() {
    assert_speedup_above(
        "tiny",
        0xfb56_52f6_10be_4a8c,
        18_110_754_168_313_367_180,
        1.15,
    );
}

/// A promise counts loads, a search measures IPC: this program (one tenant, random.md's
/// run 122) missed on 6.6% of its LLC loads, and the 3.8% a pollute buffer could turn into
/// hits (one over-full colour) cost it nearly half its cycles. Weighed as 3.8% against its
/// windows' scatter, the search was judged too noisy to tell the gain and moved nothing
/// (1.000 of off, where its oracle, confining 2 pages, runs 1.86 times as fast).
#[test]
fn a_promise_is_weighed_by_what_its_misses_cost() {
    assert_speedup_above(
        "tiny",
        0x3e8f_9f5a_f6c8_fe3d,
        4_507_996_965_057_396_285,
        1.5,
    );
}

/// A tenant kept 2 pages confined that sped both tenants up by 12-23% in its search, and
/// one window later its program changed phase (random.md's run 118 at offset 1). Steady
/// learnt its phase reference from windows on both sides of the change, so wide that the
/// change never left it, and the placement stayed through the new phase: 0.960 of off,
/// its tenant 0.938. The reference is the kept placement's windows in the search, and a
/// profile of the new phase that finds nothing to confine moves the pages back.
#[test]
fn a_phase_that_ends_right_after_the_search_takes_its_placement_with_it() {
    assert_speedup_above(
        "tiny",
        0xe35c_bf92_783b_2cb5,
        16_383_180_180_270_296_246,
        0.99,
    );
}

/// A loop over more data than the LLC holds misses on every pass, though most of it would
/// fit: random.md's run 117 (ppc970fx, one tenant: a strided loop over 0.86 of the LLC
/// beside three small regions, 146 pages where the ordinary colours hold 120). The oracle's
/// best top of the stack, 40 pages, makes it 1.37 times as fast; the search probed the fit
/// point (62) and a region boundary (82), found both no better than k = 0 and kept
/// nothing (0.999 of off). Confining the 27 pages beyond what their colours hold, with the
/// 13 the allocator put on the pollute colours left there (moved out, they over-fill
/// colours again: 1.27), lets the rest of the loop hit on every pass.
#[test]
fn a_loop_larger_than_the_cache_sheds_the_pages_that_over_fill_its_colours() {
    assert_speedup_above(
        "ppc970fx",
        0xf2ca_b167_415e_de19,
        17_494_990_759_510_597_145,
        1.4,
    );
}

/// Not every stack larger than the LLC is a loop: random.md's run 460 (tiny, one tenant)
/// has 471 pages where the ordinary colours hold 60, streams beside reused data that hits
/// part of the time. Its 411 pages beyond what their colours hold lose those hits in the
/// pollute buffer (MPKI 190 -> 507 when they were probed first, and the search, starting
/// there, went no further: 0.993 of off where rocs otherwise makes it 1.61 times as fast).
#[test]
fn a_stack_whose_pages_beyond_their_colours_hit_is_not_taken_for_a_loop() {
    assert_speedup_above(
        "tiny",
        0x47d2_fa7c_770c_1996,
        5_175_474_334_282_291_606,
        1.5,
    );
}

/// A loop can take longer than a window to make one pass: random.md's run 373 (ppc970fx,
/// one tenant: a stencil over 240 pages, one pass in about 6 windows). Its loop fit
/// (confining the 120 pages its colours hold too many) makes it 1.6 times as fast, but
/// measured a window after the move it read +8% (the pages staying hit only from the pass
/// after the one that loads them), and a window at a time its windows read 0.11 to 0.30
/// within one pass: 1.003. The loop fit is measured once a pass has loaded what stays, and
/// over one pass.
#[test]
fn a_loop_slower_than_a_window_is_measured_over_a_pass() {
    assert_speedup_above(
        "ppc970fx",
        0x3ffc_00ed_c722_d2e0,
        4_610_561_139_768_742_624,
        1.4,
    );
}

/// A tenant that waited for the turn while its sharer's search moved pages profiles
/// once its cache has settled: random.md's run 410 (tiny, three tenants). The holder's
/// search, whose LLC group score was 1.37 at k = 126, ended when a third tenant exited,
/// and moved its pages back; the waiting tenant profiled at once, its reference IPC
/// (0.069) taken while the pages went back, and its profile's windows (0.009) were
/// charged as what profiling cost it: 2.4% of the LLC's cycles, over the overhead budget
/// for the rest of the run, and the holder never searched again (1.014 of off; 1.32
/// now, its oracle 1.59).
#[test]
fn a_profile_waits_for_its_cache_to_settle_after_the_holders_moves() {
    assert_speedup_above(
        "tiny",
        0xc371_f34f_3620_137e,
        14_083_305_031_300_289_406,
        1.2,
    );
}

/// A tenant that kept nothing decided so beside the targets that ran then, and looks
/// again when they change: random.md's run 490 (tiny, four tenants). Its profiles beside
/// streaming sharers found nothing reused that missed; alone for the last third of its
/// run, it missed on a reused set the sharers had hidden, and stayed steady with nothing
/// confined (1.005 of off). Observed afresh when its sharers exit, it profiles alone,
/// and its search keeps a third of its stack (+87%).
#[test]
fn a_tenant_that_kept_nothing_looks_again_when_its_sharers_change() {
    assert_speedup_above(
        "tiny",
        0xdbfc_d2c9_78ca_9c84,
        15_851_776_551_194_107_012,
        1.3,
    );
}

/// What a profile window costs is judged over the profile, not window by window: a
/// window's IPC scatters around its pace by more than sampling costs. random.md's run 477
/// (ppc970fx, one tenant: a sequential loop, a stencil and a strided loop, 3.1 times the
/// LLC in all) scattered by 1.5% a window where sampling cost 0.7%; charged the larger of
/// the two each window, the profile paid 1.2% a window, over the overhead budget, and
/// ended before it had seen its loops loaded again: nothing found reused, nothing
/// confined (1.000 of off, its oracle 1.21).
#[test]
fn a_profiles_cost_is_not_its_windows_scatter() {
    assert_speedup_above(
        "ppc970fx",
        0xa3a3_a33e_0a50_80f5,
        11_791_447_736_242_438_389,
        1.15,
    );
}

/// A loop can take longer than a profile's usual length to make one pass: random.md's
/// run 363 (ppc970fx, one tenant: a stencil over 1.6 times the LLC, a pass in about 11
/// windows). Ten windows saw each page loaded once, as a stream's are, and rocs confined
/// nothing (1.000 of off, its oracle 1.14, confining 124 of its 199 pages). Alone on its
/// LLC, a profile that has found nothing yet goes on while the budget affords it, up to
/// `profile_loop_max_windows`, long enough to see two passes. (1.18 while confirm measured
/// k = 0 only twice; 1.10 since it measures k = 0 as often as the best point, reading it
/// once while the loop fit's pages are still warm in the ordinary colours.)
#[test]
fn a_profile_waits_for_a_slow_loop_to_come_round_again() {
    assert_speedup_above(
        "ppc970fx",
        0x713e_8fd8_133e_b1dc,
        8_160_117_733_040_501_212,
        1.05,
    );
}

/// Slower still: random.md's run 409 (ppc970fx, one tenant: a stencil over about twice
/// the LLC) makes a pass in about 23 windows. A profile of 32 windows saw each page loaded
/// once and rocs confined nothing (0.999 of off, its oracle 1.088); one of up to 64 sees
/// the loop come round, and its loop fit makes it 1.13 times as fast.
#[test]
fn a_profile_waits_for_a_loop_whose_pass_takes_two_dozen_windows() {
    assert_speedup_above(
        "ppc970fx",
        0xe4f6_c15d_2071_dea4,
        16_498_586_890_638_843_556,
        1.08,
    );
}

/// A loop fit measured over its loop's pass is kept as measured, not refined: random.md's
/// run 69 at offset 2 (ppc970fx, three tenants, the last alone with a loop over more than
/// the LLC). Its loop fit read best of the coarse points over a pass; refinement then
/// measured the points around it a window each, and a window of the loop reads whichever
/// part of the pass it caught: the search moved off the fit (0.987 of off, 1.003 kept).
#[test]
fn a_loop_fit_measured_over_its_pass_is_not_refined_window_by_window() {
    assert_speedup_above(
        "ppc970fx",
        0xc32c_4d69_50b8_bc51,
        14_063_700_851_092_405_331,
        0.995,
    );
}

/// A best point measured again is judged against k = 0 measured as often: random.md's run
/// 465 (ppc970fx, alone: a sequential loop over the LLC beside a 16-page hot array). Its
/// loop fit read 0.676 to 0.825 over four windows against k = 0's two (0.596, 0.517), and
/// with k = 0 at two windows the margin (about 0.20) took the lead of 0.146 for noise: the
/// search kept nothing (1.036 of off, its oracle 1.397). k = 0 measured again as often as
/// the best point keeps the fit (1.36).
#[test]
fn a_best_point_measured_again_is_judged_against_k0_measured_as_often() {
    assert_speedup_above(
        "ppc970fx",
        0x3f9e_5c83_2b1d_f7e0,
        4_584_203_189_143_599_072,
        1.3,
    );
}

/// Pages a placement left in the pollute buffer do not hide a loop: random.md's run 109
/// (ppc970fx, alone; phases, the later one a loop over 2.8 LLCs). Its first phase kept 256
/// pages confined, and with them counted as confined the later phase's stack of 354 pages
/// left 98 outside the buffer, under the 120 its ordinary colours hold: no loop fit was
/// made, its search moved the 256 pages out and kept nothing (1.069 of off, its oracle
/// 1.240). Counting the buffer's pages beyond what it holds as ordinary, the loop fit
/// keeps 260 pages (+30%).
#[test]
fn pages_a_placement_left_in_the_buffer_do_not_hide_a_loop() {
    assert_speedup_above(
        "ppc970fx",
        0xb341_32d1_0c9d_4659,
        12_916_661_079_716_480_601,
        1.15,
    );
}

/// A loop that runs alone only after its sharers have gone is profiled long enough to be
/// seen: random.md's run 271 (ppc970fx, three tenants). Its third tenant sweeps 3.2 LLCs
/// in a pass of 2.2 windows; its profiles beside the other two found nothing, and alone
/// its profile, on a budget halved for them, ended after 1.8 passes, each page loaded
/// about once: a stream's profile (1.000 of off, its oracle 1.21 at 316 of 408 pages).
#[test]
fn a_loop_left_alone_is_profiled_long_enough_to_be_seen() {
    assert_speedup_above(
        "ppc970fx",
        0x1287_91dc_f919_2e34,
        1_335_196_192_796_651_060,
        1.15,
    );
}

/// A placement that loses its re-verification looks again rather than settling for k = 0:
/// random.md's run 282 (tiny, two tenants). Beside its sharer the first tenant kept 16 of
/// its 50 pages; when the sharer exited, k = 16 was measured against k = 0 again, lost,
/// and went back, and the tenant stayed steady with nothing confined (1.002 of off, its
/// oracle 1.40 at k = 11): re-verification compares the kept placement with k = 0 only.
/// Observed afresh, it profiles alone and its search finds what wins now.
#[test]
fn a_failed_reverification_looks_again() {
    assert_speedup_above(
        "tiny",
        0x300d_80df_a1c0_4c84,
        3_462_565_386_497_576_068,
        1.1,
    );
}

/// A search whose windows at k = 0 leave the profile's phase for another gives the new
/// phase its own profile: random.md's run 479 (ppc970fx, two tenants). The tenant profiled
/// at IPC 0.16 and MPKI 18; its search then read 0.016 and MPKI 345 twice, judged its
/// windows too noisy to search, and stayed steady in a phase it never profiled (1.102 of
/// off, its oracle 1.85).
#[test]
fn a_phase_the_searchs_baseline_enters_is_profiled() {
    assert_speedup_above(
        "ppc970fx",
        0x4dfc_2d2d_517f_1f74,
        5_619_416_107_715_600_244,
        1.15,
    );
}

/// A search whose target changes phase between its windows at k = 0 and its probes chooses
/// from its windows before the change: random.md's run 274 (tiny, four tenants). A
/// tenant's stream ended one window into its probe of k = 116: its LLC references per
/// kilo-instruction fell from 291 to 177, and the probes' IPC 0.064 against k = 0's 0.048
/// was the next phase's (where k = 0 ran at 0.28). The search kept 172 pages, which hid
/// that phase: the tenant ran at 0.818 of off.
#[test]
fn a_search_whose_program_changes_phase_chooses_from_the_windows_before() {
    assert_speedup_above(
        "tiny",
        0x4b73_7804_4e1d_1d05,
        5_436_821_135_052_053_765,
        0.95,
    );
}
