//! One target's controller, driven against a platform.
//!
//! The controller is sans-IO: at the end of each window the driver drains the target's
//! samples and reads its counters, feeds them in, and carries the actions the controller
//! returns to the platform (start and stop sampling, migrate pages), feeding the migration
//! reports back. The same driver runs on the simulated machine and on Linux.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rocs_config::protocol::{
    ErrorCode, ErrorReply, HistoryEntry, HistoryReply, PageRow, ProfileReply, StackReply,
    TargetSummary,
};
use rocs_core::{
    Action, ColourReport, Command, Controller, CounterDelta, Counters, Errno, Event, EventKind,
    Knobs, LlcGroup, MemSample, MigrationReport, Observation, Pid, Placement, Remapper, Sampler,
    State,
};
use serde_json::Value;

use crate::state::{Capability, Query};

/// Most actions carried out for one observation; the controller's page budget keeps the
/// real number small, this only guards against a loop.
const MAX_ACTIONS_PER_WINDOW: usize = 10_000;

pub struct TargetDriver {
    /// The pid users see (the real pid on Linux; a synthetic one in simulation).
    pub pid: Pid,
    /// The pid on the platform.
    pub platform_pid: Pid,
    pub comm: String,
    pub policy: String,
    controller: Controller,
    /// The knobs as the policy gave them (before dry-run was forced for lack of a shim).
    given_knobs: Knobs,
    summary: Arc<Mutex<TargetSummary>>,
    samples: Vec<MemSample>,
    last: CounterDelta,
    started: Instant,
    last_error: Option<String>,
    sampling: bool,
    /// Counters read successfully at least once; `reported` once the host was told.
    measured: bool,
    reported: bool,
    /// The pid users see of each platform pid that differs from it (the other simulated
    /// processes of this target's machine), to name them in messages.
    shown_pids: BTreeMap<Pid, Pid>,
}

impl TargetDriver {
    /// A driver for a new target. Without migration (no shim, or observe-only), the knobs are
    /// forced to dry-run: the controller profiles and ranks but never asks for a move.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pid: Pid,
        platform_pid: Pid,
        comm: String,
        policy: String,
        given_knobs: Knobs,
        page_shift: u32,
        colours: u32,
        capability: Capability,
    ) -> Result<Self, String> {
        let mut knobs = given_knobs.clone();
        if capability != Capability::Full {
            knobs.dry_run = true;
        }
        let controller = Controller::new(platform_pid, knobs, page_shift, colours)
            .map_err(|e| format!("policy {policy}: {e}"))?;
        let summary = TargetSummary {
            pid,
            comm: comm.clone(),
            policy: policy.clone(),
            state: controller.state().to_string(),
            paused: false,
            capability: capability.as_str().to_string(),
            windows: 0,
            ipc: 0.0,
            mpki: 0.0,
            pages_profiled: 0,
            pages_confined: 0,
            samples: 0,
            lost_samples: 0,
            uptime_s: 0.0,
            last_error: None,
        };
        Ok(TargetDriver {
            pid,
            platform_pid,
            comm,
            policy,
            controller,
            given_knobs,
            summary: Arc::new(Mutex::new(summary)),
            samples: Vec::new(),
            last: CounterDelta::default(),
            started: Instant::now(),
            last_error: None,
            sampling: false,
            measured: false,
            reported: false,
            shown_pids: BTreeMap::new(),
        })
    }

    /// How users know the platform's pids (simulated machines number their processes from
    /// 1000 each; rocsd shows unique pids).
    pub fn set_shown_pids(&mut self, shown_pids: BTreeMap<Pid, Pid>) {
        self.shown_pids = shown_pids;
    }

    fn describe(&self, kind: &EventKind) -> (&'static str, String) {
        describe(kind, &|p| self.shown_pids.get(&p).copied().unwrap_or(p))
    }

    pub fn given_knobs(&self) -> &Knobs {
        &self.given_knobs
    }

    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// The summary the registry shows (updated after every window).
    pub fn summary(&self) -> Arc<Mutex<TargetSummary>> {
        self.summary.clone()
    }

    /// True once, after the first window whose counters were read: the target's events
    /// really opened.
    pub fn first_measure(&mut self) -> bool {
        let first = self.measured && !self.reported;
        self.reported |= self.measured;
        first
    }

    /// End of a window, first half: drain and feed the samples, read the counters (`None`
    /// if they could not be read; the error is reported). The second half is
    /// [`TargetDriver::observe_window`], once every target of the LLC has been read.
    pub fn end_window<P>(&mut self, platform: &mut P) -> Option<CounterDelta>
    where
        P: Sampler + Counters + Remapper,
    {
        let pid = self.platform_pid;
        self.samples.clear();
        if self.sampling {
            match Sampler::drain(platform, pid, &mut self.samples) {
                Ok(loss) => {
                    let mut actions = self.controller.on(Observation::Samples(&self.samples));
                    actions.extend(self.controller.on(Observation::SampleLoss(loss)));
                    self.carry_out(platform, actions);
                }
                Err(e) => self.error(format!("draining samples: {e}")),
            }
        }
        match Counters::read(platform, pid) {
            Ok(delta) => {
                self.last = delta;
                self.measured = true;
                Some(delta)
            }
            Err(e) => {
                self.error(format!("reading counters: {e}"));
                self.refresh();
                None
            }
        }
    }

    /// Second half of a window: feed the counters through the LLC group the target shares
    /// its cache with, and carry out what the controller asks.
    pub fn observe_window<P>(&mut self, platform: &mut P, delta: CounterDelta, group: &mut LlcGroup)
    where
        P: Sampler + Counters + Remapper,
    {
        let actions = group.feed(&mut self.controller, delta);
        self.carry_out(platform, actions);
        group.update(&self.controller);
        self.refresh();
    }

    /// An operator command (pause, resume, restore).
    pub fn command<P>(&mut self, platform: &mut P, command: Command)
    where
        P: Sampler + Counters + Remapper,
    {
        let actions = self.controller.on(Observation::Command(command));
        self.carry_out(platform, actions);
        self.refresh();
    }

    /// The target is gone: let the controller wind down and release its sampling.
    pub fn exited<P>(&mut self, platform: &mut P)
    where
        P: Sampler + Counters + Remapper,
    {
        let actions = self.controller.on(Observation::TargetExited);
        self.carry_out(platform, actions);
        if self.sampling {
            let _ = Sampler::stop(platform, self.platform_pid);
            self.sampling = false;
        }
        self.refresh();
    }

    /// rocsd is stopping (or the policy no longer applies): stop sampling and, when asked,
    /// move every confined page back at once (no page budget: this is the last chance).
    pub fn release<P>(&mut self, platform: &mut P, restore: bool)
    where
        P: Sampler + Counters + Remapper,
    {
        if self.sampling {
            let _ = Sampler::stop(platform, self.platform_pid);
            self.sampling = false;
        }
        let confined: Vec<_> = self.controller.confined().iter().copied().collect();
        if restore && !confined.is_empty() {
            match platform.migrate(self.platform_pid, &confined, Placement::Restore) {
                Ok(results) => {
                    let failed = results.iter().filter(|r| r.is_err()).count();
                    tracing::info!(
                        pid = self.pid,
                        "restored {} of {} confined pages",
                        confined.len() - failed,
                        confined.len()
                    );
                }
                Err(e) => tracing::warn!(pid = self.pid, "could not restore pages: {e}"),
            }
        }
    }

    fn carry_out<P>(&mut self, platform: &mut P, actions: Vec<Action>)
    where
        P: Sampler + Counters + Remapper,
    {
        let mut queue: std::collections::VecDeque<Action> = actions.into();
        let mut done = 0;
        while let Some(action) = queue.pop_front() {
            done += 1;
            if done > MAX_ACTIONS_PER_WINDOW {
                self.error("the controller asked for too many actions in one window".into());
                break;
            }
            match action {
                Action::StartSampling(plan) => {
                    match Sampler::start(platform, self.platform_pid, &plan) {
                        Ok(()) => self.sampling = true,
                        Err(e) => self.error(format!("starting sampling: {e}")),
                    }
                }
                Action::StopSampling => {
                    if let Err(e) = Sampler::stop(platform, self.platform_pid) {
                        self.error(format!("stopping sampling: {e}"));
                    }
                    self.sampling = false;
                }
                Action::Migrate { pages, to } => {
                    let results = match platform.migrate(self.platform_pid, &pages, to) {
                        Ok(r) => r,
                        Err(e) => {
                            self.error(format!("migrating {} pages: {e}", pages.len()));
                            vec![Err(Errno::EPERM); pages.len()]
                        }
                    };
                    let report = MigrationReport { to, pages, results };
                    queue.extend(self.controller.on(Observation::Migrated(report)));
                }
                Action::Query { pages } => {
                    let results = match platform.query(self.platform_pid, &pages) {
                        Ok(r) => r,
                        Err(e) => {
                            self.error(format!(
                                "querying the colours of {} pages: {e}",
                                pages.len()
                            ));
                            vec![Err(Errno::EPERM); pages.len()]
                        }
                    };
                    let report = ColourReport { pages, results };
                    queue.extend(self.controller.on(Observation::Colours(report)));
                }
                Action::Report(event) => self.log_event(&event),
            }
        }
    }

    fn error(&mut self, message: String) {
        // Say each distinct error once, not every window.
        if self.last_error.as_deref() != Some(&message) {
            tracing::warn!(pid = self.pid, comm = %self.comm, "{message}");
            self.last_error = Some(message);
        }
    }

    fn log_event(&self, event: &Event) {
        let (kind, text) = self.describe(&event.kind);
        tracing::info!(pid = self.pid, comm = %self.comm, "{kind}: {text}");
    }

    fn refresh(&mut self) {
        let stats = self.controller.stats();
        let mut s = self.summary.lock().unwrap();
        s.state = self.controller.state().to_string();
        s.paused = self.controller.state() == State::Paused;
        s.windows = stats.windows;
        s.ipc = self.last.ipc();
        s.mpki = self.last.mpki();
        s.pages_profiled = self.controller.profile().len();
        s.pages_confined = self.controller.confined().len();
        s.samples = stats.samples;
        s.lost_samples = stats.samples_lost;
        s.uptime_s = self.started.elapsed().as_secs_f64();
        s.last_error = self.last_error.clone();
    }

    fn head(&self) -> TargetSummary {
        self.summary.lock().unwrap().clone()
    }

    /// Answer a control query about this target.
    pub fn query(&self, query: Query) -> Result<Value, ErrorReply> {
        let c = &self.controller;
        let v = match query {
            Query::Profile => {
                let confined = c.confined();
                let pages = c
                    .profile()
                    .sorted()
                    .into_iter()
                    .map(|(page, n)| PageRow {
                        page: page.0,
                        hits: n.hits,
                        misses: n.misses,
                        other: n.other,
                        confined: confined.contains(&page),
                    })
                    .collect();
                serde_json::to_value(ProfileReply {
                    target: self.head(),
                    page_shift: c.profile().page_shift(),
                    samples: c.profile().samples_total(),
                    pages,
                })
            }
            Query::Stack { limit } => {
                let entries = c.stack().entries();
                let confined = c.confined();
                let k = entries
                    .iter()
                    .take_while(|e| confined.contains(&e.page))
                    .count();
                serde_json::to_value(StackReply {
                    target: self.head(),
                    page_shift: c.profile().page_shift(),
                    total: entries.len(),
                    k,
                    entries: entries[..limit.unwrap_or(usize::MAX).min(entries.len())].to_vec(),
                })
            }
            Query::History => {
                let events = c
                    .history()
                    .map(|e| {
                        let (kind, text) = self.describe(&e.kind);
                        HistoryEntry {
                            window: e.window,
                            kind: kind.to_string(),
                            text,
                            detail: serde_json::to_value(e).unwrap_or(Value::Null),
                        }
                    })
                    .collect();
                serde_json::to_value(HistoryReply {
                    target: self.head(),
                    events,
                })
            }
        };
        v.map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("cannot encode: {e}")))
    }
}

/// A short kind and a sentence for people, for the journal and `rocsctl history`; `shown`
/// gives the pid users know for a platform pid.
fn describe(kind: &EventKind, shown: &dyn Fn(Pid) -> Pid) -> (&'static str, String) {
    match kind {
        EventKind::Transition { from, to, reason } => {
            ("state", format!("{from} -> {to}: {reason}"))
        }
        EventKind::Profiled {
            pages_profiled,
            samples,
            stack_pages,
            regions,
        } => (
            "profile",
            format!(
                "{samples} samples over {pages_profiled} pages: a stack of {stack_pages} pages \
                 in {regions} regions"
            ),
        ),
        EventKind::SearchStep {
            k,
            ipc,
            mpki,
            group_score,
        } => {
            let group = group_score
                .map(|s| format!(", LLC group score {s:.3}"))
                .unwrap_or_default();
            (
                "search",
                format!("k = {k}: IPC {ipc:.3}, MPKI {mpki:.2}{group}"),
            )
        }
        EventKind::Waiting { holder, reason } => (
            "state",
            format!(
                "waiting for pid {}'s search to finish: {reason}",
                shown(*holder)
            ),
        ),
        EventKind::SearchDone {
            k,
            ipc,
            baseline_ipc,
            windows,
        } => {
            let gain = match (ipc, baseline_ipc) {
                (Some(i), Some(b)) if *b > 0.0 => {
                    format!(
                        " (IPC {i:.3} against {b:.3} at k = 0, {:+.1}%)",
                        (i / b - 1.0) * 100.0
                    )
                }
                _ => String::new(),
            };
            (
                "search",
                format!("chose k = {k}{gain} after {windows} windows"),
            )
        }
        EventKind::MigrationFailed { to, failed, errno } => (
            "migrate",
            format!(
                "{failed} pages could not move to {}: {errno}",
                match to {
                    Placement::Pollute => "the pollute buffer",
                    Placement::Restore => "the ordinary colours",
                }
            ),
        ),
        EventKind::Restored => ("restore", "every confined page is back".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_target_names_the_holder_by_the_pid_users_see() {
        let waiting = EventKind::Waiting {
            holder: 1000,
            reason: "LLC miss rate 0.40 ≥ 0.10".into(),
        };
        let shown: BTreeMap<Pid, Pid> = [(1000, 1002)].into();
        let (kind, text) = describe(&waiting, &|p| shown.get(&p).copied().unwrap_or(p));
        assert_eq!(kind, "state");
        assert_eq!(
            text,
            "waiting for pid 1002's search to finish: LLC miss rate 0.40 ≥ 0.10"
        );
        // On Linux the platform's pid is the pid users see.
        let (_, text) = describe(&waiting, &|p| p);
        assert!(text.starts_with("waiting for pid 1000's search"), "{text}");
    }
}
