//! The page ledger: which of a target's pages are where, which are on their way, which could
//! not move, and how many more may move in this window.
//!
//! It knows pages only through migration and colour reports (what the platform confirmed),
//! never through what was asked: a page is confined once its move was reported done.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::messages::{Action, ColourReport, MigrationReport};
use crate::geometry::spread_over_colours;
use crate::{Colour, Errno, MissRateStack, Placement, VirtPage};

/// Pages that failed in one migration report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failures {
    pub count: usize,
    /// The errno of the first page that failed.
    pub errno: Errno,
}

/// The moves that make up one placement, as far as the window's budget allows.
pub(crate) struct Moves {
    /// Migrations to carry out (restores first).
    pub actions: Vec<Action>,
    /// Pages moved by `actions`.
    pub issued: usize,
    /// Once `actions` are done, the placement is complete.
    pub complete: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct PageLedger {
    /// Pages in the pollute buffer (confirmed by migration reports).
    confined: BTreeSet<VirtPage>,
    /// Ordinary pages found in the pollute colours (the allocator put them there); moved
    /// out once a search settles on a placement that confines anything, and by a probe
    /// when the profile saw them hit (reused data that the probe's confined pages would
    /// make miss; a squatter that only missed loses nothing there). Each goes to the
    /// ordinary colour that holds the fewest of the stack's reused pages, then of its
    /// pages, staying outside ([`spread_over_colours`]): a page sent to any ordinary
    /// colour can over-fill one.
    squatters: BTreeSet<VirtPage>,
    /// Confined pages that were squatters: confined where they were, without a move, and
    /// squatters again, where they are, when a placement lets them go (the operator's
    /// restore moves them out like every confined page). (Restored by a search, they
    /// would land on some ordinary colour for good, and the program would no longer have
    /// the layout it has without rocs: a tenant on ppc970fx ran 13% slower for the rest of
    /// its run after a fruitless probe's pages went back.)
    adopted: BTreeSet<VirtPage>,
    /// Confined pages that were named ([`super::Command::Confine`]): a subset of
    /// `confined` that no placement of the search moves.
    explicit: BTreeSet<VirtPage>,
    /// Named pages being moved to the buffer by the migration in flight.
    naming: HashSet<VirtPage>,
    /// Squatters we moved out; they go back when the search settles on k = 0.
    evicted: BTreeSet<VirtPage>,
    /// Evicted squatters being moved back by the migration in flight.
    rehoming: HashSet<VirtPage>,
    /// Pages that failed to move since the last profile; not tried again until then.
    failed: HashSet<VirtPage>,
    /// Migrations and queries asked for and not yet reported.
    in_flight: u32,
    /// A colour query is out.
    awaiting_colours: bool,
    /// Pages that may still move in this window.
    budget_left: u32,
    /// Probes move squatters out too: there are more of them than the buffer holds, so
    /// that they miss there whatever else is confined, and a probe that leaves them
    /// measures nothing.
    probes_evict: bool,
    /// The colours outside the pollute buffer (never none: the knobs keep one).
    ordinary: Vec<Colour>,
    /// The colour of each page's frame, as last reported (by a colour query or a move).
    colour_of: HashMap<VirtPage, Colour>,
}

impl PageLedger {
    pub fn new(page_budget: u32, ordinary: Vec<Colour>) -> Self {
        PageLedger {
            confined: BTreeSet::new(),
            squatters: BTreeSet::new(),
            adopted: BTreeSet::new(),
            explicit: BTreeSet::new(),
            naming: HashSet::new(),
            evicted: BTreeSet::new(),
            rehoming: HashSet::new(),
            failed: HashSet::new(),
            in_flight: 0,
            awaiting_colours: false,
            budget_left: page_budget,
            probes_evict: false,
            ordinary,
            colour_of: HashMap::new(),
        }
    }

    pub fn confined(&self) -> &BTreeSet<VirtPage> {
        &self.confined
    }

    pub fn squatters(&self) -> &BTreeSet<VirtPage> {
        &self.squatters
    }

    pub fn explicit(&self) -> &BTreeSet<VirtPage> {
        &self.explicit
    }

    /// Confine `pages` by name: those already in the buffer are only marked, the others
    /// move at once (outside the window's budget: the operator asked for exactly these),
    /// failed ones included.
    pub fn confine_explicitly(&mut self, pages: Vec<VirtPage>) -> Option<Action> {
        let mut moving = BTreeSet::new();
        for page in pages {
            if self.squatters.remove(&page) {
                self.confined.insert(page);
                self.adopted.insert(page);
            }
            if self.confined.contains(&page) {
                self.explicit.insert(page);
            } else {
                self.failed.remove(&page);
                moving.insert(page);
            }
        }
        if moving.is_empty() {
            return None;
        }
        self.naming.extend(moving.iter().copied());
        self.in_flight += 1;
        Some(Action::Migrate {
            pages: moving.into_iter().collect(),
            to: Placement::Pollute,
        })
    }

    /// Reports still to come (a window that ends with one outstanding has an unknown
    /// placement).
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// A new window: its page budget.
    pub fn new_window(&mut self, page_budget: u32) {
        self.budget_left = page_budget;
    }

    /// Pages that failed may be tried again (a new profile, or the operator wants every
    /// page back).
    pub fn forget_failures(&mut self) {
        self.failed.clear();
    }

    /// Whether probes move squatters out too, as settled placements do (see
    /// `probes_evict`).
    pub fn set_probes_evict(&mut self, evict: bool) {
        self.probes_evict = evict;
    }

    /// Ask the colour of `pages`' frames; the answer comes through [`PageLedger::on_colours`].
    pub fn ask_colours(&mut self, pages: Vec<VirtPage>) -> Action {
        self.in_flight += 1;
        self.awaiting_colours = true;
        Action::Query { pages }
    }

    /// A colour report: a page in the buffer that we did not put there is a squatter; a page
    /// outside the buffer is not confined, whatever we believed. Returns false for a report
    /// nobody waited for (it is ignored).
    pub fn on_colours(&mut self, report: &ColourReport, pollute: &[Colour]) -> bool {
        if !std::mem::take(&mut self.awaiting_colours) {
            return false;
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        for (page, result) in report.pages.iter().zip(&report.results) {
            if let Ok(colour) = result {
                self.colour_of.insert(*page, *colour);
                if !pollute.contains(colour) {
                    self.confined.remove(page);
                    self.explicit.remove(page);
                    self.squatters.remove(page);
                    self.adopted.remove(page);
                } else if !self.confined.contains(page) {
                    self.squatters.insert(*page);
                }
            }
        }
        true
    }

    /// The next batch (within the window's page budget) of the moves that make the
    /// confined set the top `k` of `stack`. Confined pages that `seen` says the current
    /// profile did not see stay where they are. `settled`: the placement is a search's
    /// choice, not a probe.
    pub fn moves_towards(
        &mut self,
        stack: &MissRateStack,
        k: usize,
        seen: &dyn Fn(&VirtPage) -> bool,
        settled: bool,
    ) -> Moves {
        let target: HashSet<VirtPage> = stack.top(k).filter(|p| !self.failed.contains(p)).collect();
        // Pages that were in the buffer before us are adopted where they are when they
        // belong there, and let go where they are when they do not (if this profile saw
        // them, as for the pages we moved).
        let adopt: Vec<VirtPage> = self
            .squatters
            .iter()
            .filter(|p| target.contains(p))
            .copied()
            .collect();
        for p in adopt {
            self.squatters.remove(&p);
            self.confined.insert(p);
            self.adopted.insert(p);
        }
        self.release_adopted(|p| !target.contains(p) && seen(p));
        // Settled at k > 0 the buffer is reserved: ordinary pages found in it move out.
        // At k = 0 nothing of ours is confined and the squatters we moved out go back, so
        // that k = 0 is "rocs not running" (the LLC keeps all of its colours for the
        // program).
        let evicted = self.evicted_by(stack, settled);
        let restore: Vec<VirtPage> = self
            .confined
            .iter()
            .filter(|p| seen(p))
            .chain(evicted.iter().filter(|_| k > 0))
            .filter(|p| !target.contains(p) && !self.failed.contains(p))
            .filter(|p| !self.explicit.contains(p))
            .copied()
            .collect();
        let rehome: Vec<VirtPage> = if k == 0 {
            self.evicted
                .iter()
                .filter(|p| !self.failed.contains(p))
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let pollute: Vec<VirtPage> = stack
            .top(k)
            .filter(|p| !self.confined.contains(p) && !self.failed.contains(p))
            .chain(rehome.iter().copied())
            .collect();
        self.rehoming = rehome.into_iter().collect();
        let needed = restore.len() + pollute.len();
        let budget = self.budget_left as usize;
        // Restores first: they make room in the pollute buffer and undo the last guess.
        let restore_now: Vec<VirtPage> = restore.into_iter().take(budget).collect();
        let pollute_now: Vec<VirtPage> = pollute
            .into_iter()
            .take(budget - restore_now.len())
            .collect();
        let issued = restore_now.len() + pollute_now.len();
        self.budget_left -= issued as u32;
        // Confined pages go back to the colours they came from, squatters to the colours
        // with room.
        let (squatters_out, restore_now): (Vec<VirtPage>, Vec<VirtPage>) = restore_now
            .into_iter()
            .partition(|p| self.squatters.contains(p));
        let reused_loads = stack.reused_loads();
        let reused: HashSet<VirtPage> = stack
            .entries()
            .iter()
            .filter(|e| reused_loads.is_some_and(|least| e.hits + e.misses >= least))
            .map(|e| e.page)
            .collect();
        let staying = stack
            .entries()
            .iter()
            .filter(|e| !target.contains(&e.page))
            .filter_map(|e| Some((*self.colour_of.get(&e.page)?, reused.contains(&e.page))));
        let leaving: Vec<(VirtPage, bool)> = squatters_out
            .iter()
            .map(|p| (*p, reused.contains(p)))
            .collect();
        let spread = spread_over_colours(&self.ordinary, staying, &leaving);
        let mut batches = vec![(restore_now, Placement::Restore)];
        batches.extend(
            spread
                .into_iter()
                .map(|(c, pages)| (pages, Placement::Ordinary(c))),
        );
        batches.push((pollute_now, Placement::Pollute));
        let mut actions = Vec::new();
        for (pages, to) in batches {
            if !pages.is_empty() {
                self.in_flight += 1;
                actions.push(Action::Migrate { pages, to });
            }
        }
        Moves {
            actions,
            issued,
            complete: issued == needed,
        }
    }

    /// The squatters a placement that confines anything moves out: a settled one all of
    /// them, a probe all when told to, else those the profile saw hit.
    fn evicted_by(&self, stack: &MissRateStack, settled: bool) -> BTreeSet<VirtPage> {
        if settled || self.probes_evict {
            return self.squatters.clone();
        }
        let hit: HashSet<VirtPage> = stack
            .entries()
            .iter()
            .filter(|e| e.hits > 0)
            .map(|e| e.page)
            .collect();
        self.squatters
            .iter()
            .filter(|p| hit.contains(p))
            .copied()
            .collect()
    }

    /// How many pages [`PageLedger::moves_towards`] would move, over all its batches, to
    /// place a probe (not settled) at `k > 0`: the same selection, changing nothing.
    /// Squatters the top `k` takes in are adopted where they are, and adopted pages it
    /// lets go stay where they are: neither moves.
    pub fn moves_needed(
        &self,
        stack: &MissRateStack,
        k: usize,
        seen: &dyn Fn(&VirtPage) -> bool,
    ) -> usize {
        let target: HashSet<VirtPage> = stack.top(k).filter(|p| !self.failed.contains(p)).collect();
        let restore = self
            .confined
            .iter()
            .filter(|p| seen(p) && !target.contains(p) && !self.adopted.contains(p))
            .filter(|p| !self.failed.contains(p) && !self.explicit.contains(p))
            .count();
        let pollute = target
            .iter()
            .filter(|p| !self.confined.contains(p) && !self.squatters.contains(p))
            .count();
        let evict = self
            .evicted_by(stack, false)
            .iter()
            .filter(|p| k > 0 && !target.contains(p) && !self.failed.contains(p))
            .count();
        restore + pollute + evict
    }

    /// A migration report: pages moved, and those that could not (not tried again until
    /// [`PageLedger::forget_failures`]). Returns the pages moved and the failures.
    pub fn on_migrated(&mut self, report: &MigrationReport) -> (u64, Option<Failures>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let mut moved = 0;
        let mut failures: Option<Failures> = None;
        for (i, &page) in report.pages.iter().enumerate() {
            // A missing result means the page was not moved.
            let result = report.results.get(i).copied().unwrap_or(Err(Errno::EINVAL));
            if let Ok(colour) = result {
                self.colour_of.insert(page, colour);
            }
            let named = self.naming.remove(&page);
            match (report.to, result) {
                (Placement::Pollute, Ok(_)) if named => {
                    self.confined.insert(page);
                    self.explicit.insert(page);
                    moved += 1;
                }
                (Placement::Pollute, Ok(_)) => {
                    if self.rehoming.remove(&page) {
                        self.evicted.remove(&page);
                        self.squatters.insert(page);
                    } else {
                        self.confined.insert(page);
                    }
                    moved += 1;
                }
                (Placement::Restore | Placement::Ordinary(_), Ok(_)) => {
                    self.confined.remove(&page);
                    self.explicit.remove(&page);
                    self.adopted.remove(&page);
                    if self.squatters.remove(&page) {
                        self.evicted.insert(page);
                    }
                    moved += 1;
                }
                (to, Err(errno)) => {
                    let f = failures.get_or_insert(Failures { count: 0, errno });
                    f.count += 1;
                    self.failed.insert(page);
                    // A page that no longer exists is in no buffer.
                    if to != Placement::Pollute && matches!(errno, Errno::ENOENT | Errno::EFAULT) {
                        self.confined.remove(&page);
                        self.explicit.remove(&page);
                        self.squatters.remove(&page);
                        self.adopted.remove(&page);
                    }
                }
            }
        }
        (moved, failures)
    }

    /// Adopted squatters that `which` selects (and that no operator named) are squatters
    /// again, where they are, without a move.
    fn release_adopted(&mut self, which: impl Fn(&VirtPage) -> bool) {
        let released: Vec<VirtPage> = self
            .adopted
            .iter()
            .filter(|p| which(p) && !self.explicit.contains(p))
            .copied()
            .collect();
        for p in released {
            self.adopted.remove(&p);
            self.confined.remove(&p);
            self.squatters.insert(p);
        }
    }

    /// Confined pages that may still be moved back.
    pub fn restorable(&self) -> impl Iterator<Item = VirtPage> + '_ {
        self.confined
            .iter()
            .copied()
            .filter(|p| !self.failed.contains(p))
    }

    /// The next batch of restores within the window's budget: `None` while a report is
    /// out, `Some(None)` when nothing is left to restore. (Asked for by the operator or at
    /// exit: every confined page leaves the pollute colours, adopted squatters too.)
    pub fn restore_batch(&mut self) -> Option<Option<Action>> {
        if self.in_flight > 0 {
            return None;
        }
        let pages: Vec<VirtPage> = self.restorable().take(self.budget_left as usize).collect();
        if pages.is_empty() {
            return Some(None);
        }
        self.budget_left -= pages.len() as u32;
        self.in_flight += 1;
        Some(Some(Action::Migrate {
            pages,
            to: Placement::Restore,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StackEntry;

    /// Pages 0..n, page 0 missing most.
    fn stack(n: u64) -> MissRateStack {
        MissRateStack::from_entries(
            (0..n)
                .map(|i| StackEntry {
                    page: VirtPage(i),
                    hits: i,
                    misses: n - i,
                    miss_rate: (n - i) as f64 / n as f64,
                })
                .collect(),
        )
    }

    /// Carry out every batch towards `k`, each page's move succeeding except `fail`'s.
    fn place(l: &mut PageLedger, s: &MissRateStack, k: usize, fail: &[u64]) -> usize {
        let mut moved = 0;
        loop {
            l.new_window(7);
            let moves = l.moves_towards(s, k, &|_| true, false);
            moved += moves.issued;
            for action in moves.actions {
                let Action::Migrate { pages, to } = action else {
                    continue;
                };
                let results = pages
                    .iter()
                    .map(|p| {
                        if fail.contains(&p.0) {
                            Err(Errno::EBUSY)
                        } else {
                            Ok(Colour(0))
                        }
                    })
                    .collect();
                l.on_migrated(&MigrationReport { to, pages, results });
            }
            if moves.complete {
                return moved;
            }
        }
    }

    #[test]
    fn the_moves_needed_are_the_moves_made() {
        let s = stack(40);
        let mut l = PageLedger::new(7, vec![Colour(1)]);
        // Page 3 cannot move; from 10 confined, up to 25, down to 4, up to 30.
        for (from, to) in [(0, 10), (10, 25), (25, 4), (4, 30)] {
            let needed = l.moves_needed(&s, to, &|_| true);
            let made = place(&mut l, &s, to, &[3]);
            assert_eq!(needed, made, "from {from} to {to}");
        }
    }

    /// A ledger over colours 0 (the buffer) to 3 that knows where pages 0 to 11 are, and
    /// a stack that puts the streams 3 and 4 on top: the squatters 0 (never hit), 1 and 2
    /// (hit) are in the buffer; colour 1 holds the stack's pages 5 to 7 (and 3 and 4),
    /// colour 2 pages 8 to 10, colour 3 page 11.
    fn with_squatters() -> (PageLedger, MissRateStack) {
        let entry = |page, hits, misses| StackEntry {
            page: VirtPage(page),
            hits,
            misses,
            miss_rate: misses as f64 / (hits + misses) as f64,
        };
        let mut entries = vec![entry(3, 0, 10), entry(4, 0, 10), entry(0, 0, 5)];
        entries.extend([entry(1, 5, 5), entry(2, 8, 2)]);
        entries.extend((5..12).map(|p| entry(p, 9, 1)));
        let s = MissRateStack::from_entries(entries);
        let mut l = PageLedger::new(100, vec![Colour(1), Colour(2), Colour(3)]);
        let colour = |p: u64| match p {
            0..=2 => 0,
            3..=7 => 1,
            8..=10 => 2,
            _ => 3,
        };
        let pages: Vec<VirtPage> = (0..12).map(VirtPage).collect();
        l.ask_colours(pages.clone());
        let results = pages.iter().map(|p| Ok(Colour(colour(p.0)))).collect();
        assert!(l.on_colours(&ColourReport { pages, results }, &[Colour(0)]));
        (l, s)
    }

    fn migrations(actions: &[Action]) -> Vec<(Placement, Vec<u64>)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Migrate { pages, to } => Some((*to, pages.iter().map(|p| p.0).collect())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn squatters_leave_for_the_colours_with_room_and_probes_move_only_those_that_hit() {
        // A probe of the two streams moves out the squatters that hit, to colour 3, which
        // holds one page staying outside where colours 1 and 2 hold three.
        let (mut l, s) = with_squatters();
        assert_eq!(l.moves_needed(&s, 2, &|_| true), 4);
        let moves = l.moves_towards(&s, 2, &|_| true, false);
        assert_eq!(moves.issued, 4);
        assert_eq!(
            migrations(&moves.actions),
            vec![
                (Placement::Ordinary(Colour(3)), vec![1, 2]),
                (Placement::Pollute, vec![3, 4]),
            ]
        );
        // Settled there, every squatter leaves: 0 and 1 fill colour 3 up to three pages,
        // and 2 goes to colour 1, the lowest of the three that then hold as many.
        let (mut l, s) = with_squatters();
        let moves = l.moves_towards(&s, 2, &|_| true, true);
        assert_eq!(
            migrations(&moves.actions),
            vec![
                (Placement::Ordinary(Colour(1)), vec![2]),
                (Placement::Ordinary(Colour(3)), vec![0, 1]),
                (Placement::Pollute, vec![3, 4]),
            ]
        );
    }
}
