//! The driver: runs an [`Engine`]'s windows against a platform. Written once, for every
//! host (the simulator's closed loop, rocsd on a simulated machine, rocsd on Linux).
//!
//! One window, in one direction: drain each target's samples and feed them; read every
//! target's counters; let the engine feed each controller its window; carry each action out
//! on the platform ([`Sampler`], [`Counters`], [`Remapper`]) and feed the results back
//! (migration and colour reports) until no action is left. What happened comes out as
//! [`Outcome`]s for the host to show: the controllers' events and the platform's failures.
//!
//! The driver does no I/O of its own and reads no clock: the platform does, and the host
//! decides when a window ends.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;

use crate::controller::{Action, ColourReport, Command, Event, MigrationReport, Observation};
use crate::engine::Engine;
use crate::{CounterDelta, Counters, Errno, MemSample, Pid, Placement, Remapper, Sampler};

/// Most actions carried out for one observation; the controller's page budget keeps the
/// real number small, this only guards against a loop.
const MAX_ACTIONS: usize = 10_000;

/// What the driver was doing when the platform failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    DrainSamples,
    ReadCounters,
    StartSampling,
    StopSampling,
    Migrate {
        pages: usize,
    },
    Query {
        pages: usize,
    },
    ReadMappings,
    /// The controller asked for more than [`MAX_ACTIONS`] actions at once.
    TooManyActions,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::DrainSamples => f.write_str("draining samples"),
            Operation::ReadCounters => f.write_str("reading counters"),
            Operation::StartSampling => f.write_str("starting sampling"),
            Operation::StopSampling => f.write_str("stopping sampling"),
            Operation::Migrate { pages: 1 } => f.write_str("migrating 1 page"),
            Operation::Migrate { pages } => write!(f, "migrating {pages} pages"),
            Operation::Query { pages: 1 } => f.write_str("querying the colour of 1 page"),
            Operation::Query { pages } => write!(f, "querying the colours of {pages} pages"),
            Operation::ReadMappings => f.write_str("reading the target's mappings"),
            Operation::TooManyActions => f.write_str("carrying out the controller's actions"),
        }
    }
}

/// A platform call that failed.
#[derive(Debug, thiserror::Error)]
#[error("{operation}: {source}")]
pub struct DriverError {
    pub operation: Operation,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl DriverError {
    fn new(operation: Operation, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        DriverError {
            operation,
            source: Box::new(source),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the controller asked for more than {MAX_ACTIONS} actions at once")]
struct TooManyActions;

/// What happened to a target while the driver ran.
#[derive(Debug)]
pub enum Outcome {
    /// An event of its controller (a transition, a search step, ...).
    Event { pid: Pid, event: Event },
    /// Sampling it cost this much CPU time (nanoseconds) since the previous drain.
    SamplingCost { pid: Pid, cpu_ns: u64 },
    /// A platform call for it failed. A failed migration or query is reported to the
    /// controller as a failure of every page (EPERM), so it never waits for it.
    Failed { pid: Pid, error: DriverError },
}

/// What moving a released target's pages back did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    pub confined: usize,
    pub restored: usize,
}

/// Carries an engine's actions to a platform. Keeps which targets it started sampling, so
/// that sampling is always stopped, and one sample buffer reused window after window.
#[derive(Debug, Default)]
pub struct Driver {
    sampling: BTreeSet<Pid>,
    samples: Vec<MemSample>,
}

impl Driver {
    pub fn new() -> Self {
        Driver::default()
    }

    /// Whether sampling of `pid` is on at the platform.
    pub fn sampling(&self, pid: Pid) -> bool {
        self.sampling.contains(&pid)
    }

    /// End a window of every target of `engine`: samples, counters, the engine's window,
    /// and every action that follows. `exited` tells from a target's counters that it is
    /// gone (it is told so instead of getting its window). Returns the counters read.
    pub fn end_window<P>(
        &mut self,
        engine: &mut Engine,
        platform: &mut P,
        exited: &dyn Fn(Pid, &CounterDelta) -> bool,
        out: &mut Vec<Outcome>,
    ) -> Vec<(Pid, CounterDelta)>
    where
        P: Sampler + Counters + Remapper,
    {
        let pids: Vec<Pid> = engine.pids().collect();
        for &pid in &pids {
            if !self.sampling.contains(&pid) {
                continue;
            }
            let mut samples = std::mem::take(&mut self.samples);
            samples.clear();
            match Sampler::drain(platform, pid, &mut samples) {
                Ok(loss) => {
                    if loss.cpu_ns > 0 {
                        out.push(Outcome::SamplingCost {
                            pid,
                            cpu_ns: loss.cpu_ns,
                        });
                    }
                    let mut actions = engine.on(pid, Observation::Samples(&samples));
                    actions.extend(engine.on(pid, Observation::SampleLoss(loss)));
                    match Remapper::mappings(platform, pid) {
                        Ok(Some(mappings)) => {
                            actions.extend(engine.on(pid, Observation::Mappings(mappings)))
                        }
                        Ok(None) => {}
                        Err(e) => out.push(failed(pid, Operation::ReadMappings, e)),
                    }
                    self.carry_out(engine, platform, pid, actions, out);
                }
                Err(e) => out.push(failed(pid, Operation::DrainSamples, e)),
            }
            self.samples = samples;
        }
        let mut counters = Vec::with_capacity(pids.len());
        for &pid in &pids {
            match Counters::read(platform, pid) {
                Ok(delta) => counters.push((pid, delta)),
                Err(e) => out.push(failed(pid, Operation::ReadCounters, e)),
            }
        }
        let (gone, running): (Vec<_>, Vec<_>) =
            counters.iter().partition(|(pid, d)| exited(*pid, d));
        for (pid, _) in gone {
            self.exited(engine, platform, pid, out);
        }
        // Each target's actions in one batch, as its controller returned them.
        let mut actions = engine.end_window(&running).into_iter().peekable();
        while let Some((pid, first)) = actions.next() {
            let mut batch = vec![first];
            while let Some((_, a)) = actions.next_if(|(p, _)| *p == pid) {
                batch.push(a);
            }
            self.carry_out(engine, platform, pid, batch, out);
        }
        counters
    }

    /// An operator's command for one target.
    pub fn command<P>(
        &mut self,
        engine: &mut Engine,
        platform: &mut P,
        pid: Pid,
        command: Command,
        out: &mut Vec<Outcome>,
    ) where
        P: Sampler + Counters + Remapper,
    {
        let actions = engine.on(pid, Observation::Command(command));
        self.carry_out(engine, platform, pid, actions, out);
    }

    /// The target is gone: its controller winds down and its sampling is released. The
    /// controller stays in the engine, exited, until detached.
    pub fn exited<P>(
        &mut self,
        engine: &mut Engine,
        platform: &mut P,
        pid: Pid,
        out: &mut Vec<Outcome>,
    ) where
        P: Sampler + Counters + Remapper,
    {
        let actions = engine.on(pid, Observation::TargetExited);
        self.carry_out(engine, platform, pid, actions, out);
        if self.sampling.remove(&pid) {
            // The target is gone: a failure to stop is its events already closing.
            let _ = Sampler::stop(platform, pid);
        }
    }

    /// rocsd lets the target go (it stops, or the policy no longer applies): sampling
    /// stops and, when asked, every confined page moves back at once (no page budget: this
    /// is the last chance). The controller leaves the engine.
    pub fn release<P>(
        &mut self,
        engine: &mut Engine,
        platform: &mut P,
        pid: Pid,
        restore: bool,
        out: &mut Vec<Outcome>,
    ) -> Released
    where
        P: Sampler + Counters + Remapper,
    {
        if self.sampling.remove(&pid) {
            if let Err(e) = Sampler::stop(platform, pid) {
                out.push(failed(pid, Operation::StopSampling, e));
            }
        }
        let confined: Vec<_> = engine
            .controller(pid)
            .map(|c| c.confined().iter().copied().collect())
            .unwrap_or_default();
        let mut released = Released {
            confined: confined.len(),
            restored: 0,
        };
        if restore && !confined.is_empty() {
            let pages = confined.len();
            match platform.migrate(pid, &confined, Placement::Restore) {
                Ok(results) => released.restored = results.iter().filter(|r| r.is_ok()).count(),
                Err(e) => out.push(failed(pid, Operation::Migrate { pages }, e)),
            }
        }
        engine.detach(pid);
        released
    }

    fn carry_out<P>(
        &mut self,
        engine: &mut Engine,
        platform: &mut P,
        pid: Pid,
        actions: Vec<Action>,
        out: &mut Vec<Outcome>,
    ) where
        P: Sampler + Counters + Remapper,
    {
        let mut queue: VecDeque<Action> = actions.into();
        let mut done = 0;
        while let Some(action) = queue.pop_front() {
            done += 1;
            if done > MAX_ACTIONS {
                out.push(failed(pid, Operation::TooManyActions, TooManyActions));
                break;
            }
            match action {
                Action::StartSampling(plan) => match Sampler::start(platform, pid, &plan) {
                    Ok(()) => {
                        self.sampling.insert(pid);
                    }
                    Err(e) => out.push(failed(pid, Operation::StartSampling, e)),
                },
                Action::StopSampling => {
                    if let Err(e) = Sampler::stop(platform, pid) {
                        out.push(failed(pid, Operation::StopSampling, e));
                    }
                    self.sampling.remove(&pid);
                }
                Action::Migrate { pages, to } => {
                    let results = match platform.migrate(pid, &pages, to) {
                        Ok(r) => r,
                        Err(e) => {
                            let n = pages.len();
                            out.push(failed(pid, Operation::Migrate { pages: n }, e));
                            vec![Err(Errno::EPERM); n]
                        }
                    };
                    let report = MigrationReport { to, pages, results };
                    queue.extend(engine.on(pid, Observation::Migrated(report)));
                }
                Action::Query { pages } => {
                    let results = match platform.query(pid, &pages) {
                        Ok(r) => r,
                        Err(e) => {
                            let n = pages.len();
                            out.push(failed(pid, Operation::Query { pages: n }, e));
                            vec![Err(Errno::EPERM); n]
                        }
                    };
                    let report = ColourReport { pages, results };
                    queue.extend(engine.on(pid, Observation::Colours(report)));
                }
                Action::Report(event) => out.push(Outcome::Event { pid, event }),
            }
        }
    }
}

fn failed(
    pid: Pid,
    operation: Operation,
    error: impl std::error::Error + Send + Sync + 'static,
) -> Outcome {
    Outcome::Failed {
        pid,
        error: DriverError::new(operation, error),
    }
}
