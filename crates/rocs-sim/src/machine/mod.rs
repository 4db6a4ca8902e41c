//! The simulated machine: processes (generated workloads or replayed traces), each on its
//! own core with private L1 caches (and L2), all sharing one LLC; a frame allocator; the
//! timing model; and the PMU. It implements rocs-core's `Sampler`, `Counters` and
//! `Remapper`, so the same controller drives it that drives a real machine.
//!
//! Timing: a process's cycles are `instructions * base_cpi` plus, per access, the latency
//! of the level that served it (accesses served by the LLC or memory cost their latency /
//! `mlp` of their region; a trace's overlap nothing), plus the overheads charged to it
//! (samples, page migrations). Clocks are kept in 1/256 cycle so that fractional CPIs add
//! up exactly.

mod cat;
mod generator;
mod hierarchy;
mod models;
mod pmu;
mod replay;
mod stats;

use std::collections::HashMap;

use rocs_core::{
    CacheGeometry, Colour, Errno, Mapping, PageResult, Pid, Placement, Remapper, VirtPage,
};

pub use replay::{TraceFormat, TraceInput, TraceSpec};
pub use stats::{Counts, ProcessStats, RegionStats, RunStats};

use crate::cache::Cache;
use crate::error::SimError;
use crate::frames::FrameAllocator;
use crate::rng::{splitmix64, Rng};
use crate::spec::MachineSpec;
use crate::tlb::Tlb;
use crate::workload::Workload;
use generator::GenProc;
use hierarchy::{build_cache, build_modern, Core, Timing};
use pmu::{enforce_budget, Pmu, Snapshot};
use replay::{PageMap, TraceProc};

const FP_SHIFT: u32 = 8;
const FP: u64 = 1 << FP_SHIFT;
/// Slice of simulated time processes run in turn when several share the LLC.
const QUANTUM: u64 = 2_000;
/// Slice of simulated time a process runs alone while it samples: the sampling budget is
/// checked between slices, so that a period over budget is raised within a window.
const SAMPLING_SLICE: u64 = 250_000;
/// First pid handed out; process i of a workload gets `FIRST_PID + i`.
pub const FIRST_PID: Pid = 1000;

/// Everything of a process but its access source.
struct ProcState {
    pub(super) pid: Pid,
    pub(super) core: Core,
    pub(super) clock_fp: u64,
    pub(super) instr_fp: u64,
    pub(super) c: Counts,
    pub(super) finished: bool,
    pub(super) rng: Rng,
    pub(super) pmu: Pmu,
    pub(super) last_read: Snapshot,
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
    spec: MachineSpec,
    workload_name: String,
    seed: u64,
    llc: Cache,
    procs: Vec<Process>,
    frames: FrameAllocator,
    pollute: Vec<u32>,
    is_pollute: Vec<bool>,
    /// The colour each page on a pollute frame came from, by that frame: a restore takes
    /// the page home (the shim keeps the same table), so a search that confines nothing
    /// leaves the program's layout as it found it.
    homes: HashMap<u32, u32>,
    rng: Rng,
    now: u64,
    page_shift: u32,
    timing: Timing,
    migration_cycles: u64,
    ipc_noise: f64,
    /// Switch a process's L2 prefetcher off while its PMU samples.
    prefetch_off_while_sampling: bool,
    /// Every physical address the L2s and the LLC see is below this, unless a trace is
    /// mapped one to one (its virtual addresses are physical): see [`physical_limit`].
    physical: Option<u64>,
}

/// A bound on the physical addresses of a machine with `spec`'s memory whose pages all get
/// frames: every address is in a frame (data, page tables) or, prefetched, in the 4 KiB
/// block of one (a prefetcher never leaves its 4 KiB page, whatever the page size).
fn physical_limit(spec: &MachineSpec) -> u64 {
    spec.memory.0.next_multiple_of(4096)
}

impl Machine {
    /// `identity`: a trace is mapped one to one, so that physical addresses are not bounded.
    fn empty(
        spec: &MachineSpec,
        workload_name: String,
        seed: u64,
        identity: bool,
    ) -> Result<Machine, SimError> {
        spec.validate(&spec.name)?;
        let mut rng = Rng::new(seed);
        let physical = (!identity).then(|| physical_limit(spec));
        let llc = build_cache(spec, &spec.llc, physical);
        let colours = llc.geometry().colours();
        let frames = (spec.memory.0 / spec.page_size.0) as u32;
        let frames = FrameAllocator::new(frames, colours, &mut rng);
        let fp = |cycles: f64| (cycles * FP as f64).round() as u64;
        let timing = Timing {
            l1: fp(spec.l1d.latency as f64),
            l2: fp(spec.l2.as_ref().map_or(0, |l| l.latency) as f64),
            llc: fp(spec.llc.latency as f64),
            mem: fp(spec.memory_latency as f64),
            base_per_instr: fp(spec.base_cpi),
            sample_cost: spec.pmu.sample_cost_cycles as u64,
            jitter: spec.pmu.jitter,
            ring: spec.pmu.ring_samples,
        };
        let mut m = Machine {
            workload_name,
            seed,
            llc,
            procs: Vec::new(),
            frames,
            pollute: Vec::new(),
            is_pollute: vec![false; colours as usize],
            homes: HashMap::new(),
            rng,
            now: 0,
            page_shift: spec.page_size.0.trailing_zeros(),
            timing,
            migration_cycles: spec.migration_cycles(),
            ipc_noise: spec.pmu.ipc_noise,
            prefetch_off_while_sampling: spec
                .prefetch
                .as_ref()
                .is_some_and(|p| p.off_while_sampling),
            physical,
            spec: spec.clone(),
        };
        m.set_pollute_colours(&[Colour(colours - 1)])?;
        Ok(m)
    }

    fn new_state(&self, i: usize) -> ProcState {
        let p = &self.spec;
        let mut s = self.seed ^ (i as u64).wrapping_mul(0xA076_1D64_78BD_642F);
        let program_rng = Rng::new(splitmix64(&mut s));
        let sampler_rng = Rng::new(splitmix64(&mut s));
        ProcState {
            pid: FIRST_PID + i as Pid,
            core: Core {
                // The L1s are indexed by virtual addresses, which nothing bounds.
                l1d: build_cache(p, &p.l1d, None),
                l1i: p.l1i.as_ref().map(|l| build_cache(p, l, None)),
                l2: p.l2.as_ref().map(|l| build_cache(p, l, self.physical)),
                modern: build_modern(p, &self.llc),
            },
            clock_fp: 0,
            instr_fp: 0,
            c: Counts::default(),
            finished: false,
            rng: program_rng,
            pmu: Pmu {
                enabled: false,
                period: 1,
                requested: 1,
                cost_reported: 0,
                countdown: 1,
                budget: 0.0,
                samples: Vec::new(),
                lost: 0,
                throttled: 0,
                window_start_fp: 0,
                window_overhead: 0,
                window_samples: 0,
                rng: sampler_rng,
            },
            last_read: Snapshot::default(),
        }
    }

    /// A machine of `spec` running `workload`; everything random follows from `seed`.
    pub fn new(spec: &MachineSpec, workload: &Workload, seed: u64) -> Result<Machine, SimError> {
        let workload = &workload.sized_for(spec.llc.size.0);
        workload.validate(&workload.name)?;
        let mut m = Machine::empty(spec, workload.name.clone(), seed, false)?;
        for (i, process) in workload.processes.iter().enumerate() {
            let mut st = m.new_state(i);
            let gen = GenProc::build(spec, workload, i, &mut m.frames, &mut st.rng)?;
            st.core.modern.tlb = m.tlb_for(&gen)?;
            m.procs.push(Process {
                name: process.name.clone(),
                source: Source::Gen(gen),
                st,
            });
        }
        Ok(m)
    }

    /// A machine replaying a trace as one process.
    pub fn from_trace(
        spec: &MachineSpec,
        trace: TraceSpec,
        seed: u64,
    ) -> Result<Machine, SimError> {
        Machine::from_traces(spec, vec![trace], seed)
    }

    /// A machine replaying several traces as processes sharing the LLC, each on its own
    /// core, in turns of a quantum like a generated workload's processes. The workload's
    /// name is the traces' names joined by " + ".
    pub fn from_traces(
        spec: &MachineSpec,
        traces: Vec<TraceSpec>,
        seed: u64,
    ) -> Result<Machine, SimError> {
        if traces.is_empty() {
            return Err(SimError::Unsupported("no trace to replay".into()));
        }
        if traces.len() > 1 && traces.iter().any(|t| t.identity_map) {
            return Err(SimError::Unsupported(
                "identity mapping is for one trace (to compare with cachegrind): several \
                 traces mapped one to one would share each other's physical lines"
                    .into(),
            ));
        }
        if spec.tlb.is_some() && traces.iter().any(|t| t.identity_map) {
            return Err(SimError::Unsupported(format!(
                "machine '{}' has a TLB, whose page tables need frames, but identity mapping \
                 (to compare with cachegrind, which models no TLB) gives none: use a machine \
                 without [tlb], or no identity mapping",
                spec.name
            )));
        }
        let identity = traces.iter().any(|t| t.identity_map);
        let mut procs = Vec::with_capacity(traces.len());
        for trace in traces {
            procs.push(TraceProc::open(spec, trace)?);
        }
        let name = procs
            .iter()
            .map(|(_, n)| n.as_str())
            .collect::<Vec<_>>()
            .join(" + ");
        let mut m = Machine::empty(spec, name, seed, identity)?;
        m.frames.split_first_touches(procs.len());
        for (i, (proc, name)) in procs.into_iter().enumerate() {
            let mut st = m.new_state(i);
            st.core.modern.tlb = spec.tlb.as_ref().map(|tlb| {
                Tlb::with_touched_tables(tlb, m.page_shift, tlb.walk_cycles as u64 * FP)
            });
            m.procs.push(Process {
                name,
                source: Source::Trace(Box::new(proc)),
                st,
            });
        }
        Ok(m)
    }

    pub fn spec(&self) -> &MachineSpec {
        &self.spec
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

    /// The processes that have run to their end (a finished process runs no more: on
    /// Linux it would have exited).
    pub fn finished_pids(&self) -> Vec<Pid> {
        self.procs
            .iter()
            .filter(|p| p.st.finished)
            .map(|p| p.st.pid)
            .collect()
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

    /// Advance the simulated clock by about `cycles` (several processes: to the end of a
    /// quantum); false once the workload has finished.
    pub fn run_for(&mut self, cycles: u64) -> bool {
        if self.finished() {
            return false;
        }
        let mut target = self.now + cycles;
        if self.procs.len() > 1 {
            // Turns on a fixed grid of quanta: how the caller divides the time (the
            // controller's windows, an oracle's steps) does not change the order in which
            // the processes reach the LLC.
            target = target.next_multiple_of(QUANTUM);
        }
        let quantum = if self.procs.len() > 1 {
            QUANTUM
        } else if self.procs[0].st.pmu.enabled {
            SAMPLING_SLICE
        } else {
            cycles.max(1)
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
        ProcessStats {
            pid: p.st.pid,
            name: p.name.clone(),
            counts: Counts {
                instructions: p.st.instr_fp >> FP_SHIFT,
                cycles: p.st.clock_fp >> FP_SHIFT,
                ..p.st.c
            },
        }
    }

    /// Counts so far, in total and per process.
    pub fn totals(&self) -> RunStats {
        RunStats::of_processes(self.procs.iter().map(Self::stats_of).collect())
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
        if let Placement::Ordinary(Colour(c)) = to {
            if self.is_pollute.get(c as usize) != Some(&false) {
                return Err(Errno::EINVAL);
            }
        }
        let new = match (to, in_pollute) {
            (Placement::Pollute, true)
            | (Placement::Restore, false)
            | (Placement::Ordinary(_), false) => return Ok(Colour(old % colours)),
            (Placement::Pollute, false) => self.frames.alloc_in(&self.pollute),
            (Placement::Restore, true) => {
                // Home if the page has one and a frame of that colour is free; else any
                // ordinary colour, as the shim does.
                let home = self
                    .homes
                    .remove(&old)
                    .filter(|&c| !self.is_pollute[c as usize]);
                home.and_then(|c| self.frames.alloc_in(&[c])).or_else(|| {
                    let others: Vec<u32> = (0..colours)
                        .filter(|&c| !self.is_pollute[c as usize])
                        .collect();
                    self.frames.alloc_random_in(&others, &mut self.rng)
                })
            }
            (Placement::Ordinary(Colour(c)), true) => {
                // The chosen colour if a frame of it is free; else any ordinary colour, as
                // the shim does. The frame left is no page's home any more.
                self.homes.remove(&old);
                self.frames.alloc_in(&[c]).or_else(|| {
                    let others: Vec<u32> = (0..colours)
                        .filter(|&c| !self.is_pollute[c as usize])
                        .collect();
                    self.frames.alloc_random_in(&others, &mut self.rng)
                })
            }
        }
        .ok_or(Errno::ENOMEM)?;
        if to == Placement::Pollute {
            self.homes.insert(new, old % colours);
        }
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
        if let Some(tlb) = core.modern.tlb.as_mut() {
            tlb.invalidate(page.0);
        }
        core.l1d.invalidate_range(vstart, len);
        if let Some(l1i) = core.l1i.as_mut() {
            l1i.invalidate_range(vstart, len);
        }
        if in_pollute {
            self.frames.free_reserved(old);
        } else {
            self.frames.free(old);
        }
        let proc = &mut self.procs[idx];
        *Self::frame_slot(proc, page, page_shift).expect("slot found above") = new;
        proc.st.clock_fp += self.migration_cycles << FP_SHIFT;
        proc.st.c.migration_overhead_cycles += self.migration_cycles;
        proc.st.c.pages_migrated += 1;
        Ok(Colour(new % colours))
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

    /// A generated process's regions, each mapped apart (a trace's layout is unknown).
    fn mappings(&mut self, pid: Pid) -> Result<Option<Vec<Mapping>>, SimError> {
        let i = self.proc_index(pid)?;
        let shift = self.page_shift;
        Ok(match &self.procs[i].source {
            Source::Gen(g) => Some(
                g.regions
                    .iter()
                    .filter(|r| r.size > 0)
                    .map(|r| Mapping {
                        first: VirtPage(r.base_va >> shift),
                        last: VirtPage((r.base_va + r.size - 1) >> shift),
                    })
                    .collect(),
            ),
            Source::Trace(_) => None,
        })
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
