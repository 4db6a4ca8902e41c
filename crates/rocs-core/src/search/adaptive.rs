//! Adaptive search: k = 0 always competes, probes follow the stack's regions, and a
//! choice is kept only if it beats k = 0 in a comparison balanced against time.

use serde::{Deserialize, Serialize};

use super::{BlocksWhy, GainCheck, Measured, Measurements, Next};

/// Adaptive search: k = 0 always competes. A coarse pass measures the region boundaries of
/// the stack in order (IPC(k) bends where the miss-rate class changes, and is close to
/// linear inside a region of uniform pages), or doubling `k` when the stack has no clear
/// regions, until IPC falls significantly past its best. Golden-section refinement then
/// narrows the bracket around the best point. Comparisons within the measured noise are
/// repeated; the result must beat k = 0 by more than the noise, and then again in a
/// comparison balanced against time (see [`Stage::Verify`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveSearch {
    n: usize,
    max_repeats: usize,
    noise_floor: f64,
    /// Stack positions where the miss rate changes (region boundaries); probes snap to them.
    boundaries: Vec<usize>,
    /// Coarse points, in the order they are measured.
    coarse: Vec<usize>,
    /// The coarse points are region boundaries: refinement stops after two probes in a row
    /// fail to beat the best (the curve is close to linear between boundaries).
    by_regions: bool,
    /// Bracket width at which refinement stops.
    tolerance: usize,
    /// The search is judged by an LLC group's score ([`Search::judged_by_group`]): a coarse
    /// point that looks past the peak on one window is measured again (and so is the best)
    /// before the coarse pass stops, unless it fell [`FAR_BELOW_MARGINS`] margins below;
    /// and two candidates measured more than once are compared by their own spreads rather
    /// than the pooled one.
    #[serde(default)]
    judged_by_group: bool,
    /// How fast IPC drifted before the search, per window: the fitted slope's magnitude
    /// plus two standard errors. `None`: unknown (too few windows), so every gain is
    /// verified.
    #[serde(default)]
    drift_bound: Option<f64>,
    /// The slope of IPC per window in the unsampled windows before the profile, if it is
    /// significant (a large LLC that takes most of a short run to warm, a ramp): k = 0 measured
    /// at the start is carried forward by it, so that a probe is compared with what k = 0
    /// would have run at its time, not at the search's start.
    #[serde(default)]
    trend: Option<f64>,
    /// Pages moved in one window: how far from the best point a revisit may go.
    #[serde(default)]
    page_budget: usize,
    /// The point probed first and measured over a pass of the program's loop, confirmed as
    /// measured where it is the best coarse point: a loop fit
    /// ([`super::Search::probe_loop_fit_first`]) or a long stack's streaming top
    /// ([`super::Search::probe_streaming_top`]).
    #[serde(default, alias = "loop_fit_over_pass")]
    first_over_pass: Option<usize>,
    /// Every point is measured over a pass ([`super::Search::measured_over_passes`]).
    #[serde(default)]
    over_passes: bool,
    /// k = 0's passes forgotten before any move because the caches were still warming
    /// (see [`MAX_WARMING_PASSES`]).
    #[serde(default)]
    warming_passes: usize,
    stage: Stage,
    /// How the search began to check a gain, until the controller takes it to report.
    #[serde(skip)]
    check: Option<GainCheck>,
    /// The top pages of the stack that only stream (a miss rate of at least 1 -
    /// `region_merge_tolerance`): a first coarse point among them that reads below k = 0
    /// does not end the pass.
    #[serde(default)]
    streaming_top: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Stage {
    /// A phase seen before: measure its remembered `k` first, and keep it if it measures
    /// at least `accept_above`.
    Recall {
        k: usize,
        accept_above: f64,
    },
    Baseline,
    Coarse {
        i: usize,
    },
    Refine {
        a: usize,
        x: usize,
        b: usize,
        misses: u8,
    },
    Confirm,
    /// The best `k` beat k = 0, but the drift seen before the search could explain the
    /// gain over the time between their windows. `at`, a point near `k` measured long
    /// before ([`AdaptiveSearch::revisit_point`]), is measured again: how far IPC moved
    /// at one placement over that time bounds the drift far more tightly than a few
    /// windows before the search can, for a window or two of moves rather than the
    /// balanced blocks' trips to k = 0 and back (zen4-like's art-like at full length:
    /// 31,719 pages each way, 17 windows). `from`: the log's length when it was asked for.
    Revisit {
        k: usize,
        at: usize,
        from: usize,
    },
    /// The best `k` beat k = 0, but the two were measured at different times, and a
    /// program's IPC drifts (a warm-up, a request mix that changes): the coarse pass
    /// measures growing `k` one after another, so a rising IPC looks like a gain of the
    /// largest `k`. The choice is kept only if it also wins in blocks of windows ordered
    /// B A A B, then A B B A (B at `k`, A at k = 0), whose means a linear drift moves
    /// alike. `from`: where the blocks start in the measurement log.
    Verify {
        k: usize,
        from: usize,
    },
}

/// The balanced order of a verification's windows: blocks of B A A B and A B B A in turn.
fn verify_pattern(i: usize) -> bool {
    const B: bool = true;
    const A: bool = false;
    let block = if (i / 4).is_multiple_of(2) {
        [B, A, A, B]
    } else {
        [A, B, B, A]
    };
    block[i % 4]
}

/// `k` added to sorted `points`, unless it is there.
fn insert_sorted(points: &mut Vec<usize>, k: usize) {
    if let Err(at) = points.binary_search(&k) {
        points.insert(at, k);
    }
}

/// Golden-section ratio: the probe goes this far into the larger side of the bracket.
const GOLDEN: f64 = 0.381_966;

/// Most region boundaries the coarse pass measures; more regions than this and doubling
/// is cheaper.
const MAX_COARSE_BOUNDARIES: usize = 8;
/// A group-judged coarse point measured this many margins below the best is past the peak
/// on one window: sharers' phases scatter a group's score by a few margins, not more (on
/// random.md's workloads, 4 margins left 4-6 fewer runs below 0.99 at each of three seed
/// offsets and 2-3 fewer shared runs over the tenant bound; NOTES.md session 42).
const FAR_BELOW_MARGINS: f64 = 4.0;
/// The most pages a cheap first probe confines. Sized by the page budget alone, it grew
/// with it: at 16,384 pages a window neoverse-like's cg-like first probed 10,406 pages
/// (an eighth of its stack), moved each way again in the balanced blocks its warming LLC
/// sent it to (0.9908 -> 0.9896 of off), and zen4-like's cg-like found nothing on its
/// convex gain (tried.md, session 43).
const CHEAP_FIRST_MAX_PAGES: usize = 4096;
/// How far apart, relative to the first's, k = 0's first and last passes' LLC misses per
/// 1000 instructions and IPC may be for the program to count as warm. A loop's pass over
/// the same data at the same placement runs alike (zen4-like's cg-like: MPKI 35.55 and
/// 35.59, IPC 0.1297 and 0.1295), while a warming LLC's passes differ by far more
/// (neoverse-like's art-like: MPKI 16.20 then 13.91).
const STEADY_PASSES: f64 = 0.02;
/// The most passes at k = 0 a search over passes forgets for caches still warming before
/// it moves a page: a program whose passes never run alike drifts by itself, and its gains
/// are verified in balanced blocks instead.
const MAX_WARMING_PASSES: usize = 4;

impl AdaptiveSearch {
    /// `page_budget`: pages moved in one window. A first coarse point that takes more
    /// windows than one to place is preceded by a cheaper one (an eighth of the stack, at
    /// most one window's moves and `CHEAP_FIRST_MAX_PAGES`): inside a region of uniform
    /// pages IPC(k) is close to linear, so part of the region shows part of its gain for
    /// part of the moves, and a stack with nothing to gain is told so before thousands of
    /// pages move there and back.
    pub fn new(
        n: usize,
        max_repeats: usize,
        noise_floor: f64,
        boundaries: Vec<usize>,
        page_budget: usize,
    ) -> Self {
        // Boundaries that split off at least 1/32 of the stack; closer ones are noise.
        let min_gap = n.div_ceil(32).max(1);
        let mut significant: Vec<usize> = Vec::new();
        for &b in boundaries.iter().filter(|&&b| b > 0 && b < n) {
            let prev = significant.last().copied().unwrap_or(0);
            if b - prev >= min_gap && n - b >= min_gap {
                significant.push(b);
            }
        }
        let by_regions = !significant.is_empty() && significant.len() <= MAX_COARSE_BOUNDARIES;
        let cheap_first = n
            .div_ceil(8)
            .min(page_budget)
            .clamp(1, CHEAP_FIRST_MAX_PAGES);
        let coarse = if by_regions {
            if significant[0] > page_budget && cheap_first < significant[0] {
                significant.insert(0, cheap_first);
            }
            // A last region of more than half the stack may hold regions of different
            // pages merged by their miss rate (a stream and a pointer chase that both miss
            // on most loads: random.md's run 87, whose oracle confines 13 of its 122
            // pages): the pass enters it by doubling, as it climbs a stack without
            // regions, and reaches its bottom through three quarters of the stack.
            let last = *significant.last().expect("not empty");
            if n - last > n / 2 {
                let three_quarters = n * 3 / 4;
                let mut k = last * 2;
                while k < three_quarters {
                    significant.push(k);
                    k *= 2;
                }
                significant.push(three_quarters);
            }
            significant.push(n);
            significant
        } else {
            let mut v = Vec::new();
            let mut k = cheap_first;
            while k < n {
                v.push(k);
                k *= 2;
            }
            // The bottom of the stack holds the pages that miss least, the reused data
            // whose confinement is the costliest probe to undo (the data must come back
            // from memory afterwards): the pass reaches the whole stack through three
            // quarters of it, and stops there if IPC falls.
            let three_quarters = n * 3 / 4;
            if v.last().is_some_and(|&last| last < three_quarters) {
                v.push(three_quarters);
            }
            v.push(n);
            v
        };
        AdaptiveSearch {
            n,
            max_repeats: max_repeats.max(1),
            noise_floor,
            boundaries,
            coarse,
            by_regions,
            tolerance: n.div_ceil(16).max(1),
            judged_by_group: false,
            drift_bound: None,
            trend: None,
            page_budget,
            first_over_pass: None,
            over_passes: false,
            warming_passes: 0,
            stage: Stage::Baseline,
            check: None,
            streaming_top: 0,
        }
    }

    /// See [`super::Search::probe_first`].
    pub fn probe_first(&mut self, k: usize) {
        if k == 0 || k >= self.n {
            return;
        }
        insert_sorted(&mut self.boundaries, k);
        // A first coarse point of one page (the cheap one a tight page budget makes) read
        // below k = 0 and ended the pass before the relief of six pages that made the
        // program 1.9 times as fast (random.md's run 303 at offset 1).
        self.coarse.retain(|&c| c > k);
        self.coarse.insert(0, k);
    }

    /// See [`super::Search::probe_loop_fit_first`].
    pub fn probe_loop_fit_first(&mut self, k: usize) {
        self.probe_first(k);
        if self.coarse.first() == Some(&k) {
            self.first_over_pass = Some(k);
        }
    }

    /// See [`super::Search::probe_streaming_top`].
    pub fn probe_streaming_top(&mut self, k: usize) {
        self.only_top(k);
        if self.coarse == [k] {
            self.first_over_pass = Some(k);
        }
    }

    /// See [`super::Search::set_streaming_top`].
    pub fn set_streaming_top(&mut self, k: usize) {
        self.streaming_top = k;
    }

    /// See [`super::Search::probe_fit_point`].
    pub fn probe_fit_point(&mut self, k: usize) {
        if k == 0 || k >= self.n {
            return;
        }
        insert_sorted(&mut self.boundaries, k);
        // Among the coarse points only where they are the stack's regions (doubling
        // already probes every scale) and leave more than a quarter of the stack between
        // the two around it: the region holding the loop then has no probe inside, while
        // between closer points refinement finds the best (zen4-like's art-like at full
        // length, 1.302: its best 31,719 of 39,023 pages lies 1,928 below the fit point,
        // whose probe cost its two windows and, with them, the revisit that spared the
        // balanced blocks to k = 0 and back: 1.266).
        let at = self.coarse.partition_point(|&c| c < k);
        let below = if at == 0 { 0 } else { self.coarse[at - 1] };
        let above = self.coarse.get(at).copied().unwrap_or(self.n);
        if self.by_regions && above - below > self.n / 4 && above != k {
            self.coarse.insert(at, k);
        }
    }

    /// See [`super::Search::measured_over_passes`].
    pub fn measured_over_passes(&mut self) {
        self.over_passes = true;
    }

    /// How fast IPC may drift on its own per window, as far as the search can tell: none
    /// once k = 0's passes ran alike, else what the profile's windows allowed.
    fn drift_bound(&self, m: &Measurements) -> Option<f64> {
        if self.over_passes && k0_passes_alike(m) {
            return Some(0.0);
        }
        self.drift_bound
    }

    /// See [`super::Search::only_top`].
    pub fn only_top(&mut self, k: usize) {
        if k == 0 || k >= self.n {
            return;
        }
        self.n = k;
        self.boundaries.retain(|&b| b < k);
        self.coarse = vec![k];
        self.tolerance = k.div_ceil(16).max(1);
    }

    /// See [`super::Search::cap_first_probe`].
    pub fn cap_first_probe(&mut self, pages: usize) {
        let pages = pages.max(1);
        if self.coarse.first().is_some_and(|&k| k > pages) {
            self.coarse.insert(0, pages);
        }
    }

    /// See [`super::Search::take_check`].
    pub fn take_check(&mut self) -> Option<GainCheck> {
        self.check.take()
    }

    /// See [`super::Search::judged_by_group`].
    pub fn judge_by_group(&mut self) {
        self.judged_by_group = true;
    }

    /// See [`super::Search::drift_before`].
    pub fn drift_before(&mut self, windows: &[(u64, f64)]) {
        if let Some(line) = Line::fit(windows.iter().map(|&(t, y)| (t as f64, y))) {
            self.drift_bound = Some(line.slope.abs() + 2.0 * line.slope_se);
        }
    }

    /// See [`super::Search::trend_before`].
    pub fn trend_before(&mut self, ipcs: &[f64]) {
        let line = Line::fit(ipcs.iter().enumerate().map(|(t, &y)| (t as f64, y)));
        self.trend = line
            .filter(|l| l.slope.abs() > 2.0 * l.slope_se)
            .map(|l| l.slope);
    }

    /// What k = 0 would have measured when `k` was measured, by the trend before the
    /// search: k = 0's mean carried over the time between their windows. `None` without a
    /// significant trend.
    fn k0_at_time_of(&self, m: &Measurements, k: usize) -> Option<f64> {
        // A trend faster than the profile's windows, which came after it, allow has ended
        // before the search: a warm-up's last windows (random.md's run 272: 0.473, 0.476
        // and 0.478 before a profile that read 0.472 for nine windows, and its first
        // probe, at k = 0's pace, was taken for a loss against 0.482).
        let drift_bound = self.drift_bound(m);
        let slope = self
            .trend
            .filter(|s| drift_bound.is_none_or(|bound| s.abs() <= bound))?;
        Some(m.mean(0)? + slope * (mean_time(m, k)? - mean_time(m, 0)?))
    }

    /// See [`super::Search::has_gain`].
    pub fn has_gain(&self, m: &Measurements) -> bool {
        match (m.best(), m.mean(0)) {
            (Some((best, ipc)), Some(base)) if best > 0 => ipc - base > self.margin(m, best, 0),
            _ => false,
        }
    }

    /// See [`super::Search::conclude`].
    pub fn conclude(&mut self) {
        if !matches!(
            self.stage,
            Stage::Confirm | Stage::Revisit { .. } | Stage::Verify { .. }
        ) {
            self.stage = Stage::Confirm;
        }
    }

    /// See [`super::Search::reverify`].
    pub fn reverify(&mut self, k: usize) {
        if k > 0 && k <= self.n {
            self.stage = Stage::Verify { k, from: 0 };
        }
    }

    /// See [`super::Search::recall`].
    pub fn recall(&mut self, k: usize, accept_above: f64) {
        if k > 0 && k <= self.n {
            self.stage = Stage::Recall { k, accept_above };
        }
    }

    /// The smallest IPC difference between `k1` and `k2` that is not noise: about two
    /// standard errors of the difference of their means (wider while the noise estimate
    /// rests on few windows), and never below the floor.
    ///
    /// Once both points have repeats, their own windows say how much they scatter; before
    /// that, every point's repeats are pooled. A third point's repeats can have measured
    /// two states of the cache, not noise: a loop that fits once pages are confined
    /// thrashes again after a probe over-fills the buffer, and reads like k = 0 until a
    /// pass has gone by (random.md's run 475: 287 pages read 0.386 while the loop still fit
    /// and 0.319 after 352 had been probed; pooled, that scatter buried 251's 0.360 and
    /// 0.351 against k = 0's 0.319 twice, and the search kept nothing: 1.010 of off, where
    /// its oracle gains 20%).
    fn margin(&self, m: &Measurements, k1: usize, k2: usize) -> f64 {
        let level = m.mean(k1).unwrap_or(0.0).max(m.mean(k2).unwrap_or(0.0));
        let floor = self.noise_floor * level;
        // (A point against itself, as the coarse pass's far-below test asks when its
        // latest point is the best, keeps the pooled noise.)
        let own = (self.judged_by_group || k1 != k2)
            .then(|| m.variance(k1).zip(m.variance(k2)))
            .flatten();
        if let Some((v1, v2)) = own {
            let (n1, n2) = (m.count(k1) as f64, m.count(k2) as f64);
            let dof = n1 + n2 - 2.0;
            let z = 2.0 + 4.0 / dof;
            // A search judged by its domain weighs each point's own spread (Welch): a
            // placement moves the group's score through its members' bursts, k = 0 does
            // not. A target's own windows share one noise (pooled).
            let se = if self.judged_by_group {
                (v1 / n1 + v2 / n2).sqrt()
            } else {
                let pooled = (v1 * (n1 - 1.0) + v2 * (n2 - 1.0)) / dof;
                (pooled * (1.0 / n1 + 1.0 / n2)).sqrt()
            };
            return (z * se).max(floor);
        }
        match m.noise() {
            Some((sigma, dof)) => {
                let z = 2.0 + 4.0 / dof as f64;
                let n1 = m.count(k1).max(1) as f64;
                let n2 = m.count(k2).max(1) as f64;
                (z * sigma * (1.0 / n1 + 1.0 / n2).sqrt()).max(floor)
            }
            None => floor,
        }
    }

    /// A probe inside (lo, hi) near `u`: a region boundary if one lies within a quarter
    /// of the interval, because IPC(k) bends where the miss-rate class changes.
    fn snap(&self, u: usize, lo: usize, hi: usize) -> usize {
        let reach = (hi - lo) / 4;
        self.boundaries
            .iter()
            .copied()
            .filter(|&b| b > lo && b < hi && b.abs_diff(u) <= reach)
            .min_by_key(|&b| b.abs_diff(u))
            .unwrap_or(u)
    }

    /// When two candidates are within noise of each other, the one with fewer windows is
    /// measured again, while `limit` (and the repeat knob) allows.
    fn repeat_if_close(
        &self,
        m: &Measurements,
        k1: usize,
        k2: usize,
        limit: usize,
    ) -> Option<usize> {
        let (m1, m2) = (m.mean(k1)?, m.mean(k2)?);
        if (m1 - m2).abs() >= self.margin(m, k1, k2) {
            return None;
        }
        let (c1, c2) = (m.count(k1), m.count(k2));
        let k = if c1 <= c2 { k1 } else { k2 };
        (m.count(k) < limit.min(self.max_repeats)).then_some(k)
    }

    pub fn next(&mut self, m: &mut Measurements) -> Next {
        if self.n == 0 {
            return Next::Done(0);
        }
        // Each stage either asks for a window or moves on; bounded because every stage
        // change advances the coarse pass, narrows the bracket, or ends the search.
        loop {
            let flow = match self.stage.clone() {
                Stage::Recall { k, accept_above } => {
                    if m.count(k) == 0 {
                        return Next::Measure(k);
                    }
                    if m.mean(k).expect("measured") >= accept_above {
                        return Next::Done(k);
                    }
                    // The phase is not what it was: search it afresh (this window counts).
                    Flow::Go(Stage::Baseline)
                }
                Stage::Baseline => {
                    if m.count(0) < 2 {
                        return Next::Measure(0);
                    }
                    if self.still_warming(m) {
                        return Next::Measure(0);
                    }
                    Flow::Go(Stage::Coarse { i: 0 })
                }
                Stage::Coarse { i } => self.coarse(m, i),
                Stage::Refine { a, x, b, misses } => self.refine(m, a, x, b, misses),
                Stage::Confirm => self.confirm(m),
                Stage::Revisit { k, at, from } => self.revisit(m, k, at, from),
                Stage::Verify { k, from } => return self.verify(m, k, from),
            };
            match flow {
                Flow::Ask(next) => return next,
                Flow::Go(stage) => self.stage = stage,
                Flow::Check(check, stage) => {
                    self.check = Some(check);
                    self.stage = stage;
                }
            }
        }
    }

    /// Whether k = 0's passes, measured before any move of a search over passes, still
    /// tell caches warming (the last one missed less than the one before, or ran faster
    /// with no more misses, by more than [`STEADY_PASSES`]): the earlier ones are forgotten
    /// and another is measured, up to [`MAX_WARMING_PASSES`]. Once the last two run alike,
    /// only they are kept: they bound the drift to nothing, so a placement that beats them
    /// is kept without moving its pages there and back to verify it. A first profile
    /// starts as soon as the program misses, while a large LLC still fills: on spr-like,
    /// cg-like's k = 0 read MPKI 11.10 over its first pass and 6.03 over its second, and
    /// its search moved 92,155 pages out and back twice to verify a gain of +4% that one
    /// move would have kept. Passes that scatter without warming are not waited for:
    /// zen4-like's art-like, profiled for two windows in a scratch build, read MPKI 28.12,
    /// then 29.34, and four more passes at k = 0 that scattered as much, its stream
    /// unconfined meanwhile, cost it 1.374 -> 1.349 of off (NOTES.md, session 99).
    fn still_warming(&mut self, m: &mut Measurements) -> bool {
        let log = m.in_order();
        if !self.over_passes || log.iter().any(|w| w.k != 0) {
            return false;
        }
        let [.., a, b] = log else {
            return false;
        };
        let (Some(mpki_a), Some(mpki_b)) = (a.mpki, b.mpki) else {
            return false;
        };
        let warming = mpki_b < (1.0 - STEADY_PASSES) * mpki_a
            || (b.ipc > (1.0 + STEADY_PASSES) * a.ipc && mpki_b <= (1.0 + STEADY_PASSES) * mpki_a);
        let wait = warming && self.warming_passes < MAX_WARMING_PASSES;
        self.warming_passes += m.forget_all_but_last(if wait { 1 } else { 2 });
        wait
    }

    /// The coarse pass at its `i`-th point.
    fn coarse(&self, m: &Measurements, i: usize) -> Flow {
        let k = self.coarse[i];
        if m.count(k) == 0 {
            return Flow::Ask(Next::Measure(k));
        }
        let (best, best_ipc) = m.best().expect("k = 0 was measured");
        let ipc = m.mean(k).expect("measured");
        let past_peak = best != k && ipc < best_ipc - self.margin(m, k, best);
        // A window this far below the best is no sharer's phase: a second one at a
        // placement that bad (the whole stack confined cost its searcher 64% on random
        // run c39069bb) only costs another window there.
        let far_below = ipc < best_ipc - FAR_BELOW_MARGINS * self.margin(m, k, best);
        if past_peak && !far_below && self.judged_by_group && self.max_repeats >= 2 {
            if let Some(again) = [k, best].into_iter().find(|&x| m.count(x) < 2) {
                return Flow::Ask(Next::Measure(again));
            }
        }
        // Below k = 0 and still falling: however noisy the windows, nothing
        // so far hints at a gain further on, and each larger probe moves more
        // pages (on a machine where confining also squeezes a physically
        // indexed L2, the probes cost more than any gain could repay). A search
        // judged by an LLC group too: where the others gain, their gain shows as
        // soon as part of the polluter is confined (noisy-neighbour on ppc970fx
        // rises from the first coarse point); where they cannot, the probes
        // only move pages (on xeon-like, 0.927 -> 0.980).
        let falling = i > 0
            && ipc < m.mean(0).expect("measured")
            && ipc < m.mean(self.coarse[i - 1]).expect("measured");
        // Below what k = 0 would run by now, beyond noise, while IPC was rising by itself:
        // each larger probe would look better than the last for the trend alone.
        let below_trend = self
            .k0_at_time_of(m, k)
            .is_some_and(|k0| ipc < k0 - self.margin(m, k, 0));
        // A first point that confines only pages that (nearly) only miss loses (almost) no
        // hits of its own: what it costs is mostly the buffer's squatters moved out, which
        // every placement pays and the reused pages further down may repay. random.md's
        // bea8881e (alone on tiny): the 87 pages its stream's profile saw had passed by,
        // and their probe read 5% below k = 0 for the squatters it moved out (as fast as
        // k = 0 with them left in); 175 pages, the random region below them too, made it
        // 1.40 times as fast.
        let streams_only =
            i == 0 && best == 0 && k <= self.streaming_top && i + 1 < self.coarse.len();
        if (past_peak || below_trend) && streams_only {
            return Flow::Go(Stage::Coarse { i: i + 1 });
        }
        if past_peak || falling || below_trend || i + 1 == self.coarse.len() {
            // Nothing in the coarse pass beats k = 0 beyond noise: refining
            // would only spend windows at worse placements. Confirm instead.
            let base = m.mean(0).expect("measured");
            // Judged by a group, the gain is the other tenants': it comes when
            // a polluter is (almost) wholly confined, and measuring placements
            // between coarse points costs more than it can find. A loop fit
            // measured over its loop's pass is confirmed as it is: refinement
            // measures its neighbours window by window, and a window of a loop
            // larger than the cache reads whichever part of the pass it caught.
            if best == 0
                || best_ipc - base <= self.margin(m, best, 0)
                || self.judged_by_group
                || self.first_over_pass == Some(best)
            {
                return Flow::Go(Stage::Confirm);
            }
            // Bracket the best point by its measured neighbours.
            let ks: Vec<usize> = m.iter().map(|(k, _, _)| k).collect();
            let j = ks
                .iter()
                .position(|&x| x == best)
                .expect("best is measured");
            let a = if j == 0 { 0 } else { ks[j - 1] };
            let b = ks.get(j + 1).copied().unwrap_or(self.n);
            Flow::Go(Stage::Refine {
                a,
                x: best,
                b,
                misses: 0,
            })
        } else {
            Flow::Go(Stage::Coarse { i: i + 1 })
        }
    }

    /// Golden-section refinement of the bracket (a, b) around the best point `x`.
    fn refine(&self, m: &Measurements, a: usize, x: usize, b: usize, misses: u8) -> Flow {
        if b - a <= self.tolerance || (self.by_regions && misses >= 2) {
            return Flow::Go(Stage::Confirm);
        }
        // Flat top: both ends measured and within noise of the middle.
        let flat = [a, b].iter().all(|&e| {
            e == x
                || m.mean(e)
                    .is_some_and(|f| (f - m.mean(x).unwrap_or(f)).abs() < self.margin(m, e, x))
        });
        if flat && m.count(a) > 0 && m.count(b) > 0 {
            return Flow::Go(Stage::Confirm);
        }
        let (lo, hi) = if x - a >= b - x { (a, x) } else { (x, b) };
        let raw = if lo == a {
            x - ((x - a) as f64 * GOLDEN).round() as usize
        } else {
            x + ((b - x) as f64 * GOLDEN).round() as usize
        };
        let u = self.snap(raw, lo, hi);
        if u == a || u == b || u == x {
            return Flow::Go(Stage::Confirm);
        }
        if m.count(u) == 0 {
            return Flow::Ask(Next::Measure(u));
        }
        // While refining, one repeat settles the direction well enough: both
        // sides are within noise of each other anyway.
        if let Some(k) = self.repeat_if_close(m, u, x, 2) {
            return Flow::Ask(Next::Measure(k));
        }
        let (fu, fx) = (m.mean(u).expect("measured"), m.mean(x).expect("measured"));
        let misses = if fu > fx { 0 } else { misses + 1 };
        Flow::Go(match (fu > fx, u > x) {
            (true, true) => Stage::Refine {
                a: x,
                x: u,
                b,
                misses,
            },
            (true, false) => Stage::Refine {
                a,
                x: u,
                b: x,
                misses,
            },
            (false, true) => Stage::Refine { a, x, b: u, misses },
            (false, false) => Stage::Refine { a: u, x, b, misses },
        })
    }

    /// The search's last word on its own measurements: the best point goes on to be
    /// verified if it beats k = 0 beyond noise, else k = 0.
    fn confirm(&self, m: &Measurements) -> Flow {
        // A search told to conclude before it measured k = 0 (one that began at a placement
        // already made, a recalled k, and concluded after that window or before it) has
        // nothing to judge against: random.md's run 107 at run-seed offset 2 panicked here,
        // with a scratch rule for probes.
        let Some(base) = m.mean(0) else {
            return Flow::Ask(Next::Measure(0));
        };
        let (best, best_ipc) = m.best().expect("k = 0 is measured");
        if best == 0 {
            return Flow::Ask(Next::Done(0));
        }
        let margin = self.margin(m, best, 0);
        // A gain the trend before the search could explain is verified in balanced blocks
        // whatever the drift within the profile's windows.
        let trend_explains = self.k0_at_time_of(m, best).is_some_and(|k0| best_ipc <= k0);
        if best_ipc - base > margin {
            // A drift as fast as the one seen before the search, over the time between the
            // k = 0 windows and `best`'s, could not explain the gain: keep it, after
            // measuring it once more (the winner of many noisy windows is flattered by
            // noise).
            let apart =
                (mean_time(m, best).expect("measured") - mean_time(m, 0).expect("measured")).abs();
            let gain = best_ipc - base - margin;
            let drift_bound = self.drift_bound(m);
            if let Some(bound) = drift_bound.filter(|_| !trend_explains) {
                if gain > bound * apart {
                    if m.count(best) < 2 && self.max_repeats >= 2 {
                        return Flow::Ask(Next::Measure(best));
                    }
                    return Flow::Ask(Next::Done(best));
                }
            }
            if !trend_explains {
                if let Some(at) = self.revisit_point(m, best, apart) {
                    let from = m.in_order().len();
                    let check = GainCheck::Revisit {
                        k: best,
                        at,
                        gain,
                        apart,
                    };
                    return Flow::Check(check, Stage::Revisit { k: best, at, from });
                }
            }
            let why = match drift_bound {
                _ if trend_explains => BlocksWhy::Trend,
                None => BlocksWhy::DriftUnknown,
                Some(drift) => BlocksWhy::Drift {
                    gain,
                    drift,
                    apart,
                    reach: self.revisit_reach(best),
                },
            };
            // The last window, if it was at `best`, opens the first block.
            let log = m.in_order();
            let from = log.len() - usize::from(log.last().is_some_and(|w| w.k == best));
            let check = GainCheck::Blocks { k: best, why };
            return Flow::Check(check, Stage::Verify { k: best, from });
        }
        // Of the best point and k = 0, the one with fewer windows (the best on a tie).
        let fewer = if m.count(best) <= m.count(0) { best } else { 0 };
        if m.count(fewer) < self.max_repeats {
            return Flow::Ask(Next::Measure(fewer));
        }
        // Ahead of k = 0 by more than half the margin, the best point is measured again,
        // up to twice the repeats: a placement whose windows cycle with the program's
        // passes over its data scatters far more than k = 0 does, and its gain shows only
        // over more of them (zen4-like's cg-like: 126,024 pages confined measured 0.161
        // and 0.145 against 0.129 and 0.130 at k = 0, all seven windows between 111,726
        // and 144,930 pages were above both at k = 0, and the search chose k = 0).
        // Those windows run at a placement that measured faster than k = 0; a smaller
        // lead would not show even then (twice the windows narrow the margin by about a
        // third). k = 0 is measured again whenever it has fewer windows than the best:
        // once the best has more, k = 0's few windows dominate the margin's standard error
        // (run 465 of random.md: 1.036 -> 1.359, oracle 1.397).
        if best_ipc - base > margin / 2.0 && m.count(best) < 2 * self.max_repeats {
            return Flow::Ask(Next::Measure(fewer));
        }
        // Never worse than not running: a gain within noise is no gain.
        Flow::Ask(Next::Done(0))
    }

    /// The point to measure again for [`Stage::Revisit`], if one could settle it: of the
    /// points other than k = 0 within two windows' moves of `k` and a quarter of `k`'s
    /// pages (a revisit is a cost whenever the blocks follow it, so it must be much cheaper
    /// than the trip to k = 0 it may spare), the nearest to `k` that was first measured at
    /// least half of `apart` (the windows between k = 0's and `k`'s) ago, and whose
    /// revisit could keep `k` even if it read the same as before: its noise over the time
    /// between alone must not explain the gain. A drift seen over a shorter span says too
    /// little about the rest (a warm-up that slows down would be missed).
    fn revisit_point(&self, m: &Measurements, k: usize, apart: f64) -> Option<usize> {
        let log = m.in_order();
        let now = log.last()?.at as f64;
        let (sigma, dof) = m.noise()?;
        let z = 2.0 + 4.0 / dof as f64;
        let gain = m.mean(k)? - m.mean(0)? - self.margin(m, k, 0);
        let first_seen = |x: usize| log.iter().find(|w| w.k == x).map(|w| w.at as f64);
        let could_settle = |x: usize| {
            let span = now - mean_time(m, x).unwrap_or(now);
            let noise_alone = z * sigma * (1.0 / m.count(x).max(1) as f64 + 1.0).sqrt();
            span > 0.0 && gain > noise_alone / span * apart
        };
        let reach = self.revisit_reach(k);
        m.iter()
            .map(|(x, _, _)| x)
            .filter(|&x| x != 0 && x != k && x.abs_diff(k) <= reach)
            .filter(|&x| first_seen(x).is_some_and(|t| now - t >= apart / 2.0))
            .filter(|&x| could_settle(x))
            .min_by_key(|&x| x.abs_diff(k))
    }

    /// How far from `k` a revisit may go: two windows' moves, and a quarter of `k`.
    fn revisit_reach(&self, k: usize) -> usize {
        (2 * self.page_budget).min(k / 4)
    }

    /// [`Stage::Revisit`]: once `at` is measured again, the drift per window there (its
    /// change over the time between its windows, plus `z` standard errors) times the
    /// windows between k = 0's and `k`'s must be less than `k`'s gain beyond noise for
    /// `k` to be kept (after a second window at `k`, as confirming asks); otherwise the
    /// balanced blocks decide.
    fn revisit(&self, m: &Measurements, k: usize, at: usize, from: usize) -> Flow {
        let log = m.in_order();
        let (before, since) = log.split_at(from.min(log.len()));
        // The mean time and IPC of `at`'s windows in a part of the log, and their count.
        let windows = |part: &[Measured]| -> Option<(f64, f64, f64)> {
            let seen: Vec<&Measured> = part.iter().filter(|w| w.k == at).collect();
            let n = seen.len() as f64;
            (n > 0.0).then(|| {
                let t = seen.iter().map(|w| w.at as f64).sum::<f64>() / n;
                (t, seen.iter().map(|w| w.ipc).sum::<f64>() / n, n)
            })
        };
        let Some(late) = windows(since) else {
            return Flow::Ask(Next::Measure(at));
        };
        let blocks = Stage::Verify {
            k,
            from: log.len() - usize::from(log.last().is_some_and(|w| w.k == k)),
        };
        let verify = Flow::Go(blocks.clone());
        let (Some(early), Some((sigma, dof))) = (windows(before), m.noise()) else {
            return verify;
        };
        let span = late.0 - early.0;
        if span <= 0.0 {
            return verify;
        }
        let z = 2.0 + 4.0 / dof as f64;
        let drift = ((late.1 - early.1) / span).abs()
            + z * sigma * (1.0 / early.2 + 1.0 / late.2).sqrt() / span;
        let (Some(best), Some(base)) = (m.mean(k), m.mean(0)) else {
            return verify;
        };
        let apart = (mean_time(m, k).expect("measured") - mean_time(m, 0).expect("measured")).abs();
        let gain = best - base - self.margin(m, k, 0);
        if gain <= drift * apart {
            let why = BlocksWhy::Revisited {
                at,
                gain,
                drift,
                apart,
            };
            return Flow::Check(GainCheck::Blocks { k, why }, blocks);
        }
        if m.count(k) < 2 && self.max_repeats >= 2 {
            return Flow::Ask(Next::Measure(k));
        }
        Flow::Ask(Next::Done(k))
    }

    /// The balanced blocks of [`Stage::Verify`]: after each, keep `k` if it beats k = 0
    /// beyond noise, give up if it does not beat it at all, or, while the repeat knob
    /// allows, measure another block. The first block gives up early, at its first look
    /// back at k = 0, if k = 0 runs at least as fast as `k` did just before.
    fn verify(&self, m: &Measurements, k: usize, from: usize) -> Next {
        let log = &m.in_order()[from..];
        let another = Next::Measure(if verify_pattern(log.len()) { k } else { 0 });
        // B A A: the rest of the block would move `k`'s pages twice more to tell a gain
        // from a drift (spr-like's cg-like at auto:0.2, its LLC still warming: each move
        // of 1,716 pages cost 40% of a window). A falling drift favours B; a rising one
        // hides from A only a gain it outgrows in the two or three windows between them,
        // too small to tell from it anyway.
        if let [b, a1, a2] = log {
            if b.k == k && a1.k == 0 && a2.k == 0 && (a1.ipc + a2.ipc) / 2.0 >= b.ipc {
                return Next::Done(0);
            }
        }
        if log.is_empty() || !log.len().is_multiple_of(4) {
            return another;
        }
        let blocks = log.len() / 4;
        // The windows of a block are not evenly spaced (a move's settle windows fall
        // between them), so the drift is fitted, not assumed to cancel.
        let Some(fit) = TrendFit::of(log, k) else {
            return Next::Done(0);
        };
        // The fit's own residuals say how noisy a window is once they are enough;
        // before that, the search's pooled repeats do.
        let sigma = fit.own_noise(log.len()).or_else(|| m.noise());
        if fit.gain > self.fit_margin(&fit, sigma, log) {
            Next::Done(k)
        } else if fit.gain <= 0.0 {
            Next::Done(0)
        } else if (blocks >= self.max_repeats || k > self.page_budget)
            && self.earlier_windows_confirm(m, k, from, &fit, sigma)
        {
            Next::Done(k)
        } else if blocks >= self.max_repeats {
            Next::Done(0)
        } else {
            another
        }
    }

    /// Whether the search's windows before the blocks, at `k` and at k = 0, tell the
    /// gain the blocks tell, and fitted together with them show it beyond noise. A
    /// placement whose windows cycle with the program's passes over its data needs many
    /// of them to show its gain. Asked once the blocks are spent (random.md's run 217: two
    /// blocks left +16% at k = 59 within their own noise, its oracle +10%), and after
    /// each block when a trip to k = 0 and back takes more than a window's moves
    /// (zen4-like's cg-like at seed 3: 120,270 pages each way at 4,096 a window, and the
    /// run ended inside the second block, 0.959 of off). A cheap block is measured
    /// instead: random.md's run 133 at seed offset 2 kept 7 pages after one block that
    /// agreed with the search's windows, and ran 9% slower for it, where a second block
    /// said no. Earlier windows that tell another gain were measured in another phase,
    /// the target's or its sharers', and are not used.
    fn earlier_windows_confirm(
        &self,
        m: &Measurements,
        k: usize,
        from: usize,
        blocks: &TrendFit,
        sigma: Option<(f64, usize)>,
    ) -> bool {
        let log = m.in_order();
        let earlier: Vec<Measured> = log[..from]
            .iter()
            .filter(|w| w.k == k || w.k == 0)
            .copied()
            .collect();
        let mean_at = |x: usize| {
            let v: Vec<f64> = earlier.iter().filter(|w| w.k == x).map(|w| w.ipc).collect();
            (!v.is_empty()).then(|| (v.iter().sum::<f64>() / v.len() as f64, v.len() as f64))
        };
        let (Some((at_k, n_k)), Some((at_0, n_0)), Some((sigma, dof))) =
            (mean_at(k), mean_at(0), sigma)
        else {
            return false;
        };
        let z = 2.0 + 4.0 / dof as f64;
        let tolerance = z * sigma * (1.0 / n_k + 1.0 / n_0 + blocks.gain_scale.powi(2)).sqrt();
        if (at_k - at_0 - blocks.gain).abs() > tolerance {
            return false;
        }
        let all: Vec<Measured> = earlier.iter().chain(&log[from..]).copied().collect();
        let Some(fit) = TrendFit::of(&all, k) else {
            return false;
        };
        let sigma = fit.own_noise(all.len());
        sigma.is_some() && fit.gain > self.fit_margin(&fit, sigma, &all)
    }

    /// The gain a trend-and-placement fit over `windows` must pass to be told from noise:
    /// its standard error at `sigma` (a window's noise, with its degrees of freedom) times
    /// 2 + 4 / dof, and at least the noise floor of their fastest window.
    fn fit_margin(&self, fit: &TrendFit, sigma: Option<(f64, usize)>, windows: &[Measured]) -> f64 {
        let level = windows.iter().map(|w| w.ipc).fold(0.0, f64::max);
        let margin = sigma.map_or(0.0, |(s, dof)| {
            (2.0 + 4.0 / dof as f64) * s * fit.gain_scale
        });
        margin.max(self.noise_floor * level)
    }
}

/// Whether k = 0's first and last windows with known LLC misses, at least two, ran alike:
/// their misses and their IPC within [`STEADY_PASSES`] of the first's (a warm-up that is
/// not the LLC's, a TLB's or a branch predictor's, shows in IPC alone).
fn k0_passes_alike(m: &Measurements) -> bool {
    let mut k0 = m
        .in_order()
        .iter()
        .filter(|w| w.k == 0)
        .filter_map(|w| w.mpki.map(|mpki| (w.ipc, mpki)));
    let Some(first) = k0.next() else {
        return false;
    };
    let alike = |a: f64, b: f64| (b - a).abs() <= STEADY_PASSES * a;
    k0.next_back()
        .is_some_and(|last| alike(first.0, last.0) && alike(first.1, last.1))
}

/// The mean window number of the windows measured at `k`.
fn mean_time(m: &Measurements, k: usize) -> Option<f64> {
    let at = m
        .in_order()
        .iter()
        .filter(|w| w.k == k)
        .map(|w| w.at as f64);
    let count = at.clone().count();
    (count > 0).then(|| at.sum::<f64>() / count as f64)
}

/// A least-squares line through points (t, y): its slope and the slope's standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Line {
    slope: f64,
    slope_se: f64,
}

impl Line {
    /// `None` with fewer than three points (a slope and its error need three) or one time.
    fn fit(points: impl Iterator<Item = (f64, f64)> + Clone) -> Option<Line> {
        let n = points.clone().count() as f64;
        if n < 3.0 {
            return None;
        }
        let t_mean = points.clone().map(|(t, _)| t).sum::<f64>() / n;
        let y_mean = points.clone().map(|(_, y)| y).sum::<f64>() / n;
        let stt: f64 = points.clone().map(|(t, _)| (t - t_mean).powi(2)).sum();
        if stt == 0.0 {
            return None;
        }
        let sty: f64 = points
            .clone()
            .map(|(t, y)| (t - t_mean) * (y - y_mean))
            .sum();
        let slope = sty / stt;
        let rss: f64 = points
            .map(|(t, y)| (y - y_mean - slope * (t - t_mean)).powi(2))
            .sum();
        Some(Line {
            slope,
            slope_se: (rss / (n - 2.0) / stt).sqrt(),
        })
    }
}

/// IPC fitted as a line in time plus a gain while `k` is confined: least squares over
/// the windows of a verification.
#[derive(Clone, Copy, Debug, PartialEq)]
struct TrendFit {
    /// IPC at `k` less IPC at k = 0, the drift taken out.
    gain: f64,
    /// The gain's standard error is one window's noise times this.
    gain_scale: f64,
    /// Residual sum of squares.
    rss: f64,
}

impl TrendFit {
    /// `None` when time and placement cannot be told apart (no window at one of them).
    fn of(windows: &[Measured], k: usize) -> Option<TrendFit> {
        let n = windows.len() as f64;
        let t_mean = windows.iter().map(|w| w.at as f64).sum::<f64>() / n;
        let rows: Vec<[f64; 3]> = windows
            .iter()
            .map(|w| [1.0, w.at as f64 - t_mean, f64::from(u8::from(w.k == k))])
            .collect();
        // Normal equations: (X'X) beta = X'y.
        let mut xtx = [[0.0; 3]; 3];
        let mut xty = [0.0; 3];
        for (row, w) in rows.iter().zip(windows) {
            for i in 0..3 {
                xty[i] += row[i] * w.ipc;
                for j in 0..3 {
                    xtx[i][j] += row[i] * row[j];
                }
            }
        }
        let inv = invert3(&xtx)?;
        let beta: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|j| inv[i][j] * xty[j]).sum())
            .collect();
        let rss = rows
            .iter()
            .zip(windows)
            .map(|(row, w)| {
                let fitted: f64 = (0..3).map(|i| row[i] * beta[i]).sum();
                (w.ipc - fitted).powi(2)
            })
            .sum();
        Some(TrendFit {
            gain: beta[2],
            gain_scale: inv[2][2].max(0.0).sqrt(),
            rss,
        })
    }

    /// A window's noise by the fit's own residuals over its `windows` windows, with its
    /// degrees of freedom, once there are at least three.
    fn own_noise(&self, windows: usize) -> Option<(f64, usize)> {
        let dof = windows.checked_sub(3).filter(|&dof| dof >= 3)?;
        Some(((self.rss / dof as f64).sqrt(), dof))
    }
}

/// The inverse of a 3 × 3 matrix, if it is not (nearly) singular.
fn invert3(a: &[[f64; 3]; 3]) -> Option<[[f64; 3]; 3]> {
    let cof = |r: usize, c: usize| {
        let (r1, r2) = ((r + 1) % 3, (r + 2) % 3);
        let (c1, c2) = ((c + 1) % 3, (c + 2) % 3);
        a[r1][c1] * a[r2][c2] - a[r1][c2] * a[r2][c1]
    };
    let det: f64 = (0..3).map(|c| a[0][c] * cof(0, c)).sum();
    let scale = a.iter().flatten().map(|x| x.abs()).fold(0.0, f64::max);
    if det.abs() <= 1e-12 * scale.powi(3) {
        return None;
    }
    let mut inv = [[0.0; 3]; 3];
    for (r, row) in inv.iter_mut().enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            // The adjugate is the transposed cofactor matrix.
            *x = cof(c, r) / det;
        }
    }
    Some(inv)
}

/// What a stage of the adaptive search does next: ask for a window (or end), or hand over
/// to another stage.
enum Flow {
    Ask(Next),
    Go(Stage),
    /// Go to a stage that checks a gain against drift, and say how and why.
    Check(GainCheck, Stage),
}
