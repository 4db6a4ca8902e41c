//! Generated workloads: each process a set of regions, each region an access pattern over
//! its pages, picked by the shares of the current phase.

use super::hierarchy::{line_ref, modern_line_ref, Served, Timing};
use super::{ProcState, FP};
use crate::cache::Cache;
use crate::error::SimError;
use crate::frames::FrameAllocator;
use crate::rng::Rng;
use crate::spec::MachineSpec;
use crate::workload::{Pattern, Workload};

/// Virtual address of a generated process's first region.
const REGION_BASE: u64 = 0x4000_0000;

/// A `u8` tag rather than a niche in a field: telling the patterns apart is then one load.
#[repr(u8)]
pub(super) enum PatternState {
    Sequential {
        pos: u64,
    },
    Strided {
        pos: u64,
        lane: u64,
        stride: u64,
    },
    Random {
        elems: u64,
    },
    PointerChase {
        next: Vec<u32>,
        cur: u32,
    },
    Stencil {
        pos: u64,
        offsets: Vec<u64>,
        k: usize,
    },
}

pub(super) struct Region {
    pub(super) name: String,
    pub(super) base_va: u64,
    pub(super) size: u64,
    pub(super) elem: u64,
    pub(super) frames: Vec<u32>,
    pub(super) pattern: PatternState,
    pub(super) write_threshold: u32,
    pub(super) instr_fp: u64,
    pub(super) base_fp: u64,
    /// What an access served by the LLC costs (`mem_fp`: one served by memory), both
    /// divided by the region's `mlp` (see `RegionSpec::mlp`).
    pub(super) llc_fp: u64,
    pub(super) mem_fp: u64,
    pub(super) accesses: u64,
    pub(super) llc_accesses: u64,
    pub(super) llc_misses: u64,
}

impl Region {
    #[inline(always)]
    pub(super) fn next_offset(&mut self, rng: &mut Rng) -> u64 {
        let size = self.size;
        match &mut self.pattern {
            PatternState::Sequential { pos } => {
                let off = *pos;
                *pos += self.elem;
                if *pos >= size {
                    *pos = 0;
                }
                off
            }
            PatternState::Strided { pos, lane, stride } => {
                let off = *pos;
                *pos += *stride;
                if *pos >= size {
                    *lane += self.elem;
                    if *lane >= *stride {
                        *lane = 0;
                    }
                    *pos = *lane;
                }
                off
            }
            PatternState::Random { elems } => rng.below(*elems) * self.elem,
            PatternState::PointerChase { next, cur } => {
                let off = *cur as u64 * self.elem;
                *cur = next[*cur as usize];
                off
            }
            PatternState::Stencil { pos, offsets, k } => {
                // Offsets were stored modulo the size, so the sum wraps inside the region.
                let mut off = *pos + offsets[*k];
                if off >= size {
                    off -= size;
                }
                *k += 1;
                if *k == offsets.len() {
                    *k = 0;
                    *pos += self.elem;
                    if *pos >= size {
                        *pos = 0;
                    }
                }
                off
            }
        }
    }
}

pub(super) struct Phase {
    pub(super) accesses: u64,
    /// Cumulative shares scaled to 2^32; region i is picked when r < thresholds[i].
    pub(super) thresholds: Vec<u32>,
    pub(super) fallback: usize,
}

pub(super) struct GenProc {
    pub(super) regions: Vec<Region>,
    pub(super) phases: Vec<Phase>,
    pub(super) phase: usize,
    pub(super) left: u64,
    pub(super) repeats_left: u32,
}

impl GenProc {
    /// Process `i` of `workload`: its regions get frames from `frames` (in the allocator's
    /// shuffled order), its pointer chases a random cycle from `rng`.
    pub(super) fn build(
        machine: &MachineSpec,
        workload: &Workload,
        i: usize,
        allocator: &mut FrameAllocator,
        rng: &mut Rng,
    ) -> Result<GenProc, SimError> {
        let spec = &workload.processes[i];
        let page_size = machine.page_size.0;
        let mut regions = Vec::new();
        let mut va = REGION_BASE;
        for r in &spec.regions {
            let pages = r.size.0.div_ceil(page_size);
            let mut frames = Vec::with_capacity(pages as usize);
            for _ in 0..pages {
                frames.push(allocator.alloc_any().ok_or_else(|| {
                    SimError::OutOfFrames(format!(
                        "workload '{}' needs more than the machine's {} of memory",
                        workload.name, machine.memory
                    ))
                })?);
            }
            let elem = r.elem as u64;
            let elems = r.size.0 / elem;
            let pattern = match r.pattern {
                Pattern::Sequential => PatternState::Sequential { pos: 0 },
                Pattern::Strided => PatternState::Strided {
                    pos: 0,
                    lane: 0,
                    stride: r.stride.map_or(elem, |s| s.0),
                },
                Pattern::Random => PatternState::Random { elems },
                Pattern::PointerChase => {
                    // Sattolo's algorithm: a random permutation that is one single cycle.
                    let mut next: Vec<u32> = (0..elems as u32).collect();
                    for k in (1..next.len()).rev() {
                        let j = rng.below(k as u64) as usize;
                        next.swap(k, j);
                    }
                    PatternState::PointerChase { next, cur: 0 }
                }
                Pattern::Stencil => PatternState::Stencil {
                    pos: 0,
                    offsets: r
                        .offsets
                        .iter()
                        .map(|&o| o.rem_euclid(r.size.0 as i64) as u64)
                        .collect(),
                    k: 0,
                },
            };
            let fp = |v: f64| (v * FP as f64).round() as u64;
            regions.push(Region {
                name: r.name.clone(),
                base_va: va,
                size: r.size.0,
                elem,
                frames,
                pattern,
                write_threshold: (r.write_fraction * u32::MAX as f64) as u32,
                instr_fp: fp(r.instructions_per_access),
                base_fp: fp(r.instructions_per_access * machine.base_cpi),
                llc_fp: fp(machine.llc.latency as f64 / r.mlp),
                mem_fp: fp(machine.memory_latency as f64 / r.mlp),
                accesses: 0,
                llc_accesses: 0,
                llc_misses: 0,
            });
            // Next region after a one-page gap, page aligned.
            va += (pages + 1) * page_size;
        }
        let phases: Vec<Phase> = workload
            .resolved_phases(i)
            .into_iter()
            .map(|(accesses, shares)| {
                let total: f64 = shares.iter().sum();
                let mut acc = 0.0;
                let thresholds = shares
                    .iter()
                    .map(|s| {
                        acc += s / total;
                        (acc * 4_294_967_296.0).min(u32::MAX as f64) as u32
                    })
                    .collect();
                let fallback = shares.iter().rposition(|&s| s > 0.0).unwrap_or(0);
                Phase {
                    accesses,
                    thresholds,
                    fallback,
                }
            })
            .collect();
        let left = phases[0].accesses;
        Ok(GenProc {
            regions,
            phases,
            phase: 0,
            left,
            repeats_left: spec.repeat,
        })
    }

    pub(super) fn run(
        &mut self,
        st: &mut ProcState,
        llc: &mut Cache,
        t: &Timing,
        page_shift: u32,
        limit_fp: u64,
    ) {
        // One loop per path, so that no access asks which one it takes.
        if st.core.modern.any() {
            self.run_on::<true>(st, llc, t, page_shift, limit_fp)
        } else {
            self.run_on::<false>(st, llc, t, page_shift, limit_fp)
        }
    }

    /// [`GenProc::run`] down the modern path (`MODERN`) or the paper's.
    #[inline(always)]
    fn run_on<const MODERN: bool>(
        &mut self,
        st: &mut ProcState,
        llc: &mut Cache,
        t: &Timing,
        page_shift: u32,
        limit_fp: u64,
    ) {
        let page_mask = (1u64 << page_shift) - 1;
        // The clock, the instruction count and the random generator live in locals while
        // the loop runs (registers, not stores to `st` on every access), and go back to
        // `st` when it stops; the clock and the count also around the PMU's sample, which
        // reads them (the sampler draws from its own generator).
        let mut clock_fp = st.clock_fp;
        let mut instr_fp = st.instr_fp;
        let mut rng = st.rng.clone();
        while clock_fp < limit_fp {
            if self.left == 0 {
                self.phase += 1;
                if self.phase == self.phases.len() {
                    self.repeats_left -= 1;
                    if self.repeats_left == 0 {
                        st.finished = true;
                        break;
                    }
                    self.phase = 0;
                }
                self.left = self.phases[self.phase].accesses;
            }
            // The phase's accesses, until it ends or the clock reaches the limit: the phase
            // and the count left are looked up once for the run, not on every access.
            let phase = &self.phases[self.phase];
            let mut left = self.left;
            while left > 0 && clock_fp < limit_fp {
                left -= 1;
                let r = rng.next_u64();
                let pick = r as u32;
                let ri = phase
                    .thresholds
                    .iter()
                    .position(|&th| pick < th)
                    .unwrap_or(phase.fallback);
                let reg = &mut self.regions[ri];
                let off = reg.next_offset(&mut rng);
                let is_write = ((r >> 32) as u32) < reg.write_threshold;
                let pfn = reg.frames[(off >> page_shift) as usize] as u64;
                let paddr = (pfn << page_shift) | (off & page_mask);
                st.c.accesses += 1;
                let vaddr = reg.base_va + off;
                let (served, walk_fp) = if MODERN {
                    modern_line_ref(&mut st.core, llc, &mut st.c, t, vaddr, paddr, page_shift)
                } else {
                    (line_ref(&mut st.core, llc, &mut st.c, vaddr, paddr), 0)
                };
                reg.accesses += 1;
                instr_fp += reg.instr_fp;
                let latency = match served {
                    Served::L1 => t.l1,
                    Served::L2 => t.l2,
                    Served::Llc => {
                        reg.llc_accesses += 1;
                        reg.llc_fp
                    }
                    Served::Mem => {
                        reg.llc_accesses += 1;
                        reg.llc_misses += 1;
                        reg.mem_fp
                    }
                };
                clock_fp += reg.base_fp + latency + walk_fp;
                if served >= Served::Llc && !is_write && st.pmu.enabled {
                    st.clock_fp = clock_fp;
                    st.instr_fp = instr_fp;
                    st.pmu_event(t, vaddr, Some(paddr), served, latency);
                    clock_fp = st.clock_fp;
                }
            }
            self.left = left;
        }
        st.clock_fp = clock_fp;
        st.instr_fp = instr_fp;
        st.rng = rng;
    }

    pub(super) fn region_of(&mut self, vaddr: u64) -> Option<(&mut Region, usize)> {
        self.regions
            .iter_mut()
            .find(|r| vaddr >= r.base_va && vaddr < r.base_va + r.size)
            .map(|r| {
                let idx = ((vaddr - r.base_va) / (r.size.div_ceil(r.frames.len() as u64))) as usize;
                (r, idx)
            })
    }
}
