//! The simulated machine: processes (generated workloads or replayed traces), each on its
//! own core with private L1 caches (and L2), all sharing one LLC; a frame allocator; the
//! timing model; and the PMU. It implements rocs-core's `Sampler`, `Counters` and
//! `Remapper`, so the same controller drives it that drives a real machine.
//!
//! Timing: a process's cycles are `instructions * base_cpi` plus, per access, the latency
//! of the level that served it (memory accesses cost `memory_latency / mlp` of their region),
//! plus the overheads charged to it (samples, page migrations). Clocks are kept in 1/256
//! cycle so that fractional CPIs add up exactly.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use rocs_core::{
    CacheGeometry, Colour, CounterDelta, Counters, DataSource, Errno, MemSample, PageResult, Pid,
    Placement, Remapper, SampleLoss, Sampler, SamplingPlan, VirtPage,
};
use serde::Serialize;

use crate::cache::Cache;
use crate::error::SimError;
use crate::frames::FrameAllocator;
use crate::profile::{LevelSpec, MachineProfile};
use crate::rng::{splitmix64, Rng};
use crate::trace::{LackeyReader, TraceKind};
use crate::workload::{Pattern, Workload};

const FP_SHIFT: u32 = 8;
const FP: u64 = 1 << FP_SHIFT;
/// Slice of simulated time processes run in turn when several share the LLC.
const QUANTUM: u64 = 2_000;
/// Sampling cost is checked against the CPU budget over windows of this many cycles.
const BUDGET_WINDOW: u64 = 10_000_000;
/// First pid handed out; process i of a workload gets `FIRST_PID + i`.
pub const FIRST_PID: Pid = 1000;
/// Virtual address of a generated process's first region.
const REGION_BASE: u64 = 0x4000_0000;

/// Event counts of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcessStats {
    pub pid: Pid,
    pub name: String,
    pub instructions: u64,
    /// Cycles the process ran, overheads included.
    pub cycles: u64,
    /// Memory references simulated (data accesses and instruction fetches).
    pub accesses: u64,
    pub l1d_accesses: u64,
    pub l1d_misses: u64,
    pub l1i_accesses: u64,
    pub l1i_misses: u64,
    pub l2_accesses: u64,
    pub l2_misses: u64,
    /// LLC references, data and instruction.
    pub llc_accesses: u64,
    pub llc_misses: u64,
    /// LLC misses of data accesses only (cachegrind's DLmr + DLmw).
    pub llc_data_misses: u64,
    pub sampling_overhead_cycles: u64,
    pub migration_overhead_cycles: u64,
    pub samples: u64,
    pub pages_migrated: u64,
}

/// Totals of a run (sums over processes; `cycles` is the elapsed time, the longest process).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunStats {
    pub instructions: u64,
    pub cycles: u64,
    pub accesses: u64,
    pub l1d_accesses: u64,
    pub l1d_misses: u64,
    pub l1i_accesses: u64,
    pub l1i_misses: u64,
    pub l2_accesses: u64,
    pub l2_misses: u64,
    pub llc_accesses: u64,
    pub llc_misses: u64,
    pub llc_data_misses: u64,
    pub sampling_overhead_cycles: u64,
    pub migration_overhead_cycles: u64,
    pub processes: Vec<ProcessStats>,
}

impl RunStats {
    pub fn ipc(&self) -> f64 {
        ratio(self.instructions as f64, self.cycles as f64)
    }
    /// LLC misses per thousand instructions.
    pub fn llc_mpki(&self) -> f64 {
        ratio(self.llc_misses as f64 * 1000.0, self.instructions as f64)
    }
    pub fn llc_miss_rate(&self) -> f64 {
        ratio(self.llc_misses as f64, self.llc_accesses as f64)
    }
}

impl ProcessStats {
    pub fn ipc(&self) -> f64 {
        ratio(self.instructions as f64, self.cycles as f64)
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// What one region of a generated process saw at the LLC (for calibration and tests).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RegionStats {
    pub name: String,
    pub first_page: VirtPage,
    pub pages: u64,
    pub accesses: u64,
    pub llc_accesses: u64,
    pub llc_misses: u64,
}

impl RegionStats {
    pub fn llc_miss_rate(&self) -> f64 {
        ratio(self.llc_misses as f64, self.llc_accesses as f64)
    }
}

/// Where a trace comes from.
pub enum TraceInput {
    /// A file, reopened for each repetition.
    File(PathBuf),
    /// Standard input (one pass only).
    Stdin,
    /// Any reader (one pass only).
    Reader(Box<dyn BufRead + Send>),
}

/// A trace replayed as one process.
pub struct TraceSpec {
    pub input: TraceInput,
    /// Only valgrind lackey's format exists for now.
    pub format: TraceFormat,
    /// Replay the trace this many times (a file only).
    pub repeat: u32,
    /// Use virtual addresses as physical ones (to compare with cachegrind, which indexes
    /// by virtual address); otherwise pages get frames from the allocator on first touch.
    pub identity_map: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Lackey,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Served {
    L1,
    L2,
    Llc,
    Mem,
}

struct Core {
    l1d: Cache,
    l1i: Option<Cache>,
    l2: Option<Cache>,
}

#[derive(Clone, Copy, Default)]
struct Counts {
    accesses: u64,
    l1d_accesses: u64,
    l1d_misses: u64,
    l1i_accesses: u64,
    l1i_misses: u64,
    l2_accesses: u64,
    l2_misses: u64,
    llc_accesses: u64,
    llc_misses: u64,
    llc_data_misses: u64,
    sampling_overhead: u64,
    migration_overhead: u64,
    samples: u64,
    pages_migrated: u64,
}

struct Pmu {
    enabled: bool,
    period: u64,
    countdown: u64,
    budget: f64,
    samples: Vec<MemSample>,
    lost: u64,
    throttled: u64,
    window_start_fp: u64,
    window_overhead: u64,
}

#[derive(Clone, Copy, Default)]
struct Snapshot {
    instructions: u64,
    cycles: u64,
    llc_refs: u64,
    llc_misses: u64,
}

/// Latencies in fixed point, and the PMU's per-sample cost.
#[derive(Clone, Copy)]
struct Timing {
    l1: u64,
    l2: u64,
    llc: u64,
    mem: u64,
    base_per_instr: u64,
    sample_cost: u64,
    jitter: f64,
    ring: usize,
}

/// Everything of a process but its access source.
struct ProcState {
    pid: Pid,
    core: Core,
    clock_fp: u64,
    instr_fp: u64,
    c: Counts,
    finished: bool,
    rng: Rng,
    pmu: Pmu,
    last_read: Snapshot,
}

impl ProcState {
    /// A load reached the LLC: count it for the sampler.
    #[inline(always)]
    fn pmu_event(
        &mut self,
        t: &Timing,
        vaddr: u64,
        paddr: Option<u64>,
        served: Served,
        weight: u64,
    ) {
        self.pmu.countdown -= 1;
        if self.pmu.countdown > 0 {
            return;
        }
        self.pmu.countdown = jittered(self.pmu.period, t.jitter, &mut self.rng);
        self.c.samples += 1;
        self.c.sampling_overhead += t.sample_cost;
        self.pmu.window_overhead += t.sample_cost;
        self.clock_fp += t.sample_cost << FP_SHIFT;
        if self.pmu.samples.len() >= t.ring {
            self.pmu.lost += 1;
            return;
        }
        self.pmu.samples.push(MemSample {
            pid: self.pid,
            tid: self.pid,
            vaddr,
            paddr,
            source: if served == Served::Mem {
                DataSource::LlcMiss
            } else {
                DataSource::LlcHit
            },
            weight: (weight >> FP_SHIFT) as u32,
            time: self.clock_fp >> FP_SHIFT,
        });
    }
}

fn jittered(period: u64, jitter: f64, rng: &mut Rng) -> u64 {
    if jitter == 0.0 {
        return period.max(1);
    }
    let f = 1.0 + jitter * (2.0 * rng.unit() - 1.0);
    ((period as f64 * f).round() as u64).max(1)
}

/// A data reference through the hierarchy, counted. The L1 is indexed by the virtual
/// address (virtually indexed, physically tagged, as L1s are: recolouring a page does not
/// change where its lines sit in the L1); the L2 and the LLC by the physical address.
#[inline(always)]
fn data_ref(
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
fn line_ref(core: &mut Core, llc: &mut Cache, c: &mut Counts, vaddr: u64, paddr: u64) -> Served {
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
fn instr_ref(
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

enum PatternState {
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

struct Region {
    name: String,
    base_va: u64,
    size: u64,
    elem: u64,
    frames: Vec<u32>,
    pattern: PatternState,
    write_threshold: u32,
    instr_fp: u64,
    base_fp: u64,
    mem_fp: u64,
    accesses: u64,
    llc_accesses: u64,
    llc_misses: u64,
}

impl Region {
    #[inline(always)]
    fn next_offset(&mut self, rng: &mut Rng) -> u64 {
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

struct Phase {
    accesses: u64,
    /// Cumulative shares scaled to 2^32; region i is picked when r < thresholds[i].
    thresholds: Vec<u32>,
    fallback: usize,
}

struct GenProc {
    regions: Vec<Region>,
    phases: Vec<Phase>,
    phase: usize,
    left: u64,
    repeats_left: u32,
}

impl GenProc {
    fn run(
        &mut self,
        st: &mut ProcState,
        llc: &mut Cache,
        t: &Timing,
        page_shift: u32,
        limit_fp: u64,
    ) {
        let page_mask = (1u64 << page_shift) - 1;
        while st.clock_fp < limit_fp {
            if self.left == 0 {
                self.phase += 1;
                if self.phase == self.phases.len() {
                    self.repeats_left -= 1;
                    if self.repeats_left == 0 {
                        st.finished = true;
                        return;
                    }
                    self.phase = 0;
                }
                self.left = self.phases[self.phase].accesses;
            }
            self.left -= 1;
            let r = st.rng.next_u64();
            let phase = &self.phases[self.phase];
            let pick = r as u32;
            let ri = phase
                .thresholds
                .iter()
                .position(|&th| pick < th)
                .unwrap_or(phase.fallback);
            let reg = &mut self.regions[ri];
            let off = reg.next_offset(&mut st.rng);
            let is_write = ((r >> 32) as u32) < reg.write_threshold;
            let pfn = reg.frames[(off >> page_shift) as usize] as u64;
            let paddr = (pfn << page_shift) | (off & page_mask);
            st.c.accesses += 1;
            let vaddr = reg.base_va + off;
            let served = line_ref(&mut st.core, llc, &mut st.c, vaddr, paddr);
            reg.accesses += 1;
            st.instr_fp += reg.instr_fp;
            let latency = match served {
                Served::L1 => t.l1,
                Served::L2 => t.l2,
                Served::Llc => {
                    reg.llc_accesses += 1;
                    t.llc
                }
                Served::Mem => {
                    reg.llc_accesses += 1;
                    reg.llc_misses += 1;
                    reg.mem_fp
                }
            };
            st.clock_fp += reg.base_fp + latency;
            if served >= Served::Llc && !is_write && st.pmu.enabled {
                st.pmu_event(t, vaddr, Some(paddr), served, latency);
            }
        }
    }

    fn region_of(&mut self, vaddr: u64) -> Option<(&mut Region, usize)> {
        self.regions
            .iter_mut()
            .find(|r| vaddr >= r.base_va && vaddr < r.base_va + r.size)
            .map(|r| {
                let idx = ((vaddr - r.base_va) / (r.size.div_ceil(r.frames.len() as u64))) as usize;
                (r, idx)
            })
    }
}

enum PageMap {
    Identity,
    Table {
        pages: HashMap<u64, u32>,
        last: Option<(u64, u32)>,
    },
}

struct TraceProc {
    reader: LackeyReader<Box<dyn BufRead + Send>>,
    path: Option<PathBuf>,
    repeats_left: u32,
    map: PageMap,
    /// Sizes are clamped to the smallest line, as cachegrind does, so that an access never
    /// spans more than two lines.
    max_size: u64,
    error: Option<SimError>,
}

impl TraceProc {
    #[inline]
    fn translate(
        &mut self,
        frames: &mut FrameAllocator,
        vaddr: u64,
        page_shift: u32,
    ) -> Result<u64, SimError> {
        let PageMap::Table { pages, last } = &mut self.map else {
            return Ok(vaddr);
        };
        let vpn = vaddr >> page_shift;
        let off = vaddr & ((1 << page_shift) - 1);
        if let Some((lv, lp)) = *last {
            if lv == vpn {
                return Ok(((lp as u64) << page_shift) | off);
            }
        }
        let pfn = match pages.get(&vpn) {
            Some(&p) => p,
            None => {
                let p = frames.alloc_any().ok_or_else(|| {
                    SimError::OutOfFrames(format!("trace touched {} pages", pages.len()))
                })?;
                pages.insert(vpn, p);
                p
            }
        };
        *last = Some((vpn, pfn));
        Ok(((pfn as u64) << page_shift) | off)
    }

    fn run(
        &mut self,
        st: &mut ProcState,
        llc: &mut Cache,
        frames: &mut FrameAllocator,
        t: &Timing,
        page_shift: u32,
        limit_fp: u64,
    ) {
        if let Err(e) = self.run_inner(st, llc, frames, t, page_shift, limit_fp) {
            self.error = Some(e);
            st.finished = true;
        }
    }

    fn run_inner(
        &mut self,
        st: &mut ProcState,
        llc: &mut Cache,
        frames: &mut FrameAllocator,
        t: &Timing,
        page_shift: u32,
        limit_fp: u64,
    ) -> Result<(), SimError> {
        let page_size = 1u64 << page_shift;
        while st.clock_fp < limit_fp {
            let Some(ev) = self.reader.next_event()? else {
                if self.repeats_left > 1 {
                    let path = self
                        .path
                        .clone()
                        .ok_or_else(|| SimError::Unsupported("repeat needs a trace file".into()))?;
                    self.reader = LackeyReader::new(open_trace(&path)?);
                    self.repeats_left -= 1;
                    continue;
                }
                st.finished = true;
                return Ok(());
            };
            let size = ev.size.min(self.max_size);
            let paddr = self.translate(frames, ev.addr, page_shift)?;
            // An access crossing into another page touches two frames: reference the two
            // parts separately, as one access (a miss if either part misses).
            let split = !matches!(self.map, PageMap::Identity)
                && (ev.addr & (page_size - 1)) + size > page_size;
            let latency = if ev.kind == TraceKind::Instr {
                st.instr_fp += FP;
                st.clock_fp += t.base_per_instr;

                if split {
                    let first = page_size - (ev.addr & (page_size - 1));
                    let p2 = self.translate(frames, ev.addr.wrapping_add(first), page_shift)?;
                    let a = instr_ref(&mut st.core, llc, &mut st.c, ev.addr, paddr, first);
                    let b = instr_ref(
                        &mut st.core,
                        llc,
                        &mut st.c,
                        ev.addr + first,
                        p2,
                        size - first,
                    );
                    st.c.accesses -= 1;
                    a.max(b)
                } else {
                    instr_ref(&mut st.core, llc, &mut st.c, ev.addr, paddr, size)
                }
            } else {
                st.c.accesses += 1;
                let served = if split {
                    let first = page_size - (ev.addr & (page_size - 1));
                    let p2 = self.translate(frames, ev.addr.wrapping_add(first), page_shift)?;
                    let a = data_ref(&mut st.core, llc, &mut st.c, ev.addr, paddr, first);
                    let b = data_ref(
                        &mut st.core,
                        llc,
                        &mut st.c,
                        ev.addr + first,
                        p2,
                        size - first,
                    );
                    st.c.l1d_accesses -= 1;
                    a.max(b)
                } else {
                    data_ref(&mut st.core, llc, &mut st.c, ev.addr, paddr, size)
                };
                if served >= Served::Llc && ev.kind != TraceKind::Store && st.pmu.enabled {
                    let w = if served == Served::Mem { t.mem } else { t.llc };
                    let pa = (!matches!(self.map, PageMap::Identity)).then_some(paddr);
                    st.pmu_event(t, ev.addr, pa, served, w);
                }
                served
            };
            st.clock_fp += match latency {
                Served::L1 => t.l1,
                Served::L2 => t.l2,
                Served::Llc => t.llc,
                Served::Mem => t.mem,
            };
        }
        Ok(())
    }
}

fn open_trace(path: &PathBuf) -> Result<Box<dyn BufRead + Send>, SimError> {
    let f = File::open(path).map_err(|reason| SimError::Io {
        path: path.clone(),
        reason,
    })?;
    Ok(Box::new(BufReader::with_capacity(1 << 20, f)))
}

enum Source {
    Gen(GenProc),
    Trace(Box<TraceProc>),
}

struct Process {
    name: String,
    source: Source,
    st: ProcState,
}

/// A simulated machine running a workload.
pub struct Machine {
    profile: MachineProfile,
    workload_name: String,
    seed: u64,
    llc: Cache,
    procs: Vec<Process>,
    frames: FrameAllocator,
    pollute: Vec<u32>,
    is_pollute: Vec<bool>,
    rng: Rng,
    now: u64,
    page_shift: u32,
    timing: Timing,
    migration_cycles: u64,
    ipc_noise: f64,
}

fn build_cache(profile: &MachineProfile, l: &LevelSpec) -> Cache {
    let g = CacheGeometry::from_size(l.size.0, l.line.0, l.ways, l.slices, profile.page_size.0)
        .expect("validated profile");
    Cache::new(g, l.policy)
}

impl Machine {
    fn empty(
        profile: &MachineProfile,
        workload_name: String,
        seed: u64,
    ) -> Result<Machine, SimError> {
        profile.validate(&profile.name)?;
        let mut rng = Rng::new(seed);
        let llc = build_cache(profile, &profile.llc);
        let colours = llc.geometry().colours();
        let frames = (profile.memory.0 / profile.page_size.0) as u32;
        let frames = FrameAllocator::new(frames, colours, &mut rng);
        let fp = |cycles: f64| (cycles * FP as f64).round() as u64;
        let timing = Timing {
            l1: fp(profile.l1d.latency as f64),
            l2: fp(profile.l2.as_ref().map_or(0, |l| l.latency) as f64),
            llc: fp(profile.llc.latency as f64),
            mem: fp(profile.memory_latency as f64),
            base_per_instr: fp(profile.base_cpi),
            sample_cost: profile.pmu.sample_cost_cycles as u64,
            jitter: profile.pmu.jitter,
            ring: profile.pmu.ring_samples,
        };
        let mut m = Machine {
            workload_name,
            seed,
            llc,
            procs: Vec::new(),
            frames,
            pollute: Vec::new(),
            is_pollute: vec![false; colours as usize],
            rng,
            now: 0,
            page_shift: profile.page_size.0.trailing_zeros(),
            timing,
            migration_cycles: profile.migration_cycles(),
            ipc_noise: profile.pmu.ipc_noise,
            profile: profile.clone(),
        };
        m.set_pollute_colours(&[Colour(colours - 1)])?;
        Ok(m)
    }

    fn new_state(&self, i: usize) -> ProcState {
        let p = &self.profile;
        let mut s = self.seed ^ (i as u64).wrapping_mul(0xA076_1D64_78BD_642F);
        ProcState {
            pid: FIRST_PID + i as Pid,
            core: Core {
                l1d: build_cache(p, &p.l1d),
                l1i: p.l1i.as_ref().map(|l| build_cache(p, l)),
                l2: p.l2.as_ref().map(|l| build_cache(p, l)),
            },
            clock_fp: 0,
            instr_fp: 0,
            c: Counts::default(),
            finished: false,
            rng: Rng::new(splitmix64(&mut s)),
            pmu: Pmu {
                enabled: false,
                period: 1,
                countdown: 1,
                budget: 0.0,
                samples: Vec::new(),
                lost: 0,
                throttled: 0,
                window_start_fp: 0,
                window_overhead: 0,
            },
            last_read: Snapshot::default(),
        }
    }

    /// A machine of `profile` running `workload`; everything random follows from `seed`.
    pub fn new(
        profile: &MachineProfile,
        workload: &Workload,
        seed: u64,
    ) -> Result<Machine, SimError> {
        workload.validate(&workload.name)?;
        let mut m = Machine::empty(profile, workload.name.clone(), seed)?;
        let page_size = profile.page_size.0;
        for (i, spec) in workload.processes.iter().enumerate() {
            let mut st = m.new_state(i);
            let mut regions = Vec::new();
            let mut va = REGION_BASE;
            for r in &spec.regions {
                let pages = r.size.0.div_ceil(page_size);
                let mut frames = Vec::with_capacity(pages as usize);
                for _ in 0..pages {
                    frames.push(m.frames.alloc_any().ok_or_else(|| {
                        SimError::OutOfFrames(format!(
                            "workload '{}' needs more than the machine's {} of memory",
                            workload.name, profile.memory
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
                            let j = st.rng.below(k as u64) as usize;
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
                    base_fp: fp(r.instructions_per_access * profile.base_cpi),
                    mem_fp: fp(profile.memory_latency as f64 / r.mlp),
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
            st.finished = false;
            let left = phases[0].accesses;
            m.procs.push(Process {
                name: spec.name.clone(),
                source: Source::Gen(GenProc {
                    regions,
                    phases,
                    phase: 0,
                    left,
                    repeats_left: spec.repeat,
                }),
                st,
            });
        }
        Ok(m)
    }

    /// A machine replaying a trace as one process.
    pub fn from_trace(
        profile: &MachineProfile,
        trace: TraceSpec,
        seed: u64,
    ) -> Result<Machine, SimError> {
        let TraceFormat::Lackey = trace.format;
        if trace.repeat == 0 {
            return Err(SimError::Unsupported("repeat must be at least 1".into()));
        }
        let (reader, path, name): (Box<dyn BufRead + Send>, Option<PathBuf>, String) =
            match trace.input {
                TraceInput::File(p) => (open_trace(&p)?, Some(p.clone()), p.display().to_string()),
                TraceInput::Stdin => (
                    Box::new(BufReader::with_capacity(1 << 20, std::io::stdin())),
                    None,
                    "-".into(),
                ),
                TraceInput::Reader(r) => (r, None, "trace".into()),
            };
        if trace.repeat > 1 && path.is_none() {
            return Err(SimError::Unsupported(
                "repeat > 1 needs a trace file (standard input can be read once)".into(),
            ));
        }
        let mut m = Machine::empty(profile, name.clone(), seed)?;
        let max_size = [
            Some(&profile.l1d),
            profile.l1i.as_ref(),
            profile.l2.as_ref(),
            Some(&profile.llc),
        ]
        .into_iter()
        .flatten()
        .map(|l| l.line.0)
        .min()
        .unwrap_or(64);
        let st = m.new_state(0);
        m.procs.push(Process {
            name,
            source: Source::Trace(Box::new(TraceProc {
                reader: LackeyReader::new(reader),
                path,
                repeats_left: trace.repeat,
                map: if trace.identity_map {
                    PageMap::Identity
                } else {
                    PageMap::Table {
                        pages: HashMap::new(),
                        last: None,
                    }
                },
                max_size,
                error: None,
            })),
            st,
        });
        Ok(m)
    }

    pub fn profile(&self) -> &MachineProfile {
        &self.profile
    }

    pub fn workload_name(&self) -> &str {
        &self.workload_name
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Geometry of the shared LLC (the cache colours partition).
    pub fn llc_geometry(&self) -> CacheGeometry {
        self.llc.geometry()
    }

    /// One pid per workload process, in workload order.
    pub fn pids(&self) -> Vec<Pid> {
        self.procs.iter().map(|p| p.st.pid).collect()
    }

    /// Simulated cycles elapsed.
    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// Cycles one page migration costs the target.
    pub fn migration_cycles(&self) -> u64 {
        self.migration_cycles
    }

    /// The colours whose frames form the pollute buffer.
    pub fn pollute_colours(&self) -> Vec<Colour> {
        self.pollute.iter().map(|&c| Colour(c)).collect()
    }

    /// Choose the pollute buffer's colours (default: the last of N). Pages already there
    /// stay where they are.
    pub fn set_pollute_colours(&mut self, colours: &[Colour]) -> Result<(), SimError> {
        let n = self.llc.geometry().colours();
        if colours.is_empty() || colours.len() >= n as usize || colours.iter().any(|c| c.0 >= n) {
            return Err(SimError::Unsupported(format!(
                "pollute colours must be 1 to {} distinct colours below {n}",
                n - 1
            )));
        }
        self.pollute = colours.iter().map(|c| c.0).collect();
        self.pollute.sort_unstable();
        self.pollute.dedup();
        self.is_pollute = (0..n).map(|c| self.pollute.contains(&c)).collect();
        Ok(())
    }

    /// True once every process has finished.
    pub fn finished(&self) -> bool {
        self.procs.iter().all(|p| p.st.finished)
    }

    /// The first error a process stopped on (a bad trace line), if any.
    pub fn error(&self) -> Option<&SimError> {
        self.procs.iter().find_map(|p| match &p.source {
            Source::Trace(t) => t.error.as_ref(),
            Source::Gen(_) => None,
        })
    }

    /// Advance the simulated clock by about `cycles`; false once the workload has finished.
    pub fn run_for(&mut self, cycles: u64) -> bool {
        if self.finished() {
            return false;
        }
        let target = self.now + cycles;
        let quantum = if self.procs.len() == 1 {
            cycles.max(1)
        } else {
            QUANTUM
        };
        let page_shift = self.page_shift;
        while self.now < target && !self.finished() {
            let slice_end = (self.now + quantum).min(target);
            let limit_fp = slice_end << FP_SHIFT;
            for p in &mut self.procs {
                if p.st.finished {
                    continue;
                }
                match &mut p.source {
                    Source::Gen(g) => {
                        g.run(&mut p.st, &mut self.llc, &self.timing, page_shift, limit_fp)
                    }
                    Source::Trace(t) => t.run(
                        &mut p.st,
                        &mut self.llc,
                        &mut self.frames,
                        &self.timing,
                        page_shift,
                        limit_fp,
                    ),
                }
                enforce_budget(&mut p.st);
            }
            self.now = slice_end;
        }
        if self.finished() {
            // The clock stops when the last process does.
            self.now = self
                .procs
                .iter()
                .map(|p| p.st.clock_fp >> FP_SHIFT)
                .max()
                .unwrap_or(self.now);
        }
        !self.finished()
    }

    /// Like `run_for`, but reports a process's error (a bad trace line).
    pub fn run_for_checked(&mut self, cycles: u64) -> Result<bool, SimError> {
        let more = self.run_for(cycles);
        for p in &mut self.procs {
            if let Source::Trace(t) = &mut p.source {
                if let Some(e) = t.error.take() {
                    return Err(e);
                }
            }
        }
        Ok(more)
    }

    /// Run until the workload ends (or stops on an error).
    pub fn run_to_end(&mut self) -> Result<(), SimError> {
        while self.run_for_checked(1 << 30)? {}
        Ok(())
    }

    fn stats_of(p: &Process) -> ProcessStats {
        let c = &p.st.c;
        ProcessStats {
            pid: p.st.pid,
            name: p.name.clone(),
            instructions: p.st.instr_fp >> FP_SHIFT,
            cycles: p.st.clock_fp >> FP_SHIFT,
            accesses: c.accesses,
            l1d_accesses: c.l1d_accesses,
            l1d_misses: c.l1d_misses,
            l1i_accesses: c.l1i_accesses,
            l1i_misses: c.l1i_misses,
            l2_accesses: c.l2_accesses,
            l2_misses: c.l2_misses,
            llc_accesses: c.llc_accesses,
            llc_misses: c.llc_misses,
            llc_data_misses: c.llc_data_misses,
            sampling_overhead_cycles: c.sampling_overhead,
            migration_overhead_cycles: c.migration_overhead,
            samples: c.samples,
            pages_migrated: c.pages_migrated,
        }
    }

    /// Counts so far, in total and per process.
    pub fn totals(&self) -> RunStats {
        let processes: Vec<ProcessStats> = self.procs.iter().map(Self::stats_of).collect();
        let mut t = RunStats::default();
        for p in &processes {
            t.instructions += p.instructions;
            t.cycles = t.cycles.max(p.cycles);
            t.accesses += p.accesses;
            t.l1d_accesses += p.l1d_accesses;
            t.l1d_misses += p.l1d_misses;
            t.l1i_accesses += p.l1i_accesses;
            t.l1i_misses += p.l1i_misses;
            t.l2_accesses += p.l2_accesses;
            t.l2_misses += p.l2_misses;
            t.llc_accesses += p.llc_accesses;
            t.llc_misses += p.llc_misses;
            t.llc_data_misses += p.llc_data_misses;
            t.sampling_overhead_cycles += p.sampling_overhead_cycles;
            t.migration_overhead_cycles += p.migration_overhead_cycles;
        }
        t.processes = processes;
        t
    }

    fn proc_index(&self, pid: Pid) -> Result<usize, SimError> {
        self.procs
            .iter()
            .position(|p| p.st.pid == pid)
            .ok_or(SimError::NoSuchProcess(pid))
    }

    /// Per-region LLC behaviour of a generated process (empty for a trace).
    pub fn region_stats(&self, pid: Pid) -> Result<Vec<RegionStats>, SimError> {
        let p = &self.procs[self.proc_index(pid)?];
        Ok(match &p.source {
            Source::Gen(g) => g
                .regions
                .iter()
                .map(|r| RegionStats {
                    name: r.name.clone(),
                    first_page: VirtPage(r.base_va >> self.page_shift),
                    pages: r.frames.len() as u64,
                    accesses: r.accesses,
                    llc_accesses: r.llc_accesses,
                    llc_misses: r.llc_misses,
                })
                .collect(),
            Source::Trace(_) => Vec::new(),
        })
    }

    /// The virtual pages of one region of a generated process.
    pub fn region_pages(&self, pid: Pid, region: &str) -> Result<Vec<VirtPage>, SimError> {
        let stats = self.region_stats(pid)?;
        let r = stats.iter().find(|r| r.name == region).ok_or_else(|| {
            SimError::Unsupported(format!("process {pid} has no region '{region}'"))
        })?;
        Ok((0..r.pages).map(|i| VirtPage(r.first_page.0 + i)).collect())
    }

    /// Every mapped virtual page of a process, in address order.
    pub fn pages(&self, pid: Pid) -> Result<Vec<VirtPage>, SimError> {
        let p = &self.procs[self.proc_index(pid)?];
        Ok(match &p.source {
            Source::Gen(g) => g
                .regions
                .iter()
                .flat_map(|r| {
                    let first = r.base_va >> self.page_shift;
                    (0..r.frames.len() as u64).map(move |i| VirtPage(first + i))
                })
                .collect(),
            Source::Trace(t) => match &t.map {
                PageMap::Identity => Vec::new(),
                PageMap::Table { pages, .. } => {
                    let mut v: Vec<VirtPage> = pages.keys().map(|&k| VirtPage(k)).collect();
                    v.sort_unstable();
                    v
                }
            },
        })
    }

    /// The frame slot of a page, or why there is none.
    fn frame_slot(proc: &mut Process, page: VirtPage, page_shift: u32) -> Result<&mut u32, Errno> {
        match &mut proc.source {
            Source::Gen(g) => {
                let vaddr = page.0 << page_shift;
                let (r, _) = g.region_of(vaddr).ok_or(Errno::EFAULT)?;
                let idx = ((vaddr - r.base_va) >> page_shift) as usize;
                r.frames.get_mut(idx).ok_or(Errno::EFAULT)
            }
            Source::Trace(t) => match &mut t.map {
                PageMap::Identity => Err(Errno::EINVAL),
                PageMap::Table { pages, last } => {
                    *last = None;
                    pages.get_mut(&page.0).ok_or(Errno::ENOENT)
                }
            },
        }
    }

    fn migrate_one(&mut self, idx: usize, page: VirtPage, to: Placement) -> PageResult {
        let page_shift = self.page_shift;
        let colours = self.is_pollute.len() as u32;
        let old = *Self::frame_slot(&mut self.procs[idx], page, page_shift)?;
        let in_pollute = self.is_pollute[(old % colours) as usize];
        let new = match (to, in_pollute) {
            (Placement::Pollute, true) | (Placement::Restore, false) => {
                return Ok(Colour(old % colours))
            }
            (Placement::Pollute, false) => self.frames.alloc_in(&self.pollute),
            (Placement::Restore, true) => {
                let others: Vec<u32> = (0..colours)
                    .filter(|&c| !self.is_pollute[c as usize])
                    .collect();
                self.frames.alloc_random_in(&others, &mut self.rng)
            }
        }
        .ok_or(Errno::ENOMEM)?;
        // The old frame's lines are gone from every physically indexed cache (the copy went
        // to a new frame), and from the owner's virtually indexed L1s (their physical tags
        // no longer match).
        let start = (old as u64) << page_shift;
        let len = 1u64 << page_shift;
        self.llc.invalidate_range(start, len);
        for p in &mut self.procs {
            if let Some(l2) = p.st.core.l2.as_mut() {
                l2.invalidate_range(start, len);
            }
        }
        let vstart = page.0 << page_shift;
        let core = &mut self.procs[idx].st.core;
        core.l1d.invalidate_range(vstart, len);
        if let Some(l1i) = core.l1i.as_mut() {
            l1i.invalidate_range(vstart, len);
        }
        self.frames.free(old);
        let proc = &mut self.procs[idx];
        *Self::frame_slot(proc, page, page_shift).expect("slot found above") = new;
        proc.st.clock_fp += self.migration_cycles << FP_SHIFT;
        proc.st.c.migration_overhead += self.migration_cycles;
        proc.st.c.pages_migrated += 1;
        Ok(Colour(new % colours))
    }
}

/// Raise the sampling period when sampling costs more than its CPU budget.
fn enforce_budget(st: &mut ProcState) {
    let pmu = &mut st.pmu;
    if !pmu.enabled || pmu.budget <= 0.0 {
        return;
    }
    let span = (st.clock_fp - pmu.window_start_fp) >> FP_SHIFT;
    if span < BUDGET_WINDOW {
        return;
    }
    let share = pmu.window_overhead as f64 / span as f64;
    if share > pmu.budget {
        pmu.period = ((pmu.period as f64 * share / pmu.budget).ceil() as u64).max(pmu.period + 1);
        pmu.countdown = pmu.countdown.min(pmu.period);
        pmu.throttled += 1;
    }
    pmu.window_start_fp = st.clock_fp;
    pmu.window_overhead = 0;
}

impl Sampler for Machine {
    type Error = SimError;

    fn start(&mut self, pid: Pid, plan: &SamplingPlan) -> Result<(), SimError> {
        if plan.period == 0 {
            return Err(SimError::Unsupported(
                "sampling period must be at least 1".into(),
            ));
        }
        let i = self.proc_index(pid)?;
        let st = &mut self.procs[i].st;
        st.pmu.enabled = true;
        st.pmu.period = plan.period;
        st.pmu.budget = plan.cpu_budget;
        st.pmu.countdown = jittered(plan.period, self.timing.jitter, &mut st.rng);
        st.pmu.window_start_fp = st.clock_fp;
        st.pmu.window_overhead = 0;
        Ok(())
    }

    fn stop(&mut self, pid: Pid) -> Result<(), SimError> {
        let i = self.proc_index(pid)?;
        self.procs[i].st.pmu.enabled = false;
        Ok(())
    }

    fn drain(&mut self, pid: Pid, out: &mut Vec<MemSample>) -> Result<SampleLoss, SimError> {
        let i = self.proc_index(pid)?;
        let pmu = &mut self.procs[i].st.pmu;
        out.append(&mut pmu.samples);
        let loss = SampleLoss {
            lost: pmu.lost,
            throttled: pmu.throttled,
        };
        pmu.lost = 0;
        pmu.throttled = 0;
        Ok(loss)
    }
}

impl Counters for Machine {
    type Error = SimError;

    fn read(&mut self, pid: Pid) -> Result<CounterDelta, SimError> {
        let i = self.proc_index(pid)?;
        let st = &mut self.procs[i].st;
        let now = Snapshot {
            instructions: st.instr_fp >> FP_SHIFT,
            cycles: st.clock_fp >> FP_SHIFT,
            llc_refs: st.c.llc_accesses,
            llc_misses: st.c.llc_misses,
        };
        let last = std::mem::replace(&mut st.last_read, now);
        let mut cycles = now.cycles - last.cycles;
        if self.ipc_noise > 0.0 && cycles > 0 {
            let f = (1.0 + self.ipc_noise * self.rng.normal()).clamp(0.5, 1.5);
            cycles = ((cycles as f64 * f).round() as u64).max(1);
        }
        Ok(CounterDelta {
            instructions: now.instructions - last.instructions,
            cycles,
            llc_references: now.llc_refs - last.llc_refs,
            llc_misses: now.llc_misses - last.llc_misses,
            time_enabled: cycles,
            time_running: cycles,
        })
    }
}

impl Remapper for Machine {
    type Error = SimError;

    fn migrate(
        &mut self,
        pid: Pid,
        pages: &[VirtPage],
        to: Placement,
    ) -> Result<Vec<PageResult>, SimError> {
        let i = self.proc_index(pid)?;
        Ok(pages
            .iter()
            .map(|&pg| self.migrate_one(i, pg, to))
            .collect())
    }

    fn query(&mut self, pid: Pid, pages: &[VirtPage]) -> Result<Vec<PageResult>, SimError> {
        let i = self.proc_index(pid)?;
        let colours = self.is_pollute.len() as u32;
        let shift = self.page_shift;
        let proc = &mut self.procs[i];
        Ok(pages
            .iter()
            .map(|&pg| Self::frame_slot(proc, pg, shift).map(|f| Colour(*f % colours)))
            .collect())
    }
}
