//! Per-page profiles: what sampling says about each virtual page of a target.

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

/// One slot: page number + 1 (0 = empty) split into two u32s so that the slot has
/// alignment 4 and no padding, then the counts.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Slot {
    key_lo: u32,
    key_hi: u32,
    counts: PageCounts,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 20);

/// The page profile of one target: sampled counts per virtual page.
///
/// A compact open-addressing table: 20-byte slots filled to 7/8 and grown by 11/8, so that
/// a tracked page costs at most 32 bytes and counting a sample is cheap (sample ingest is
/// a hot path of the daemon).
#[derive(Clone)]
pub struct PageProfile {
    slots: Vec<Slot>,
    len: usize,
    page_shift: u32,
    samples_total: u64,
    /// The slot of the page counted last: samples come in runs on one page (a scan
    /// touches a page many times in a row), so it is checked before hashing.
    last: usize,
}

#[inline(always)]
fn index(key: u64, cap: usize) -> usize {
    // Fibonacci hashing, then map onto [0, cap) by multiply-high (cap need not be a
    // power of two, which lets the table grow by 11/8 instead of doubling).
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h as u128 * cap as u128) >> 64) as usize
}

impl PageProfile {
    /// An empty profile for pages of `1 << page_shift` bytes.
    pub fn new(page_shift: u32) -> Self {
        PageProfile {
            slots: vec![Slot::default(); 64],
            len: 0,
            page_shift,
            samples_total: 0,
            last: 0,
        }
    }

    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// Count one sample at `vaddr`.
    #[inline]
    pub fn record(&mut self, vaddr: u64, source: DataSource) {
        let key = (vaddr >> self.page_shift) + 1;
        let (lo, hi) = (key as u32, (key >> 32) as u32);
        let cap = self.slots.len();
        let last = &self.slots[self.last];
        let mut i = if last.key_lo == lo && last.key_hi == hi {
            self.last
        } else {
            index(key, cap)
        };
        loop {
            let s = &mut self.slots[i];
            if s.key_lo == lo && s.key_hi == hi {
                self.last = i;
                s.counts.record(source);
                self.samples_total += 1;
                return;
            }
            if s.key_lo == 0 && s.key_hi == 0 {
                break;
            }
            i += 1;
            if i == cap {
                i = 0;
            }
        }
        // A new page.
        if (self.len + 1) * 8 > cap * 7 {
            self.grow();
            return self.record(vaddr, source);
        }
        self.last = i;
        let s = &mut self.slots[i];
        s.key_lo = lo;
        s.key_hi = hi;
        s.counts.record(source);
        self.len += 1;
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
        let key = page.0.checked_add(1)?;
        let (lo, hi) = (key as u32, (key >> 32) as u32);
        let cap = self.slots.len();
        let mut i = index(key, cap);
        loop {
            let s = &self.slots[i];
            if s.key_lo == lo && s.key_hi == hi {
                return Some(s.counts);
            }
            if s.key_lo == 0 && s.key_hi == 0 {
                return None;
            }
            i = if i + 1 == cap { 0 } else { i + 1 };
        }
    }

    #[cold]
    fn grow(&mut self) {
        let new_cap = self.slots.len() * 11 / 8;
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); new_cap]);
        self.last = 0;
        for s in old.into_iter().filter(|s| s.key_lo != 0 || s.key_hi != 0) {
            let key = s.key_lo as u64 | (s.key_hi as u64) << 32;
            let mut i = index(key, new_cap);
            while self.slots[i].key_lo != 0 || self.slots[i].key_hi != 0 {
                i = if i + 1 == new_cap { 0 } else { i + 1 };
            }
            self.slots[i] = s;
        }
    }

    /// Distinct pages sampled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All samples counted, including those without an LLC data source.
    pub fn samples_total(&self) -> u64 {
        self.samples_total
    }

    /// Heap bytes held per tracked page (the slot array over the pages in it).
    pub fn bytes_per_page(&self) -> f64 {
        (self.slots.capacity() * std::mem::size_of::<Slot>()) as f64 / self.len.max(1) as f64
    }

    /// Every sampled page with its counts, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (VirtPage, PageCounts)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.key_lo != 0 || s.key_hi != 0)
            .map(|s| {
                let key = s.key_lo as u64 | (s.key_hi as u64) << 32;
                (VirtPage(key - 1), s.counts)
            })
    }

    /// Every sampled page, by address.
    pub fn sorted(&self) -> Vec<(VirtPage, PageCounts)> {
        let mut v: Vec<_> = self.iter().collect();
        v.sort_unstable_by_key(|(p, _)| *p);
        v
    }

    /// Forget everything (a new profiling phase).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = Slot::default());
        self.last = 0;
        self.len = 0;
        self.samples_total = 0;
    }
}

impl std::fmt::Debug for PageProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageProfile")
            .field("pages", &self.len)
            .field("samples_total", &self.samples_total)
            .field("page_shift", &self.page_shift)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn counts_like_a_hash_map() {
        let mut t = PageProfile::new(12);
        let mut reference: HashMap<u64, PageCounts> = HashMap::new();
        let mut x = 0x1234_5678u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let vaddr = 0x7f00_0000_0000 + (x % 50_000) * 4096 + (i & 0xfff);
            let src = [DataSource::LlcHit, DataSource::LlcMiss, DataSource::Other]
                [(x >> 40) as usize % 3];
            t.record(vaddr, src);
            reference.entry(vaddr >> 12).or_default().record(src);
        }
        let mut expected: Vec<_> = reference
            .into_iter()
            .map(|(p, c)| (VirtPage(p), c))
            .collect();
        expected.sort_unstable_by_key(|(p, _)| *p);
        assert_eq!(t.len(), expected.len());
        assert_eq!(t.samples_total(), 200_000);
        assert_eq!(t.sorted(), expected);
        for &(page, c) in expected.iter().step_by(97) {
            assert_eq!(t.get(page), Some(c));
        }
        assert_eq!(t.get(VirtPage(1)), None);
    }

    #[test]
    fn memory_per_page_stays_within_32_bytes() {
        // Every table size from 100 pages to 2M pages: the slot array never exceeds
        // 32 bytes per tracked page (worst case right after a growth step).
        let mut t = PageProfile::new(12);
        let mut worst: f64 = 0.0;
        for page in 0..2_000_000u64 {
            t.record(page << 12, DataSource::Other);
            if page >= 100 {
                worst = worst.max(t.bytes_per_page());
            }
        }
        assert!(worst <= 32.0, "worst {worst:.2} bytes per page");
        assert_eq!(t.len(), 2_000_000);
    }

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
