//! The search for `k`: how many pages from the top of the stack to confine.
//!
//! A search is sans-IO: it proposes the next `k` to measure ([`Search::next`]), is told the
//! IPC of a window at that `k` ([`Search::record`]), and finally says which `k` to keep.
//! Moving pages and measuring windows is the controller's job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::knobs::{Knobs, SearchMode};

mod adaptive;

use adaptive::AdaptiveSearch;

/// What the search wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Next {
    /// Confine the top `k` pages and measure a window.
    Measure(usize),
    /// The search is over: keep the top `k` pages confined.
    Done(usize),
}

/// How a search checks that a gain it measured is its placement's and not a drift of the
/// program's own pace over the windows between k = 0's and the best point's, and why it
/// checks that way: a check by balanced blocks moves every page of `k` to k = 0 and back
/// once a block, which on a large placement takes dozens of windows.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum GainCheck {
    /// `at`, a point near `k` first measured long before, is measured again: how far IPC
    /// moved there over that time bounds the drift. `gain`: `k`'s lead over k = 0 beyond
    /// noise; `apart`: windows between k = 0's and `k`'s.
    Revisit {
        k: usize,
        at: usize,
        gain: f64,
        apart: f64,
    },
    /// Windows at `k` and k = 0 in balanced blocks.
    Blocks { k: usize, why: BlocksWhy },
}

/// Why [`GainCheck::Blocks`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum BlocksWhy {
    /// IPC rose or fell by itself before the search, and that trend carried forward to
    /// `k`'s windows reaches `k`'s IPC.
    Trend,
    /// Too few windows before the search to say how fast IPC drifts by itself.
    DriftUnknown,
    /// A drift as fast as the one before the search (`drift` IPC a window, at most) over
    /// the `apart` windows between k = 0's and `k`'s could explain `gain`, `k`'s lead
    /// beyond noise; and no point first measured long enough before lies within `reach`
    /// pages of `k` to be measured again instead.
    Drift {
        gain: f64,
        drift: f64,
        apart: f64,
        reach: usize,
    },
    /// `at`, measured again, moved `drift` IPC a window (noise included): over `apart`
    /// windows enough to explain `gain`.
    Revisited {
        at: usize,
        gain: f64,
        drift: f64,
        apart: f64,
    },
}

/// Windows measured at each `k`, and what they say.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    /// Every window in the order measured.
    log: Vec<Measured>,
}

/// One measured window: when, at which `k`, its IPC and, where known, the target's LLC
/// misses per 1000 instructions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The window's number (any clock that counts windows, settle windows included).
    pub at: u64,
    pub k: usize,
    pub ipc: f64,
    #[serde(default)]
    pub mpki: Option<f64>,
}

/// Mean and sum of squared deviations of `v`.
pub(crate) fn moments(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    (m, v.iter().map(|x| (x - m) * (x - m)).sum())
}

/// The smallest relative IPC gain a search that measures `repeats` windows a point can
/// tell from noise, for a target whose windows at one placement scatter as `groups` do:
/// the margin the adaptive search puts between two points, `z` standard errors of their
/// difference with `z` wider while the scatter rests on few windows, over the mean IPC.
/// Each group is scattered about its own mean (a profile's windows pay for sampling, a
/// search's do not: that step is not noise); a drift in time counts as scatter, since a
/// search measures its points one after another. `None`: under two degrees of freedom.
pub fn resolvable_gain(groups: &[&[f64]], repeats: u32) -> Option<f64> {
    let groups = groups.iter().filter(|g| !g.is_empty());
    let (mut ss, mut dof, mut last_mean) = (0.0, 0usize, 0.0);
    for g in groups {
        let (mean, s) = moments(g);
        ss += s;
        dof += g.len() - 1;
        last_mean = mean;
    }
    if dof < 2 || last_mean <= 0.0 {
        return None;
    }
    let z = 2.0 + 4.0 / dof as f64;
    let se = (ss / dof as f64 * 2.0 / f64::from(repeats.max(1))).sqrt();
    Some(z * se / last_mean)
}

impl Measurements {
    /// One window's IPC at `k`, and its MPKI where known; `at` numbers the window (windows
    /// not measured count too).
    pub fn record(&mut self, at: u64, k: usize, ipc: f64, mpki: Option<f64>) {
        self.log.push(Measured { at, k, ipc, mpki });
    }

    /// Forget the windows measured from window number `at` on.
    fn forget_from(&mut self, at: u64) {
        self.log.retain(|w| w.at < at);
    }

    /// Forget every window but the last `keep`; how many were forgotten.
    pub(crate) fn forget_all_but_last(&mut self, keep: usize) -> usize {
        let forget = self.log.len().saturating_sub(keep);
        self.log.drain(..forget);
        forget
    }

    /// Every window in the order measured.
    pub fn in_order(&self) -> &[Measured] {
        &self.log
    }

    /// The IPCs measured at each `k` (a search measures a few dozen windows at most).
    fn by_k(&self) -> BTreeMap<usize, Vec<f64>> {
        let mut by_k: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for w in &self.log {
            by_k.entry(w.k).or_default().push(w.ipc);
        }
        by_k
    }

    fn at(&self, k: usize) -> Vec<f64> {
        self.log
            .iter()
            .filter(|w| w.k == k)
            .map(|w| w.ipc)
            .collect()
    }

    /// Windows measured at `k`.
    pub fn count(&self, k: usize) -> usize {
        self.log.iter().filter(|w| w.k == k).count()
    }

    /// Mean IPC at `k`, if measured.
    pub fn mean(&self, k: usize) -> Option<f64> {
        let v = self.at(k);
        (!v.is_empty()).then(|| moments(&v).0)
    }

    /// Every measured `k` with its mean IPC and window count, by `k`.
    pub fn iter(&self) -> impl Iterator<Item = (usize, f64, usize)> {
        self.by_k()
            .into_iter()
            .map(|(k, v)| (k, moments(&v).0, v.len()))
    }

    /// Sample variance of one window's IPC at `k`; `None` before a repeat.
    pub fn variance(&self, k: usize) -> Option<f64> {
        let v = self.at(k);
        (v.len() > 1).then(|| moments(&v).1 / (v.len() - 1) as f64)
    }

    /// Pooled standard deviation of one window's IPC, from every `k` measured more than
    /// once, with its degrees of freedom; `None` before any repeat.
    pub fn noise(&self) -> Option<(f64, usize)> {
        let (mut ss, mut dof) = (0.0, 0);
        for v in self.by_k().values().filter(|v| v.len() > 1) {
            ss += moments(v).1;
            dof += v.len() - 1;
        }
        (dof > 0).then(|| ((ss / dof as f64).sqrt(), dof))
    }

    /// The best measured `k` by mean IPC (ties: the smaller `k`, fewer pages moved).
    pub fn best(&self) -> Option<(usize, f64)> {
        self.iter()
            .map(|(k, m, _)| (k, m))
            .fold(None, |best, (k, m)| match best {
                Some((_, bm)) if bm >= m => best,
                _ => Some((k, m)),
            })
    }
}

/// Linear search, ROCS Algorithm 1: confine `step` more pages per window, from the top of
/// the stack, while more than `min_pages` stack pages are left outside the pollute buffer;
/// keep the `k` with the best IPC (k = 0 is not a candidate, as in the paper).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinearSearch {
    n: usize,
    step: usize,
    min_pages: usize,
    /// Steps proposed so far.
    steps: usize,
}

impl LinearSearch {
    pub fn new(n: usize, step: usize, min_pages: usize) -> Self {
        LinearSearch {
            n,
            step: step.max(1),
            min_pages,
            steps: 0,
        }
    }

    fn next(&mut self, m: &Measurements) -> Next {
        // `index` of Algorithm 1: stack pages still outside the pollute buffer.
        let index = self.n.saturating_sub(self.steps * self.step);
        let k = self.steps * self.step;
        if self.steps > 0 && m.count(k.min(self.n)) == 0 {
            return Next::Measure(k.min(self.n));
        }
        if index > self.min_pages && k < self.n {
            self.steps += 1;
            return Next::Measure((self.steps * self.step).min(self.n));
        }
        // Restore the excess: keep the best measured k.
        Next::Done(m.best().map_or(0, |(k, _)| k))
    }
}

/// A search in progress, in either mode, with its measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Search {
    mode: SearchMode,
    linear: Option<LinearSearch>,
    adaptive: Option<AdaptiveSearch>,
    measurements: Measurements,
}

impl Search {
    /// A search over a stack of `n` pages. `boundaries` are stack positions where the miss
    /// rate changes, and any other position worth a probe (the controller's fit point).
    pub fn new(knobs: &Knobs, n: usize, boundaries: Vec<usize>) -> Self {
        let (linear, adaptive) = match knobs.search {
            SearchMode::Linear => {
                let step = knobs
                    .linear_step
                    .map(|s| s as usize)
                    .unwrap_or_else(|| n.div_ceil(knobs.linear_auto_steps.max(1) as usize));
                (
                    Some(LinearSearch::new(
                        n,
                        step.max(1),
                        knobs.linear_min_pages as usize,
                    )),
                    None,
                )
            }
            SearchMode::Adaptive => (
                None,
                Some(AdaptiveSearch::new(
                    n,
                    knobs.search_max_repeats as usize,
                    knobs.search_noise_floor,
                    boundaries,
                    knobs.page_budget as usize,
                )),
            ),
        };
        Search {
            mode: knobs.search,
            linear,
            adaptive,
            measurements: Measurements::default(),
        }
    }

    pub fn mode(&self) -> SearchMode {
        self.mode
    }

    /// The search records the score of targets sharing an LLC, not its target's IPC
    /// (adaptive search: confirm declines, compare by each candidate's own spread). The
    /// score's noise depends on `k`: while a streaming tenant is partly confined, the others
    /// gain only when its sweep is in the confined part, so one window's score depends on
    /// where the sweep was, a noise that the repeats at `k = 0` do not show.
    pub fn judged_by_group(&mut self) {
        if let Some(a) = self.adaptive.as_mut() {
            a.judge_by_group();
        }
    }

    /// Measure `k` first of the coarse points, and count it among the boundaries
    /// refinement snaps to: the top `k` pages are a placement worth trying in its own right
    /// (the pages that over-fill their colours), and fewer of them a placement that is not
    /// (a colour relieved of part of its excess still misses on all its pages). Adaptive
    /// search only.
    pub fn probe_first(&mut self, k: usize) {
        if let Some(a) = self.adaptive.as_mut() {
            a.probe_first(k);
        }
    }

    /// As [`Self::probe_first`], for a loop fit that the controller measures over a pass of
    /// its loop: where it is the best coarse point, the search confirms it without
    /// refining around it. Refinement's probes are measured a window each, and a window
    /// of a loop larger than the cache reads whichever part of the pass it caught: on
    /// random.md's run 69 at offset 2 they moved the kept point off the fit (0.998 -> 0.987
    /// of off with 64-window loop profiles; 1.003 confirmed). Adaptive search only.
    pub fn probe_loop_fit_first(&mut self, k: usize) {
        if let Some(a) = self.adaptive.as_mut() {
            a.probe_loop_fit_first(k);
        }
    }

    /// Every point is measured over a pass of the program's loop (the controller's rule for
    /// a stack that takes long to place): k = 0's windows then each read the whole loop,
    /// and two of them that ran alike (LLC misses and IPC, the last within 2% of the
    /// first's) say that the program has stopped warming, so the drift the profile's
    /// windows allowed is not the search's, and a gain beyond noise is kept without
    /// balanced blocks. The profile's windows are a poor measure of the search's drift
    /// where they ran with the prefetchers off (zen4-like's cg-like: three of them at half
    /// the search's IPC, one degree of freedom, left a drift bound of 0.00105 IPC a window
    /// that could explain its streaming top's 14% over the 9 windows between them; the
    /// balanced blocks moved 81,281 pages to k = 0 and back, about 2% of the run: 1.0671 of
    /// off, 1.0896 without them). Where k = 0's misses fall pass to pass, the LLC is still
    /// warming and the bound stands (neoverse-like's art-like: MPKI 16.20 then 13.91, and
    /// the blocks rightly chose k = 0). Adaptive search only.
    pub fn measured_over_passes(&mut self) {
        if let Some(a) = self.adaptive.as_mut() {
            a.measured_over_passes();
        }
    }

    /// Search only the top `k` pages of a stack too long to walk point by point, those
    /// that only stream (what confining is for: the pages below them hit, and confined
    /// they would lose their hits), measured over a pass of the program's loop and, where
    /// they beat k = 0, confirmed as measured. On zen4-like they are the oracle's point
    /// (art-like: 31,826 of 39,060 pages, the oracle's 31,719), which doubling from 4,096
    /// pages reached only after 16,384 had shown nothing (the gain shows once most of the
    /// stream is confined), and refining around it took 40 windows (1.2676 of off; probed
    /// alone, 1.3496). Probed first with the points above it still to measure, art-like on
    /// neoverse-like, whose oracle gains only while the LLC warms, went on to confine the
    /// whole stack (reused pages too: a third of its pace for three windows) and lost
    /// 2.3%. Adaptive search only.
    pub fn probe_streaming_top(&mut self, k: usize) {
        if let Some(a) = self.adaptive.as_mut() {
            a.probe_streaming_top(k);
        }
    }

    /// Count `k`, the point where a loop larger than the cache would fit, among the
    /// boundaries refinement snaps to, and measure it among the coarse points when those
    /// are the stack's regions and the two around it lie more than a quarter of the stack
    /// apart. Not a region itself: it must not tip a stack of many regions into doubling
    /// (zen4-like's art-like at full length: 1.302 -> 1.273 when it was one). Adaptive
    /// search only.
    pub fn probe_fit_point(&mut self, k: usize) {
        if let Some(a) = self.adaptive.as_mut() {
            a.probe_fit_point(k);
        }
    }

    /// The top `k` pages of the stack only stream: a first probe among them that reads
    /// below k = 0 goes on to the next coarse point instead of ending the pass (what it
    /// cost is the buffer's squatters moved out, not hits of its own). Adaptive search
    /// only.
    pub fn set_streaming_top(&mut self, k: usize) {
        if let Some(a) = self.adaptive.as_mut() {
            a.set_streaming_top(k);
        }
    }

    /// Make the first probe at most `pages` pages (at least one), by a cheaper coarse
    /// point before the first: what a retry can still afford. Adaptive search only.
    pub fn cap_first_probe(&mut self, pages: usize) {
        if let Some(a) = self.adaptive.as_mut() {
            a.cap_first_probe(pages);
        }
    }

    /// Search only the top `k` pages of the stack, measuring all `k` first: the rest of
    /// the stack promises nothing (a search for the pages that over-fill their colours,
    /// in a profile whose rates promise no gain). Adaptive search only.
    pub fn only_top(&mut self, k: usize) {
        if let Some(a) = self.adaptive.as_mut() {
            a.only_top(k);
        }
    }

    /// Start by measuring `k`, the remembered choice of an earlier phase whose stack this
    /// one repeats, and end there if it measures at least `accept_above` (the remembered
    /// search measured k = 0 then; a phase that comes back need not pay for it again).
    /// Otherwise the search goes on as usual, with that window as a measurement. Adaptive
    /// search only: linear search is Algorithm 1 as the paper has it.
    pub fn recall(&mut self, k: usize, accept_above: f64) {
        if let Some(a) = self.adaptive.as_mut() {
            a.recall(k, accept_above);
        }
    }

    /// Measure a placement already made, `k`, against k = 0 in the balanced blocks that
    /// verify a choice, and choose between the two only. Adaptive search only (returns
    /// false for linear search, which is Algorithm 1 as the paper has it).
    pub fn reverify(&mut self, k: usize) -> bool {
        match self.adaptive.as_mut() {
            Some(a) => {
                a.reverify(k);
                true
            }
            None => false,
        }
    }

    /// Whether a point measured so far beats k = 0 beyond noise (adaptive search; linear
    /// search does not judge until its end).
    pub fn has_gain(&self) -> bool {
        self.adaptive
            .as_ref()
            .is_some_and(|a| a.has_gain(&self.measurements))
    }

    /// Stop exploring: keep the best point measured so far if it beats k = 0 as a
    /// finished search's choice must (beyond noise, and drift), else k = 0. Returns false
    /// for linear search, which is Algorithm 1 as the paper has it and runs to its end.
    pub fn conclude(&mut self) -> bool {
        match self.adaptive.as_mut() {
            Some(a) => {
                a.conclude();
                true
            }
            None => false,
        }
    }

    /// The target's IPC in windows before the search, by window number, with no page
    /// moved (its profile): how fast IPC drifts on its own says whether a gain measured
    /// across time must be verified in balanced blocks. Adaptive search only.
    pub fn drift_before(&mut self, windows: &[(u64, f64)]) {
        if let Some(a) = self.adaptive.as_mut() {
            a.drift_before(windows);
        }
    }

    /// The target's IPC in consecutive unsampled windows before the profile: if it rose or
    /// fell significantly, a probe is compared with k = 0 carried forward by that trend.
    /// Adaptive search only.
    pub fn trend_before(&mut self, ipcs: &[f64]) {
        if let Some(a) = self.adaptive.as_mut() {
            a.trend_before(ipcs);
        }
    }

    /// How the search began to check a gain against drift since this was last asked, if
    /// it did (adaptive search).
    pub fn take_check(&mut self) -> Option<GainCheck> {
        self.adaptive.as_mut().and_then(AdaptiveSearch::take_check)
    }

    /// What to do next. Asking again without recording returns the same request.
    pub fn next_step(&mut self) -> Next {
        match (&mut self.linear, &mut self.adaptive) {
            (Some(l), _) => l.next(&self.measurements),
            (_, Some(a)) => a.next(&mut self.measurements),
            (None, None) => Next::Done(0),
        }
    }

    /// One window's IPC with the top `k` pages confined. Windows are taken to follow one
    /// another without a gap; see [`Search::record_at`].
    pub fn record(&mut self, k: usize, ipc: f64) {
        let at = self.measurements.log.last().map_or(0, |m| m.at + 1);
        self.measurements.record(at, k, ipc, None);
    }

    /// One window's IPC with the top `k` pages confined, measured in window number `at`
    /// (the windows after a move that are not measured count, so that a drift of IPC in
    /// time can be told from the effect of `k`).
    pub fn record_at(&mut self, at: u64, k: usize, ipc: f64) {
        self.measurements.record(at, k, ipc, None);
    }

    /// [`Search::record_at`] with the window's LLC misses per 1000 instructions: at
    /// k = 0, whether they moved says whether the caches were still warming
    /// ([`Search::measured_over_passes`]).
    pub fn record_at_with_mpki(&mut self, at: u64, k: usize, ipc: f64, mpki: f64) {
        self.measurements.record(at, k, ipc, Some(mpki));
    }

    /// Forget the windows measured from window number `at` on (the program changed phase
    /// there: they do not compare with the windows before).
    pub fn forget_from(&mut self, at: u64) {
        self.measurements.forget_from(at);
    }

    pub fn measurements(&self) -> &Measurements {
        &self.measurements
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn run(s: Search, f: impl Fn(usize) -> f64) -> (usize, usize) {
        run_in_time(s, |k, _| f(k))
    }

    /// A search against IPC that depends on `k` and on the window's place in time: its
    /// choice and how many windows it measured.
    fn run_in_time(s: Search, f: impl Fn(usize, usize) -> f64) -> (usize, usize) {
        let (k, log) = run_logged(s, f);
        (k, log.len())
    }

    /// [`run_in_time`], with the `k` of each window measured, in order.
    fn run_logged(s: Search, f: impl Fn(usize, usize) -> f64) -> (usize, Vec<usize>) {
        let (k, log, _) = run_checked(s, f);
        (k, log)
    }

    /// The first `k > 0` the search measures.
    fn first_probe(s: Search, f: impl Fn(usize, usize) -> f64) -> Option<usize> {
        let (_, log) = run_logged(s, f);
        log.into_iter().find(|&k| k > 0)
    }

    /// [`run_logged`], with the checks of a gain against drift the search reported.
    fn run_checked(
        mut s: Search,
        f: impl Fn(usize, usize) -> f64,
    ) -> (usize, Vec<usize>, Vec<GainCheck>) {
        let (mut log, mut checks) = (Vec::new(), Vec::new());
        loop {
            let next = s.next_step();
            checks.extend(s.take_check());
            match next {
                Next::Measure(k) => {
                    assert!(log.len() < 1000, "search does not end");
                    s.record(k, f(k, log.len()));
                    log.push(k);
                }
                Next::Done(k) => return (k, log, checks),
            }
        }
    }

    /// Regions that climb to a peak at 650 of 1000 pages in steps of 50, and the IPC there
    /// (as zen4-like's art-like climbs its 128 MiB stream).
    const PEAK_REGIONS: [usize; 7] = [100, 500, 550, 600, 650, 700, 800];

    fn peak(k: usize) -> f64 {
        let x = k as f64 / 1000.0;
        if x <= 0.65 {
            1.0 + 0.3 * x
        } else {
            1.195 - 0.8 * (x - 0.65)
        }
    }

    #[test]
    fn a_gain_whose_windows_cycle_with_the_programs_passes_is_measured_until_it_shows() {
        // zen4-like's cg-like (seed 1; its stack of 195,553 pages scaled to 1,000): the
        // windows its search had measured when its refinement ended, by window number.
        // Confining about two thirds of the stack gains some 18%, but those windows cycle
        // with the program's passes over its data while k = 0's barely scatter: two
        // windows a point left the gain within the pooled noise, and the search chose
        // k = 0. The best point, ahead of k = 0, is measured again until the gain shows;
        // the windows that follow are those the run measured with about as many pages
        // confined.
        let knobs = Knobs {
            page_budget: 21,
            ..Knobs::default()
        };
        let mut s = Search::new(&knobs, 1000, vec![571, 644, 741]);
        let profile = [0.0598, 0.0599, 0.0589, 0.0595, 0.0602, 0.0591, 0.0595];
        let profile: Vec<(u64, f64)> = (33..).zip(profile).collect();
        s.drift_before(&profile);
        let searched = [
            (40, 0, 0.1288),
            (41, 0, 0.1298),
            (43, 21, 0.129),
            (69, 571, 0.148),
            (74, 644, 0.161),
            (80, 741, 0.154),
            (81, 681, 0.139),
            (84, 616, 0.141),
            (87, 644, 0.145),
            (89, 741, 0.139),
        ];
        for (at, k, ipc) in searched {
            s.record_at(at, k, ipc);
        }
        s.conclude();
        let k0 = |t: usize| [0.1288, 0.1298][t % 2];
        let later = [0.1452, 0.1497, 0.1603, 0.1364, 0.1529, 0.1605];
        let (k, log) = run_logged(s.clone(), |k, t| match k {
            0 => k0(t),
            _ => later[t % later.len()],
        });
        assert_eq!(k, 644, "windows after the refinement: {log:?}");
        // Had the placement's later windows read as k = 0 does, the search would end at
        // k = 0 after three more (the best point's, then the next best's, then 741's: its
        // one window, judged by the pooled noise, stays ahead of k = 0 by more than half
        // the margin).
        let (k, log) = run_logged(s, |_, t| k0(t));
        assert_eq!((k, log), (0, vec![644, 571, 741]));
    }

    #[test]
    fn two_points_are_judged_by_their_own_repeats_not_by_a_third_measured_in_another_state() {
        // random.md's run 475 (ppc970fx, alone, oracle 1.197), the windows its search
        // measured, by window number: its loop of 2.7 LLCs fits once 251 pages are
        // confined (each point measured over a pass), 287 read 0.386 while the loop still
        // fit and 0.319 after 352 had over-filled the buffer and the loop thrashed again,
        // as every point reads until a pass has gone by. Pooled, 287's two states buried
        // 251's gain over k = 0 and the search kept nothing.
        let mut s = Search::new(&Knobs::default(), 371, vec![233]);
        let searched = [
            (34, 0, 0.3189),
            (35, 0, 0.3190),
            (49, 251, 0.360),
            (51, 287, 0.386),
            (53, 352, 0.319),
            (55, 312, 0.319),
            (57, 273, 0.319),
            (59, 287, 0.319),
            (73, 251, 0.351),
        ];
        for (at, k, ipc) in searched {
            s.record_at(at, k, ipc);
        }
        s.conclude();
        let later = |k: usize, t: usize| match k {
            0 => [0.3189, 0.3191][t % 2],
            _ => [0.358, 0.352][t % 2],
        };
        let (k, log) = run_logged(s, later);
        assert_eq!(k, 251, "windows after the refinement: {log:?}");
        // Had 251 read as k = 0 the second time, its own scatter leaves no gain.
        let mut s = Search::new(&Knobs::default(), 371, vec![233]);
        for (at, k, ipc) in searched {
            s.record_at(at, k, if at == 73 { 0.3185 } else { ipc });
        }
        s.conclude();
        let (k, log) = run_logged(s, |_, t| [0.3189, 0.3191][t % 2]);
        assert_eq!(k, 0, "windows after the refinement: {log:?}");
    }

    /// zen4-like's cg-like (seed 1): a stack of 87,529 pages whose top 81,281 only stream,
    /// every point measured over a pass of its loop, by the window that ended the pass.
    /// The profile's three windows (prefetchers off) allow a drift of 0.00105 IPC a
    /// window. Its search given k = 0's passes (window, IPC, MPKI), then two passes at the
    /// streaming top: what it asked for, what it chose, and how it checked the gain.
    fn replay_over_passes(k0: &[(u64, f64, f64)]) -> (Next, Vec<usize>, Vec<GainCheck>) {
        let mut s = Search::new(&Knobs::default(), 87_529, vec![]);
        s.drift_before(&[(1, 0.0603), (2, 0.0593), (3, 0.0594)]);
        s.probe_streaming_top(81_281);
        s.measured_over_passes();
        let last = k0.last().map_or(0, |p| p.0);
        let top = [(last + 7, 0.1483, 22.15), (last + 9, 0.1436, 25.87)];
        let (mut asked, mut checks) = (Vec::new(), Vec::new());
        let mut k0 = k0.iter().copied();
        let mut top = top.into_iter();
        loop {
            let next = s.next_step();
            checks.extend(s.take_check());
            let Next::Measure(k) = next else {
                return (next, asked, checks);
            };
            let pass = if k == 0 { k0.next() } else { top.next() };
            let Some((at, ipc, mpki)) = pass else {
                return (next, asked, checks);
            };
            asked.push(k);
            s.record_at_with_mpki(at, k, ipc, mpki);
        }
    }

    #[test]
    fn a_gain_over_passes_is_kept_without_blocks_once_k0s_passes_ran_alike() {
        // Without the drift k = 0's passes rule out, the profile's could explain the
        // streaming top's lead over the 9 windows between them: balanced blocks, moving
        // 81,281 pages to k = 0 and back. k = 0's two passes ran alike (MPKI 35.55 and
        // 35.59, IPC 0.1297 and 0.1295): the program is not warming, and the lead is kept
        // as measured.
        let (next, asked, checks) = replay_over_passes(&[(5, 0.1297, 35.55), (7, 0.1295, 35.59)]);
        assert_eq!(
            next,
            Next::Done(81_281),
            "asked for {asked:?}, checks {checks:?}"
        );
        assert_eq!(asked, [0, 0, 81_281, 81_281]);
        assert!(checks.is_empty(), "{checks:?}");
    }

    #[test]
    fn a_search_over_passes_moves_no_page_while_k0s_passes_still_warm_the_caches() {
        // spr-like's cg-like: its first profile began at the program's first window, and
        // k = 0's first pass still warmed the LLC (MPKI 11.10, then 6.03; IPC 0.190, then
        // 0.204). The search measures k = 0 again before it moves a page, forgets the
        // warming pass, and keeps the lead over the two that ran alike without moving
        // 81,281 pages there and back. A warm-up that shows in IPC alone (the misses
        // alike, IPC 3% up) waits too.
        for first in [(5, 0.1190, 41.2), (5, 0.1255, 35.6)] {
            let k0 = [first, (7, 0.1297, 35.55), (9, 0.1295, 35.59)];
            let (next, asked, checks) = replay_over_passes(&k0);
            assert_eq!(
                next,
                Next::Done(81_281),
                "asked for {asked:?}, checks {checks:?}"
            );
            assert_eq!(asked, [0, 0, 0, 81_281, 81_281]);
            assert!(checks.is_empty(), "{checks:?}");
        }
        // A program whose passes never run alike drifts by itself: after four passes
        // forgotten, the profile's drift stands and the balanced blocks decide. Passes
        // that scatter without warming (zen4-like's art-like: MPKI 28.12, then 29.34) are
        // not waited for.
        let never_alike: Vec<(u64, f64, f64)> = (0..6)
            .map(|i| (5 + 2 * i, 0.1115 + 0.004 * i as f64, 38.0 - 0.8 * i as f64))
            .collect();
        let scattered = [(5, 0.1330, 35.55), (7, 0.1295, 37.1)];
        for (k0, waits) in [(&never_alike[..], 4), (&scattered[..], 0)] {
            let (next, asked, checks) = replay_over_passes(k0);
            assert_ne!(next, Next::Done(81_281));
            assert_eq!(
                asked[..3 + waits],
                [&vec![0; 2 + waits][..], &[81_281]].concat()
            );
            assert!(
                matches!(checks[..], [GainCheck::Blocks { k: 81_281, .. }]),
                "{next:?} {asked:?} {checks:?}"
            );
        }
    }

    #[test]
    fn a_cycling_gain_the_blocks_agree_with_is_kept_after_one_block() {
        // zen4-like's cg-like at seed 3: the windows its search measured at k = 0 and
        // around its best point (120,270 of 195,641 pages), by window number. The best
        // point's windows cycle with the program's passes (0.1435 to 0.1590) and the
        // drift before the search (the profile's windows) could not rule out the gain,
        // so it is verified in balanced blocks, each moving 120,270 pages to k = 0 and
        // back at 4,096 a window: the run ended inside the second (0.959 of off). The
        // first block's windows agree with the search's own at both placements, and
        // fitted together with them they keep the gain.
        let knobs = Knobs {
            page_budget: 4096,
            ..Knobs::default()
        };
        let best = 120_270;
        let replay = || {
            let mut s = Search::new(&knobs, 195_641, vec![]);
            let profile = [0.0587, 0.0592, 0.0589, 0.0588, 0.0594, 0.0599, 0.0594];
            let profile: Vec<(u64, f64)> = (33..).zip(profile).collect();
            s.drift_before(&profile);
            let searched = [
                (40, 0, 0.1295),
                (41, 0, 0.1289),
                (43, 4096, 0.1285),
                (71, best, 0.1589),
                (76, 134_764, 0.1449),
                (89, 75_895, 0.1390),
                (97, 103_320, 0.1354),
                (102, best, 0.1445),
                (103, best, 0.1435),
                (104, best, 0.1590),
            ];
            for (at, k, ipc) in searched {
                s.record_at(at, k, ipc);
            }
            s.conclude();
            s
        };
        // The first block: k = 0 twice (windows 133 and 134), then the best again (163).
        let mut s = replay();
        for (at, ipc) in [(133, 0.1289), (134, 0.1304), (163, 0.1340)] {
            let k = match s.next_step() {
                Next::Measure(k) => k,
                Next::Done(k) => panic!("done at k = {k} before window {at}"),
            };
            s.record_at(at, k, ipc);
        }
        assert_eq!(s.next_step(), Next::Done(best));
        // Had k = 0 risen to the best point's pace by the block, the gain would be the
        // program's drift: fitted with the search's windows, it is not kept.
        let mut s = replay();
        for (at, ipc) in [(133, 0.1440), (134, 0.1450), (163, 0.1450)] {
            let Next::Measure(k) = s.next_step() else {
                panic!("done before window {at}");
            };
            s.record_at(at, k, ipc);
        }
        assert_ne!(s.next_step(), Next::Done(best));
    }

    #[test]
    fn a_gain_the_spent_blocks_leave_within_noise_is_judged_with_the_searchs_windows() {
        // random.md's run 217 (ppc970fx, one tenant; its oracle gains 10%): the windows its
        // search measured, by window number. k = 59 read 0.393 against k = 0's 0.317 and
        // 0.283, but the windows of its two balanced blocks scattered (0.306 to 0.360 at
        // k = 59, 0.285 to 0.338 at k = 0) and left the gain within their own noise; the
        // search's windows before the blocks tell the same gain, and fitted together with
        // the blocks they keep it (1.006 of off without, 1.096 with).
        let knobs = Knobs {
            page_budget: 64,
            ..Knobs::default()
        };
        let mut s = Search::new(&knobs, 162, vec![4, 59]);
        for (at, k, ipc) in [
            (12, 0, 0.3174),
            (13, 0, 0.2829),
            (15, 4, 0.3335),
            (17, 59, 0.39259),
        ] {
            s.record_at(at, k, ipc);
        }
        s.conclude();
        let blocks = [
            (18, 0.3947),
            (20, 0.2848),
            (21, 0.3195),
            (23, 0.3057),
            (25, 0.3384),
            (27, 0.3581),
            (28, 0.3598),
            (30, 0.3310),
        ];
        let mut log = Vec::new();
        for (at, ipc) in blocks {
            let k = match s.next_step() {
                Next::Measure(k) => k,
                Next::Done(k) => panic!("done at k = {k} before window {at}: {log:?}"),
            };
            s.record_at(at, k, ipc);
            log.push(k);
        }
        assert_eq!(log, [59, 0, 0, 59, 0, 59, 59, 0]);
        assert_eq!(s.next_step(), Next::Done(59));
    }

    #[test]
    fn a_group_judged_point_far_below_the_best_is_not_measured_twice() {
        // Judged by an LLC group, a coarse point past the peak on one window is measured
        // again, as sharers' phases scatter the score; but not one that fell far below:
        // confining the whole stack here costs 65%, which no phase explains.
        let knobs = Knobs::default();
        let count = |whole_stack: f64| {
            let mut s = Search::new(&knobs, 1000, vec![]);
            s.judged_by_group();
            let (_, log) = run_logged(s, |k, t| {
                let noise = 0.004 * (t % 2) as f64;
                if k == 1000 {
                    whole_stack + noise
                } else {
                    1.0 + 0.02 * k as f64 / 1000.0 + noise
                }
            });
            log.iter().filter(|&&k| k == 1000).count()
        };
        assert_eq!(count(0.35), 1, "far below");
        assert_eq!(count(0.97), 2, "past the peak, within what phases scatter");
    }

    #[test]
    fn a_drift_in_time_is_not_taken_for_a_gain_and_a_gain_is_kept_despite_one() {
        // A program warming up: IPC rises 5% a window whatever is confined. The coarse
        // pass measures growing k one after another and sees the largest win; the balanced
        // blocks see no gain.
        let knobs = Knobs::default();
        let warming = |_k: usize, t: usize| 0.5 * (1.0 + 0.05 * t as f64);
        let (k, _) = run_in_time(Search::new(&knobs, 1000, vec![]), warming);
        assert_eq!(k, 0);
        // Falling just as fast, with a real 30% gain for the top 600 pages: kept.
        let gain = |k: usize, t: usize| {
            let g = if (500..=700).contains(&k) { 1.3 } else { 1.0 };
            g * (1.0 - 0.02 * t as f64)
        };
        let (k, _) = run_in_time(Search::new(&knobs, 1000, vec![600]), gain);
        assert_eq!(k, 600);
    }

    #[test]
    fn a_gain_gone_at_the_first_look_back_at_k0_ends_the_verification_there() {
        // The warm-up above: the verification opens at the best point, and k = 0, measured
        // next, already runs faster. The search ends there, at k = 0, instead of moving the
        // pages twice more to finish the block.
        let knobs = Knobs::default();
        let warming = |t: usize| 0.5 * (1.0 + 0.05 * t as f64);
        let (k, log) = run_logged(Search::new(&knobs, 1000, vec![]), |_, t| warming(t));
        assert_eq!(k, 0);
        assert!(
            matches!(log[..], [.., b, 0, 0] if b > 0),
            "the last windows: {log:?}"
        );
        // A real 30% gain on a rising drift as fast is still kept.
        let gain =
            |k: usize, t: usize| warming(t) * if (500..=700).contains(&k) { 1.3 } else { 1.0 };
        let (k, _) = run_in_time(Search::new(&knobs, 1000, vec![600]), gain);
        assert_eq!(k, 600);
    }

    #[test]
    fn a_gain_far_from_k0_is_confirmed_by_measuring_again_a_point_near_it() {
        // The stack's regions climb to a peak (`PEAK_REGIONS`), 100 pages moved a window,
        // and nothing known of the drift before the search. The balanced blocks would move
        // the pages to k = 0 and back; a point near the best, measured long before and
        // again now, shows that IPC does not drift, so the gain stands without going back
        // to k = 0.
        let knobs = Knobs {
            page_budget: 100,
            ..Knobs::default()
        };
        let search = || Search::new(&knobs, 1000, PEAK_REGIONS.to_vec());
        let (k, log) = run_logged(search(), |k, _| peak(k));
        assert_eq!(k, 650, "windows {log:?}");
        let last_k0 = log.iter().rposition(|&k| k == 0).expect("k = 0 measured");
        assert_eq!(last_k0, 1, "k = 0 only before the coarse pass: {log:?}");
        // The same peak on a warm-up that keeps going still ends in the balanced blocks.
        let warming = |k: usize, t: usize| peak(k) + 0.02 * t as f64;
        let (_, log) = run_logged(search(), warming);
        assert!(log.iter().rposition(|&k| k == 0) > Some(1), "{log:?}");
    }

    /// The checks a search reported, in order, and its choice.
    fn checks_of(s: Search, f: impl Fn(usize, usize) -> f64) -> (usize, Vec<GainCheck>) {
        let (k, _, checks) = run_checked(s, f);
        (k, checks)
    }

    #[test]
    fn the_default_page_budget_probes_a_modern_stacks_first_region_at_once() {
        // spr-like's art-like: a stack of 17,183 pages whose first region, the stream
        // above its reused weights, ends at 12,107. At 4,096 pages a window the region
        // took more than a window of moves, so the search probed an eighth of the stack
        // first (2,148 pages): its gain was within the LLC's warming, the balanced blocks
        // found none, and the cost rule ended the search (0.993 of off, its oracle 1.050).
        // With the default budget the region is placed in one window and probed first,
        // and kept (1.032).
        let stream = 12_107;
        let ipc = |k: usize, _| {
            if k <= stream {
                1.0 + 0.15 * k as f64 / stream as f64
            } else {
                0.5
            }
        };
        let first_probe =
            |knobs: &Knobs| first_probe(Search::new(knobs, 17_183, vec![stream]), ipc);
        assert_eq!(first_probe(&Knobs::default()), Some(stream));
        let old = Knobs {
            page_budget: 4096,
            ..Knobs::default()
        };
        assert_eq!(first_probe(&old), Some(17_183usize.div_ceil(8)));
    }

    #[test]
    fn a_capped_first_probe_moves_no_more_pages_than_the_cap_and_at_least_one() {
        // 64 pages and no regions: the first probe is an eighth of the stack.
        let s = || Search::new(&Knobs::default(), 64, vec![]);
        assert_eq!(first_probe(s(), |_, _| 1.0), Some(8));
        let capped = |pages| {
            let mut s = s();
            s.cap_first_probe(pages);
            first_probe(s, |_, _| 1.0)
        };
        assert_eq!(capped(3), Some(3));
        assert_eq!(capped(0), Some(1));
        assert_eq!(
            capped(100),
            Some(8),
            "a cap above the first probe changes nothing"
        );
    }

    #[test]
    fn a_first_probe_of_a_long_stack_stays_cheap_with_the_budget() {
        // neoverse-like's cg-like: a stack of 83,245 pages. An eighth of it, 10,406 pages,
        // fits in a window of the default budget, but a first probe that large is moved
        // each way again in the balanced blocks a warming LLC sends the search to (0.9908
        // -> 0.9896 of off); the cheap first probe stays at 4,096 pages.
        let s = Search::new(&Knobs::default(), 83_245, vec![]);
        assert_eq!(first_probe(s, |_, _| 1.0), Some(4096));
    }

    #[test]
    fn a_search_says_how_it_checks_a_gain_against_drift_and_why() {
        // The peak of the test above. The timeline and rocsd's journal tell from these why a
        // search went on to the balanced blocks (zen4-like's cg-like spends 62 windows on
        // one block's trip to k = 0 and back).
        let search = |page_budget| {
            let knobs = Knobs {
                page_budget,
                ..Knobs::default()
            };
            Search::new(&knobs, 1000, PEAK_REGIONS.to_vec())
        };
        let noisy_drift = [(0, 1.0), (1, 1.03), (2, 0.99), (3, 1.04)];
        // A point near the best, measured long before, is measured again...
        let (k, checks) = checks_of(search(100), |k, _| peak(k));
        assert_eq!(k, 650);
        assert!(
            matches!(
                checks[..],
                [GainCheck::Revisit {
                    k: 650,
                    at: 600,
                    ..
                }]
            ),
            "{checks:?}"
        );
        // ... and moved too much in between: the blocks, and why.
        let (_, checks) = checks_of(search(100), |k, t| peak(k) + 0.02 * t as f64);
        assert!(
            matches!(
                checks[..],
                [
                    GainCheck::Revisit { k: 650, .. },
                    GainCheck::Blocks {
                        k: 650,
                        why: BlocksWhy::Revisited { at: 600, .. }
                    }
                ]
            ),
            "{checks:?}"
        );
        // No point within two windows' moves (20 pages) to measure again: the drift the
        // windows before the search allow, over the windows between, is why.
        let mut s = search(10);
        s.drift_before(&noisy_drift);
        let (_, checks) = checks_of(s, |k, t| peak(k) + 0.01 * t as f64);
        assert!(
            matches!(
                checks[..],
                [GainCheck::Blocks {
                    k: 650,
                    why: BlocksWhy::Drift { reach: 20, .. }
                }]
            ),
            "{checks:?}"
        );
        // Nothing known of the drift before the search.
        let (_, checks) = checks_of(search(10), |k, t| peak(k) + 0.01 * t as f64);
        assert!(
            matches!(
                checks[..],
                [GainCheck::Blocks {
                    why: BlocksWhy::DriftUnknown,
                    ..
                }]
            ),
            "{checks:?}"
        );
        // A rising trend before the search explains the whole stack's lead.
        let mut s = Search::new(&Knobs::default(), 1000, vec![600]);
        s.trend_before(&[1.0, 1.02, 1.04, 1.06, 1.08]);
        let (k, checks) = checks_of(s, |_, t| 1.1 + 0.02 * t as f64);
        assert_eq!(k, 0);
        assert!(
            matches!(
                checks[..],
                [GainCheck::Blocks {
                    why: BlocksWhy::Trend,
                    ..
                }]
            ),
            "{checks:?}"
        );
    }

    #[test]
    fn probes_are_compared_with_k0_carried_forward_by_the_trend_before_the_search() {
        // A large LLC still warming over most of a short run (spr-like's art-like at
        // auto:0.2): IPC rises 2% a window whatever is confined, and every probe costs 10%,
        // within the noise the trend itself puts between k = 0's two windows. Measured
        // against k = 0 at the search's start, each larger probe looks better than the
        // last and the coarse pass climbs the whole stack before the balanced blocks
        // reject it; measured against k = 0 carried forward by the trend of the windows
        // before the profile, the first probe is seen to lose.
        let knobs = Knobs::default();
        let warming = |t: usize| 0.5 * (1.0 + 0.02 * t as f64);
        let before: Vec<f64> = (0..5).map(warming).collect();
        let costly = |k: usize, t: usize| warming(t + 5) * if k > 0 { 0.90 } else { 1.0 };
        let probes = |trend: bool| {
            let mut s = Search::new(&knobs, 1000, vec![]);
            if trend {
                s.trend_before(&before);
            }
            let mut probed = BTreeSet::new();
            for t in 0.. {
                match s.next_step() {
                    Next::Measure(k) => {
                        assert!(t < 1000, "search does not end");
                        if k > 0 {
                            probed.insert(k);
                        }
                        s.record(k, costly(k, t));
                    }
                    Next::Done(k) => return (k, probed.len()),
                }
            }
            unreachable!()
        };
        let (k, untrended) = probes(false);
        assert_eq!(k, 0);
        assert!(untrended >= 4, "{untrended} probes without the trend");
        assert_eq!(probes(true), (0, 1));
        // A real 30% gain for the top 600 pages on the same trend is still kept.
        let gain =
            |k: usize, t: usize| warming(t + 5) * if (500..=700).contains(&k) { 1.3 } else { 1.0 };
        let mut s = Search::new(&knobs, 1000, vec![600]);
        s.trend_before(&before);
        assert_eq!(run_in_time(s, gain).0, 600);
    }

    #[test]
    fn a_trend_the_profiles_windows_do_not_show_has_ended() {
        // random.md's run 272 (tiny, a stencil over 2.6 times the LLC): the unsampled
        // windows before its profile rose as the LLC warmed, and its profile's nine
        // windows, which came after them, were flat. Carried forward by the warm-up's
        // slope, k = 0 would have run at 0.482 when the first probe read 0.475, k = 0's
        // own pace, and the coarse pass ended there (the oracle gains 13%).
        let knobs = Knobs {
            page_budget: 21,
            ..Knobs::default()
        };
        let profile = [
            0.4700, 0.4718, 0.4676, 0.4700, 0.4743, 0.4761, 0.4744, 0.4695, 0.4716,
        ];
        let profile: Vec<(u64, f64)> = (4..).zip(profile).collect();
        let after_first_probe = |profile: &[(u64, f64)]| {
            let mut s = Search::new(&knobs, 171, vec![]);
            s.drift_before(profile);
            s.trend_before(&[0.4731, 0.4760, 0.4777]);
            s.record_at(14, 0, 0.4758);
            s.record_at(15, 0, 0.4757);
            assert_eq!(s.next_step(), Next::Measure(21));
            s.record_at(17, 21, 0.4747);
            s.next_step()
        };
        assert_eq!(after_first_probe(&profile), Next::Measure(42));
        // Without the profile's windows the warm-up may still be going on.
        assert_eq!(after_first_probe(&[]), Next::Done(0));
    }

    #[test]
    fn linear_is_algorithm_1() {
        let knobs = Knobs {
            search: SearchMode::Linear,
            linear_step: Some(10),
            linear_min_pages: 20,
            ..Knobs::default()
        };
        let s = Search::new(&knobs, 100, vec![]);
        // Measures k = 10, 20, ..., 80 (index 100, 90, ..., 30 > 20), then stops.
        let (k, windows) = run(s, |k| -((k as f64 - 42.0).abs()));
        assert_eq!(windows, 8);
        assert_eq!(k, 40);
    }

    #[test]
    fn adaptive_finds_a_sharp_peak_and_refuses_flat_curves() {
        let knobs = Knobs::default();
        let peak = |k: usize| {
            let x = k as f64 / 1000.0;
            if x <= 0.6 {
                1.0 + 0.3 * x
            } else {
                1.18 - 0.8 * (x - 0.6)
            }
        };
        let (k, _) = run(Search::new(&knobs, 1000, vec![]), peak);
        assert!((k as i64 - 600).abs() <= 40, "k = {k}");
        let (k, _) = run(Search::new(&knobs, 1000, vec![]), |_| 1.0);
        assert_eq!(k, 0);
        let (k, _) = run(Search::new(&knobs, 1000, vec![]), |k| 1.0 - k as f64 * 1e-4);
        assert_eq!(k, 0);
    }

    #[test]
    fn a_recalled_k_ends_the_search_if_it_still_pays_and_is_searched_again_if_not() {
        let knobs = Knobs::default();
        let f = |k: usize| if k <= 613 { 1.0 + k as f64 * 1e-3 } else { 1.0 };
        let mut s = Search::new(&knobs, 1000, vec![613, 900]);
        s.recall(613, 1.3);
        assert_eq!(run(s, f), (613, 1));
        // The phase changed: 613 no longer pays; the full search finds k = 0.
        let mut s = Search::new(&knobs, 1000, vec![613, 900]);
        s.recall(613, 1.3);
        let (k, windows) = run(s, |_| 1.0);
        assert_eq!(k, 0);
        assert!(windows > 3);
        // Linear search ignores it.
        let linear = Knobs {
            search: SearchMode::Linear,
            linear_step: Some(100),
            ..Knobs::default()
        };
        let mut s = Search::new(&linear, 1000, vec![]);
        s.recall(600, 1.3);
        let (_, windows) = run(s, f);
        assert_eq!(windows, 10);
    }

    #[test]
    fn a_recalled_k_concluded_before_k0_was_measured_measures_k0() {
        // A phase's search began at the placement an earlier phase kept, and was told to
        // conclude (by the cost rule, or a placement past its target's floor) after that
        // one window: it has nothing to judge the placement against but k = 0.
        let knobs = Knobs::default();
        let mut s = Search::new(&knobs, 477, vec![]);
        s.recall(357, 1.3);
        assert_eq!(s.next_step(), Next::Measure(357));
        s.record_at(84, 357, 0.9);
        assert!(s.conclude());
        assert_eq!(s.next_step(), Next::Measure(0));
        s.record_at(86, 0, 1.0);
        assert_eq!(s.next_step(), Next::Done(0));
    }

    #[test]
    fn the_coarse_pass_stops_when_ipc_is_below_k0_and_falling() {
        // A gentle decline, each step within the noise floor: no probe is significantly
        // worse than k = 0, but two in a row below it and falling end the coarse pass
        // before the large (expensive) probes.
        let knobs = Knobs::default();
        let (k, measured) = run_logged(Search::new(&knobs, 1000, vec![]), |k, _| {
            1.0 - k as f64 * 1e-5
        });
        assert_eq!(k, 0);
        assert!(measured.iter().all(|&k| k <= 250), "{measured:?}");
    }

    #[test]
    fn adaptive_snaps_to_region_boundaries() {
        let knobs = Knobs::default();
        let f = |k: usize| if k <= 613 { 1.0 + k as f64 * 1e-3 } else { 1.0 };
        let (k, _) = run(Search::new(&knobs, 1000, vec![613, 900]), f);
        assert_eq!(k, 613);
    }

    #[test]
    fn the_coarse_pass_reaches_the_whole_stack_through_three_quarters() {
        // IPC rises up to 600 of 1000 pages, then falls, steeply past 800 (reused data at
        // the bottom of the stack): the pass doubles to 500, steps to 750, finds it worse,
        // and the whole stack is never probed.
        let knobs = Knobs::default();
        let curve = |k: usize| {
            let x = k as f64 / 1000.0;
            if x <= 0.6 {
                1.0 + 0.1 * x
            } else if x <= 0.8 {
                1.06 - 0.3 * (x - 0.6)
            } else {
                1.0 - 2.0 * (x - 0.8)
            }
        };
        let (k, probed) = run_logged(Search::new(&knobs, 1000, vec![]), |k, _| curve(k));
        assert!(probed.contains(&750), "probed {probed:?}");
        assert!(!probed.contains(&1000), "probed {probed:?}");
        assert!((500..=700).contains(&k), "chose {k}, probed {probed:?}");
        // Still rising at three quarters: the whole stack is probed, and chosen.
        let (k, _) = run(Search::new(&knobs, 1000, vec![]), |k| 1.0 + k as f64 * 1e-4);
        assert_eq!(k, 1000);
    }

    #[test]
    fn a_last_region_of_most_of_the_stack_is_entered_by_doubling() {
        // One region boundary, at 60 of 1000 pages; the last region a stream over its first
        // 150 pages above reused data (random.md's run 87: a stream and a pointer chase
        // merged into one region, the oracle's best k 13 of 122): the pass doubles into
        // the region from its boundary, finds the gain, and never probes the whole stack.
        let knobs = Knobs::default();
        let curve = |k: usize| {
            if k <= 210 {
                1.0 + k as f64 * 5e-4
            } else {
                1.105 - (k - 210) as f64 * 2e-3
            }
        };
        let (k, probed) = run_logged(Search::new(&knobs, 1000, vec![60]), |k, _| curve(k));
        assert!(probed.contains(&120), "probed {probed:?}");
        assert!(!probed.contains(&1000), "probed {probed:?}");
        assert!((120..=240).contains(&k), "chose {k}, probed {probed:?}");
    }

    #[test]
    fn a_first_region_that_takes_windows_to_move_is_probed_at_an_eighth_first() {
        // 100 pages a window: the first region (800 pages) would take 8 windows to move
        // there and 8 back: the first probe is the stack's eighth, at most a window's moves.
        let knobs = Knobs {
            page_budget: 100,
            ..Knobs::default()
        };
        let mut s = Search::new(&knobs, 1000, vec![800]);
        for _ in 0..2 {
            assert_eq!(s.next_step(), Next::Measure(0));
            s.record(0, 1.0);
        }
        assert_eq!(s.next_step(), Next::Measure(100));
        // Placed in one window, the region's boundary is probed first, as before.
        let mut s = Search::new(&Knobs::default(), 1000, vec![800]);
        for _ in 0..2 {
            assert_eq!(s.next_step(), Next::Measure(0));
            s.record(0, 1.0);
        }
        assert_eq!(s.next_step(), Next::Measure(800));
    }

    #[test]
    fn the_fit_point_is_probed_inside_a_wide_region_and_is_no_region_itself() {
        let knobs = Knobs::default();
        // A loop over more than the cache, in a region from 100 to 900 where no boundary
        // is: IPC rises once part of it is confined, until the rest fits (k = 450), and
        // falls below k = 0's when all of it is. The region's ends alone show nothing.
        let loop_curve = |k: usize| {
            let k = k as f64;
            if k <= 100.0 {
                1.0
            } else if k <= 450.0 {
                1.0 + 0.3 * (k - 100.0) / 350.0
            } else {
                (1.3 - 0.4 * (k - 450.0) / 450.0).max(0.9)
            }
        };
        let (without, probed) = run_logged(Search::new(&knobs, 1000, vec![100, 900]), |k, _| {
            loop_curve(k)
        });
        assert_eq!(without, 0, "probed {probed:?}");
        let mut s = Search::new(&knobs, 1000, vec![100, 900]);
        s.probe_fit_point(450);
        let (with, probed) = run_logged(s, |k, _| loop_curve(k));
        assert_eq!(with, 450, "probed {probed:?}");
        // Eight regions: the coarse pass climbs them; the fit point beside the last does
        // not make them nine, which a pass by regions would give up for doubling.
        let regions: Vec<usize> = (1..=8).map(|i| i * 100).collect();
        let mut s = Search::new(&knobs, 1000, regions);
        s.probe_fit_point(850);
        let (_, probed) = run_logged(s, |k, _| 1.0 + k as f64 * 1e-4);
        let first: Vec<usize> = probed.iter().copied().filter(|&k| k > 0).take(3).collect();
        assert_eq!(first, [100, 200, 300], "probed {probed:?}");
    }

    #[test]
    fn a_first_probe_of_pages_that_only_stream_does_not_end_the_pass_below_k0() {
        // random.md's bea8881e: the top 87 of 236 pages only stream; confining them costs
        // the squatters moved out of the buffer (5%), and confining the random region
        // below them too is what frees the cache (+40% at 175).
        let boundaries = vec![87, 123, 175, 186];
        let f = |k: usize| match k {
            0 => 1.0,
            1..=87 => 0.95,
            88..=175 => 0.95 + (k - 87) as f64 * 0.005,
            _ => 0.5,
        };
        let knobs = Knobs::default();
        let mut s = Search::new(&knobs, 236, boundaries.clone());
        s.set_streaming_top(87);
        let (k, probed) = run_logged(s, |k, _| f(k));
        assert!((123..=186).contains(&k), "chose {k}, probed {probed:?}");
        // Pages that hit at the top: the first point below k = 0 ends the pass.
        let (k, probed) = run_logged(Search::new(&knobs, 236, boundaries.clone()), |k, _| f(k));
        assert_eq!(k, 0, "probed {probed:?}");
        assert!(probed.iter().all(|&k| k <= 87), "probed {probed:?}");
        // A second point below k = 0 ends it too, streaming or not.
        let mut s = Search::new(&knobs, 236, boundaries);
        s.set_streaming_top(236);
        let (k, probed) = run_logged(s, |k, _| if k == 0 { 1.0 } else { 0.95 - k as f64 * 1e-4 });
        assert_eq!(k, 0);
        assert!(probed.iter().all(|&k| k <= 123), "probed {probed:?}");
    }

    #[test]
    fn a_search_of_only_the_top_pages_probes_nothing_below_them() {
        // The whole stack would gain more (IPC rises to k = 1000), but only the top 6
        // pages are searched: they are probed first, and nothing past them is.
        let knobs = Knobs::default();
        let mut s = Search::new(&knobs, 1000, vec![300, 800]);
        s.probe_first(6);
        s.only_top(6);
        let (k, probed) = run_logged(s, |k, _| 1.0 + k as f64 * 0.02);
        assert_eq!(k, 6, "probed {probed:?}");
        assert_eq!(
            probed.iter().find(|&&k| k > 0),
            Some(&6),
            "probed {probed:?}"
        );
        assert!(probed.iter().all(|&k| k <= 6), "probed {probed:?}");
    }

    #[test]
    fn the_pages_that_over_fill_their_colours_are_probed_before_any_smaller_placement() {
        // random.md's run 303: 90 pages, 6 of them over-filling two colours, a page budget
        // of one page a window. Part of the relief relieves no colour and reads below
        // k = 0 (its pages miss in the buffer as they did on their colours); all 6 pages
        // make the program twice as fast.
        let knobs = Knobs {
            page_budget: 1,
            ..Knobs::default()
        };
        let mut s = Search::new(&knobs, 90, vec![]);
        s.probe_first(6);
        let ipc = |k: usize| match k {
            0 => 0.175,
            1..=5 => 0.168,
            _ => 0.37,
        };
        let (k, probed) = run_logged(s, |k, _| ipc(k));
        assert_eq!(
            probed.iter().find(|&&k| k > 0),
            Some(&6),
            "probed {probed:?}"
        );
        assert!(k >= 6, "chose {k}, probed {probed:?}");
    }
}
