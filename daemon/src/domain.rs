//! One LLC domain as rocsd runs it: the engine that owns its targets' controllers, the
//! driver that runs its windows on the platform, and rocsd's side of each target (summary,
//! errors, queries). Both hosts use it, the simulated machine and Linux; neither drives a
//! controller itself.

use std::collections::BTreeMap;

use rocs_config::protocol::{ConfineReply, ErrorCode, ErrorReply};
use rocs_core::{
    Command, Controller, CounterDelta, Counters, Driver, Engine, Outcome, Pid, Remapper, Sampler,
    VirtPage,
};
use serde_json::Value;

use crate::state::Query;
use crate::targets::Target;
use rocs_config::report::describe;

/// Most pages one confine request may name (16 GiB of 4 KiB pages): a larger range is more
/// likely a mistyped address than a buffer.
const MAX_CONFINE_PAGES: u64 = 1 << 22;

/// Which pages of a target to confine by name.
#[derive(Clone, Debug)]
pub enum Confine {
    /// The pages of the byte range `[start, end)`.
    Range { start: u64, end: u64 },
    /// The `k` worst pages of the current miss-rate stack.
    Top(usize),
    /// These pages (a policy's mappings).
    Pages(Vec<VirtPage>),
}

#[derive(Default)]
pub struct Domain {
    engine: Engine,
    driver: Driver,
    /// rocsd's side of each target, by the pid users see.
    targets: BTreeMap<Pid, Target>,
    /// The pid users see of each platform pid (on a simulated machine, of every process,
    /// attached or not, so that messages about one name it as users know it).
    shown: BTreeMap<Pid, Pid>,
    outcomes: Vec<Outcome>,
    /// CPU time sampling cost since the host last took it.
    sampling_cpu_ns: u64,
}

impl Domain {
    pub fn new() -> Self {
        Domain::default()
    }

    /// How users know the platform's pids besides the targets' own.
    pub fn set_shown_pids(&mut self, shown: BTreeMap<Pid, Pid>) {
        self.shown = shown;
    }

    pub fn attach(&mut self, target: Target, controller: Controller) {
        self.shown.insert(target.platform_pid, target.pid);
        target.refresh(&controller);
        self.engine.attach(controller);
        self.targets.insert(target.pid, target);
    }

    pub fn contains(&self, pid: Pid) -> bool {
        self.targets.contains_key(&pid)
    }

    pub fn targets(&self) -> impl Iterator<Item = &Target> + '_ {
        self.targets.values()
    }

    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The controller of a target, by the pid users see.
    pub fn controller(&self, pid: Pid) -> Option<&Controller> {
        let target = self.targets.get(&pid)?;
        self.engine.controller(target.platform_pid)
    }

    /// End a window of every target. `exited` tells from a target's counters (by platform
    /// pid) that it is gone. Returns how many targets were measured for the first time.
    pub fn end_window<P>(
        &mut self,
        platform: &mut P,
        exited: &dyn Fn(Pid, &CounterDelta) -> bool,
    ) -> usize
    where
        P: Sampler + Counters + Remapper,
    {
        let mut out = std::mem::take(&mut self.outcomes);
        let counters = self
            .driver
            .end_window(&mut self.engine, platform, exited, &mut out);
        for (ppid, delta) in counters {
            if let Some(t) = self.target_mut(ppid) {
                t.measured(delta);
            }
        }
        self.report(&mut out);
        self.outcomes = out;
        let mut first = 0;
        for t in self.targets.values_mut() {
            first += usize::from(t.first_measure());
        }
        first
    }

    /// An operator's command for a target. False if it is not here.
    pub fn command<P>(&mut self, platform: &mut P, pid: Pid, command: Command) -> bool
    where
        P: Sampler + Counters + Remapper,
    {
        let Some(ppid) = self.targets.get(&pid).map(|t| t.platform_pid) else {
            return false;
        };
        let mut out = std::mem::take(&mut self.outcomes);
        self.driver
            .command(&mut self.engine, platform, ppid, command, &mut out);
        self.report(&mut out);
        self.outcomes = out;
        true
    }

    /// Confine pages of a target by name, at once; say how many are confined now.
    pub fn confine<P>(
        &mut self,
        platform: &mut P,
        pid: Pid,
        what: Confine,
    ) -> Result<ConfineReply, ErrorReply>
    where
        P: Sampler + Counters + Remapper,
    {
        let Some(c) = self.controller(pid) else {
            return Err(ErrorReply::new(
                ErrorCode::NoSuchTarget,
                format!("target {pid} has just exited"),
            ));
        };
        if c.knobs().dry_run {
            return Err(ErrorReply::new(
                ErrorCode::Unavailable,
                format!(
                    "target {pid} runs dry (no kernel shim, or its policy's dry_run): \
                     rocsd moves none of its pages; `rocsctl status` says why"
                ),
            ));
        }
        let shift = c.profile().page_shift();
        let pages: Vec<VirtPage> = match what {
            Confine::Range { start, end } => {
                let (first, last) = (start >> shift, (end - 1) >> shift);
                if last - first >= MAX_CONFINE_PAGES {
                    return Err(ErrorReply::new(
                        ErrorCode::BadRequest,
                        format!(
                            "[{start:#x}, {end:#x}) spans more than {MAX_CONFINE_PAGES} pages: \
                             check the addresses (`rocsctl profile` shows the target's)"
                        ),
                    ));
                }
                (first..=last).map(VirtPage).collect()
            }
            Confine::Top(k) if c.stack().is_empty() => {
                return Err(ErrorReply::new(
                    ErrorCode::Unavailable,
                    format!(
                        "target {pid} has no miss-rate stack yet (it is profiled first), so it \
                         has no top {}; name an address range instead",
                        rocs_config::report::count(k, "page", "pages")
                    ),
                ))
            }
            Confine::Top(k) => c.stack().top(k).collect(),
            Confine::Pages(pages) => pages,
        };
        self.command(
            platform,
            pid,
            Command::Confine {
                pages: pages.clone(),
            },
        );
        let explicit = self.controller(pid).map(|c| c.explicit());
        Ok(ConfineReply {
            target: pid,
            pages: pages.len(),
            confined: explicit.map_or(0, |e| pages.iter().filter(|p| e.contains(p)).count()),
            explicit: explicit.map_or(0, |e| e.len()),
        })
    }

    /// Answer a control query about a target.
    pub fn query(&self, pid: Pid, query: Query) -> Result<Value, ErrorReply> {
        let (Some(t), Some(c)) = (self.targets.get(&pid), self.controller(pid)) else {
            return Err(ErrorReply::new(
                ErrorCode::NoSuchTarget,
                format!("target {pid} has just exited"),
            ));
        };
        t.query(c, query, &|p| self.shown_pid(p))
    }

    /// The target is gone: its controller winds down, its sampling is released, and it
    /// leaves the domain.
    pub fn exited<P>(&mut self, platform: &mut P, pid: Pid) -> Option<Target>
    where
        P: Sampler + Counters + Remapper,
    {
        let ppid = self.targets.get(&pid)?.platform_pid;
        let mut out = std::mem::take(&mut self.outcomes);
        self.driver
            .exited(&mut self.engine, platform, ppid, &mut out);
        self.report(&mut out);
        self.outcomes = out;
        self.engine.detach(ppid);
        self.targets.remove(&pid)
    }

    /// Let a target go (rocsd stops, or its policy no longer applies): sampling stops and,
    /// when asked, every confined page moves back at once.
    pub fn release<P>(&mut self, platform: &mut P, pid: Pid, restore: bool) -> Option<Target>
    where
        P: Sampler + Counters + Remapper,
    {
        let ppid = self.targets.get(&pid)?.platform_pid;
        let mut out = std::mem::take(&mut self.outcomes);
        let released = self
            .driver
            .release(&mut self.engine, platform, ppid, restore, &mut out);
        self.report(&mut out);
        self.outcomes = out;
        if restore && released.confined > 0 {
            tracing::info!(
                pid,
                "restored {} of {} confined pages",
                released.restored,
                released.confined
            );
        }
        self.targets.remove(&pid)
    }

    /// CPU time sampling cost since the last call.
    pub fn take_sampling_cpu(&mut self) -> std::time::Duration {
        std::time::Duration::from_nanos(std::mem::take(&mut self.sampling_cpu_ns))
    }

    fn shown_pid(&self, platform_pid: Pid) -> Pid {
        self.shown
            .get(&platform_pid)
            .copied()
            .unwrap_or(platform_pid)
    }

    fn target_mut(&mut self, platform_pid: Pid) -> Option<&mut Target> {
        let pid = self.shown_pid(platform_pid);
        self.targets.get_mut(&pid)
    }

    /// Say what happened (events to the journal, failures on their target), then bring
    /// every summary up to date.
    fn report(&mut self, out: &mut Vec<Outcome>) {
        for outcome in out.drain(..) {
            match outcome {
                Outcome::Event { pid, event } => {
                    let (kind, text) = describe(&event.kind, &|p| self.shown_pid(p));
                    if let Some(t) = self.targets.get(&self.shown_pid(pid)) {
                        tracing::info!(pid = t.pid, comm = %t.comm, "{kind}: {text}");
                    }
                }
                Outcome::SamplingCost { cpu_ns, .. } => self.sampling_cpu_ns += cpu_ns,
                Outcome::Failed { pid, error } => {
                    if let Some(t) = self.target_mut(pid) {
                        t.error(error.to_string());
                    }
                }
            }
        }
        for t in self.targets.values() {
            if let Some(c) = self.engine.controller(t.platform_pid) {
                t.refresh(c);
            }
        }
    }
}
