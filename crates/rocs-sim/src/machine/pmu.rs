//! The simulated PMU: precise sampling of loads that reach the LLC (every N-th, with
//! jitter, into a bounded ring), its cost charged to the process, the CPU budget that moves
//! the period, and the counting events.

use rocs_core::{
    next_period, period_check_due, CounterDelta, Counters, DataSource, MemSample, Pid, SampleLoss,
    Sampler, SamplingPlan,
};

use super::hierarchy::{Served, Timing};
use super::{Machine, ProcState, FP_SHIFT};
use crate::error::SimError;
use crate::rng::Rng;

/// Sampling cost is checked against the CPU budget over windows of this many cycles (and
/// earlier when it is over: [`rocs_core::period_check_due`]).
const BUDGET_WINDOW: u64 = 10_000_000;

pub(super) struct Pmu {
    pub(super) enabled: bool,
    pub(super) period: u64,
    /// The period the plan asked for: the budget never lowers the period below it.
    pub(super) requested: u64,
    /// Sampling cycles already reported by a drain.
    pub(super) cost_reported: u64,
    pub(super) countdown: u64,
    pub(super) budget: f64,
    pub(super) samples: Vec<MemSample>,
    pub(super) lost: u64,
    pub(super) throttled: u64,
    pub(super) window_start_fp: u64,
    pub(super) window_overhead: u64,
    pub(super) window_samples: u64,
    /// The sampler's own random numbers (its period's jitter). The program's accesses
    /// draw from the process's generator: were a sample's jitter drawn from it too,
    /// profiling would change which regions and offsets the program touches from then on,
    /// and a run that moved no page would differ from its baseline in more than the
    /// samples' cost.
    pub(super) rng: Rng,
}

#[derive(Clone, Copy, Default)]
pub(super) struct Snapshot {
    pub(super) instructions: u64,
    pub(super) cycles: u64,
    pub(super) llc_refs: u64,
    pub(super) llc_misses: u64,
}

impl ProcState {
    /// A load reached the LLC: count it for the sampler.
    #[inline(always)]
    pub(super) fn pmu_event(
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
        self.pmu.countdown = jittered(self.pmu.period, t.jitter, &mut self.pmu.rng);
        self.c.samples += 1;
        self.c.sampling_overhead_cycles += t.sample_cost;
        self.pmu.window_overhead += t.sample_cost;
        self.pmu.window_samples += 1;
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

pub(super) fn jittered(period: u64, jitter: f64, rng: &mut Rng) -> u64 {
    if jitter == 0.0 {
        return period.max(1);
    }
    let f = 1.0 + jitter * (2.0 * rng.unit() - 1.0);
    ((period as f64 * f).round() as u64).max(1)
}

/// Move the sampling period so that sampling costs about its CPU budget, by the rule the
/// real sampler follows (rocs_core::next_period): raised when over, lowered again when well
/// under. A raise counts as throttling (the samples it costs are not taken).
pub(super) fn enforce_budget(st: &mut ProcState) {
    let pmu = &mut st.pmu;
    if !pmu.enabled || pmu.budget <= 0.0 {
        return;
    }
    let span = (st.clock_fp - pmu.window_start_fp) >> FP_SHIFT;
    if span == 0 {
        return;
    }
    let share = pmu.window_overhead as f64 / span as f64;
    if !period_check_due(span >= BUDGET_WINDOW, pmu.window_samples, share, pmu.budget) {
        return;
    }
    let period = next_period(pmu.period, pmu.requested, share, pmu.budget);
    if period > pmu.period {
        pmu.throttled += 1;
    }
    pmu.period = period;
    pmu.countdown = pmu.countdown.min(period);
    pmu.window_start_fp = st.clock_fp;
    pmu.window_overhead = 0;
    pmu.window_samples = 0;
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
        st.pmu.requested = plan.period;
        st.pmu.budget = plan.cpu_budget;
        st.pmu.countdown = jittered(plan.period, self.timing.jitter, &mut st.pmu.rng);
        st.pmu.window_start_fp = st.clock_fp;
        st.pmu.window_overhead = 0;
        st.pmu.window_samples = 0;
        // ROCS profiles with the L2 prefetchers off (MSR 0x1A4 on Intel), so that streaming
        // pages are seen missing rather than hidden by prefetched lines (Fig. 4).
        st.core.modern.prefetch_paused = self.prefetch_off_while_sampling;
        Ok(())
    }

    fn stop(&mut self, pid: Pid) -> Result<(), SimError> {
        let i = self.proc_index(pid)?;
        let st = &mut self.procs[i].st;
        st.pmu.enabled = false;
        st.core.modern.prefetch_paused = false;
        Ok(())
    }

    fn drain(&mut self, pid: Pid, out: &mut Vec<MemSample>) -> Result<SampleLoss, SimError> {
        let i = self.proc_index(pid)?;
        let clock_ghz = self.spec.clock_ghz;
        let st = &mut self.procs[i].st;
        let spent = st.c.sampling_overhead_cycles;
        let pmu = &mut st.pmu;
        out.append(&mut pmu.samples);
        let cycles = spent - std::mem::replace(&mut pmu.cost_reported, spent);
        let loss = SampleLoss {
            lost: pmu.lost,
            throttled: pmu.throttled,
            cpu_ns: (cycles as f64 / clock_ghz).round() as u64,
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
        let clock_ghz = self.spec.clock_ghz;
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
        // perf reports the time a counter ran in nanoseconds; so does the model, so that a
        // cost reported in time (`SampleLoss::cpu_ns`) converts to cycles as on Linux.
        let ns = (cycles as f64 / clock_ghz).round() as u64;
        Ok(CounterDelta {
            instructions: now.instructions - last.instructions,
            cycles,
            llc_references: now.llc_refs - last.llc_refs,
            llc_misses: now.llc_misses - last.llc_misses,
            time_enabled: ns,
            time_running: ns,
        })
    }
}
