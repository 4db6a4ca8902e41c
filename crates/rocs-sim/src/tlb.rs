//! A set-associative data TLB (true LRU) and where a process's leaf page-table entries
//! sit in physical memory, so that a miss can read its entry through the caches.

use std::collections::HashMap;

use crate::spec::TlbSpec;

const INVALID: u64 = u64::MAX;
/// Bytes per page-table entry (x86-64 and AArch64 alike).
pub const PTE_BYTES: u64 = 8;

/// Frames of a process's leaf page tables, one per `page_size / 8` pages.
#[derive(Clone)]
enum PageTables {
    /// A generated process's: every table of its address range, from table `first`.
    Range { first: u64, frames: Vec<u32> },
    /// A trace's: the tables of the pages it touched so far (its address space is sparse:
    /// code, heap and stack far apart), added as it touches new ones.
    Touched(HashMap<u64, u32>),
}

/// One core's TLB and its process's page tables.
#[derive(Clone)]
pub struct Tlb {
    /// `sets * ways` virtual page numbers, each set most recently used first.
    tags: Vec<u64>,
    ways: usize,
    set_mask: u64,
    tables: PageTables,
    table_shift: u32,
    page_shift: u32,
    pub(crate) walk_fp: u64,
}

impl Tlb {
    /// A TLB (validated spec) for a process whose pages lie in `[first_vpn, last_vpn]`,
    /// its leaf tables in `tables` (one frame per `page_size / 8` pages, see
    /// [`Tlb::tables_needed`]). `walk_fp` is the fixed walk cost in 1/256 cycles.
    pub fn new(
        spec: &TlbSpec,
        page_shift: u32,
        first_vpn: u64,
        tables: Vec<u32>,
        walk_fp: u64,
    ) -> Tlb {
        let sets = spec.entries / spec.ways;
        let table_shift = page_shift - PTE_BYTES.trailing_zeros();
        Tlb {
            tags: vec![INVALID; spec.entries as usize],
            ways: spec.ways as usize,
            set_mask: sets - 1,
            tables: PageTables::Range {
                first: first_vpn >> table_shift,
                frames: tables,
            },
            table_shift,
            page_shift,
            walk_fp,
        }
    }

    /// A TLB (validated spec) whose page tables are added as the process touches pages
    /// ([`Tlb::add_table`]).
    pub fn with_touched_tables(spec: &TlbSpec, page_shift: u32, walk_fp: u64) -> Tlb {
        Tlb {
            tables: PageTables::Touched(HashMap::new()),
            ..Tlb::new(spec, page_shift, 0, Vec::new(), walk_fp)
        }
    }

    /// True if the leaf table that maps `vpn` has no frame yet (touched tables only).
    pub fn lacks_table(&self, vpn: u64) -> bool {
        match &self.tables {
            PageTables::Range { .. } => false,
            PageTables::Touched(t) => !t.contains_key(&(vpn >> self.table_shift)),
        }
    }

    /// Give the leaf table that maps `vpn` the frame `frame` (touched tables only).
    pub fn add_table(&mut self, vpn: u64, frame: u32) {
        if let PageTables::Touched(t) = &mut self.tables {
            t.insert(vpn >> self.table_shift, frame);
        }
    }

    /// Leaf page-table frames a process with pages `[first_vpn, last_vpn]` needs.
    pub fn tables_needed(page_shift: u32, first_vpn: u64, last_vpn: u64) -> usize {
        let shift = page_shift - PTE_BYTES.trailing_zeros();
        ((last_vpn >> shift) - (first_vpn >> shift) + 1) as usize
    }

    /// Translate `vpn`: true on a hit; on a miss the entry is installed.
    #[inline]
    pub fn lookup(&mut self, vpn: u64) -> bool {
        let base = (vpn & self.set_mask) as usize * self.ways;
        debug_assert!(base + self.ways <= self.tags.len());
        // SAFETY: the set index is masked by `set_mask`, one less than the number of sets
        // (`entries / ways`), and `tags` holds `ways` entries for each set. Unchecked
        // because every generated access looks up its page here, and the range checks
        // cost several instructions each time.
        let set = unsafe { self.tags.get_unchecked_mut(base..base + self.ways) };
        let mut prev = set[0];
        if prev == vpn {
            return true;
        }
        for slot in set[1..].iter_mut() {
            let cur = std::mem::replace(slot, prev);
            if cur == vpn {
                set[0] = vpn;
                return true;
            }
            prev = cur;
        }
        set[0] = vpn;
        false
    }

    /// Physical address of the leaf entry that maps `vpn`.
    #[inline]
    pub fn pte_paddr(&self, vpn: u64) -> u64 {
        let table = match &self.tables {
            PageTables::Range { first, frames } => {
                frames[((vpn >> self.table_shift) - first) as usize]
            }
            PageTables::Touched(t) => t[&(vpn >> self.table_shift)],
        } as u64;
        let index = vpn & ((1 << self.table_shift) - 1);
        (table << self.page_shift) + index * PTE_BYTES
    }

    /// A migrated page's entry is shot down.
    pub fn invalidate(&mut self, vpn: u64) {
        let base = (vpn & self.set_mask) as usize * self.ways;
        let set = &mut self.tags[base..base + self.ways];
        if let Some(i) = set.iter().position(|&t| t == vpn) {
            set[i..].rotate_left(1);
            set[self.ways - 1] = INVALID;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlb(entries: u64, ways: u64) -> Tlb {
        let spec = TlbSpec {
            entries,
            ways,
            walk_cycles: 0,
        };
        Tlb::new(&spec, 12, 0, vec![7, 9], 0)
    }

    #[test]
    fn uniform_random_pages_miss_one_minus_entries_over_pages() {
        // Independent references, uniform over P pages, into a fully associative E-entry
        // TLB: in steady state it holds E of the P pages, so a reference hits with
        // probability E/P whatever the replacement (closed form).
        let (entries, pages) = (64u64, 256u64);
        let mut t = tlb(entries, entries);
        let mut x = 99u64;
        let (mut misses, n) = (0u64, 400_000u64);
        for i in 0..n + 10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let hit = t.lookup((x >> 33) % pages);
            if i >= 10_000 && !hit {
                misses += 1;
            }
        }
        let rate = misses as f64 / n as f64;
        let expect = 1.0 - entries as f64 / pages as f64;
        assert!((rate - expect).abs() < 0.005, "{rate} vs {expect}");
    }

    #[test]
    fn entries_are_eight_to_a_line_in_their_table_frames() {
        let t = tlb(16, 4);
        // 4 KiB pages: 512 entries per table; pages 0..512 in frame 7, 512.. in frame 9.
        assert_eq!(t.pte_paddr(0), 7 << 12);
        assert_eq!(t.pte_paddr(9), (7 << 12) + 72);
        assert_eq!(t.pte_paddr(513), (9 << 12) + 8);
        assert_eq!(Tlb::tables_needed(12, 100, 600), 2);
    }

    #[test]
    fn a_shot_down_entry_misses() {
        let mut t = tlb(16, 4);
        assert!(!t.lookup(5));
        assert!(t.lookup(5));
        t.invalidate(5);
        assert!(!t.lookup(5));
    }
}
