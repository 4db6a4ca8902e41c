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
}
