//! The platform traits: what the controller needs from a machine, real or simulated.
//!
//! `rocs-sim` and `rocs-linux` implement them; the daemon and the simulator's closed loop
//! carry the controller's actions to them and their results back as observations.

use serde::{Deserialize, Serialize};

use crate::{Colour, Errno, MemSample, Pid, Placement, VirtPage};

/// How to sample a target's memory accesses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingPlan {
    /// Take one sample every `period` events.
    pub period: u64,
    /// Largest share of one core that sampling may cost (0.01 = 1%); the platform raises
    /// the period when it would cost more.
    pub cpu_budget: f64,
}

/// What sampling lost, and cost, since the last drain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleLoss {
    /// Records the kernel (or model) dropped because a ring was full.
    pub lost: u64,
    /// Times sampling was throttled for exceeding the interrupt rate.
    pub throttled: u64,
    /// CPU time sampling cost, in nanoseconds (the platform's estimate: the interrupts or
    /// assists that took the samples, and draining them).
    #[serde(default)]
    pub cpu_ns: u64,
}

/// Counter values accumulated since the previous read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDelta {
    pub instructions: u64,
    pub cycles: u64,
    pub llc_references: u64,
    pub llc_misses: u64,
    /// Time the counters were enabled and running (ns or cycles); they differ when the
    /// PMU multiplexed the group and the values above were scaled.
    pub time_enabled: u64,
    pub time_running: u64,
}

impl CounterDelta {
    pub fn ipc(&self) -> f64 {
        if self.cycles == 0 {
            0.0
        } else {
            self.instructions as f64 / self.cycles as f64
        }
    }

    /// LLC misses per thousand instructions.
    pub fn mpki(&self) -> f64 {
        if self.instructions == 0 {
            0.0
        } else {
            self.llc_misses as f64 * 1000.0 / self.instructions as f64
        }
    }

    /// LLC references per thousand instructions: the program's loads that reach the LLC,
    /// which its placement in the LLC changes little.
    pub fn apki(&self) -> f64 {
        if self.instructions == 0 {
            0.0
        } else {
            self.llc_references as f64 * 1000.0 / self.instructions as f64
        }
    }

    /// True when the counters did not run the whole time they were enabled.
    pub fn multiplexed(&self) -> bool {
        self.time_running < self.time_enabled
    }
}

/// Precise memory sampling of targets.
pub trait Sampler {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Start sampling `pid` (all of its threads) with `plan`.
    fn start(&mut self, pid: Pid, plan: &SamplingPlan) -> Result<(), Self::Error>;
    /// Stop sampling `pid` and release what sampling held.
    fn stop(&mut self, pid: Pid) -> Result<(), Self::Error>;
    /// Move every pending sample of `pid` into `out` and report what was lost since the
    /// previous drain.
    fn drain(&mut self, pid: Pid, out: &mut Vec<MemSample>) -> Result<SampleLoss, Self::Error>;
}

/// Counting-mode events of targets.
pub trait Counters {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Counts of `pid` since the previous read (the first read starts counting).
    fn read(&mut self, pid: Pid) -> Result<CounterDelta, Self::Error>;
}

/// The result for one page of a migrate or query: its colour now, or why not.
pub type PageResult = Result<Colour, Errno>;

/// One of a target's mappings (a VMA on Linux): its first and last page, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub first: VirtPage,
    pub last: VirtPage,
}

impl Mapping {
    /// Whether `page` lies in the mapping.
    pub fn holds(&self, page: VirtPage) -> bool {
        self.first <= page && page <= self.last
    }
}

/// Moving a target's pages between the pollute buffer and the ordinary colours.
pub trait Remapper {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Move `pages` of `pid` to `to`. One result per page, in order, like move_pages(2):
    /// the page's new colour, or the errno that kept it where it was. The outer error is
    /// for failures of the whole call (no shim, target gone).
    fn migrate(
        &mut self,
        pid: Pid,
        pages: &[VirtPage],
        to: Placement,
    ) -> Result<Vec<PageResult>, Self::Error>;

    /// The colour of each page's frame now.
    fn query(&mut self, pid: Pid, pages: &[VirtPage]) -> Result<Vec<PageResult>, Self::Error>;

    /// The target's mappings in address order: where a stream's pages lie beyond those
    /// its samples reached. `None`: the platform cannot tell (then only sampled pages and
    /// the gaps between them are ever confined).
    fn mappings(&mut self, pid: Pid) -> Result<Option<Vec<Mapping>>, Self::Error> {
        let _ = pid;
        Ok(None)
    }
}
