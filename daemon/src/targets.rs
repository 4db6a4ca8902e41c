//! One target as rocsd keeps it: who it is, the summary the registry shows, what went
//! wrong last, and the answers to control queries about it. Its controller lives in its LLC
//! domain's engine ([`crate::domain::Domain`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use rocs_config::protocol::{
    ErrorCode, ErrorReply, HistoryEntry, HistoryReply, PageRow, ProfileReply, StackReply,
    TargetSummary,
};
use rocs_core::{Controller, CounterDelta, Knobs, Pid, State};
use serde_json::Value;

use crate::state::{Capability, Query};
use rocs_config::report::describe;

pub struct Target {
    /// The pid users see (the real pid on Linux; a synthetic one in simulation).
    pub pid: Pid,
    /// The pid on the platform.
    pub platform_pid: Pid,
    pub comm: String,
    pub policy: String,
    /// The knobs as the policy gave them (before dry-run was forced for lack of a shim).
    given_knobs: Knobs,
    summary: Arc<Mutex<TargetSummary>>,
    /// The counters of its last window.
    last: CounterDelta,
    started: Instant,
    last_error: Option<String>,
    /// Counters read successfully at least once; `reported` once the daemon was told.
    measured: bool,
    reported: bool,
}

impl Target {
    /// A new target and its controller. Without the shim the knobs are forced to dry-run:
    /// the controller profiles and ranks but never asks for a move. (Observe-only targets,
    /// on software events, never search: their samples carry no LLC data, so their stack is
    /// empty; the host forces dry-run on them only when the shim is missing too, so that
    /// pages named by the operator or a policy still move.)
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
    ) -> Result<(Self, Controller), String> {
        let mut knobs = given_knobs.clone();
        if capability == Capability::ObserveAndProfile {
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
            throttled_samples: 0,
            pages_migrated: 0,
            migration_failures: 0,
            uptime_s: 0.0,
            last_error: None,
        };
        let target = Target {
            pid,
            platform_pid,
            comm,
            policy,
            given_knobs,
            summary: Arc::new(Mutex::new(summary)),
            last: CounterDelta::default(),
            started: Instant::now(),
            last_error: None,
            measured: false,
            reported: false,
        };
        Ok((target, controller))
    }

    pub fn given_knobs(&self) -> &Knobs {
        &self.given_knobs
    }

    /// The summary the registry shows (updated after every window).
    pub fn summary(&self) -> Arc<Mutex<TargetSummary>> {
        self.summary.clone()
    }

    /// Its counters of the window that just ended.
    pub fn measured(&mut self, delta: CounterDelta) {
        self.last = delta;
        self.measured = true;
    }

    /// True once, after the first window whose counters were read: the target's events
    /// really opened.
    pub fn first_measure(&mut self) -> bool {
        let first = self.measured && !self.reported;
        self.reported |= self.measured;
        first
    }

    /// Something failed for this target: say each distinct error once, not every window.
    pub fn error(&mut self, message: String) {
        if self.last_error.as_deref() != Some(&message) {
            tracing::warn!(pid = self.pid, comm = %self.comm, "{message}");
            self.last_error = Some(message);
        }
    }

    /// Bring the summary up to date with the controller.
    pub fn refresh(&self, c: &Controller) {
        let stats = c.stats();
        let mut s = self
            .summary
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.state = c.state().to_string();
        s.paused = c.state() == State::Paused;
        s.windows = stats.windows;
        s.ipc = self.last.ipc();
        s.mpki = self.last.mpki();
        s.pages_profiled = c.profile().len();
        s.pages_confined = c.confined().len();
        s.samples = stats.samples;
        s.lost_samples = stats.samples_lost;
        s.throttled_samples = stats.samples_throttled;
        s.pages_migrated = stats.pages_migrated;
        s.migration_failures = stats.migrations_failed;
        s.uptime_s = self.started.elapsed().as_secs_f64();
        s.last_error = self.last_error.clone();
    }

    fn head(&self) -> TargetSummary {
        self.summary
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Answer a control query about this target.
    pub fn query(
        &self,
        c: &Controller,
        query: Query,
        shown: &dyn Fn(Pid) -> Pid,
    ) -> Result<Value, ErrorReply> {
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
                    explicit: c.explicit().iter().map(|p| p.0).collect(),
                })
            }
            Query::History => {
                let events = c
                    .history()
                    .map(|e| {
                        let (kind, text) = describe(&e.kind, shown);
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
