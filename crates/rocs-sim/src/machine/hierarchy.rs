//! The cache path of one reference: the core's private caches, then the shared LLC,
//! counted, and the level that served it.

use super::stats::Counts;
use super::FP_SHIFT;
use crate::cache::Cache;
use crate::prefetch::Prefetcher;
use crate::spec::{Fill, LevelSpec, MachineSpec};
use crate::tlb::Tlb;
use rocs_core::CacheGeometry;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Served {
    L1,
    L2,
    Llc,
    Mem,
}

pub(super) struct Core {
    pub(super) l1d: Cache,
    pub(super) l1i: Option<Cache>,
    pub(super) l2: Option<Cache>,
    /// The models beyond the paper's machines; any of them on sends generated accesses
    /// down [`modern_ref`] instead of [`line_ref`].
    pub(super) modern: Modern,
}

/// A core's prefetcher, TLB, how the LLC is filled, and its process's LLC way mask.
pub(super) struct Modern {
    pub(super) prefetch: Option<Prefetcher>,
    /// The prefetcher is switched off (while the PMU samples, if the spec says so).
    pub(super) prefetch_paused: bool,
    pub(super) tlb: Option<Tlb>,
    pub(super) fill: Fill,
    /// The ways of the LLC this process may fill (a resctrl capacity bitmask).
    pub(super) llc_mask: u64,
    pub(super) llc_all_ways: u64,
}

impl Modern {
    pub(super) fn any(&self) -> bool {
        self.prefetch.is_some()
            || self.tlb.is_some()
            || self.fill != Fill::OnMiss
            || self.llc_mask != self.llc_all_ways
    }
}

/// Latencies in fixed point, and the PMU's per-sample cost.
#[derive(Clone, Copy)]
pub(super) struct Timing {
    pub(super) l1: u64,
    pub(super) l2: u64,
    pub(super) llc: u64,
    pub(super) mem: u64,
    pub(super) base_per_instr: u64,
    pub(super) sample_cost: u64,
    pub(super) jitter: f64,
    pub(super) ring: usize,
}

/// A data reference through the hierarchy, counted. The L1 is indexed by the virtual
/// address (virtually indexed, physically tagged, as L1s are: recolouring a page does not
/// change where its lines sit in the L1); the L2 and the LLC by the physical address.
#[inline(always)]
pub(super) fn data_ref(
    core: &mut Core,
    llc: &mut Cache,
    c: &mut Counts,
    vaddr: u64,
    paddr: u64,
    size: u64,
) -> Served {
    c.l1d_accesses += 1;
    if core.l1d.access(vaddr, size) {
        return Served::L1;
    }
    c.l1d_misses += 1;
    cachegrind_below_l1(core, llc, c, paddr, size, true)
}

/// An L1 miss (of a data access if `data`) on the cachegrind path: through the L2, if the
/// core has one, and the LLC, counted.
#[inline(always)]
pub(super) fn cachegrind_below_l1(
    core: &mut Core,
    llc: &mut Cache,
    c: &mut Counts,
    paddr: u64,
    size: u64,
    data: bool,
) -> Served {
    if let Some(l2) = core.l2.as_mut() {
        c.l2_accesses += 1;
        if l2.access(paddr, size) {
            return Served::L2;
        }
        c.l2_misses += 1;
    }
    c.llc_accesses += 1;
    if llc.access(paddr, size) {
        Served::Llc
    } else {
        c.llc_misses += 1;
        c.llc_data_misses += data as u64;
        Served::Mem
    }
}

/// A data reference of a generated workload: elements are aligned to their (power of two)
/// size, so an access touches exactly one line and skips the straddle check; an element
/// larger than a line is counted as one access to its first line.
#[inline(always)]
pub(super) fn line_ref(
    core: &mut Core,
    llc: &mut Cache,
    c: &mut Counts,
    vaddr: u64,
    paddr: u64,
) -> Served {
    c.l1d_accesses += 1;
    if core
        .l1d
        .access_line_generated(vaddr >> core.l1d.line_shift())
    {
        return Served::L1;
    }
    c.l1d_misses += 1;
    if let Some(l2) = core.l2.as_mut() {
        c.l2_accesses += 1;
        if l2.access_line(paddr >> l2.line_shift()) {
            return Served::L2;
        }
        c.l2_misses += 1;
    }
    c.llc_accesses += 1;
    if llc.access_line(paddr >> llc.line_shift()) {
        Served::Llc
    } else {
        c.llc_misses += 1;
        c.llc_data_misses += 1;
        Served::Mem
    }
}

/// An instruction fetch through the L1I (if the machine has one), counted.
#[inline(always)]
pub(super) fn instr_ref(
    core: &mut Core,
    llc: &mut Cache,
    c: &mut Counts,
    vaddr: u64,
    paddr: u64,
    size: u64,
) -> Served {
    let Some(l1i) = core.l1i.as_mut() else {
        return Served::L1;
    };
    c.accesses += 1;
    c.l1i_accesses += 1;
    if l1i.access(vaddr, size) {
        return Served::L1;
    }
    c.l1i_misses += 1;
    cachegrind_below_l1(core, llc, c, paddr, size, false)
}

/// A cache of level `l`; `physical`: the bound on the addresses it will see, if known (a
/// physically indexed cache of a machine whose addresses all come from its frames).
pub(super) fn build_cache(spec: &MachineSpec, l: &LevelSpec, physical: Option<u64>) -> Cache {
    let g = CacheGeometry::from_size(l.size.0, l.line.0, l.ways, l.slices, spec.page_size.0)
        .expect("validated spec");
    match physical {
        Some(bytes) => Cache::with_line_limit(g, l.policy, bytes.div_ceil(l.line.0)),
        None => Cache::new(g, l.policy),
    }
}

/// Who asked for a line below the L1: counted apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Request {
    Demand,
    /// An instruction fetch that missed the L1I.
    Fetch,
    Prefetch,
    Walk,
}

/// A reference that missed the L1 (or a prefetch, or a page walk's read), through the L2
/// and the LLC as the LLC is filled: on a miss (every level installs the line), or as a
/// victim cache (lines from memory go to the L2 only; the L2's evictions fill the LLC; an
/// exclusive one gives up a line that hits).
#[inline]
fn below_l1(core: &mut Core, llc: &mut Cache, paddr: u64) -> Served {
    let mask = core.modern.llc_mask;
    let Some(l2) = core.l2.as_mut() else {
        let (hit, _) = llc.access_line_evicting(paddr >> llc.line_shift(), mask);
        return if hit { Served::Llc } else { Served::Mem };
    };
    let (hit, evicted) = l2.access_line_evicting(paddr >> l2.line_shift(), u64::MAX);
    if hit {
        return Served::L2;
    }
    let line = paddr >> llc.line_shift();
    let in_llc = match core.modern.fill {
        Fill::OnMiss => llc.access_line_evicting(line, mask).0,
        Fill::Victim => llc.contains_line(line) && llc.access_line(line),
        Fill::ExclusiveVictim => llc.invalidate_line(line),
    };
    if core.modern.fill != Fill::OnMiss {
        if !in_llc {
            llc.demand_missed(line);
        }
        if let Some(victim) = evicted {
            let victim = (victim << l2.line_shift()) >> llc.line_shift();
            llc.fill_line_evicting(victim, mask);
        }
    }
    if in_llc {
        Served::Llc
    } else {
        Served::Mem
    }
}

/// Count a reference below the L1 of kind `request` that was `served`.
#[inline(always)]
fn count(c: &mut Counts, has_l2: bool, request: Request, served: Served) {
    match request {
        Request::Demand => {
            if has_l2 {
                c.l2_accesses += 1;
                c.l2_misses += (served > Served::L2) as u64;
            }
            c.llc_accesses += (served >= Served::Llc) as u64;
            let mem = (served == Served::Mem) as u64;
            c.llc_misses += mem;
            c.llc_data_misses += mem;
        }
        Request::Fetch => {
            if has_l2 {
                c.l2_accesses += 1;
                c.l2_misses += (served > Served::L2) as u64;
            }
            c.llc_accesses += (served >= Served::Llc) as u64;
            c.llc_misses += (served == Served::Mem) as u64;
        }
        Request::Prefetch => {
            c.prefetches += 1;
            c.prefetch_mem += (served == Served::Mem) as u64;
        }
        Request::Walk => {
            c.tlb_misses += 1;
            c.walk_mem += (served == Served::Mem) as u64;
        }
    }
}

/// A data reference on a machine with the modern models: the TLB (a miss reads the
/// page-table entry through the L2 and the LLC), the L1, the L2 and the LLC as it is filled,
/// and the L2 prefetcher trained on the L1's misses. `size` bytes at `vaddr` may straddle
/// two lines (a trace's accesses; a generated one gives 1): each line goes its way, and the
/// access is one, served by the slower line, as in [`data_ref`]. Both lines lie in one page
/// (the replay splits accesses that cross pages). Returns the level that served the data
/// and the page walk's cycles (fixed point), if there was one.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn modern_ref(
    core: &mut Core,
    llc: &mut Cache,
    c: &mut Counts,
    t: &Timing,
    vaddr: u64,
    paddr: u64,
    size: u64,
    page_shift: u32,
) -> (Served, u64) {
    let has_l2 = core.l2.is_some();
    let walk_fp = translate(core, llc, c, t, vaddr, page_shift);
    c.l1d_accesses += 1;
    let l1_shift = core.l1d.line_shift();
    let first = vaddr >> l1_shift;
    let last = (vaddr + size.max(1) - 1) >> l1_shift;
    let mut served = Served::L1;
    for line in first..=last {
        if core.l1d.access_line(line) {
            continue;
        }
        // The second line is a line on in the same frame.
        let below = paddr + ((line - first) << l1_shift);
        served = served.max(l1_miss(core, llc, c, below));
    }
    if served > Served::L1 {
        c.l1d_misses += 1;
        count(c, has_l2, Request::Demand, served);
    }
    (served, walk_fp)
}

/// A data reference of a generated workload (one line, see [`line_ref`]) on a machine with
/// the modern models: [`modern_ref`] for an access of one byte, inlined into the
/// generator's loop, its L1 misses out of line. Returns what [`modern_ref`] returns.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn modern_line_ref(
    core: &mut Core,
    llc: &mut Cache,
    c: &mut Counts,
    t: &Timing,
    vaddr: u64,
    paddr: u64,
    page_shift: u32,
) -> (Served, u64) {
    let walk_fp = translate(core, llc, c, t, vaddr, page_shift);
    c.l1d_accesses += 1;
    if core
        .l1d
        .access_line_generated(vaddr >> core.l1d.line_shift())
    {
        return (Served::L1, walk_fp);
    }
    (demand_miss(core, llc, c, paddr), walk_fp)
}

/// A generated access's line that missed the L1D, counted.
#[inline(never)]
fn demand_miss(core: &mut Core, llc: &mut Cache, c: &mut Counts, paddr: u64) -> Served {
    let served = l1_miss(core, llc, c, paddr);
    c.l1d_misses += 1;
    count(c, core.l2.is_some(), Request::Demand, served);
    served
}

/// The TLB's part of a data reference: on a miss, the page walk reads the page-table entry
/// through the L2 and the LLC, counted. Returns the walk's cycles (fixed point), 0 on a hit
/// or without a TLB.
#[inline(always)]
fn translate(
    core: &mut Core,
    llc: &mut Cache,
    c: &mut Counts,
    t: &Timing,
    vaddr: u64,
    page_shift: u32,
) -> u64 {
    let Some(tlb) = core.modern.tlb.as_mut() else {
        return 0;
    };
    let vpn = vaddr >> page_shift;
    if tlb.lookup(vpn) {
        return 0;
    }
    walk(core, llc, c, t, vpn)
}

#[inline(never)]
fn walk(core: &mut Core, llc: &mut Cache, c: &mut Counts, t: &Timing, vpn: u64) -> u64 {
    let tlb = core.modern.tlb.as_ref().expect("a TLB missed");
    let pte = tlb.pte_paddr(vpn);
    let mut walk_fp = tlb.walk_fp;
    let served = below_l1(core, llc, pte);
    count(c, core.l2.is_some(), Request::Walk, served);
    walk_fp += match served {
        Served::L1 => t.l1,
        Served::L2 => t.l2,
        Served::Llc => t.llc,
        // The walk's loads depend on each other: nothing overlaps them.
        Served::Mem => t.mem,
    };
    c.walk_cycles += walk_fp >> FP_SHIFT;
    walk_fp
}

/// A data line that missed the L1: through the levels below, and the prefetcher trains on
/// it (unless switched off) and fetches what it says. Counts only the prefetches.
#[inline]
fn l1_miss(core: &mut Core, llc: &mut Cache, c: &mut Counts, paddr: u64) -> Served {
    let has_l2 = core.l2.is_some();
    let served = below_l1(core, llc, paddr);
    if core.modern.prefetch_paused {
        return served;
    }
    let (Some(p), Some(l2)) = (core.modern.prefetch.as_mut(), core.l2.as_ref()) else {
        return served;
    };
    let l2_shift = l2.line_shift();
    for line in p.on_access(paddr >> l2_shift) {
        // A line the L2 already holds is not fetched again.
        if core.l2.as_ref().is_some_and(|l2| l2.contains_line(line)) {
            continue;
        }
        let served = below_l1(core, llc, line << l2_shift);
        count(c, has_l2, Request::Prefetch, served);
    }
    served
}

/// An instruction fetch on a machine with the modern models: through the L1I (if the
/// machine has one), then below it as the LLC is filled. Code is not translated by the
/// data TLB and does not train the (data) prefetcher. `size` bytes may straddle two lines
/// of one page, as in [`modern_ref`].
#[inline(never)]
pub(super) fn modern_fetch(
    core: &mut Core,
    llc: &mut Cache,
    c: &mut Counts,
    vaddr: u64,
    paddr: u64,
    size: u64,
) -> Served {
    let Some(l1i) = core.l1i.as_mut() else {
        return Served::L1;
    };
    c.accesses += 1;
    c.l1i_accesses += 1;
    let l1_shift = l1i.line_shift();
    let first = vaddr >> l1_shift;
    let last = (vaddr + size.max(1) - 1) >> l1_shift;
    // Sizes are clamped to the smallest line: at most two lines.
    let hits = [
        l1i.access_line(first),
        last == first || l1i.access_line(last),
    ];
    let mut served = Served::L1;
    for (i, hit) in hits.into_iter().enumerate() {
        if !hit {
            let below = paddr + ((i as u64) << l1_shift);
            served = served.max(below_l1(core, llc, below));
        }
    }
    if served > Served::L1 {
        c.l1i_misses += 1;
        count(c, core.l2.is_some(), Request::Fetch, served);
    }
    served
}

pub(super) fn build_modern(spec: &MachineSpec, llc: &Cache) -> Modern {
    let line = spec.l2.as_ref().map_or(spec.llc.line.0, |l| l.line.0);
    Modern {
        prefetch: spec.prefetch.as_ref().map(|p| Prefetcher::new(p, line)),
        prefetch_paused: false,
        // The TLB needs the process's page tables: the machine adds it once it has them.
        tlb: None,
        fill: spec.llc.fill,
        llc_mask: llc.all_ways(),
        llc_all_ways: llc.all_ways(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Policy;

    fn cache(sets: u64, ways: u64, policy: Policy) -> Cache {
        Cache::new(CacheGeometry::new(64, sets, ways, 1, 4096).unwrap(), policy)
    }

    fn core(l2: Cache, fill: Fill, llc: &Cache) -> Core {
        Core {
            l1d: cache(1, 1, Policy::Lru),
            l1i: None,
            l2: Some(l2),
            modern: Modern {
                prefetch: None,
                prefetch_paused: false,
                tlb: None,
                fill,
                llc_mask: llc.all_ways(),
                llc_all_ways: llc.all_ways(),
            },
        }
    }

    #[test]
    fn an_exclusive_victim_llc_is_the_lru_stack_split_in_two() {
        // An L2 of A ways and an exclusive victim LLC of B ways with the same sets, both
        // LRU: the L2 holds each set's A most recent lines and the LLC the next B, so a
        // reference at per-set LRU stack distance d hits the L2 if d < A, the LLC if
        // A <= d < A + B, and memory otherwise (Mattson's stack, computed here from the
        // references alone).
        let (sets, a, b) = (4u64, 2u64, 4u64);
        let mut llc = cache(sets, b, Policy::Lru);
        let mut c = core(cache(sets, a, Policy::Lru), Fill::ExclusiveVictim, &llc);
        let mut stacks: Vec<Vec<u64>> = vec![Vec::new(); sets as usize];
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let line = (x >> 40) % 48;
            let stack = &mut stacks[(line % sets) as usize];
            let depth = stack.iter().position(|&l| l == line);
            let expect = match depth {
                Some(d) if (d as u64) < a => Served::L2,
                Some(d) if (d as u64) < a + b => Served::Llc,
                _ => Served::Mem,
            };
            if let Some(d) = depth {
                stack.remove(d);
            }
            stack.insert(0, line);
            assert!(
                expect == below_l1(&mut c, &mut llc, line * 64),
                "line {line}"
            );
        }
    }

    #[test]
    fn a_victim_llc_gets_lines_only_from_l2_evictions() {
        for fill in [Fill::Victim, Fill::ExclusiveVictim] {
            let mut llc = cache(4, 4, Policy::Lru);
            let mut c = core(cache(4, 2, Policy::Lru), fill, &llc);
            // Lines 0, 4, 8 share set 0: the third evicts the first from the L2.
            assert!(below_l1(&mut c, &mut llc, 0) == Served::Mem);
            assert!(!llc.contains_line(0), "{fill:?}: not filled from memory");
            below_l1(&mut c, &mut llc, 4 * 64);
            below_l1(&mut c, &mut llc, 8 * 64);
            assert!(llc.contains_line(0), "{fill:?}: the L2's victim");
            assert!(below_l1(&mut c, &mut llc, 0) == Served::Llc);
            assert_eq!(
                llc.contains_line(0),
                fill == Fill::Victim,
                "{fill:?}: a hit keeps the line only if not exclusive"
            );
        }
    }

    #[test]
    fn a_drrip_victim_llc_duels_on_demand_misses_and_keeps_part_of_a_thrashing_loop() {
        // A loop over twice the lines the L2 and the LLC hold together. Set dueling (Jaleel
        // et al., ISCA 2010) counts the misses of each policy's leader sets and gives the
        // follower sets the policy that misses less: here BRRIP, which keeps part of the
        // loop where SRRIP keeps none of it. A victim LLC is filled by every line the L2
        // evicts, whatever its policy: were the leaders' votes counted on fills they would
        // be equal, the selector would stay where it started, and DRRIP would miss like
        // SRRIP.
        let (sets, l2_ways, llc_ways) = (128u64, 2u64, 4u64);
        let lines = 2 * sets * (l2_ways + llc_ways);
        for fill in [Fill::Victim, Fill::ExclusiveVictim] {
            let llc_hits = |policy: Policy| {
                let mut llc = cache(sets, llc_ways, policy);
                let mut c = core(cache(sets, l2_ways, Policy::Lru), fill, &llc);
                let mut hits = 0u32;
                for round in 0..40 {
                    for line in 0..lines {
                        let served = below_l1(&mut c, &mut llc, line * 64);
                        hits += u32::from(round >= 8 && served == Served::Llc);
                    }
                }
                f64::from(hits) / (32 * lines) as f64
            };
            let (srrip, brrip, drrip) = (
                llc_hits(Policy::Srrip),
                llc_hits(Policy::Brrip),
                llc_hits(Policy::Drrip),
            );
            assert!(
                brrip > srrip + 0.2,
                "{fill:?}: SRRIP {srrip:.3}, BRRIP {brrip:.3}"
            );
            // The SRRIP leaders (one set in 64) keep missing like SRRIP.
            assert!(
                drrip >= brrip * (1.0 - 2.0 / 64.0),
                "{fill:?}: DRRIP {drrip:.3}, BRRIP {brrip:.3}, SRRIP {srrip:.3}"
            );
        }
    }
}
