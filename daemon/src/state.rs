//! What the daemon knows: its configuration, the policies in force, the targets and their
//! hosts (the tasks that run their controllers), and the answers to control requests.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocs_config::protocol::{
    ActionReply, ConfineReply, ErrorCode, ErrorReply, PolicySummary, ReloadReply, Request,
    StatusReply, TargetSummary,
};
use rocs_config::{DaemonConfig, Platform, Policy, PolicyErrors, PolicySet, ProcessInfo};
use rocs_core::knobs::Knobs;
use rocs_core::{CacheGeometry, Pid};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use rocs_config::report;

/// The policies in force, each with its knobs merged over rocsd.toml's and checked.
#[derive(Debug, Default)]
pub struct LoadedPolicies {
    pub set: PolicySet,
    knobs: HashMap<String, Knobs>,
}

impl LoadedPolicies {
    /// Load the policy directory and check every policy's knobs for a cache of `colours`.
    pub fn load(config: &DaemonConfig, colours: u32) -> Result<Self, PolicyErrors> {
        let set = PolicySet::load_dir(&config.policy_dir)?;
        Self::check(set, config, colours)
    }

    pub fn check(
        set: PolicySet,
        config: &DaemonConfig,
        colours: u32,
    ) -> Result<Self, PolicyErrors> {
        let mut knobs = HashMap::new();
        let mut errors = Vec::new();
        for p in set.policies() {
            let merged = config.knobs.overlay(&p.knobs);
            let k = merged
                .resolve::<Knobs>()
                .and_then(|k| merged.check(&k, |k| k.validate(colours)).map(|()| k));
            match k {
                Ok(k) => {
                    knobs.insert(p.name.clone(), k);
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(LoadedPolicies { set, knobs })
        } else {
            Err(PolicyErrors(errors))
        }
    }

    /// The first policy that applies to `p`, with its knobs.
    pub fn matching(&self, p: &ProcessInfo) -> Option<(&Policy, &Knobs)> {
        let pol = self.set.matching(p)?;
        Some((pol, self.knobs.get(&pol.name)?))
    }

    pub fn summaries(&self) -> Vec<PolicySummary> {
        self.set
            .policies()
            .iter()
            .map(|p| PolicySummary {
                name: p.name.clone(),
                file: p.file.display().to_string(),
            })
            .collect()
    }
}

/// What a target's host is asked to read.
#[derive(Clone, Copy, Debug)]
pub enum Query {
    Profile,
    Stack { limit: Option<usize> },
    History,
}

/// Messages to a host (the task that owns one or more targets' controllers).
#[derive(Debug)]
pub enum HostCommand {
    Query {
        pid: Pid,
        query: Query,
        reply: oneshot::Sender<Result<Value, ErrorReply>>,
    },
    Operator {
        pid: Pid,
        command: rocs_core::controller::Command,
        reply: oneshot::Sender<()>,
    },
    /// A process to attach under a policy (Linux: the scanner hands it to the host of the
    /// LLC domain it runs in).
    Attach {
        pid: Pid,
        comm: String,
        policy: String,
        knobs: Box<rocs_core::Knobs>,
        /// The policy's mappings to confine by name.
        confine: Vec<String>,
    },
    /// Confine pages of a target by name (`rocsctl confine`).
    Confine {
        pid: Pid,
        what: crate::domain::Confine,
        reply: oneshot::Sender<Result<ConfineReply, ErrorReply>>,
    },
    /// The process is gone (the scanner saw it exit).
    Exited { pid: Pid },
    /// Let one target go (its policy changed or no longer applies), restoring its pages
    /// first when `restore`.
    Release { pid: Pid, restore: bool },
    /// Stop serving: release every target, restoring pages first when `restore`.
    Stop { restore: bool },
}

/// A target as the registry holds it.
pub struct TargetEntry {
    pub summary: Arc<Mutex<TargetSummary>>,
    pub host: mpsc::Sender<HostCommand>,
}

/// What rocsd can do on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// Sampling and migration.
    Full,
    /// No shim: profile and build stacks, never migrate.
    ObserveAndProfile,
    /// No PMU: software events only (clearly not a cache profile).
    ObserveOnly,
}

impl Capability {
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Full => "full",
            Capability::ObserveAndProfile => "observe-and-profile",
            Capability::ObserveOnly => "observe-only",
        }
    }
}

/// The daemon's shared state.
pub struct Daemon {
    pub config: DaemonConfig,
    pub started: Instant,
    pub capability: Capability,
    pub notices: Vec<String>,
    pub llc: Option<CacheGeometry>,
    pub colours: u32,
    policies: watch::Sender<Arc<LoadedPolicies>>,
    targets: Mutex<BTreeMap<Pid, TargetEntry>>,
    pub targets_seen: AtomicU64,
    pub targets_exited: AtomicU64,
    targets_measured: AtomicU64,
    reloads: AtomicU64,
    last_reload_error: Mutex<Option<String>>,
    paused: AtomicBool,
    /// The rocs group, whose members may read.
    pub rocs_gid: Option<u32>,
    reload_lock: tokio::sync::Mutex<()>,
    /// The counters of targets that are gone, so that the machine's totals never go back.
    retired: Mutex<TargetTotals>,
    /// CPU time the platform spent sampling, in nanoseconds (the hosts add to it).
    sampling_cpu_ns: AtomicU64,
}

/// Counters summed over targets: per machine, they count every target since rocsd started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetTotals {
    pub samples: u64,
    pub lost_samples: u64,
    pub throttled_samples: u64,
    pub pages_migrated: u64,
    pub migration_failures: u64,
}

impl TargetTotals {
    fn add(&mut self, t: &TargetSummary) {
        self.samples += t.samples;
        self.lost_samples += t.lost_samples;
        self.throttled_samples += t.throttled_samples;
        self.pages_migrated += t.pages_migrated;
        self.migration_failures += t.migration_failures;
    }
}

/// How long a host may take to answer a query before the client is told it is busy.
const HOST_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// A `restore` reply waits at most this long for pages to go back, and gives up earlier
/// when none has gone back for `RESTORE_STALL` (they could not move, or windows are long).
const RESTORE_WAIT: Duration = Duration::from_secs(5);
const RESTORE_STALL: Duration = Duration::from_secs(1);

impl Daemon {
    pub fn new(
        config: DaemonConfig,
        capability: Capability,
        notices: Vec<String>,
        llc: Option<CacheGeometry>,
        policies: LoadedPolicies,
    ) -> Arc<Self> {
        let colours = llc.map_or(1, |g| g.colours());
        let rocs_gid = nix::unistd::Group::from_name(&config.socket_group)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw());
        Arc::new(Daemon {
            config,
            started: Instant::now(),
            capability,
            notices,
            llc,
            colours,
            policies: watch::channel(Arc::new(policies)).0,
            targets: Mutex::new(BTreeMap::new()),
            targets_seen: AtomicU64::new(0),
            targets_exited: AtomicU64::new(0),
            targets_measured: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            last_reload_error: Mutex::new(None),
            paused: AtomicBool::new(false),
            rocs_gid,
            reload_lock: tokio::sync::Mutex::new(()),
            retired: Mutex::new(TargetTotals::default()),
            sampling_cpu_ns: AtomicU64::new(0),
        })
    }

    pub fn platform(&self) -> Platform {
        self.config.platform
    }

    pub fn policies(&self) -> Arc<LoadedPolicies> {
        self.policies.borrow().clone()
    }

    /// Hosts and the scanner watch this to apply a reload.
    pub fn subscribe_policies(&self) -> watch::Receiver<Arc<LoadedPolicies>> {
        self.policies.subscribe()
    }

    /// New targets start paused while the operator has paused everything.
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    pub fn register(&self, pid: Pid, entry: TargetEntry) {
        self.targets_seen.fetch_add(1, Ordering::Relaxed);
        self.targets.lock().unwrap().insert(pid, entry);
    }

    pub fn unregister(&self, pid: Pid) {
        let mut targets = self.targets.lock().unwrap();
        if let Some(gone) = targets.remove(&pid) {
            self.targets_exited.fetch_add(1, Ordering::Relaxed);
            // Under the registry's lock: a reader of `totals` sees the target once, either
            // attached or retired.
            let last = gone.summary.lock().unwrap().clone();
            self.retired.lock().unwrap().add(&last);
        }
    }

    /// The counters of every target since start, attached now or gone.
    pub fn totals(&self) -> TargetTotals {
        let targets = self.targets.lock().unwrap();
        let mut totals = *self.retired.lock().unwrap();
        for t in targets.values() {
            totals.add(&t.summary.lock().unwrap());
        }
        totals
    }

    /// The platform spent `cost` of CPU time sampling.
    pub fn add_sampling_cpu(&self, cost: Duration) {
        let ns = u64::try_from(cost.as_nanos()).unwrap_or(u64::MAX);
        self.sampling_cpu_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// CPU time spent sampling since start.
    pub fn sampling_cpu(&self) -> Duration {
        Duration::from_nanos(self.sampling_cpu_ns.load(Ordering::Relaxed))
    }

    /// A target's events opened and were read (its first window was measured).
    pub fn note_measured(&self) {
        self.targets_measured.fetch_add(1, Ordering::Relaxed);
    }

    pub fn target_count(&self) -> usize {
        self.targets.lock().unwrap().len()
    }

    pub fn summaries(&self) -> Vec<TargetSummary> {
        let targets = self.targets.lock().unwrap();
        targets
            .values()
            .map(|t| t.summary.lock().unwrap().clone())
            .collect()
    }

    /// Every host sender (to stop them all).
    pub fn hosts(&self) -> Vec<mpsc::Sender<HostCommand>> {
        let targets = self.targets.lock().unwrap();
        targets.values().map(|t| t.host.clone()).collect()
    }

    /// The target a user means: a pid, or a command name that only one target has.
    fn resolve(&self, name: &str) -> Result<(Pid, mpsc::Sender<HostCommand>), ErrorReply> {
        let targets = self.targets.lock().unwrap();
        if let Ok(pid) = name.parse::<Pid>() {
            return match targets.get(&pid) {
                Some(t) => Ok((pid, t.host.clone())),
                None => Err(ErrorReply::new(
                    ErrorCode::NoSuchTarget,
                    format!("no target with pid {pid}; `rocsctl targets` lists them"),
                )),
            };
        }
        let found: Vec<_> = targets
            .iter()
            .filter(|(_, t)| t.summary.lock().unwrap().comm == name)
            .map(|(&pid, t)| (pid, t.host.clone()))
            .collect();
        match found.len() {
            1 => Ok(found.into_iter().next().unwrap()),
            0 => Err(ErrorReply::new(
                ErrorCode::NoSuchTarget,
                format!("no target named {name:?}; `rocsctl targets` lists them"),
            )),
            n => Err(ErrorReply::new(
                ErrorCode::AmbiguousTarget,
                format!(
                    "{n} targets are named {name:?} (pids {}); name one by pid",
                    found
                        .iter()
                        .map(|(p, _)| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// Every target, or the one named.
    fn resolve_many(
        &self,
        name: Option<&str>,
    ) -> Result<Vec<(Pid, mpsc::Sender<HostCommand>)>, ErrorReply> {
        match name {
            Some(n) => Ok(vec![self.resolve(n)?]),
            None => {
                let targets = self.targets.lock().unwrap();
                Ok(targets.iter().map(|(&p, t)| (p, t.host.clone())).collect())
            }
        }
    }

    pub fn status(&self) -> StatusReply {
        StatusReply {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: rocs_config::protocol::PROTOCOL_VERSION,
            pid: std::process::id(),
            platform: self.platform().to_string(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            capability: self.capability.as_str().to_string(),
            notices: self.notices.clone(),
            llc: self.llc,
            colours: self.colours,
            policies: self.policies().summaries(),
            targets: self.target_count(),
            targets_seen: self.targets_seen.load(Ordering::Relaxed),
            targets_exited: self.targets_exited.load(Ordering::Relaxed),
            targets_measured: self.targets_measured.load(Ordering::Relaxed),
            reloads: self.reloads.load(Ordering::Relaxed),
            last_reload_error: self.last_reload_error.lock().unwrap().clone(),
            paused: self.paused(),
            paused_targets: self
                .summaries()
                .iter()
                .filter(|t| t.paused)
                .map(|t| t.pid)
                .collect(),
        }
    }

    /// Re-read the policies. A broken set is refused whole and the policies in force stay.
    pub async fn reload(&self) -> Result<ReloadReply, ErrorReply> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let config = self.config.clone();
        let colours = self.colours;
        // Reading files is blocking I/O: keep it off the runtime's workers.
        let loaded = tokio::task::spawn_blocking(move || LoadedPolicies::load(&config, colours))
            .await
            .map_err(|e| {
                ErrorReply::new(ErrorCode::Internal, format!("reload task failed: {e}"))
            })?;
        match loaded {
            Ok(p) => {
                let summaries = p.summaries();
                tracing::info!(
                    "policies reloaded: {}",
                    summaries
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                self.policies.send_replace(Arc::new(p));
                self.reloads.fetch_add(1, Ordering::Relaxed);
                *self.last_reload_error.lock().unwrap() = None;
                Ok(ReloadReply {
                    policies: summaries,
                })
            }
            Err(e) => {
                let msg = e.to_string();
                for line in msg.lines() {
                    tracing::error!("policy reload refused, previous policies stay: {line}");
                }
                *self.last_reload_error.lock().unwrap() = Some(msg.clone());
                Err(ErrorReply::new(
                    ErrorCode::ReloadFailed,
                    format!("policies not reloaded (the previous ones stay in force):\n{msg}"),
                ))
            }
        }
    }

    /// Answer one control request (access was checked by the caller).
    pub async fn handle(&self, request: Request) -> Result<Value, ErrorReply> {
        let json = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("cannot encode: {e}")))
        };
        match request {
            Request::Status => json(serde_json::to_value(self.status())),
            Request::Targets => json(serde_json::to_value(self.summaries())),
            Request::Profile { target } => self.query(&target, Query::Profile).await,
            Request::Stack { target, limit } => self.query(&target, Query::Stack { limit }).await,
            Request::History { target } => self.query(&target, Query::History).await,
            Request::Pause { target } => {
                use rocs_core::controller::Command;
                self.operator("pause", target.as_deref(), Command::Pause)
                    .await
            }
            Request::Resume { target } => {
                use rocs_core::controller::Command;
                self.operator("resume", target.as_deref(), Command::Resume)
                    .await
            }
            Request::Restore { target } => {
                use rocs_core::controller::Command;
                self.operator("restore", target.as_deref(), Command::RestoreAll)
                    .await
            }
            Request::Reload => json(serde_json::to_value(self.reload().await?)),
            Request::Confine { target, range, top } => {
                use crate::domain::Confine;
                let what = match (range, top) {
                    (Some([start, end]), _) => Confine::Range { start, end },
                    (None, k) => Confine::Top(k.unwrap_or(0)),
                };
                json(serde_json::to_value(self.confine(&target, what).await?))
            }
        }
    }

    async fn query(&self, target: &str, query: Query) -> Result<Value, ErrorReply> {
        let (pid, host) = self.resolve(target)?;
        let (tx, rx) = oneshot::channel();
        let gone = || {
            ErrorReply::new(
                ErrorCode::NoSuchTarget,
                format!("target {pid} has just exited"),
            )
        };
        host.send(HostCommand::Query {
            pid,
            query,
            reply: tx,
        })
        .await
        .map_err(|_| gone())?;
        match tokio::time::timeout(HOST_REPLY_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(gone()),
            Err(_) => Err(ErrorReply::new(
                ErrorCode::Unavailable,
                format!("target {pid} did not answer within {HOST_REPLY_TIMEOUT:?}"),
            )),
        }
    }

    async fn confine(
        &self,
        target: &str,
        what: crate::domain::Confine,
    ) -> Result<ConfineReply, ErrorReply> {
        let (pid, host) = self.resolve(target)?;
        let (reply, rx) = oneshot::channel();
        let gone = || {
            ErrorReply::new(
                ErrorCode::NoSuchTarget,
                format!("target {pid} has just exited"),
            )
        };
        let confine = HostCommand::Confine { pid, what, reply };
        host.send(confine).await.map_err(|_| gone())?;
        let r = match tokio::time::timeout(HOST_REPLY_TIMEOUT, rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(gone()),
            Err(_) => {
                return Err(ErrorReply::new(
                    ErrorCode::Unavailable,
                    format!("target {pid} did not answer within {HOST_REPLY_TIMEOUT:?}"),
                ))
            }
        };
        tracing::info!(
            "operator confine of {pid}: {} of {} confined",
            r.confined,
            report::count(r.pages, "named page", "named pages")
        );
        Ok(r)
    }

    async fn operator(
        &self,
        action: &str,
        target: Option<&str>,
        command: rocs_core::controller::Command,
    ) -> Result<Value, ErrorReply> {
        use rocs_core::controller::Command;
        let targets = self.resolve_many(target)?;
        if target.is_none() {
            // The whole daemon: targets found later follow suit.
            match command {
                Command::Pause | Command::RestoreAll => self.paused.store(true, Ordering::Relaxed),
                Command::Resume => self.paused.store(false, Ordering::Relaxed),
                Command::Confine { .. } => {}
            }
        }
        let restoring = matches!(command, Command::RestoreAll);
        let mut done = Vec::new();
        let mut confined_before = 0;
        for (pid, host) in targets {
            let before = self.pages_confined(pid).unwrap_or(0);
            let (tx, rx) = oneshot::channel();
            if host
                .send(HostCommand::Operator {
                    pid,
                    command: command.clone(),
                    reply: tx,
                })
                .await
                .is_ok()
                && tokio::time::timeout(HOST_REPLY_TIMEOUT, rx)
                    .await
                    .is_ok_and(|r| r.is_ok())
            {
                done.push(pid);
                confined_before += before;
            }
        }
        let mut reply = ActionReply {
            action: action.to_string(),
            targets: done,
            pages_restored: None,
            pages_still_confined: None,
        };
        let mut restored = String::new();
        if restoring {
            let still = self.wait_for_restores(&reply.targets).await;
            let back = confined_before.saturating_sub(still);
            reply.pages_restored = Some(back);
            reply.pages_still_confined = Some(still);
            restored = format!(
                ", {} back in the ordinary colours, {} still confined",
                report::count(back, "page", "pages"),
                still
            );
        }
        tracing::info!(
            "operator {action} of {}: {}{restored}",
            target.unwrap_or("all targets"),
            report::count(reply.targets.len(), "target", "targets")
        );
        serde_json::to_value(reply).map_err(|e| ErrorReply::new(ErrorCode::Internal, e.to_string()))
    }

    /// A target's confined pages, as its last summary says.
    fn pages_confined(&self, pid: Pid) -> Option<usize> {
        let targets = self.targets.lock().unwrap();
        let t = targets.get(&pid)?;
        let confined = t.summary.lock().unwrap().pages_confined;
        Some(confined)
    }

    /// Wait (a little) for the restores of `pids` to finish, and say how many of their pages
    /// are still confined. The host moves the first `page_budget` pages before it answers
    /// the command and the rest one window's budget at a time; pages that cannot move stay,
    /// so the wait ends when the count stops falling.
    async fn wait_for_restores(&self, pids: &[Pid]) -> usize {
        let still = || {
            pids.iter()
                .filter_map(|&p| self.pages_confined(p))
                .sum::<usize>()
        };
        let (mut last, mut since) = (still(), Instant::now());
        let started = Instant::now();
        while last > 0 && since.elapsed() < RESTORE_STALL && started.elapsed() < RESTORE_WAIT {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = still();
            if now < last {
                since = Instant::now();
            }
            last = now;
        }
        last
    }
}
