//! The search for `k`: how many pages from the top of the stack to confine.
//!
//! A search is sans-IO: it proposes the next `k` to measure ([`Search::next`]), is told the
//! IPC of a window at that `k` ([`Search::record`]), and finally says which `k` to keep.
//! Moving pages and measuring windows is the controller's job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::knobs::{Knobs, SearchMode};

/// What the search wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Next {
    /// Confine the top `k` pages and measure a window.
    Measure(usize),
    /// The search is over: keep the top `k` pages confined.
    Done(usize),
}

/// Windows measured at each `k`, and what they say.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    by_k: BTreeMap<usize, Vec<f64>>,
}

impl Measurements {
    pub fn record(&mut self, k: usize, ipc: f64) {
        self.by_k.entry(k).or_default().push(ipc);
    }

    /// Windows measured at `k`.
    pub fn count(&self, k: usize) -> usize {
        self.by_k.get(&k).map_or(0, Vec::len)
    }

    /// Mean IPC at `k`, if measured.
    pub fn mean(&self, k: usize) -> Option<f64> {
        let v = self.by_k.get(&k)?;
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Every measured `k` with its mean IPC and window count, by `k`.
    pub fn iter(&self) -> impl Iterator<Item = (usize, f64, usize)> + '_ {
        self.by_k
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(&k, v)| (k, v.iter().sum::<f64>() / v.len() as f64, v.len()))
    }

    /// Sample variance of one window's IPC at `k`; `None` before a repeat.
    pub fn variance(&self, k: usize) -> Option<f64> {
        let v = self.by_k.get(&k).filter(|v| v.len() > 1)?;
        let m = v.iter().sum::<f64>() / v.len() as f64;
        Some(v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64)
    }

    /// Pooled standard deviation of one window's IPC, from every `k` measured more than
    /// once, with its degrees of freedom; `None` before any repeat.
    pub fn noise(&self) -> Option<(f64, usize)> {
        let (mut ss, mut dof) = (0.0, 0);
        for v in self.by_k.values().filter(|v| v.len() > 1) {
            let m = v.iter().sum::<f64>() / v.len() as f64;
            ss += v.iter().map(|x| (x - m) * (x - m)).sum::<f64>();
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

/// Adaptive search: k = 0 always competes. A coarse pass measures the region boundaries of
/// the stack in order (IPC(k) bends where the miss-rate class changes, and is close to
/// linear inside a region of uniform pages), or doubling `k` when the stack has no clear
/// regions, until IPC falls significantly past its best. Golden-section refinement then
/// narrows the bracket around the best point. Comparisons within the measured noise are
/// repeated; the result must beat k = 0 by more than the noise.
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
    /// before the coarse pass stops, and two candidates measured more than once are
    /// compared by their own spreads rather than the pooled one.
    #[serde(default)]
    judged_by_group: bool,
    stage: Stage,
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
}

/// Golden-section ratio: the probe goes this far into the larger side of the bracket.
const GOLDEN: f64 = 0.381_966;

/// Most region boundaries the coarse pass measures; more regions than this and doubling
/// is cheaper.
const MAX_COARSE_BOUNDARIES: usize = 8;

impl AdaptiveSearch {
    pub fn new(n: usize, max_repeats: usize, noise_floor: f64, boundaries: Vec<usize>) -> Self {
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
        let coarse = if by_regions {
            significant.push(n);
            significant
        } else {
            let mut v = Vec::new();
            let mut k = n.div_ceil(8).max(1);
            while k < n {
                v.push(k);
                k *= 2;
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
            stage: Stage::Baseline,
        }
    }

    /// The smallest IPC difference between `k1` and `k2` that is not noise: about two
    /// standard errors of the difference of their means (wider while the noise estimate
    /// rests on few windows), and never below the floor.
    fn margin(&self, m: &Measurements, k1: usize, k2: usize) -> f64 {
        let level = m.mean(k1).unwrap_or(0.0).max(m.mean(k2).unwrap_or(0.0));
        let floor = self.noise_floor * level;
        if self.judged_by_group {
            if let (Some(v1), Some(v2)) = (m.variance(k1), m.variance(k2)) {
                let (n1, n2) = (m.count(k1) as f64, m.count(k2) as f64);
                let z = 2.0 + 4.0 / (n1 + n2 - 2.0);
                return (z * (v1 / n1 + v2 / n2).sqrt()).max(floor);
            }
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

    fn next(&mut self, m: &Measurements) -> Next {
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
                    Flow::Go(Stage::Coarse { i: 0 })
                }
                Stage::Coarse { i } => self.coarse(m, i),
                Stage::Refine { a, x, b, misses } => self.refine(m, a, x, b, misses),
                Stage::Confirm => return self.confirm(m),
            };
            match flow {
                Flow::Ask(next) => return next,
                Flow::Go(stage) => self.stage = stage,
            }
        }
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
        if past_peak && self.judged_by_group && self.max_repeats >= 2 {
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
        if past_peak || falling || i + 1 == self.coarse.len() {
            // Nothing in the coarse pass beats k = 0 beyond noise: refining
            // would only spend windows at worse placements. Confirm instead.
            let base = m.mean(0).expect("measured");
            // Judged by a group, the gain is the other tenants': it comes when
            // a polluter is (almost) wholly confined, and measuring placements
            // between coarse points costs more than it can find.
            if best == 0 || best_ipc - base <= self.margin(m, best, 0) || self.judged_by_group {
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

    /// The search's last word: the best point if it beats k = 0 beyond noise, else k = 0.
    fn confirm(&self, m: &Measurements) -> Next {
        let (best, best_ipc) = m.best().expect("k = 0 was measured");
        if best == 0 {
            return Next::Done(0);
        }
        let base = m.mean(0).expect("measured");
        if best_ipc - base > self.margin(m, best, 0) {
            // The winner of many noisy windows is flattered by noise; measure
            // it once more before trusting it, then decide.
            if m.count(best) < 2 && self.max_repeats >= 2 {
                return Next::Measure(best);
            }
            return Next::Done(best);
        }
        let k = if m.count(best) <= m.count(0) { best } else { 0 };
        if m.count(k) < self.max_repeats {
            return Next::Measure(k);
        }
        // Never worse than not running: a gain within noise is no gain.
        Next::Done(0)
    }
}

/// What a stage of the adaptive search does next: ask for a window (or end), or hand over
/// to another stage.
enum Flow {
    Ask(Next),
    Go(Stage),
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
    /// rate changes.
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
            a.judged_by_group = true;
        }
    }

    /// Start by measuring `k`, the remembered choice of an earlier phase whose stack this
    /// one repeats, and end there if it measures at least `accept_above` (the remembered
    /// search measured k = 0 then; a phase that comes back need not pay for it again).
    /// Otherwise the search goes on as usual, with that window as a measurement. Adaptive
    /// search only: linear search is Algorithm 1 as the paper has it.
    pub fn recall(&mut self, k: usize, accept_above: f64) {
        if let Some(a) = self.adaptive.as_mut() {
            if k > 0 && k <= a.n {
                a.stage = Stage::Recall { k, accept_above };
            }
        }
    }

    /// What to do next. Asking again without recording returns the same request.
    pub fn next_step(&mut self) -> Next {
        match (&mut self.linear, &mut self.adaptive) {
            (Some(l), _) => l.next(&self.measurements),
            (_, Some(a)) => a.next(&self.measurements),
            (None, None) => Next::Done(0),
        }
    }

    /// One window's IPC with the top `k` pages confined.
    pub fn record(&mut self, k: usize, ipc: f64) {
        self.measurements.record(k, ipc);
    }

    pub fn measurements(&self) -> &Measurements {
        &self.measurements
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mut s: Search, f: impl Fn(usize) -> f64) -> (usize, usize) {
        let mut windows = 0;
        loop {
            match s.next_step() {
                Next::Measure(k) => {
                    windows += 1;
                    assert!(windows < 1000, "search does not end");
                    s.record(k, f(k));
                }
                Next::Done(k) => return (k, windows),
            }
        }
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
    fn the_coarse_pass_stops_when_ipc_is_below_k0_and_falling() {
        // A gentle decline, each step within the noise floor: no probe is significantly
        // worse than k = 0, but two in a row below it and falling end the coarse pass
        // before the large (expensive) probes.
        let knobs = Knobs::default();
        let mut s = Search::new(&knobs, 1000, vec![]);
        let mut measured = Vec::new();
        let k = loop {
            match s.next_step() {
                Next::Measure(k) => {
                    measured.push(k);
                    s.record(k, 1.0 - k as f64 * 1e-5);
                }
                Next::Done(k) => break k,
            }
        };
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
}
