//! The cache path of one reference: the core's private caches, then the shared LLC,
//! counted, and the level that served it.

use super::stats::Counts;
use crate::cache::Cache;
use crate::profile::{LevelSpec, MachineProfile};
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
        c.llc_data_misses += 1;
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
    if core.l1d.access_line(vaddr >> core.l1d.line_shift()) {
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
        Served::Mem
    }
}

pub(super) fn build_cache(profile: &MachineProfile, l: &LevelSpec) -> Cache {
    let g = CacheGeometry::from_size(l.size.0, l.line.0, l.ways, l.slices, profile.page_size.0)
        .expect("validated profile");
    Cache::new(g, l.policy)
}
