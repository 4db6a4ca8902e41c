//! Counting-mode events of a target for the controller's windows: `LinuxCounters`,
//! rocs-core's `Counters` on perf_event.
//!
//! One group (instructions, cycles, LLC references, LLC misses) per thread of the target,
//! with `inherit` so that threads created later are counted into their creator's group.
//! The kernel multiplexes groups when the PMU has too few counters: time_running <
//! time_enabled. Values are then scaled by enabled/running and the delta says so.

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
                .read_format(
                    ReadFormat::GROUP
                        | ReadFormat::ID
                        | ReadFormat::TOTAL_TIME_ENABLED
                        | ReadFormat::TOTAL_TIME_RUNNING,
                );
            match leader.as_mut() {
                None => leader = Some(b.build()?),
                Some(l) => members.push(b.build_with_group(l)?),
            }
        }
        let mut leader = leader.expect("four events");
        leader.enable_group()?;
        Ok(ThreadGroup { leader, members })
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
            match self.open_group(tid) {
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
        let mut now = t.retired;
        let mut gone = Vec::new();
        for (&tid, g) in t.groups.iter_mut() {
            let data = match g.leader.read_group() {
                Ok(d) => d,
                Err(e) => {
                    gone.push(tid);
                    if tid == pid {
                        return Err(CountersError::Read { pid, source: e });
                    }
                    continue;
                }
            };
            let enabled = data.time_enabled().map_or(0, |d| d.as_nanos() as u64);
            let running = data.time_running().map_or(0, |d| d.as_nanos() as u64);
            let mut raw = [0u64; 4];
            raw[0] = data.get(&g.leader).map_or(0, |e| e.value());
            for (i, m) in g.members.iter().enumerate() {
                raw[i + 1] = data.get(m).map_or(0, |e| e.value());
            }
            for (acc, v) in now.values.iter_mut().zip(raw) {
                *acc += scale(v, enabled, running);
            }
            now.enabled += enabled;
            now.running += running;
        }
        for tid in gone {
            t.groups.remove(&tid);
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
