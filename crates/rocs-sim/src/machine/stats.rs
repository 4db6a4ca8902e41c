//! What a run counted: one set of counters ([`Counts`]), kept per process, summed for the
//! run, and reported as they are.

use std::ops::Deref;

use rocs_core::{Pid, VirtPage};
use serde::{Deserialize, Serialize};

/// Event counts of a process, or of a run (then `cycles` is the elapsed time: the longest
/// process's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub instructions: u64,
    /// Cycles run, overheads included.
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
    /// Cycles spent taking samples.
    pub sampling_overhead_cycles: u64,
    /// Cycles spent migrating pages.
    pub migration_overhead_cycles: u64,
    pub samples: u64,
    pub pages_migrated: u64,
    /// Lines the L2 prefetcher fetched (not in the demand counts above).
    pub prefetches: u64,
    /// Of those, lines that came from memory.
    pub prefetch_mem: u64,
    /// Data TLB misses (page walks).
    pub tlb_misses: u64,
    /// Page walks whose page-table entry came from memory.
    pub walk_mem: u64,
    /// Cycles spent walking page tables.
    pub walk_cycles: u64,
}

impl Counts {
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

    /// Add another process's counts to a run's: everything sums but the elapsed cycles,
    /// which are the longest process's (each process has a core of its own).
    fn add_process(&mut self, p: &Counts) {
        let Counts {
            instructions,
            cycles,
            accesses,
            l1d_accesses,
            l1d_misses,
            l1i_accesses,
            l1i_misses,
            l2_accesses,
            l2_misses,
            llc_accesses,
            llc_misses,
            llc_data_misses,
            sampling_overhead_cycles,
            migration_overhead_cycles,
            samples,
            pages_migrated,
            prefetches,
            prefetch_mem,
            tlb_misses,
            walk_mem,
            walk_cycles,
        } = *p;
        self.instructions += instructions;
        self.cycles = self.cycles.max(cycles);
        self.accesses += accesses;
        self.l1d_accesses += l1d_accesses;
        self.l1d_misses += l1d_misses;
        self.l1i_accesses += l1i_accesses;
        self.l1i_misses += l1i_misses;
        self.l2_accesses += l2_accesses;
        self.l2_misses += l2_misses;
        self.llc_accesses += llc_accesses;
        self.llc_misses += llc_misses;
        self.llc_data_misses += llc_data_misses;
        self.sampling_overhead_cycles += sampling_overhead_cycles;
        self.migration_overhead_cycles += migration_overhead_cycles;
        self.samples += samples;
        self.pages_migrated += pages_migrated;
        self.prefetches += prefetches;
        self.prefetch_mem += prefetch_mem;
        self.tlb_misses += tlb_misses;
        self.walk_mem += walk_mem;
        self.walk_cycles += walk_cycles;
    }
}

/// The counts of one process. It derefs to its [`Counts`]: a process's stats are its counts
/// with a name, so `stats.cycles` reads as it says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    pub pid: Pid,
    pub name: String,
    #[serde(flatten)]
    pub counts: Counts,
}

impl Deref for ProcessStats {
    type Target = Counts;
    fn deref(&self) -> &Counts {
        &self.counts
    }
}

/// The counts of a run, in total and per process. It derefs to the total.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStats {
    #[serde(flatten)]
    pub counts: Counts,
    pub processes: Vec<ProcessStats>,
    /// Pages that placements applied from outside a controller (the oracle's) asked to
    /// confine but that stayed in ordinary colours at the end of the run: their moves
    /// failed (no free frame in the pollute colours, or a sampled page not mapped). 0
    /// otherwise.
    #[serde(default)]
    pub pages_not_confined: u64,
}

impl RunStats {
    pub fn of_processes(processes: Vec<ProcessStats>) -> RunStats {
        let mut counts = Counts::default();
        for p in &processes {
            counts.add_process(&p.counts);
        }
        RunStats {
            counts,
            processes,
            pages_not_confined: 0,
        }
    }
}

impl Deref for RunStats {
    type Target = Counts;
    fn deref(&self) -> &Counts {
        &self.counts
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

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}
