//! The controller's search for k: the adaptive search against ROCS's linear Algorithm 1,
//! on noisy, flat and declining curves, and the budget and top-k invariants it keeps.

use crate::common::*;
use proptest::prelude::*;
use rocs_core::{EventKind, Knobs, SearchMode, State};

#[test]
fn adaptive_finds_the_best_k_on_a_noisy_unimodal_curve() {
    for seed in 1..6 {
        let mut d = Harness::new(
            knobs(SearchMode::Adaptive),
            World::new(art_like(), 0.01, seed),
        );
        d.run_until_steady(200);
        let k = d.confined_is_top_k();
        let rel = d.world.true_ipc() / d.world.base_ipc;
        assert!(
            rel >= 0.97 * best_possible(&art_like()),
            "seed {seed}: k = {k}, relative IPC {rel:.3}"
        );
        assert!((470..=520).contains(&k), "seed {seed}: k = {k}");
    }
}

#[test]
fn adaptive_never_ends_worse_than_k0_on_flat_or_declining_curves() {
    for seed in 1..8 {
        for gain in [0.0, -0.05, -0.3] {
            let mut d = Harness::new(
                knobs(SearchMode::Adaptive),
                World::new(flat(gain), 0.01, seed),
            );
            d.run_until_steady(200);
            let rel = d.world.true_ipc() / d.world.base_ipc;
            assert!(
                rel >= 0.999,
                "seed {seed}, gain {gain}: ended at relative IPC {rel:.4} with {} pages",
                d.ctrl.confined().len()
            );
        }
    }
}

#[test]
fn a_program_warming_up_is_not_taken_for_a_gain() {
    // Its IPC rises 4% a window whatever is confined (a real program's first windows:
    // redis-kv under lackey went from IPC 0.42 to 1.35 while the coarse pass confined ever
    // more of its pages). Nothing it confines gains.
    for seed in 1..6 {
        let mut world = World::new(flat(0.0), 0.01, seed);
        world.warming = 0.04;
        let mut d = Harness::new(knobs(SearchMode::Adaptive), world);
        d.run_until_steady(200);
        assert!(
            d.ctrl.confined().is_empty(),
            "seed {seed}: {} pages kept confined: {:?}",
            d.ctrl.confined().len(),
            d.ctrl
                .search()
                .map(|s| s.measurements().in_order().to_vec())
        );
    }
}

#[test]
fn a_program_whose_windows_scatter_more_than_it_could_gain_moves_no_page() {
    // A window's IPC scatters 30% (redis-kv and sqlite3 under lackey scatter 13-40%):
    // two windows a point can tell only gains above ~60% from noise, and the profile
    // promises ~23%. Searching would move hundreds of pages to learn nothing.
    for mode in [SearchMode::Adaptive] {
        for seed in 1..6 {
            let mut d = Harness::new(knobs(mode), World::new(flat(0.0), 0.3, seed));
            d.run_until_steady(200);
            assert_eq!(
                d.migrate_actions,
                0,
                "{mode} seed {seed}: pages were moved ({} confined)",
                d.ctrl.confined().len()
            );
            assert!(
                matches!(d.ctrl.state(), State::Steady),
                "{mode} seed {seed}"
            );
        }
    }
}

/// An adaptive search run to Steady where each page moved costs 2% of a window.
fn with_costly_moves(classes: Vec<Class>, seed: u64) -> Harness {
    let knobs = rocs_core::Knobs {
        migration_cost_cycles: 20_000_000,
        ..knobs(SearchMode::Adaptive)
    };
    let mut d = Harness::new(knobs, World::new(classes, 0.01, seed));
    d.run_until_steady(200);
    d
}

/// The `k` of each search window that measured a probe (k > 0), in order.
fn probes(d: &Harness) -> Vec<usize> {
    d.ctrl
        .history()
        .filter_map(|e| match e.kind {
            EventKind::SearchStep { k, .. } if k > 0 => Some(k),
            _ => None,
        })
        .collect()
}

/// The search ended early because of what it had cost.
fn ended_early(d: &Harness) -> bool {
    d.ctrl.history().any(|e| {
        matches!(&e.kind, EventKind::Transition { reason, .. } if reason.contains("ended early"))
    })
}

#[test]
fn a_search_that_has_cost_more_than_its_promise_could_win_back_stops() {
    // Each page moved costs 2% of a window, nothing gains, and the search starts a few
    // windows into the run: its first probe (227 pages, 4.5 windows) already costs more
    // than the promise (~23%) could win back over as many windows again. Without the stop
    // the coarse pass goes on to larger k.
    for seed in 1..6 {
        let d = with_costly_moves(flat(0.0), seed);
        let probes: std::collections::BTreeSet<usize> = probes(&d).into_iter().collect();
        assert!(
            ended_early(&d),
            "seed {seed}: not stopped, probes {probes:?}"
        );
        assert_eq!(probes.len(), 1, "seed {seed}: probes {probes:?}");
    }
}

#[test]
fn a_probe_whose_own_moves_would_cost_more_than_the_promise_could_win_back_is_not_made() {
    // Moves at 3 M cycles a page: the first probe (the stack's first region, 500 pages)
    // still fits what the promise could win back; the next one's moves would not, and the
    // search stops before making them rather than after (a whole stack moved there and
    // back costs windows a short run never wins back).
    for seed in [2, 3] {
        let knobs = rocs_core::Knobs {
            migration_cost_cycles: 3_000_000,
            ..knobs(SearchMode::Adaptive)
        };
        let mut d = Harness::new(knobs, World::new(flat(0.0), 0.01, seed));
        d.run_until_steady(300);
        let probes = probes(&d);
        assert!(ended_early(&d), "seed {seed}: probes {probes:?}");
        assert!(
            probes.iter().all(|&k| k == 500),
            "seed {seed}: probes {probes:?}"
        );
        let said = d.ctrl.history().any(|e| {
            matches!(&e.kind, EventKind::Transition { reason, .. }
                if reason.contains("next probe's moves would have added"))
        });
        assert!(
            said,
            "seed {seed}: the reason does not name the probe's moves"
        );
    }
}

#[test]
fn a_search_that_has_found_a_gain_is_not_stopped_by_its_cost() {
    // The same costly moves, but the stream's pages gain 25% when confined: the first
    // probe costs more than the promise could win back over the run so far, and shows a
    // gain. Its moves are the price of a placement the target keeps, so the search goes
    // on to the best k (cg-like on ppc970fx, stopped there, kept 1,869 of its ~2,900
    // pages: 1.069 of off where the search that went on reached 1.155).
    for seed in 1..6 {
        let d = with_costly_moves(art_like(), seed);
        let rel = d.world.true_ipc() / d.world.base_ipc;
        assert!(!ended_early(&d), "seed {seed}: the search ended early");
        assert!(
            rel >= 0.97 * best_possible(&art_like()),
            "seed {seed}: relative IPC {rel:.3}"
        );
    }
}

#[test]
fn adaptive_uses_fewer_windows_than_linear_and_is_not_worse() {
    let (mut lin_windows, mut ada_windows, mut lin_ipc, mut ada_ipc) = (0, 0, 0.0, 0.0);
    for seed in 1..6 {
        for (mode, windows, ipc) in [
            (SearchMode::Linear, &mut lin_windows, &mut lin_ipc),
            (SearchMode::Adaptive, &mut ada_windows, &mut ada_ipc),
        ] {
            let mut d = Harness::new(knobs(mode), World::new(art_like(), 0.01, seed));
            d.run_until_steady(200);
            *windows += d.ctrl.stats().search_windows;
            *ipc += d.world.true_ipc();
        }
    }
    assert!(
        ada_windows < lin_windows,
        "adaptive {ada_windows} windows, linear {lin_windows}"
    );
    assert!(
        ada_ipc >= lin_ipc * 0.99,
        "adaptive {ada_ipc}, linear {lin_ipc}"
    );
}

#[test]
fn linear_search_is_algorithm_1() {
    let k = Knobs {
        search: SearchMode::Linear,
        linear_step: Some(100),
        ..Knobs::default()
    };
    let mut d = Harness::new(k, World::new(art_like(), 0.0, 3));
    d.run_until_steady(200);
    let steps: Vec<usize> = d
        .ctrl
        .history()
        .filter_map(|e| match e.kind {
            EventKind::SearchStep { k, .. } => Some(k),
            _ => None,
        })
        .collect();
    let n = d.ctrl.stack().len();
    // Every step adds 100 pages from the top, until the whole stack is in; then the
    // excess is restored down to the best step.
    let expected: Vec<usize> = (1..)
        .map(|i| (i * 100).min(n))
        .take(n.div_ceil(100))
        .collect();
    assert_eq!(steps, expected);
    assert_eq!(d.confined_is_top_k(), 500);
    // Each step moves only the next 100 pages: no restore until the search ends.
    assert_eq!(d.ctrl.stats().pages_migrated as usize, n + (n - 500));
}

#[test]
fn a_search_whose_baseline_no_longer_misses_ends_at_k0_without_a_probe() {
    // The misses that started the profile were a cold start: by the time the search
    // measures k = 0 the target misses too little to be worth profiling. No probe, no move.
    let mut d = Harness::new(knobs(SearchMode::Adaptive), World::new(art_like(), 0.01, 2));
    while d.ctrl.state() != State::Search {
        d.window();
        assert!(d.ctrl.stats().windows < 50);
    }
    d.world.mpki = 0.2;
    d.run_until_steady(50);
    assert_eq!(d.ctrl.stats().search_windows, 2);
    assert_eq!(d.ctrl.stats().pages_migrated, 0);
    assert!(d.ctrl.confined().is_empty());
    let reason = d
        .ctrl
        .history()
        .filter_map(|e| match &e.kind {
            EventKind::Transition {
                to: State::Steady,
                reason,
                ..
            } => Some(reason.clone()),
            _ => None,
        })
        .last()
        .unwrap();
    assert!(reason.contains("missed too little"), "{reason}");
}

/// How a search starts, as the controller starts one (`Controller::start_search`,
/// `Controller::reverify`).
#[derive(Clone, Copy, Debug)]
enum Start {
    Plain,
    Recall(usize),
    ProbeFirst(usize),
    LoopFitFirst(usize),
    StreamingTop(usize),
    FitPoint(usize),
    OnlyTop(usize),
    Reverify(usize),
}

fn start() -> impl Strategy<Value = Start> {
    prop_oneof![
        Just(Start::Plain),
        (1usize..=400).prop_map(Start::Recall),
        (1usize..=400).prop_map(Start::ProbeFirst),
        (1usize..=400).prop_map(Start::LoopFitFirst),
        (1usize..=400).prop_map(Start::StreamingTop),
        (1usize..=400).prop_map(Start::FitPoint),
        (1usize..=400).prop_map(Start::OnlyTop),
        (1usize..=400).prop_map(Start::Reverify),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the start, the IPCs measured, and when the controller tells the search to
    /// conclude (its cost rule, a placement past its target's floor) or forgets windows of
    /// another phase and ends it: the search asks only for placements of its stack and
    /// ends, never panics (a search started at a recalled placement and concluded before
    /// k = 0 was measured once did).
    #[test]
    fn a_search_ends_with_a_placement_of_its_stack_whatever_it_is_told(
        how in start(),
        n in 1usize..=400,
        group in any::<bool>(),
        ipcs in prop::collection::vec(0.01f64..2.0, 64),
        conclude_at in prop::option::of(0usize..64),
        forget_at in prop::option::of(0usize..64),
    ) {
        let knobs = Knobs::default();
        let boundaries: Vec<usize> = [n / 4, n / 2, 3 * n / 4]
            .into_iter()
            .filter(|&b| b > 0 && b < n)
            .collect();
        let mut s = rocs_core::Search::new(&knobs, n, boundaries);
        match how {
            Start::Plain => {}
            Start::Recall(k) => s.recall(k.min(n), 1.0),
            Start::ProbeFirst(k) => s.probe_first(k.min(n)),
            Start::LoopFitFirst(k) => s.probe_loop_fit_first(k.min(n)),
            Start::StreamingTop(k) => s.probe_streaming_top(k.min(n)),
            Start::FitPoint(k) => s.probe_fit_point(k.min(n)),
            Start::OnlyTop(k) => s.only_top(k.min(n)),
            Start::Reverify(k) => {
                s.reverify(k.min(n));
            }
        }
        if group {
            s.judged_by_group();
        }
        let mut done = None;
        for step in 0..2000usize {
            if Some(step) == conclude_at {
                s.conclude();
            }
            if Some(step) == forget_at && step > 0 {
                // The program changed phase: the controller forgets the windows since and
                // ends the search with the best point before, if it has a gain there.
                s.forget_from(step as u64 / 2);
                done = Some(match s.measurements().best() {
                    Some((best, _)) if s.has_gain() => best,
                    _ => 0,
                });
                break;
            }
            match s.next_step() {
                rocs_core::Next::Measure(k) => {
                    prop_assert!(k <= n, "asked for k = {} of {}", k, n);
                    s.record_at(step as u64, k, ipcs[step % ipcs.len()]);
                }
                rocs_core::Next::Done(k) => {
                    done = Some(k);
                    break;
                }
            }
        }
        let k = done.expect("the search ends");
        prop_assert!(k <= n, "chose k = {} of {}", k, n);
    }

    /// Whatever the curve, noise and budget: no window moves more than the budget, the
    /// search ends, and the confined set is the top k of the stack.
    #[test]
    fn budget_and_top_k_hold(seed in 0u64..1000, budget in 1u32..600, noise in 0.0f64..0.03,
                             g0 in -0.3f64..0.4, g1 in -0.9f64..0.2, linear in any::<bool>()) {
        let mut classes = art_like();
        classes[0].gain = g0;
        classes[1].gain = g1;
        let k = Knobs {
            page_budget: budget,
            search: if linear { SearchMode::Linear } else { SearchMode::Adaptive },
            ..Knobs::default()
        };
        let mut d = Harness::new(k, World::new(classes, noise, seed));
        // At one page a window, a search of the 760 pages takes over a thousand windows,
        // and verifying its choice (out to k = 0 and back) as many again.
        d.run_until_steady(4000);
        prop_assert!(d.max_moved_in_a_window <= budget);
        d.confined_is_top_k();
    }
}

#[test]
fn a_search_that_ends_at_k0_says_its_probe_goes_back_not_that_pages_stay_confined() {
    // Confining hurts: the search ends at k = 0 while its last probe is still confined;
    // the restores are issued in the same step, so the words must not count those pages
    // as confined ("k = 0 ... (86 confined)" read as a contradiction).
    let mut d = Harness::new(knobs(SearchMode::Adaptive), World::new(flat(-0.3), 0.01, 5));
    d.run_until_steady(200);
    let reason = d
        .ctrl
        .history()
        .find_map(|e| match &e.kind {
            EventKind::Transition {
                to: State::Steady,
                reason,
                ..
            } => Some(reason.clone()),
            _ => None,
        })
        .unwrap();
    assert!(reason.starts_with("search chose k = 0 of "), "{reason}");
    assert!(
        reason.contains("of the last probe go back to the ordinary colours"),
        "{reason}"
    );
    assert!(!reason.contains("stay confined"), "{reason}");
    assert!(d.ctrl.confined().is_empty());
}

#[test]
fn no_probe_confines_more_of_the_stacks_hits_than_the_stack_has_misses() {
    // A stream carrying a fifth of the loads above reused data that hits on nine in ten
    // (random.md's run 5: a search confined the whole stack, the reused pages too, and its
    // target ran 80% slower for three windows). Confined, reused pages lose their hits to
    // the small buffer: past the point where the hits confined outnumber every miss the
    // stack has (here about 70 reused pages in), no placement can gain, and none is
    // probed.
    let classes = vec![
        Class {
            first: 1000,
            pages: 300,
            miss_rate: 0.95,
            share: 0.2,
            gain: 0.1,
        },
        Class {
            first: 2000,
            pages: 200,
            miss_rate: 0.1,
            share: 0.8,
            gain: -0.8,
        },
    ];
    for seed in 1..4 {
        let mut d = Harness::new(
            knobs(SearchMode::Adaptive),
            World::new(classes.clone(), 0.01, seed),
        );
        let mut most = 0;
        for _ in 0..200 {
            d.window();
            most = most.max(d.world.confined.len());
        }
        assert!(
            most <= 400,
            "seed {seed}: {most} of 500 pages confined at once"
        );
        let rel = d.world.true_ipc() / d.world.base_ipc;
        assert!(rel >= 1.05, "seed {seed}: relative IPC {rel:.3}");
    }
}

#[test]
fn a_long_stack_whose_top_only_streams_is_probed_there_and_kept_as_measured() {
    // 40,000 pages that only miss (zen4-like's art-like streams 31,826 of its 39,060) above
    // 8,000 reused pages that lose their hits when confined: a stack longer than a search
    // walks point by point. The search probes the stream's pages, nothing around them,
    // and keeps them as measured.
    let classes = vec![
        Class {
            first: 100_000,
            pages: 40_000,
            miss_rate: 1.0,
            share: 0.6,
            gain: 0.3,
        },
        Class {
            first: 200_000,
            pages: 8_000,
            miss_rate: 0.4,
            share: 0.4,
            gain: -0.6,
        },
    ];
    let mut world = World::new(classes, 0.01, 3);
    world.samples_per_window = 100_000;
    let mut d = Harness::new(knobs(SearchMode::Adaptive), world);
    d.run_until_steady(100);
    let streaming = d
        .ctrl
        .stack()
        .entries()
        .iter()
        .take_while(|e| e.miss_rate >= 0.9)
        .count();
    assert!(
        (39_000..=40_000).contains(&streaming),
        "the stream's pages at the top: {streaming}"
    );
    let probed = probes(&d);
    assert_eq!(probed.first(), Some(&streaming), "probes: {probed:?}");
    assert!(
        probed.iter().all(|&k| k == streaming),
        "probed beyond or around the streaming top: {probed:?}"
    );
    assert_eq!(d.confined_is_top_k(), streaming);
    assert_eq!(d.asked_to_move.len(), streaming, "pages moved");
}
