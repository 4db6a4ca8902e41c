//! A compact per-page counter table for sample ingest: at most 32 bytes per tracked page
//! (20-byte slots, open addressing, filled to 7/8 and grown by 11/8), cheap to update.

use rocs_core::{DataSource, PageCounts, PageProfile, VirtPage};

/// One slot: page number + 1 (0 = empty) split into two u32s so that the slot has
/// alignment 4 and no padding, then the counts.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Slot {
    key_lo: u32,
    key_hi: u32,
    hits: u32,
    misses: u32,
    other: u32,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 20);

/// Sampled counts per virtual page.
#[derive(Clone)]
pub struct PageTable {
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

impl PageTable {
    pub fn new(page_shift: u32) -> Self {
        PageTable {
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
                let c = match source {
                    DataSource::LlcHit => &mut s.hits,
                    DataSource::LlcMiss => &mut s.misses,
                    DataSource::Other => &mut s.other,
                };
                *c = c.saturating_add(1);
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
        match source {
            DataSource::LlcHit => s.hits = 1,
            DataSource::LlcMiss => s.misses = 1,
            DataSource::Other => s.other = 1,
        }
        self.len += 1;
        self.samples_total += 1;
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
                (
                    VirtPage((s.key_lo as u64 | (s.key_hi as u64) << 32) - 1),
                    PageCounts {
                        hits: s.hits,
                        misses: s.misses,
                        other: s.other,
                    },
                )
            })
    }

    /// Every sampled page, by address.
    pub fn sorted(&self) -> Vec<(VirtPage, PageCounts)> {
        let mut v: Vec<_> = self.iter().collect();
        v.sort_unstable_by_key(|(p, _)| *p);
        v
    }

    /// The same counts as a rocs-core profile (for the stack and the pictures).
    pub fn to_profile(&self) -> PageProfile {
        let mut p = PageProfile::new(self.page_shift);
        for (page, c) in self.iter() {
            let addr = page.addr(self.page_shift);
            for (n, src) in [
                (c.hits, DataSource::LlcHit),
                (c.misses, DataSource::LlcMiss),
                (c.other, DataSource::Other),
            ] {
                for _ in 0..n {
                    p.record(addr, src);
                }
            }
        }
        p
    }

    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = Slot::default());
        self.last = 0;
        self.len = 0;
        self.samples_total = 0;
    }
}

impl std::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTable")
            .field("pages", &self.len)
            .field("samples_total", &self.samples_total)
            .field("page_shift", &self.page_shift)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_like_the_core_profile() {
        let mut t = PageTable::new(12);
        let mut p = PageProfile::new(12);
        let mut x = 0x1234_5678u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let vaddr = 0x7f00_0000_0000 + (x % 50_000) * 4096 + (i & 0xfff);
            let src = [DataSource::LlcHit, DataSource::LlcMiss, DataSource::Other]
                [(x >> 40) as usize % 3];
            t.record(vaddr, src);
            p.record(vaddr, src);
        }
        assert_eq!(t.len(), p.len());
        assert_eq!(t.samples_total(), p.samples_total());
        assert_eq!(t.sorted(), p.sorted());
        assert_eq!(t.to_profile().sorted(), p.sorted());
    }

    #[test]
    fn memory_per_page_stays_within_32_bytes() {
        // Every table size from 100 pages to 2M pages: the slot array never exceeds
        // 32 bytes per tracked page (worst case right after a growth step).
        let mut t = PageTable::new(12);
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
}
