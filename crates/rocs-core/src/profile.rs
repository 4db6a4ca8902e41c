//! Per-page profiles: what sampling says about each virtual page of a target.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{DataSource, MemSample, VirtPage};

/// Sampled loads of one page, by data source. 12 bytes, so that a tracked page (key and
/// counts in the map) stays within 32 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageCounts {
    pub hits: u32,
    pub misses: u32,
    /// Samples without an LLC data source (e.g. software events, L1/L2 hits).
    pub other: u32,
}

impl PageCounts {
    /// All samples of this page.
    pub fn samples(&self) -> u64 {
        self.hits as u64 + self.misses as u64 + self.other as u64
    }

    /// Samples that reached the LLC (hit or miss): the denominator of the miss rate.
    pub fn llc_samples(&self) -> u64 {
        self.hits as u64 + self.misses as u64
    }

    /// misses / (hits + misses), or `None` when no sample reached the LLC.
    pub fn miss_rate(&self) -> Option<f64> {
        let n = self.llc_samples();
        (n > 0).then(|| self.misses as f64 / n as f64)
    }

    #[inline]
    pub fn record(&mut self, source: DataSource) {
        let c = match source {
            DataSource::LlcHit => &mut self.hits,
            DataSource::LlcMiss => &mut self.misses,
            DataSource::Other => &mut self.other,
        };
        *c = c.saturating_add(1);
    }
}

/// The page profile of one target: sampled counts per virtual page.
#[derive(Clone, Debug, Default)]
pub struct PageProfile {
    page_shift: u32,
    pages: HashMap<u64, PageCounts>,
    samples_total: u64,
}

impl PageProfile {
    /// An empty profile for pages of `1 << page_shift` bytes.
    pub fn new(page_shift: u32) -> Self {
        PageProfile {
            page_shift,
            pages: HashMap::new(),
            samples_total: 0,
        }
    }

    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// Count one sample against its page.
    #[inline]
    pub fn record(&mut self, vaddr: u64, source: DataSource) {
        self.pages
            .entry(vaddr >> self.page_shift)
            .or_default()
            .record(source);
        self.samples_total += 1;
    }

    /// Count a batch of samples.
    pub fn ingest(&mut self, samples: &[MemSample]) {
        for s in samples {
            self.record(s.vaddr, s.source);
        }
    }

    /// Counts of one page, if it was sampled.
    pub fn get(&self, page: VirtPage) -> Option<PageCounts> {
        self.pages.get(&page.0).copied()
    }

    /// Every sampled page, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (VirtPage, PageCounts)> + '_ {
        self.pages.iter().map(|(&p, &c)| (VirtPage(p), c))
    }

    /// Every sampled page, ordered by address.
    pub fn sorted(&self) -> Vec<(VirtPage, PageCounts)> {
        let mut v: Vec<_> = self.iter().collect();
        v.sort_unstable_by_key(|(p, _)| *p);
        v
    }

    /// Number of distinct pages sampled.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// All samples counted, including those without an LLC data source.
    pub fn samples_total(&self) -> u64 {
        self.samples_total
    }

    /// Forget everything (a new profiling phase).
    pub fn clear(&mut self) {
        self.pages.clear();
        self.samples_total = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_page_and_source() {
        let mut p = PageProfile::new(12);
        p.record(0x1000, DataSource::LlcMiss);
        p.record(0x1fff, DataSource::LlcMiss);
        p.record(0x1800, DataSource::LlcHit);
        p.record(0x2000, DataSource::Other);
        assert_eq!(p.len(), 2);
        assert_eq!(p.samples_total(), 4);
        let c = p.get(VirtPage(1)).unwrap();
        assert_eq!((c.hits, c.misses, c.samples()), (1, 2, 3));
        assert!((c.miss_rate().unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(p.get(VirtPage(2)).unwrap().miss_rate(), None);
    }
}
