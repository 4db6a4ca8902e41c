//! The pages: failed migrations, ordinary pages found in the pollute colours, pages named
//! by the operator, and dry runs that move nothing.

use std::collections::HashSet;

use crate::common::*;
use rocs_core::{
    Command, Controller, Errno, EventKind, Knobs, Observation, SearchMode, State, VirtPage,
};

#[test]
fn failed_migrations_are_counted_and_not_confined() {
    let mut w = World::new(art_like(), 0.0, 11);
    w.unmovable = (1000..1500).filter(|p| p % 10 == 0).collect();
    let mut d = Harness::new(knobs(SearchMode::Adaptive), w);
    d.run_until_steady(200);
    assert!(d.ctrl.stats().migrations_failed >= 50);
    assert!(d
        .ctrl
        .confined()
        .iter()
        .all(|p| p.0 % 10 != 0 || p.0 >= 1500));
    let reported: HashSet<u64> = d.world.confined.clone();
    let ours: HashSet<u64> = d.ctrl.confined().iter().map(|p| p.0).collect();
    assert_eq!(
        reported, ours,
        "the controller's view matches the platform's"
    );
    assert!(d.ctrl.history().any(|e| matches!(
        e.kind,
        EventKind::MigrationFailed {
            errno: Errno::EBUSY,
            ..
        }
    )));
}

#[test]
fn ordinary_pages_found_in_the_pollute_colours_are_moved_out() {
    let mut w = World::new(art_like(), 0.0, 13);
    // The allocator put some of the reused region's pages in the pollute colour.
    w.confined = (1600..1620).collect();
    let base = w.true_ipc();
    let mut d = Harness::new(knobs(SearchMode::Adaptive), w);
    d.run_until_steady(200);
    assert!(d.world.confined.iter().all(|p| !(1600..1620).contains(p)));
    d.confined_is_top_k();
    assert!(d.world.true_ipc() > base);
}

#[test]
fn with_nothing_to_gain_pages_in_the_pollute_colours_end_where_the_allocator_put_them() {
    let mut w = World::new(flat(0.0), 0.01, 13);
    // Squatters at the top of the stack (probes of k past them confine them where they
    // are) and among the reused pages. Probes move out those the profile saw hit:
    // confined pages beside them would make them miss.
    let squatters: HashSet<u64> = (1000..1010).chain(1600..1620).collect();
    w.confined = squatters.clone();
    let mut d = Harness::new(knobs(SearchMode::Adaptive), w);
    d.run_until_steady(200);
    assert!(d.ctrl.stats().search_windows > 2, "the search probed");
    assert!(d.ctrl.confined().is_empty(), "a flat curve ends at k = 0");
    assert!(
        (1600..1620).all(|p| d.asked_to_move.contains(&p)),
        "probes moved the reused squatters out"
    );
    // k = 0 is "rocs not running": the program keeps its layout, squatters where the
    // allocator put them (those moved out are back in the buffer).
    assert_eq!(d.world.confined, squatters);
    assert_eq!(d.ctrl.squatters().len(), 30);
}

#[test]
fn named_pages_are_confined_at_once_kept_out_of_the_search_and_restored() {
    let mut d = Harness::new(knobs(SearchMode::Adaptive), World::new(art_like(), 0.0, 7));
    // The operator names 100 pages of the streamed region (and one twice) before any
    // profile: they move now, in one migration.
    let named: Vec<VirtPage> = (1000..1100).chain([1000]).map(VirtPage).collect();
    let before = d.migrate_actions;
    let a = d.ctrl.on(Observation::Command(Command::Confine {
        pages: named.clone(),
    }));
    d.handle(a);
    assert_eq!(d.migrate_actions, before + 1);
    assert_eq!(d.ctrl.explicit().len(), 100);
    assert!((1000..1100).all(|p| d.world.confined.contains(&p)));

    d.run_until_steady(300);
    // The search ranked the other pages only, and moved none of the named ones back.
    let stack: HashSet<VirtPage> = d.ctrl.stack().top(usize::MAX).collect();
    assert!(named.iter().all(|p| !stack.contains(p)));
    assert!(!stack.is_empty());
    assert_eq!(d.ctrl.explicit().len(), 100);
    assert!((1000..1100).all(|p| d.world.confined.contains(&p)));
    assert!(d.ctrl.confined().len() > 100, "the search confined more");

    // Naming pages that are already confined only marks them.
    let searched = *d.ctrl.confined().iter().find(|p| p.0 >= 1100).unwrap();
    let before = d.migrate_actions;
    let a = d.ctrl.on(Observation::Command(Command::Confine {
        pages: vec![searched],
    }));
    d.handle(a);
    assert_eq!(d.migrate_actions, before);
    assert!(d.ctrl.explicit().contains(&searched));

    // Restored like the others.
    let a = d.ctrl.on(Observation::Command(Command::RestoreAll));
    d.handle(a);
    for _ in 0..20 {
        d.window();
    }
    assert!(d.ctrl.confined().is_empty() && d.ctrl.explicit().is_empty());
    assert!(d.world.confined.is_empty());
}

#[test]
fn pages_named_during_a_search_leave_its_stack_and_the_search_starts_again() {
    let mut d = Harness::new(knobs(SearchMode::Adaptive), World::new(art_like(), 0.0, 7));
    // The search has moved pages for a probe when a policy names some of its top pages
    // (a mapping whose pages became present after the profile ended).
    for _ in 0..300 {
        d.window();
        if d.ctrl.state() == State::Search && !d.ctrl.confined().is_empty() {
            break;
        }
    }
    assert_eq!(d.ctrl.state(), State::Search);
    let named: Vec<VirtPage> = d.ctrl.stack().top(30).collect();
    let ranked = d.ctrl.stack().len();
    let a = d.ctrl.on(Observation::Command(Command::Confine {
        pages: named.clone(),
    }));
    d.handle(a);
    let in_stack = |d: &Harness| {
        let stack: HashSet<VirtPage> = d.ctrl.stack().top(usize::MAX).collect();
        named.iter().filter(|p| stack.contains(p)).count()
    };
    assert_eq!(in_stack(&d), 0, "named pages leave the stack at once");
    assert_eq!(d.ctrl.stack().len(), ranked - 30);
    assert!(d.ctrl.history().any(|e| matches!(
        &e.kind,
        EventKind::Transition { reason, .. } if reason.contains("starts again")
    )));

    d.run_until_steady(300);
    assert_eq!(in_stack(&d), 0);
    assert_eq!(d.ctrl.explicit().len(), 30);
    assert!(named.iter().all(|p| d.world.confined.contains(&p.0)));
    // The search's own placement is the top of the stack it ranks now.
    let searched: HashSet<VirtPage> = d
        .ctrl
        .confined()
        .iter()
        .filter(|p| !d.ctrl.explicit().contains(p))
        .copied()
        .collect();
    let top: HashSet<VirtPage> = d.ctrl.stack().top(searched.len()).collect();
    assert!(
        !searched.is_empty(),
        "art-like gains by confining its stream"
    );
    assert_eq!(searched, top);
}

#[test]
fn dry_run_never_migrates() {
    let k = Knobs {
        dry_run: true,
        ..Knobs::default()
    };
    let mut d = Harness::new(k, World::new(art_like(), 0.01, 5));
    d.run_until_steady(50);
    for _ in 0..10 {
        d.window();
    }
    assert_eq!(d.migrate_actions, 0);
    assert!(d.ctrl.stack().len() > 700);
}

#[test]
fn a_dry_run_never_confines_named_pages() {
    let k = Knobs {
        dry_run: true,
        ..Knobs::default()
    };
    let mut ctrl = Controller::new(PID, k, SHIFT, 16).unwrap();
    let a = ctrl.on(Observation::Command(Command::Confine {
        pages: vec![VirtPage(1)],
    }));
    assert!(a.is_empty());
    assert!(ctrl.explicit().is_empty());
}
