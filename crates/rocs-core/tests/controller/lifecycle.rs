//! The controller's life: targets that miss too little stay in Observe, every transition
//! has a reason, operator commands and exit, and the same inputs give the same decisions.

use crate::common::*;
use rocs_core::{Action, Command, CounterDelta, EventKind, Knobs, Observation, SearchMode, State};

#[test]
fn low_miss_targets_stay_in_observe() {
    let mut w = World::new(art_like(), 0.0, 1);
    w.mpki = 0.2;
    let mut d = Harness::new(knobs(SearchMode::Adaptive), w);
    for _ in 0..10 {
        d.window();
    }
    assert_eq!(d.ctrl.state(), State::Observe);
    assert!(!d.world.sampling);
}

#[test]
fn every_transition_has_a_reason() {
    let mut d = Harness::new(knobs(SearchMode::Adaptive), World::new(art_like(), 0.01, 9));
    d.run_until_steady(200);
    let t: Vec<(State, State)> = d
        .ctrl
        .history()
        .filter_map(|e| match &e.kind {
            EventKind::Transition { from, to, reason } => {
                assert!(!reason.is_empty());
                Some((*from, *to))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        t,
        vec![
            (State::Observe, State::Profile),
            (State::Profile, State::Search),
            (State::Search, State::Steady)
        ]
    );
    let s = d.ctrl.stats();
    assert_eq!(s.samples, 2 * 4000);
    assert_eq!(s.profiles, 1);
    // History serializes for the control socket.
    let e = d.ctrl.history().next().unwrap();
    let json = format!("{e:?}");
    assert!(json.contains("Transition"));
}

#[test]
fn operator_commands_and_exit() {
    let k = Knobs {
        page_budget: 128,
        ..Knobs::default()
    };
    let mut d = Harness::new(k, World::new(art_like(), 0.0, 5));
    d.run_until_steady(300);
    assert!(d.max_moved_in_a_window <= 128);
    let n = d.ctrl.confined().len();
    assert!(n > 400);
    let a = d.ctrl.on(Observation::Command(Command::RestoreAll));
    d.handle(a);
    assert_eq!(d.ctrl.state(), State::Paused);
    // Restoring spreads over windows at 128 pages each.
    let mut windows = 0;
    while !d.ctrl.confined().is_empty() {
        d.window();
        windows += 1;
        assert!(windows < 100);
    }
    assert_eq!(windows, n.div_ceil(128) - 1);
    assert!(d.world.confined.is_empty());
    assert!(d.ctrl.history().any(|e| e.kind == EventKind::Restored));
    d.window();
    assert_eq!(d.ctrl.state(), State::Paused);
    let a = d.ctrl.on(Observation::Command(Command::Resume));
    d.handle(a);
    assert_eq!(d.ctrl.state(), State::Observe);
    d.window();
    assert_eq!(d.ctrl.state(), State::Profile);
    assert!(d.world.sampling);
    let a = d.ctrl.on(Observation::Command(Command::Pause));
    assert!(a.contains(&Action::StopSampling));
    d.handle(a);
    let a = d.ctrl.on(Observation::Command(Command::Resume));
    d.handle(a);
    d.window();
    assert!(d.world.sampling);
    let a = d.ctrl.on(Observation::TargetExited);
    assert!(a.contains(&Action::StopSampling));
    assert_eq!(d.ctrl.state(), State::Exited);
    assert!(d
        .ctrl
        .on(Observation::Window(CounterDelta::default()))
        .is_empty());
}

#[test]
fn the_same_inputs_give_the_same_decisions() {
    let run = || {
        let mut d = Harness::new(
            knobs(SearchMode::Adaptive),
            World::new(art_like(), 0.02, 77),
        );
        d.run_until_steady(200);
        (
            d.ctrl.history().cloned().collect::<Vec<_>>(),
            d.ctrl.confined().clone(),
        )
    };
    assert_eq!(run(), run());
}
