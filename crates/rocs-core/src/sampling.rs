//! The sampling CPU budget: how a platform moves the sample period so that sampling costs
//! about what the plan allows ([`crate::SamplingPlan::cpu_budget`]). One rule for the real
//! sampler (rocs-linux) and the simulated PMU (rocs-sim), so that the simulator samples as
//! the real machine does.

/// The period to sample with next, given the period now, the period the plan asked for,
/// the share of a core sampling cost over the last budget window, and the budget.
///
/// Over budget, the period grows in proportion to the overshoot, with 25% to spare (so one
/// step lands under the budget rather than on it), and always by at least one event. Well
/// under budget (under a quarter of it), a period that was raised halves again, never below
/// the requested one: a burst of sampling cost must not leave the profile thin for good.
pub fn next_period(period: u64, requested: u64, share: f64, budget: f64) -> u64 {
    if budget <= 0.0 {
        return period;
    }
    if share > budget {
        ((period as f64 * share / budget * 1.25).ceil() as u64).max(period + 1)
    } else if share < budget / 4.0 && period > requested {
        (period / 2).max(requested)
    } else {
        period
    }
}

/// Samples a budget window must have taken before its cost may end it early.
pub const EARLY_CHECK_SAMPLES: u64 = 64;

/// Whether a sampler reconsiders its period now: when its budget window is over, or
/// earlier, once the window's first `EARLY_CHECK_SAMPLES` samples already cost more than
/// the budget. A sampler that waited for the window's end would pay several times its
/// budget at the start of every profile shorter than that window (a profile starts at the
/// requested period, whatever the target's rate of events).
pub fn period_check_due(window_over: bool, samples: u64, share: f64, budget: f64) -> bool {
    window_over || (samples >= EARLY_CHECK_SAMPLES && share > budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_budget_raises_with_room_to_spare() {
        // Twice the budget: twice the period, and a quarter more.
        assert_eq!(next_period(1000, 1000, 0.02, 0.01), 2500);
        // Barely over: still at least one more event.
        assert_eq!(next_period(3, 3, 0.0100001, 0.01), 4);
    }

    #[test]
    fn well_under_budget_lowers_back_towards_the_request() {
        assert_eq!(next_period(8000, 1000, 0.001, 0.01), 4000);
        assert_eq!(next_period(1500, 1000, 0.001, 0.01), 1000);
        // Never below the request, and no change near the budget.
        assert_eq!(next_period(1000, 1000, 0.0, 0.01), 1000);
        assert_eq!(next_period(8000, 1000, 0.005, 0.01), 8000);
    }

    #[test]
    fn a_window_over_budget_ends_early_once_it_has_enough_samples() {
        assert!(period_check_due(true, 0, 0.0, 0.01));
        assert!(period_check_due(false, EARLY_CHECK_SAMPLES, 0.02, 0.01));
        // Too few samples to tell, or within the budget: the window runs its course.
        assert!(!period_check_due(false, EARLY_CHECK_SAMPLES - 1, 0.5, 0.01));
        assert!(!period_check_due(false, 1000, 0.01, 0.01));
    }

    #[test]
    fn no_budget_no_change() {
        assert_eq!(next_period(1000, 1000, 0.5, 0.0), 1000);
    }
}
