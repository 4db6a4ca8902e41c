//! What trying costs a target, and when it may try again.
//!
//! An attempt is a profile and the search after it. The controller counts what it costs
//! the target from what it knows without a clock: each profile window at most the
//! sampling budget it asked for (`sample_cpu_budget` of the window's cycles), each page
//! moved `migration_cost_cycles`, and each probe window what it ran slower than the
//! search's own k = 0 windows (a probe window the search forgets as another phase's is
//! counted no faster than them). An attempt that confines nothing is fruitless; what
//! fruitless attempts cost (their restores included) is kept, and no new attempt starts
//! until the target has run long enough for that cost to be a small share of its cycles
//! (`overhead_budget`), a share that halves with each fruitless attempt in a row. So a
//! target with nothing to gain pays for its first attempt and then for ever fewer, and
//! its overhead tends to zero, however often its phases seem to change. After an attempt
//! that found nothing, the next also waits until its own cost fits, and neither its
//! profile (past its minimum length) nor its search (past its first probe) spends beyond
//! the share: a program of short phases otherwise starts one as soon as the cost so far
//! fits, and spends past the budget with it. Only a profile that goes on to find a loop (see
//! `Controller::profile_window`) may spend up to the budget itself: what fruitless
//! attempts cost stays within it.
//!
//! The targets of one LLC share that budget: what each spent on fruitless attempts, the
//! attempts in a row and the cycles run are summed over them. Each would otherwise have a
//! first attempt of its own, and the attempts of two to four tenants, each new mix of them
//! giving each a reason to try again, cost more than any one's budget (on random.md's
//! shared runs, a budget per target left three profiles a run).

/// What targets have spent on fruitless attempts: one target's, or the sum over the other
/// targets of its LLC.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SharedSpending {
    /// Cycles lost by fruitless attempts since each target's last fruitful one.
    pub fruitless_cycles: f64,
    /// Fruitless attempts in a row.
    pub fruitless_attempts: u32,
    /// Cycles the targets ran.
    pub cycles_seen: u64,
}

impl SharedSpending {
    /// Whether `cycles` more, with what fruitless attempts cost already, stay within
    /// `share` of the cycles run.
    fn fits(&self, share: f64, cycles: f64) -> bool {
        self.fruitless_cycles + cycles <= share * self.cycles_seen as f64
    }
}

impl std::ops::Add for SharedSpending {
    type Output = SharedSpending;

    fn add(self, other: SharedSpending) -> SharedSpending {
        SharedSpending {
            fruitless_cycles: self.fruitless_cycles + other.fruitless_cycles,
            fruitless_attempts: self.fruitless_attempts + other.fruitless_attempts,
            cycles_seen: self.cycles_seen + other.cycles_seen,
        }
    }
}

impl std::iter::Sum for SharedSpending {
    fn sum<I: Iterator<Item = SharedSpending>>(iter: I) -> SharedSpending {
        iter.fold(SharedSpending::default(), |a, b| a + b)
    }
}

/// The cost of the attempt in progress and of the fruitless ones before it.
#[derive(Clone, Debug, Default)]
pub(super) struct Spending {
    /// Cycles of every window in which the target ran.
    cycles_seen: u64,
    /// The cycles the attempt in progress has cost so far.
    attempt: Option<f64>,
    /// Cycles lost by fruitless attempts since the last fruitful one.
    fruitless_cycles: f64,
    /// Fruitless attempts in a row.
    fruitless_attempts: u32,
    /// What the last attempt cost, its restores included, while it may be resumed: it was
    /// fruitless, and no attempt has started since.
    resumable: Option<f64>,
    /// What the last attempt cost, its restores included, if it ended having found nothing
    /// to confine (not abandoned: see [`Spending::abandon`]) under the mix of targets
    /// running now, and no attempt has been fruitful since.
    found_nothing: Option<f64>,
}

impl Spending {
    /// A window in which the target ran `cycles`.
    pub fn window(&mut self, cycles: u64) {
        self.cycles_seen += cycles;
    }

    /// An attempt starts.
    pub fn start(&mut self) {
        self.attempt = Some(0.0);
        self.resumable = None;
    }

    /// The last attempt, fruitless so far, goes on (if there is one to resume): what it
    /// cost is its own again, not a fruitless attempt's.
    pub fn resume(&mut self) {
        if let Some(cost) = self.resumable.take() {
            self.fruitless_cycles = (self.fruitless_cycles - cost).max(0.0);
            self.fruitless_attempts = self.fruitless_attempts.saturating_sub(1);
            self.attempt = Some(cost);
        }
    }

    /// Whether the last attempt, resumed, could spend `next` more cycles within what
    /// `gain` (a relative gain) could win back over as many cycles again as the target
    /// has run (see [`Spending::over_what_it_could_win`]).
    pub fn could_resume(&self, gain: f64, next: f64) -> bool {
        self.resumable
            .is_some_and(|cost| cost + next <= gain * self.cycles_seen as f64)
    }

    /// The attempt in progress cost `cycles` (a profile window's sampling, a probe window
    /// slower than k = 0; negative for a probe faster than k = 0). Pages moved go through
    /// [`Spending::moved`].
    pub fn spent(&mut self, cycles: f64) {
        if let Some(cost) = self.attempt.as_mut() {
            *cost += cycles;
        }
    }

    /// Pages were moved at `cycles` in all: part of the attempt in progress, or, after a
    /// fruitless one, its restores.
    pub fn moved(&mut self, cycles: f64) {
        match self.attempt.as_mut() {
            Some(cost) => *cost += cycles,
            None if self.fruitless_attempts > 0 => {
                self.fruitless_cycles += cycles;
                if let Some(cost) = self.resumable.as_mut() {
                    *cost += cycles;
                }
                if let Some(cost) = self.found_nothing.as_mut() {
                    *cost += cycles;
                }
            }
            None => {}
        }
    }

    /// The attempt ended; `fruitful`: it confined something.
    pub fn end(&mut self, fruitful: bool) {
        if let Some(cost) = self.attempt {
            self.found_nothing = (!fruitful).then_some(cost.max(0.0));
        }
        self.close(fruitful);
    }

    /// The attempt was abandoned before it could judge (the targets sharing the LLC
    /// changed, the program changed phase under its search): it cost as a fruitless one
    /// does, but the target has not learnt that there is nothing to win.
    pub fn abandon(&mut self) {
        self.close(false);
    }

    /// The targets sharing the LLC changed: what an attempt found nothing in was another
    /// mix, and the next is no retry of it.
    pub fn new_mix(&mut self) {
        self.found_nothing = None;
    }

    /// What the next attempt is counted to cost before it may start, its cheapest form
    /// costing `cycles` (see [`Spending::affords_attempt`]): `None` unless an attempt of
    /// this target's found nothing under the mix running now.
    pub fn next_attempt_cost(&self, cycles: f64) -> Option<f64> {
        self.found_nothing.map(|last| last.max(cycles))
    }

    fn close(&mut self, fruitful: bool) {
        let Some(cost) = self.attempt.take() else {
            return;
        };
        if fruitful {
            self.fruitless_cycles = 0.0;
            self.fruitless_attempts = 0;
            self.resumable = None;
        } else {
            // Probes that measured faster than k = 0 were noise, not a gain to bank: an
            // attempt costs nothing at least, never less.
            self.fruitless_cycles += cost.max(0.0);
            self.fruitless_attempts += 1;
            self.resumable = Some(cost.max(0.0));
        }
    }

    /// What this target spent on fruitless attempts, for its sharers' budget.
    pub fn shared(&self) -> SharedSpending {
        SharedSpending {
            fruitless_cycles: self.fruitless_cycles,
            fruitless_attempts: self.fruitless_attempts,
            cycles_seen: self.cycles_seen,
        }
    }

    /// Whether an attempt that may cost `cycles` fits in `budget` now, with what fruitless
    /// attempts of the target and its `sharers` have cost already.
    pub fn affords(&self, budget: f64, cycles: f64, sharers: SharedSpending) -> bool {
        let all = self.shared() + sharers;
        all.fits(share(budget, &all), cycles)
    }

    /// Whether an attempt whose cheapest form costs `cycles` may start now. The first
    /// attempt on the LLC is free. After an attempt of this target's that found nothing,
    /// the next starts only once what fruitless attempts cost and the next's own cost fit
    /// in the share [`Spending::affords`] allows, that cost being what the last attempt
    /// cost or the cheapest form, whichever is more: starting on the cost so far alone let
    /// bzip2's third attempt start as soon as the first two fit, and its real trace on
    /// ppc970fx lost 1.2% to the three. Otherwise (its sharers' attempts, or its own that
    /// were abandoned) the cost so far must fit: the target has not learnt that it has
    /// nothing to win, and counting its next attempt as well delayed it past the phases and
    /// mixes it could win in (random.md's shared runs at the machine's costs: geomean
    /// -0.4%).
    pub fn affords_attempt(&self, budget: f64, cycles: f64, sharers: SharedSpending) -> bool {
        let all = self.shared() + sharers;
        let next = self.next_attempt_cost(cycles).unwrap_or(0.0);
        all.fruitless_attempts == 0 || all.fits(share(budget, &all), next)
    }

    /// Whether the attempt in progress, a retry after one that found nothing, may spend
    /// `next` more cycles: what fruitless attempts cost and its own cost so far with them
    /// fit in the share [`Spending::affords`] allows. Any other attempt may.
    pub fn retry_affords(&self, budget: f64, next: f64, sharers: SharedSpending) -> bool {
        let all = self.shared() + sharers;
        let spent = self.attempt_cost();
        self.found_nothing.is_none() || all.fits(share(budget, &all), spent + next)
    }

    /// The cycles a retry after an attempt that found nothing may still spend within the
    /// share [`Spending::affords`] allows (none if it is past it); `None` for any other
    /// attempt.
    pub fn retry_room(&self, budget: f64, sharers: SharedSpending) -> Option<f64> {
        self.found_nothing?;
        let all = self.shared() + sharers;
        let allowed = share(budget, &all) * all.cycles_seen as f64;
        Some((allowed - all.fruitless_cycles - self.attempt_cost()).max(0.0))
    }

    /// What the attempt in progress has cost so far (nothing if none is).
    pub fn attempt_cost(&self) -> f64 {
        self.attempt.unwrap_or(0.0)
    }

    /// Whether `cycles` more fit in `budget` itself, not halved for the fruitless attempts
    /// in a row: what all fruitless attempts cost stays within `budget` of the cycles run.
    pub fn affords_unhalved(&self, budget: f64, cycles: f64, sharers: SharedSpending) -> bool {
        (self.shared() + sharers).fits(budget, cycles)
    }

    /// What the attempt in progress will have cost once it spends `next` more cycles, if
    /// that is more than `gain` (a relative gain) could win back over as many cycles again
    /// as the target has run. The target's future is unknown; the past is the estimate
    /// that neither favours a long-lived target nor one about to end.
    pub fn over_what_it_could_win(&self, gain: f64, next: f64) -> Option<f64> {
        let cost = self.attempt? + next;
        (cost > gain * self.cycles_seen as f64).then_some(cost)
    }

    /// `cycles` as a share of the cycles the target and its `sharers` ran.
    pub fn share_of(&self, cycles: f64, sharers: SharedSpending) -> f64 {
        cycles / (self.shared() + sharers).cycles_seen.max(1) as f64
    }

    /// What fruitless attempts of the target and its `sharers` have cost, as a share of
    /// the cycles they ran, and the share allowed now (for the reasons the controller
    /// gives).
    pub fn shares(&self, budget: f64, sharers: SharedSpending) -> (f64, f64) {
        let all = self.shared() + sharers;
        let seen = all.cycles_seen.max(1) as f64;
        (all.fruitless_cycles / seen, share(budget, &all))
    }
}

/// The share of their cycles targets may spend on attempts now: `budget`, halved for each
/// fruitless attempt in a row after the first.
fn share(budget: f64, spent: &SharedSpending) -> f64 {
    let halvings = spent.fruitless_attempts.saturating_sub(1).min(30);
    budget / f64::from(1u32 << halvings)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: SharedSpending = SharedSpending {
        fruitless_cycles: 0.0,
        fruitless_attempts: 0,
        cycles_seen: 0,
    };

    #[test]
    fn a_fruitless_attempt_waits_for_its_cost_to_be_a_budget_share_and_the_share_halves() {
        let mut s = Spending::default();
        s.window(3000);
        assert!(s.affords(0.01, 0.0, NONE), "the first attempt is free");
        s.start();
        s.spent(500.0);
        s.moved(400.0);
        s.spent(-200.0);
        s.end(false);
        // Its restores, after it ended, count too: 1000 cycles lost in all.
        s.moved(300.0);
        assert_eq!(s.shares(0.01, NONE).0, 1000.0 / 3000.0);
        // Wait until 1000 cycles are 1% of the cycles seen.
        s.window(96_000);
        assert!(!s.affords(0.01, 0.0, NONE));
        s.window(1000);
        assert!(s.affords(0.01, 0.0, NONE));
        // A second fruitless attempt: 100 more cycles, and the share halves.
        s.start();
        s.spent(100.0);
        s.end(false);
        assert_eq!(s.shares(0.01, NONE).1, 0.005);
        s.window(119_000);
        assert!(!s.affords(0.01, 0.0, NONE));
        s.window(1000);
        assert!(s.affords(0.01, 0.0, NONE), "{:?}", s.shares(0.01, NONE));
        // A fruitful attempt forgives the fruitless ones, and its moves cost nothing more.
        s.start();
        s.spent(1e9);
        s.end(true);
        s.moved(1e9);
        assert!(s.affords(0.01, 0.0, NONE));
        assert_eq!(s.shares(0.01, NONE), (0.0, 0.01));
    }

    #[test]
    fn after_an_attempt_that_found_nothing_the_next_starts_only_if_its_cost_fits() {
        let mut s = Spending::default();
        s.window(100_000);
        assert!(
            s.affords_attempt(0.01, 1e9, NONE),
            "the first attempt is free, whatever it costs"
        );
        s.start();
        s.spent(500.0);
        s.end(false);
        // 500 cycles lost of 100,000: 0.5%, within 1% on their own, but not with a
        // profile that would cost 600 more.
        assert!(s.affords(0.01, 0.0, NONE));
        assert!(!s.affords_attempt(0.01, 600.0, NONE));
        assert!(s.affords_attempt(0.01, 500.0, NONE));
        // Its restores, made after it ended, are part of what it cost: 600 cycles lost and
        // 600 more need 120,000 cycles run (bzip2's real trace on ppc970fx, counted
        // without them, started a second attempt at 1.0% and lost 1.1% in all).
        let mut restored = s.clone();
        restored.moved(100.0);
        restored.window(10_000);
        assert!(!restored.affords_attempt(0.01, 0.0, NONE));
        restored.window(10_000);
        assert!(restored.affords_attempt(0.01, 0.0, NONE));
        // What the attempt that found nothing cost is the estimate, if more.
        let mut dear = s.clone();
        dear.start();
        dear.spent(200.0);
        dear.end(false);
        dear.window(200_000);
        // 700 cycles of 300,000, at the share halved for two attempts in a row (1,500).
        assert!(dear.affords_attempt(0.01, 0.0, NONE));
        assert!(!dear.affords_attempt(0.01, 801.0, NONE));
        assert!(dear.affords_attempt(0.01, 800.0, NONE));
        // Once a retry has started, it may spend only what keeps within that share.
        let mut retry = s.clone();
        retry.start();
        retry.spent(300.0);
        assert!(retry.retry_affords(0.01, 200.0, NONE));
        assert!(!retry.retry_affords(0.01, 201.0, NONE));
        // Nor after a change of the LLC's sharers.
        let mut m = s.clone();
        m.new_mix();
        assert!(m.affords_attempt(0.01, 600.0, NONE));
        // An abandoned attempt costs as much, but is not a reason to wait for the next.
        let mut a = Spending::default();
        a.window(100_000);
        a.start();
        a.spent(500.0);
        a.abandon();
        assert_eq!(a.shares(0.01, NONE).0, 0.005);
        assert!(a.affords_attempt(0.01, 600.0, NONE));
        a.start();
        assert!(a.retry_affords(0.01, 1e9, NONE), "nor is it a retry");
        // A target that has not tried yet waits only for its sharers' fruitless attempts
        // to fit in 1% of the 200,000 cycles the two ran, whatever its own would cost.
        let fresh = Spending {
            cycles_seen: 100_000,
            ..Spending::default()
        };
        let sharer = SharedSpending {
            fruitless_cycles: 1_000.0,
            fruitless_attempts: 1,
            cycles_seen: 100_000,
        };
        assert!(fresh.affords_attempt(0.01, 1e9, sharer));
        let spent = SharedSpending {
            fruitless_cycles: 2_001.0,
            ..sharer
        };
        assert!(!fresh.affords_attempt(0.01, 0.0, spent));
    }

    #[test]
    fn a_retry_has_room_for_what_keeps_fruitless_attempts_within_the_share() {
        let mut s = Spending::default();
        s.window(100_000);
        assert_eq!(
            s.retry_room(0.01, NONE),
            None,
            "no attempt found nothing yet"
        );
        s.start();
        s.spent(500.0);
        s.end(false);
        // 1% of 100,000 cycles, less the 500 the first attempt cost.
        assert_eq!(s.retry_room(0.01, NONE), Some(500.0));
        s.start();
        s.spent(300.0);
        assert_eq!(s.retry_room(0.01, NONE), Some(200.0));
        s.spent(300.0);
        assert_eq!(s.retry_room(0.01, NONE), Some(0.0), "past the share: none");
        s.new_mix();
        assert_eq!(s.retry_room(0.01, NONE), None, "another mix: no retry");
    }

    #[test]
    fn an_attempt_whose_probes_ran_faster_costs_nothing() {
        let mut s = Spending::default();
        s.window(1000);
        s.start();
        s.spent(-500.0);
        s.end(false);
        assert_eq!(s.shares(0.01, NONE).0, 0.0);
        assert!(s.affords(0.01, 0.0, NONE));
    }

    #[test]
    fn the_targets_of_an_llc_share_one_budget() {
        // A target that has not tried yet, beside one whose fruitless attempt cost 2% of
        // the 100,000 cycles it ran: the LLC has spent 2,000 of 200,000 cycles, 1%.
        let mut s = Spending::default();
        s.window(100_000);
        let sharer = SharedSpending {
            fruitless_cycles: 2_000.0,
            fruitless_attempts: 1,
            cycles_seen: 100_000,
        };
        assert!(
            s.affords(0.01, 0.0, NONE),
            "alone, its first attempt is free"
        );
        assert!(s.affords(0.01, 0.0, sharer));
        assert_eq!(s.shares(0.01, sharer), (0.01, 0.01));
        // A second fruitless attempt among them halves the share for both.
        let twice = SharedSpending {
            fruitless_attempts: 2,
            ..sharer
        };
        assert!(!s.affords(0.01, 0.0, twice));
        // It waits until the LLC's cycles make 2,000 half a percent.
        s.window(200_000);
        assert!(s.affords(0.01, 0.0, twice));
        // What a probe would cost counts as well.
        assert!(!s.affords(0.01, 1.0, twice));
    }
}
