//! Counting-mode events of a target for the controller's windows: `LinuxCounters`,
//! rocs-core's `Counters` on perf_event.
//!
//! One group (instructions, cycles, LLC references, LLC misses) per thread of the target,
//! with `inherit` so that threads created later are counted into their creator's group.
//! The kernel multiplexes groups when the PMU has too few counters: time_running <
//! time_enabled. Values are then scaled by enabled/running and the delta says so.
//!
//! The events are grouped (scheduled together) but read one by one: the kernel refuses a
//! group read (ECHILD) while any thread holds an inherited copy of the group that differs
//! from it, and a thread created while the group was being built keeps such a copy for
//! its whole life (`__perf_read_group_add` in kernel/events/core.c). A single read sums
//! every inherited copy without that check.

use std::collections::HashMap;
use std::io;

use perf_event::events::Raw;
use perf_event::{Builder, Counter, ReadFormat};
use rocs_core::{CounterDelta, Counters, Pid};
use thiserror::Error;

use crate::events::explain_open_error;
use crate::perf_abi::*;
use crate::target::{process_alive, threads};

#[derive(Debug, Error)]
pub enum CountersError {
    #[error("no process with pid {0} (check the pid: `ps -p {0}`)")]
    NoSuchProcess(Pid),
    #[error("{0}")]
    Open(String),
    #[error("reading the counters of pid {pid}: {source}")]
    Read { pid: Pid, source: io::Error },
}

/// The four events of a counting group, as (type, config).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterEvents {
    pub instructions: (u32, u64),
    pub cycles: (u32, u64),
    pub llc_references: (u32, u64),
    pub llc_misses: (u32, u64),
}

impl CounterEvents {
    /// The generic hardware events (what the controller needs).
    pub const HARDWARE: CounterEvents = CounterEvents {
        instructions: (TYPE_HARDWARE, HW_INSTRUCTIONS),
        cycles: (TYPE_HARDWARE, HW_CPU_CYCLES),
        llc_references: (TYPE_HARDWARE, HW_CACHE_REFERENCES),
        llc_misses: (TYPE_HARDWARE, HW_CACHE_MISSES),
    };

    /// Software stand-ins (task clock, CPU clock, page faults, context switches) that
    /// open on any Linux: they exercise the group, inherit and multiplexing plumbing on
    /// machines without a PMU; the values are not instructions or cache events.
    pub const SOFTWARE_STAND_INS: CounterEvents = CounterEvents {
        instructions: (TYPE_SOFTWARE, SW_TASK_CLOCK),
        cycles: (TYPE_SOFTWARE, SW_CPU_CLOCK),
        llc_references: (TYPE_SOFTWARE, SW_PAGE_FAULTS),
        llc_misses: (TYPE_SOFTWARE, SW_CONTEXT_SWITCHES),
    };

    fn all(&self) -> [(&'static str, (u32, u64)); 4] {
        [
            ("instructions", self.instructions),
            ("cycles", self.cycles),
            ("LLC references", self.llc_references),
            ("LLC misses", self.llc_misses),
        ]
    }
}

struct ThreadGroup {
    leader: Counter,
    members: Vec<Counter>,
    /// What this thread's group read last (scaled), kept when the thread goes.
    last: Totals,
}

#[derive(Default, Clone, Copy)]
struct Totals {
    values: [u64; 4],
    enabled: u64,
    running: u64,
}

struct TargetCounters {
    groups: HashMap<u32, ThreadGroup>,
    last: Totals,
    /// Totals of groups whose thread is gone (kept so deltas never go backwards).
    retired: Totals,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        for (acc, v) in self.values.iter_mut().zip(other.values) {
            *acc += v;
        }
        self.enabled += other.enabled;
        self.running += other.running;
    }
}

impl ThreadGroup {
    /// Every event of the group, each scaled by its own enabled/running; the group's
    /// times are the leader's (a group is scheduled as one).
    fn read(&mut self) -> io::Result<Totals> {
        let mut totals = Totals::default();
        for (i, counter) in std::iter::once(&mut self.leader)
            .chain(self.members.iter_mut())
            .enumerate()
        {
            let c = counter.read_count_and_time()?;
            totals.values[i] = scale(c.count, c.time_enabled, c.time_running);
            if i == 0 {
                totals.enabled = c.time_enabled;
                totals.running = c.time_running;
            }
        }
        Ok(totals)
    }
}

/// A multiplexed count extrapolated to the whole enabled time (what `perf stat` does):
/// value * enabled / running; unchanged when the group ran all the time (or never).
pub fn scale(value: u64, enabled: u64, running: u64) -> u64 {
    if running > 0 && running < enabled {
        (value as u128 * enabled as u128 / running as u128).min(u64::MAX as u128) as u64
    } else {
        value
    }
}

/// rocs-core's `Counters` on Linux perf_event.
pub struct LinuxCounters {
    events: CounterEvents,
    targets: HashMap<Pid, TargetCounters>,
}

impl Default for LinuxCounters {
    fn default() -> Self {
        Self::new(CounterEvents::HARDWARE)
    }
}

impl LinuxCounters {
    pub fn new(events: CounterEvents) -> Self {
        LinuxCounters {
            events,
            targets: HashMap::new(),
        }
    }

    /// Stop counting `pid` and close its events.
    pub fn forget(&mut self, pid: Pid) {
        self.targets.remove(&pid);
    }

    fn open_group(&self, tid: u32) -> io::Result<ThreadGroup> {
        let mut leader: Option<Counter> = None;
        let mut members = Vec::new();
        for (_, (type_, config)) in self.events.all() {
            let mut b = Builder::new(Raw::new(config));
            b.attrs_mut().type_ = type_;
            b.observe_pid(tid as i32)
                .any_cpu()
                .inherit(true)
                .exclude_kernel(true)
                .exclude_hv(true)
                .read_format(ReadFormat::TOTAL_TIME_ENABLED | ReadFormat::TOTAL_TIME_RUNNING);
            match leader.as_mut() {
                None => leader = Some(b.build()?),
                Some(l) => members.push(b.build_with_group(l)?),
            }
        }
        let mut leader = leader.expect("four events");
        leader.enable_group()?;
        Ok(ThreadGroup {
            leader,
            members,
            last: Totals::default(),
        })
    }

    /// [`Self::open_group`], again when the kernel refused it: while the thread creates
    /// or ends threads, the kernel can refuse a member (EINVAL, ENODEV) that it accepts
    /// a moment later (it swaps equal inherited contexts between tasks on a context
    /// switch, and a member must share its leader's context). A thread that has exited
    /// is refused with ESRCH.
    fn open_group_settled(&self, tid: u32) -> io::Result<ThreadGroup> {
        const ATTEMPTS: usize = 5;
        let mut result = self.open_group(tid);
        for _ in 1..ATTEMPTS {
            if result.is_ok() {
                break;
            }
            result = self.open_group(tid);
        }
        result
    }

    /// Attach groups to threads not yet counted.
    fn attach_new_threads(&mut self, pid: Pid) -> Result<(), CountersError> {
        let tids = threads(pid).map_err(|_| CountersError::NoSuchProcess(pid))?;
        let known: Vec<u32> = self
            .targets
            .get(&pid)
            .map(|t| t.groups.keys().copied().collect())
            .unwrap_or_default();
        for tid in tids.into_iter().filter(|t| !known.contains(t)) {
            // Threads created after attaching are already counted through inherit in
            // their creator's group; only attach threads we have never seen when the
            // target is new (the first read).
            if !known.is_empty() {
                continue;
            }
            match self.open_group_settled(tid) {
                Ok(g) => {
                    self.targets
                        .entry(pid)
                        .or_insert_with(|| TargetCounters {
                            groups: HashMap::new(),
                            last: Totals::default(),
                            retired: Totals::default(),
                        })
                        .groups
                        .insert(tid, g);
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) && tid != pid => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    return Err(CountersError::NoSuchProcess(pid))
                }
                Err(e) => {
                    return Err(CountersError::Open(explain_open_error(
                        &e,
                        &format!("the counting group of pid {pid}"),
                    )))
                }
            }
        }
        Ok(())
    }
}

impl Counters for LinuxCounters {
    type Error = CountersError;

    fn read(&mut self, pid: Pid) -> Result<CounterDelta, CountersError> {
        if !self.targets.contains_key(&pid) {
            if !process_alive(pid) {
                return Err(CountersError::NoSuchProcess(pid));
            }
            self.attach_new_threads(pid)?;
        }
        let t = self
            .targets
            .get_mut(&pid)
            .ok_or(CountersError::NoSuchProcess(pid))?;
        let mut gone = Vec::new();
        for (&tid, g) in t.groups.iter_mut() {
            match g.read() {
                Ok(totals) => g.last = totals,
                Err(e) if tid == pid => return Err(CountersError::Read { pid, source: e }),
                Err(_) => gone.push(tid),
            }
        }
        for tid in gone {
            if let Some(g) = t.groups.remove(&tid) {
                t.retired.add(&g.last);
            }
        }
        let mut now = t.retired;
        for g in t.groups.values() {
            now.add(&g.last);
        }
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let delta = CounterDelta {
            instructions: d(now.values[0], t.last.values[0]),
            cycles: d(now.values[1], t.last.values[1]),
            llc_references: d(now.values[2], t.last.values[2]),
            llc_misses: d(now.values[3], t.last.values[3]),
            time_enabled: d(now.enabled, t.last.enabled),
            time_running: d(now.running, t.last.running),
        };
        t.last = now;
        Ok(delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplexed_counts_are_extrapolated() {
        // On the PMU a quarter of the time: four times the count.
        assert_eq!(scale(1000, 400, 100), 4000);
        assert_eq!(scale(1000, 400, 400), 1000);
        assert_eq!(scale(1000, 400, 0), 1000);
        assert_eq!(scale(u64::MAX, 10, 1), u64::MAX);
        let d = CounterDelta {
            time_enabled: 400,
            time_running: 100,
            ..Default::default()
        };
        assert!(d.multiplexed());
    }
}
