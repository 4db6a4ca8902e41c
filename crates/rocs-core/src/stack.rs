//! The miss-rate stack: a target's profiled pages ordered by miss rate, highest first.

use serde::{Deserialize, Serialize};

use crate::{PageProfile, VirtPage};

/// One page of the stack with the counts that placed it there.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StackEntry {
    pub page: VirtPage,
    pub hits: u64,
    pub misses: u64,
    pub miss_rate: f64,
}

/// Pages ordered by miss rate, highest first; ties go to the page with more misses, then
/// to the lower address so that the order is deterministic.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MissRateStack {
    entries: Vec<StackEntry>,
}

impl MissRateStack {
    /// Order the given entries.
    pub fn from_entries(mut entries: Vec<StackEntry>) -> Self {
        entries.sort_by(|a, b| {
            b.miss_rate
                .total_cmp(&a.miss_rate)
                .then(b.misses.cmp(&a.misses))
                .then(a.page.cmp(&b.page))
        });
        MissRateStack { entries }
    }

    /// One entry per page that has at least one LLC sample, each ranked on its own.
    pub fn from_profile(profile: &PageProfile) -> Self {
        let entries = profile
            .iter()
            .filter_map(|(page, c)| {
                c.miss_rate().map(|miss_rate| StackEntry {
                    page,
                    hits: c.hits as u64,
                    misses: c.misses as u64,
                    miss_rate,
                })
            })
            .collect();
        Self::from_entries(entries)
    }

    pub fn entries(&self) -> &[StackEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `k` pages at the top of the stack (the first `k` to confine).
    pub fn top(&self, k: usize) -> impl Iterator<Item = VirtPage> + '_ {
        self.entries.iter().take(k).map(|e| e.page)
    }

    /// The top `k` entries in their order (all of them if the stack is smaller).
    pub fn truncated(&self, k: usize) -> Self {
        let entries = self.entries[..k.min(self.entries.len())].to_vec();
        MissRateStack { entries }
    }

    /// The same pages with `first` (pages of this stack, in that order) moved to the top
    /// and the rest in their order; a page not in the stack is ignored.
    pub fn with_first(&self, first: &[VirtPage]) -> Self {
        let at: std::collections::HashMap<VirtPage, usize> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.page, i))
            .collect();
        let lifted: Vec<usize> = first.iter().filter_map(|p| at.get(p).copied()).collect();
        let mut taken = vec![false; self.entries.len()];
        let mut entries = Vec::with_capacity(self.entries.len());
        for i in lifted {
            if !std::mem::replace(&mut taken[i], true) {
                entries.push(self.entries[i]);
            }
        }
        entries.extend(
            self.entries
                .iter()
                .zip(&taken)
                .filter(|(_, &t)| !t)
                .map(|(e, _)| *e),
        );
        MissRateStack { entries }
    }

    /// How many of the top pages could pay to confine: the most whose sampled LLC hits
    /// add up to no more than the whole stack's sampled misses. Confined, a page that hits
    /// loses its hits once the small pollute buffer is full, and no placement turns more
    /// misses into hits than the stack has, so a deeper placement costs more than it can
    /// win (random.md's run 5: the last 65 of its 408 pages hit on seven loads in eight,
    /// and a probe that confined them slowed its target 80% for three windows).
    pub fn worth_confining(&self) -> usize {
        let misses: u64 = self.entries.iter().map(|e| e.misses).sum();
        let mut hits = 0;
        self.entries
            .iter()
            .position(|e| {
                hits += e.hits;
                hits > misses
            })
            .unwrap_or(self.entries.len())
    }

    /// The fewest sampled loads a page needs to look reused: half the median of the pages
    /// that hit. A page of a reused array is loaded on every pass, as often as the array's
    /// pages that hit, even when its colour makes it miss every time; a stream's page is
    /// loaded on one pass only. `None` when no page hits: then nothing is reused.
    pub fn reused_loads(&self) -> Option<u64> {
        let mut loads: Vec<u64> = self
            .entries
            .iter()
            .filter(|e| e.hits > 0)
            .map(|e| e.hits + e.misses)
            .collect();
        if loads.is_empty() {
            return None;
        }
        loads.sort_unstable();
        Some(loads[loads.len() / 2].div_ceil(2))
    }

    /// Region boundaries in stack order: the positions where the miss rate changes (pages
    /// of one merged region share theirs).
    pub fn boundaries(&self) -> Vec<usize> {
        let e = &self.entries;
        (1..e.len())
            .filter(|&i| e[i].miss_rate != e[i - 1].miss_rate)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DataSource::*;

    #[test]
    fn highest_miss_rate_first_ties_by_more_misses() {
        let mut p = PageProfile::new(12);
        // page 1: 1/2 miss; page 2: 2/4 miss (same rate, more misses); page 3: 3/3 miss.
        for (page, src) in [
            (1, LlcMiss),
            (1, LlcHit),
            (2, LlcMiss),
            (2, LlcMiss),
            (2, LlcHit),
            (2, LlcHit),
            (3, LlcMiss),
            (3, LlcMiss),
            (3, LlcMiss),
            (4, Other),
        ] {
            p.record(page << 12, src);
        }
        let s = MissRateStack::from_profile(&p);
        let order: Vec<u64> = s.top(10).map(|v| v.0).collect();
        assert_eq!(
            order,
            vec![3, 2, 1],
            "page 4 has no LLC samples and is not ranked"
        );
    }

    #[test]
    fn pages_brought_to_the_top_keep_their_order_and_the_rest_theirs() {
        let entries = (1..=5)
            .map(|p| StackEntry {
                page: VirtPage(p),
                hits: 0,
                misses: 6 - p,
                miss_rate: 1.0 - p as f64 / 10.0,
            })
            .collect();
        let s = MissRateStack::from_entries(entries);
        let lifted = s.with_first(&[VirtPage(4), VirtPage(9), VirtPage(2), VirtPage(4)]);
        let order: Vec<u64> = lifted.top(10).map(|v| v.0).collect();
        assert_eq!(order, vec![4, 2, 1, 3, 5], "page 9 is not in the stack");
    }
}
