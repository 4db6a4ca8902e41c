//! Live sampling of a target's memory accesses: `LinuxSampler`, rocs-core's `Sampler`
//! on perf_event.
//!
//! Every thread the target has when sampling starts gets the plan's events on every
//! online CPU, with `inherit` so that threads (and processes) created later are followed
//! by the kernel. All events of one CPU write into one mmap ring (PERF_EVENT_IOC_SET_OUTPUT),
//! drained in place. The sample period is raised when sampling would cost more than the
//! CPU budget, and lowered again (never below the requested period) when it costs much
//! less.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use perf_event::Counter;
use rocs_core::{next_period, period_check_due, MemSample, Pid, SampleLoss, Sampler, SamplingPlan};
use serde::Serialize;
use thiserror::Error;

use crate::decode::{DecodeError, Decoded, Decoder, EventKind};
use crate::doctor::{effective_caps, CAP_SYS_ADMIN};
use crate::events::{explain_open_error, open_event, Target};
use crate::perf_abi::*;
use crate::plan::{EventPlan, EventSpec, PlanKind};
use crate::record::SampleFormat;
use crate::ring::Ring;
use crate::target::{online_cpus, process_alive, threads};

/// Why sampling a target failed.
#[derive(Debug, Error)]
pub enum SamplerError {
    #[error("no process with pid {0} (check the pid: `ps -p {0}`)")]
    NoSuchProcess(Pid),
    #[error("{0}")]
    Open(String),
    #[error("pid {0} is not being sampled (start it first)")]
    NotSampling(Pid),
    #[error("pid {0} is already being sampled")]
    AlreadySampling(Pid),
    #[error("live sampling with this plan is not supported: {0}")]
    Unsupported(String),
    #[error("mapping the sample ring: {0}")]
    Ring(io::Error),
    #[error("a sample record could not be read: {0}")]
    Corrupt(String),
    #[error("the kernel refused sample period {period} ({err}); the period stays {kept}")]
    PeriodRefused {
        period: u64,
        kept: u64,
        err: io::Error,
    },
}

/// Running totals of one target's sampling, for progress lines and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SamplingStats {
    pub samples: u64,
    pub lost: u64,
    pub throttled: u64,
    pub unthrottled: u64,
    /// Samples without a usable data address.
    pub without_address: u64,
    /// Samples of other processes the target started (followed by inherit, not counted).
    pub other_processes: u64,
    /// Second copies of a sample, not counted (see [`SecondCopies`]).
    pub second_copies: u64,
    /// The sample period in use now.
    pub period: u64,
    /// How often the period changed (the kernel took a new one).
    pub period_changes: u64,
    /// How often the kernel refused a new period (the old one stayed).
    pub period_refusals: u64,
    /// Events opened (threads x CPUs x events).
    pub events: u64,
    pub rings: u64,
}

/// Tells the second copy of a sample from the first, in one ring.
///
/// A thread created while sampling was attaching may both inherit its creator's events
/// and be given its own: the kernel shows a new thread in /proc before it writes the FORK
/// record that would tell (see `open_all`), and writes none while its creator's events
/// are still disabled. Every fault of such a thread then fires two software events on
/// its CPU, and the kernel fills one sample for both (`do_perf_sw_event` shares its
/// `perf_sample_data`: the second record repeats the first's time and event id), so the
/// two records are alike and follow each other in the CPU's ring. A sample is counted
/// once: a record alike to the one before it in its ring (same thread, time and address)
/// is its second copy. Two samples of one thread are never taken at the same time.
#[derive(Clone, Copy, Debug, Default)]
struct SecondCopies {
    /// (thread, time, address) of the last sample read from the ring.
    last: Option<(u32, u64, u64)>,
}

impl SecondCopies {
    /// Whether `m` is the second copy of the sample read before it; remembers it.
    fn is_second(&mut self, m: &MemSample) -> bool {
        let key = (m.tid, m.time, m.vaddr);
        self.last.replace(key) == Some(key)
    }
}

struct Session {
    decoder: Decoder,
    counters: Vec<Counter>,
    sampling_fds: Vec<RawFd>,
    /// One ring a CPU, each with what tells a sample's second copy in it.
    rings: Vec<(Ring, SecondCopies)>,
    ring_fd_of_cpu: HashMap<usize, RawFd>,
    /// Threads given their own events (others are followed by inherit).
    threads: Vec<u32>,
    requested_period: u64,
    budget: f64,
    pending: SampleLoss,
    stats: SamplingStats,
    exited: bool,
    window_start: Instant,
    window_samples: u64,
    window_user: Duration,
}

/// rocs-core's `Sampler` on Linux perf_event, for one event plan.
pub struct LinuxSampler {
    plan: EventPlan,
    sessions: HashMap<Pid, Session>,
    /// Data pages per ring (a power of two).
    ring_pages: usize,
}

/// Estimated kernel-side cost of one sample (interrupt or assist, record write), used
/// with the measured user-side drain time to keep sampling under the CPU budget.
fn kernel_cost_per_sample(kind: PlanKind) -> Duration {
    Duration::from_nanos(match kind {
        PlanKind::SoftwarePageFaults => 300,
        PlanKind::IntelLoadRetired | PlanKind::IntelLoadLatency => 700,
        PlanKind::AmdIbsOp | PlanKind::AmdIbsOpRaw => 2000,
        PlanKind::ArmSpe => 200,
    })
}

/// How often the period is reconsidered (and earlier when it is over budget:
/// [`rocs_core::period_check_due`]).
const BUDGET_WINDOW: Duration = Duration::from_millis(200);

fn ioctl_period(fd: RawFd, period: u64) -> io::Result<()> {
    let mut p = period;
    // SAFETY: PERF_EVENT_IOC_PERIOD reads one u64 through the pointer, which points to a
    // live local for the duration of the call.
    let r = unsafe { libc::ioctl(fd, IOC_PERIOD as _, &mut p as *mut u64) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Give every sampling event of a session a new period (rounded for the plan's PMU),
/// all or none: on a refusal the events already changed get the old period back.
fn change_period(s: &mut Session, plan: &EventPlan, period: u64) -> Result<u64, SamplerError> {
    let old = s.stats.period;
    let new = plan.usable_period(period);
    if new == old {
        return Ok(old);
    }
    for (i, &fd) in s.sampling_fds.iter().enumerate() {
        if let Err(err) = ioctl_period(fd, new) {
            for &done in &s.sampling_fds[..i] {
                // The kernel took `old` on these events before; it takes it again.
                let _ = ioctl_period(done, old);
            }
            s.stats.period_refusals += 1;
            return Err(SamplerError::PeriodRefused {
                period: new,
                kept: old,
                err,
            });
        }
    }
    s.stats.period = new;
    s.stats.period_changes += 1;
    Ok(new)
}

fn ioctl_set_output(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: PERF_EVENT_IOC_SET_OUTPUT takes an fd by value; both fds are open perf
    // events owned by the session.
    let r = unsafe { libc::ioctl(fd, IOC_SET_OUTPUT as _, target as libc::c_ulong) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl LinuxSampler {
    pub fn new(plan: EventPlan) -> Self {
        LinuxSampler {
            plan,
            sessions: HashMap::new(),
            ring_pages: 128,
        }
    }

    pub fn plan(&self) -> &EventPlan {
        &self.plan
    }

    /// Data pages per ring (default 128 = 512 KiB with 4 KiB pages); rounded up to a
    /// power of two. Applies to targets started afterwards.
    pub fn set_ring_pages(&mut self, pages: usize) {
        self.ring_pages = pages.max(1).next_power_of_two();
    }

    /// True once the target has exited (seen in an exit record or in /proc).
    pub fn target_exited(&self, pid: Pid) -> bool {
        self.sessions.get(&pid).is_none_or(|s| s.exited)
    }

    pub fn stats(&self, pid: Pid) -> Option<SamplingStats> {
        self.sessions.get(&pid).map(|s| s.stats)
    }

    /// Hand every pending sample of `pid` to `f` without collecting them anywhere;
    /// report what was lost since the previous drain.
    pub fn drain_with(
        &mut self,
        pid: Pid,
        mut f: impl FnMut(&MemSample),
    ) -> Result<SampleLoss, SamplerError> {
        let kind = self.plan.kind;
        let s = self
            .sessions
            .get_mut(&pid)
            .ok_or(SamplerError::NotSampling(pid))?;
        let started = Instant::now();
        let mut corrupt: Option<DecodeError> = None;
        let mut saw_exit = false;
        let before = s.stats.samples;
        for (ring, copies) in &mut s.rings {
            let decoder = &s.decoder;
            let stats = &mut s.stats;
            let pending = &mut s.pending;
            ring.drain(|rec| match decoder.decode(rec, Some(pid)) {
                Ok(Decoded::Sample(m)) if copies.is_second(&m) => stats.second_copies += 1,
                Ok(Decoded::Sample(m)) => {
                    stats.samples += 1;
                    f(&m);
                }
                Ok(Decoded::SampleWithoutAddress) => stats.without_address += 1,
                Ok(Decoded::SampleOfOtherProcess) => stats.other_processes += 1,
                Ok(Decoded::Lost(n)) => {
                    stats.lost += n;
                    pending.lost += n;
                }
                Ok(Decoded::Throttle) => {
                    stats.throttled += 1;
                    pending.throttled += 1;
                }
                Ok(Decoded::Unthrottle) => stats.unthrottled += 1,
                Ok(Decoded::Exit { pid: p, tid }) if p == pid && tid == pid => saw_exit = true,
                Ok(_) => {}
                Err(e) => corrupt = Some(e),
            });
        }
        if saw_exit || !process_alive(pid) {
            s.exited = true;
        }
        let drained = s.stats.samples - before;
        s.window_samples += drained;
        s.window_user += started.elapsed();
        let cost = kernel_cost_per_sample(kind) * drained as u32 + started.elapsed();
        s.pending.cpu_ns += u64::try_from(cost.as_nanos()).unwrap_or(u64::MAX);
        let elapsed = s.window_start.elapsed();
        let cost = kernel_cost_per_sample(kind).as_secs_f64() * s.window_samples as f64
            + s.window_user.as_secs_f64();
        let share = cost / elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let due = period_check_due(elapsed >= BUDGET_WINDOW, s.window_samples, share, s.budget);
        if due && s.budget > 0.0 && !s.exited {
            let period = s.stats.period;
            let new_period = next_period(period, s.requested_period, share, s.budget);
            if new_period != period {
                // A refusal keeps the period in use; it is counted in the stats.
                let _ = change_period(s, &self.plan, new_period);
            }
            s.window_start = Instant::now();
            s.window_samples = 0;
            s.window_user = Duration::ZERO;
        }
        if let Some(e) = corrupt {
            return Err(SamplerError::Corrupt(format!("{e:?}")));
        }
        Ok(std::mem::take(&mut s.pending))
    }

    /// Set the sample period of every sampling event of `pid`, rounded to one the PMU
    /// accepts; returns the period the kernel took. If the kernel refuses it, the events
    /// keep the period they had and so does `stats().period`.
    ///
    /// Threads the kernel started following (by inherit) before this call keep the old
    /// period: PERF_EVENT_IOC_PERIOD reaches the event it is called on, not its inherited
    /// copies. Threads created afterwards inherit the new one.
    pub fn set_period(&mut self, pid: Pid, period: u64) -> Result<u64, SamplerError> {
        let s = self
            .sessions
            .get_mut(&pid)
            .ok_or(SamplerError::NotSampling(pid))?;
        change_period(s, &self.plan, period)
    }

    /// A session with its decoder, before any event is open.
    fn new_session(&self, period: u64) -> (Session, OpenState) {
        let mut decoder = Decoder::new();
        let mut extra = 0;
        if self.plan.phys_addr && effective_caps() & (1 << CAP_SYS_ADMIN) != 0 {
            extra = SAMPLE_PHYS_ADDR;
        }
        // One decoder kind per sampling spec, in plan order.
        let kind_of = self
            .plan
            .events()
            .map(|spec| {
                spec.samples.then(|| {
                    decoder.add_kind(EventKind {
                        format: SampleFormat::simple(spec.sample_type | extra),
                        source: spec.source,
                        drop_kernel_addresses: spec.pmu_type != TYPE_SOFTWARE
                            && !spec.exclude_kernel,
                    })
                })
            })
            .collect();
        let session = Session {
            decoder,
            counters: Vec::new(),
            sampling_fds: Vec::new(),
            rings: Vec::new(),
            ring_fd_of_cpu: HashMap::new(),
            threads: Vec::new(),
            requested_period: period,
            budget: 0.0,
            pending: SampleLoss::default(),
            stats: SamplingStats {
                period,
                ..Default::default()
            },
            exited: false,
            window_start: Instant::now(),
            window_samples: 0,
            window_user: Duration::ZERO,
        };
        let state = OpenState {
            specs: self.plan.events().cloned().collect(),
            kind_of,
            extra,
            wanted_extra: extra,
            first: true,
        };
        (session, state)
    }

    /// Open the plan's events for one thread on every CPU, with inherit, into the
    /// session's per-CPU rings. The events start disabled.
    fn attach_thread(
        &self,
        s: &mut Session,
        st: &mut OpenState,
        pid: Pid,
        tid: u32,
        cpus: &[usize],
    ) -> Result<Vec<Counter>, SamplerError> {
        let period = s.requested_period;
        let mut opened = Vec::new();
        for &cpu in cpus {
            let mut spec_index = 0;
            for group in &self.plan.groups {
                let mut leader: Option<Counter> = None;
                let mut members = Vec::new();
                for _ in group {
                    let i = spec_index;
                    spec_index += 1;
                    let target = Target {
                        pid: tid as i32,
                        cpu: Some(cpu),
                        inherit: true,
                    };
                    let mut result =
                        open_event(&st.specs[i], target, period, st.extra, leader.as_mut());
                    if st.first {
                        // Fall back once, for the whole session, where the kernel refuses
                        // optional extras: physical addresses, kernel-mode faults on
                        // user pages.
                        if result.is_err() && st.extra != 0 {
                            st.extra = 0;
                            result = open_event(&st.specs[i], target, period, 0, leader.as_mut());
                        }
                        if let Err(e) = &result {
                            if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
                                && !st.specs[i].exclude_kernel
                            {
                                st.specs.iter_mut().for_each(|s| s.exclude_kernel = true);
                                result = open_event(
                                    &st.specs[i],
                                    target,
                                    period,
                                    st.extra,
                                    leader.as_mut(),
                                );
                            }
                        }
                    }
                    let counter = match result {
                        Ok(c) => c,
                        // A thread that exited between the scan and the open.
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) && tid != pid => {
                            return Ok(opened);
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                            return Err(SamplerError::NoSuchProcess(pid))
                        }
                        Err(e) => {
                            return Err(SamplerError::Open(explain_open_error(
                                &e,
                                &format!("`{}` on pid {pid}", st.specs[i].name),
                            )))
                        }
                    };
                    st.first = false;
                    if let Some(k) = st.kind_of[i] {
                        s.decoder.add_id(counter.id(), k);
                        let fd = counter.as_raw_fd();
                        s.sampling_fds.push(fd);
                        match s.ring_fd_of_cpu.get(&cpu) {
                            Some(&ring_fd) => {
                                ioctl_set_output(fd, ring_fd).map_err(SamplerError::Ring)?
                            }
                            None => {
                                let ring =
                                    Ring::map(fd, self.ring_pages).map_err(SamplerError::Ring)?;
                                s.rings.push((ring, SecondCopies::default()));
                                s.ring_fd_of_cpu.insert(cpu, fd);
                            }
                        }
                    }
                    if leader.is_none() {
                        leader = Some(counter);
                    } else {
                        members.push(counter);
                    }
                }
                opened.extend(leader);
                opened.append(&mut members);
            }
        }
        s.threads.push(tid);
        Ok(opened)
    }

    /// Open and enable events for every thread of `pid`. Threads created after their
    /// creator's events exist are followed by inherit (the kernel writes a FORK record
    /// for them into our rings); a thread that appeared while we were attaching, without
    /// such a record, was created before and gets its own events. The record is not
    /// always there to be seen in time, and a thread may then have both: its samples
    /// are counted once (see [`SecondCopies`]).
    fn open_all(&self, pid: Pid, period: u64) -> Result<Session, SamplerError> {
        let cpus = online_cpus();
        let (mut session, mut state) = self.new_session(period);
        let mut pending: Vec<u32> = threads(pid).map_err(|_| SamplerError::NoSuchProcess(pid))?;
        for _round in 0..8 {
            for &tid in &pending {
                let mut opened = self.attach_thread(&mut session, &mut state, pid, tid, &cpus)?;
                for c in &mut opened {
                    c.enable().map_err(|e| {
                        SamplerError::Open(explain_open_error(&e, "enabling the events"))
                    })?;
                }
                session.counters.append(&mut opened);
            }
            let mut forked = Vec::new();
            for (ring, _) in &session.rings {
                ring.peek(|rec| {
                    if let Ok(Decoded::Fork { pid: p, tid }) = session.decoder.decode(rec, None) {
                        if p == pid {
                            forked.push(tid);
                        }
                    }
                });
            }
            let now = threads(pid).map_err(|_| SamplerError::NoSuchProcess(pid))?;
            pending = now
                .into_iter()
                .filter(|t| !session.threads.contains(t) && !forked.contains(t))
                .collect();
            if pending.is_empty() {
                break;
            }
        }
        if state.extra != state.wanted_extra {
            // Physical addresses were refused: the samples carry none.
            session.decoder.strip_sample_bits(state.wanted_extra);
        }
        session.stats.events = session.counters.len() as u64;
        session.stats.rings = session.rings.len() as u64;
        Ok(session)
    }
}

/// What opening events learnt so far (fallbacks apply to the whole session).
struct OpenState {
    specs: Vec<EventSpec>,
    kind_of: Vec<Option<usize>>,
    extra: u64,
    wanted_extra: u64,
    first: bool,
}

impl Sampler for LinuxSampler {
    type Error = SamplerError;

    fn start(&mut self, pid: Pid, plan: &SamplingPlan) -> Result<(), SamplerError> {
        if self.sessions.contains_key(&pid) {
            return Err(SamplerError::AlreadySampling(pid));
        }
        if let Some(why) = &self.plan.live_unsupported {
            return Err(SamplerError::Unsupported(why.clone()));
        }
        if !process_alive(pid) {
            return Err(SamplerError::NoSuchProcess(pid));
        }
        let period = if plan.period == 0 {
            self.plan.default_period
        } else {
            self.plan.usable_period(plan.period)
        };
        let mut session = self.open_all(pid, period)?;
        session.budget = plan.cpu_budget;
        self.sessions.insert(pid, session);
        Ok(())
    }

    fn stop(&mut self, pid: Pid) -> Result<(), SamplerError> {
        let mut s = self
            .sessions
            .remove(&pid)
            .ok_or(SamplerError::NotSampling(pid))?;
        for c in &mut s.counters {
            // The target may be gone; its events are closed on drop either way.
            let _ = c.disable();
        }
        Ok(())
    }

    fn drain(&mut self, pid: Pid, out: &mut Vec<MemSample>) -> Result<SampleLoss, SamplerError> {
        self.drain_with(pid, |m| out.push(*m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocs_core::DataSource;

    fn sample(tid: u32, time: u64, vaddr: u64) -> MemSample {
        MemSample {
            pid: 1,
            tid,
            vaddr,
            paddr: None,
            source: DataSource::Other,
            weight: 0,
            time,
        }
    }

    #[test]
    fn a_sample_alike_to_the_one_before_it_is_its_second_copy() {
        let mut ring = SecondCopies::default();
        assert!(!ring.is_second(&sample(7, 100, 0x1000)));
        assert!(ring.is_second(&sample(7, 100, 0x1000)), "the kernel's copy");
        // The same page again later, another thread at the same time, another page at
        // the same time: each a sample of its own.
        assert!(!ring.is_second(&sample(7, 200, 0x1000)));
        assert!(!ring.is_second(&sample(8, 200, 0x1000)));
        assert!(!ring.is_second(&sample(8, 200, 0x2000)));
    }
}
