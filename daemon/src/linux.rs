//! The linux platform: processes of this machine found by scanning /proc, one task per
//! target driving its controller over perf events (rocs-linux's LinuxSampler and
//! LinuxCounters) and the kernel shim (when it is loaded).
//!
//! What can be done here is decided once at start and said once:
//! - no shim: observe and profile only (the controller runs dry: it ranks, never moves);
//! - no hardware PMU: refuse to start, unless `allow_observe_only`; then counting uses
//!   software stand-ins and sampling the page-fault plan, which exercise the perf plumbing
//!   but measure no cache event (labelled "observe-only" everywhere).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use rocs_config::DaemonConfig;
use rocs_core::{
    CacheGeometry, Colour, Command, CounterDelta, Counters, Knobs, LlcGroup, MemSample, PageResult,
    Pid, Placement, Remapper, SampleLoss, Sampler, SamplingPlan, VirtPage,
};
use rocs_linux::counters::CounterEvents;
use rocs_linux::plan::software_page_fault_plan;
use rocs_linux::shim::{ShimClient, ShimConfig, ShimError};
use rocs_linux::{
    detect_geometry, select_plan, CountersError, CpuInfo, EventChoice, EventPlan, KernelVersion,
    LinuxCounters, LinuxSampler, PmuInventory, SamplerError,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::driver::TargetDriver;
use crate::procscan::{process_info, Scanner};
use crate::state::{Capability, Daemon, HostCommand, LoadedPolicies, TargetEntry};

/// What the machine offers, found at start.
pub struct LinuxSetup {
    pub capability: Capability,
    pub notices: Vec<String>,
    pub llc: Option<CacheGeometry>,
    plan: EventPlan,
    counter_events: CounterEvents,
    shim: Option<Arc<Mutex<ShimClient>>>,
    /// The colours the shim's pollute buffer was configured with.
    shim_pollute: Vec<Colour>,
    page_shift: u32,
}

impl LinuxSetup {
    pub fn probe(config: &DaemonConfig) -> anyhow::Result<LinuxSetup> {
        let mut notices = Vec::new();
        let cpu = CpuInfo::detect().context("reading /proc/cpuinfo")?;
        let pmus = PmuInventory::read(Path::new("/sys"));
        let kernel = KernelVersion::running().unwrap_or(KernelVersion::new(0, 0, 0));
        let page_size = rocs_linux::geometry::page_size();
        let override_ = config
            .geometry()
            .map_err(|e| anyhow::anyhow!("[geometry]: {e}"))?;
        let geometry = detect_geometry(Path::new("/sys"), &cpu, page_size, override_)
            .context("finding the LLC geometry (give it in rocsd.toml's [geometry])")?;
        notices.extend(geometry.notes.iter().cloned());
        let llc = geometry.llc;

        let (plan, counter_events, observe_only) =
            match select_plan(&cpu, &pmus, kernel, EventChoice::Auto) {
                Ok(plan) => (plan, CounterEvents::HARDWARE, false),
                Err(no) if config.allow_observe_only => {
                    notices.push(format!(
                        "OBSERVE-ONLY: no precise memory sampling here ({}). Running on software \
                         events: counters are task-clock/page-fault stand-ins and samples are page \
                         faults, which show the perf plumbing at work but measure no cache event; \
                         no page will be moved",
                        no.why
                    ));
                    let events = if pmus.core_pmu().is_some() {
                        CounterEvents::HARDWARE
                    } else {
                        CounterEvents::SOFTWARE_STAND_INS
                    };
                    (software_page_fault_plan(), events, true)
                }
                Err(no) => bail!(
                    "no precise memory sampling on this machine: {}; {}. rocsd cannot profile \
                     here. To run anyway on software events (no cache data, no migration), set \
                     allow_observe_only = true in rocsd.toml",
                    no.why,
                    no.fix
                ),
            };

        let mut shim_pollute = Vec::new();
        let shim = match ShimClient::open() {
            Ok(client) => {
                // The buffer's colours come from the default knobs; policies that name other
                // colours are told at attach time (the shim has one buffer for everyone).
                let knobs: Knobs = config.knobs.resolve().map_err(|e| anyhow::anyhow!("{e}"))?;
                let pollute = knobs
                    .pollute_colours
                    .resolve(llc.colours())
                    .map_err(|e| anyhow::anyhow!("default knobs: {e}"))?;
                shim_pollute = pollute.clone();
                client
                    .configure(&ShimConfig {
                        colours: llc.colours(),
                        pollute,
                        pool_limit: 1 << 16,
                        prefill: false,
                    })
                    .context("configuring the rocs_shim module")?;
                Some(Arc::new(Mutex::new(client)))
            }
            Err(e) => {
                notices.push(format!(
                    "OBSERVE-AND-PROFILE ONLY: the kernel shim cannot be used ({e}); rocsd profiles \
                     targets and ranks their pages but moves none"
                ));
                None
            }
        };
        let capability = if observe_only {
            Capability::ObserveOnly
        } else if shim.is_none() {
            Capability::ObserveAndProfile
        } else {
            Capability::Full
        };
        Ok(LinuxSetup {
            capability,
            notices,
            llc: Some(llc),
            plan,
            counter_events,
            shim,
            shim_pollute,
            page_shift: page_size.trailing_zeros(),
        })
    }
}

/// Why an operation on this machine failed.
#[derive(Debug, thiserror::Error)]
pub enum LinuxPlatformError {
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Counters(#[from] CountersError),
    #[error(transparent)]
    Shim(#[from] ShimError),
    #[error("the rocs_shim kernel module is not available: pages cannot move")]
    NoShim,
}

/// One target's view of the machine: its own sampler and counters (their perf events are
/// closed when this is dropped) and the shared shim.
pub struct LinuxPlatform {
    sampler: LinuxSampler,
    counters: LinuxCounters,
    shim: Option<Arc<Mutex<ShimClient>>>,
}

impl Sampler for LinuxPlatform {
    type Error = LinuxPlatformError;
    fn start(&mut self, pid: Pid, plan: &SamplingPlan) -> Result<(), Self::Error> {
        Ok(self.sampler.start(pid, plan)?)
    }
    fn stop(&mut self, pid: Pid) -> Result<(), Self::Error> {
        Ok(self.sampler.stop(pid)?)
    }
    fn drain(&mut self, pid: Pid, out: &mut Vec<MemSample>) -> Result<SampleLoss, Self::Error> {
        Ok(self.sampler.drain(pid, out)?)
    }
}

impl Counters for LinuxPlatform {
    type Error = LinuxPlatformError;
    fn read(&mut self, pid: Pid) -> Result<CounterDelta, Self::Error> {
        Ok(self.counters.read(pid)?)
    }
}

impl Remapper for LinuxPlatform {
    type Error = LinuxPlatformError;
    fn migrate(
        &mut self,
        pid: Pid,
        pages: &[VirtPage],
        to: Placement,
    ) -> Result<Vec<PageResult>, Self::Error> {
        let shim = self.shim.as_ref().ok_or(LinuxPlatformError::NoShim)?;
        Ok(shim.lock().unwrap().migrate(pid, pages, to)?)
    }
    fn query(&mut self, pid: Pid, pages: &[VirtPage]) -> Result<Vec<PageResult>, Self::Error> {
        let shim = self.shim.as_ref().ok_or(LinuxPlatformError::NoShim)?;
        Ok(shim.lock().unwrap().query(pid, pages)?)
    }
}

/// What every target task needs from the setup.
struct Shared {
    capability: Capability,
    plan: EventPlan,
    counter_events: CounterEvents,
    shim: Option<Arc<Mutex<ShimClient>>>,
    shim_pollute: Vec<Colour>,
    page_shift: u32,
    colours: u32,
    window: Duration,
    /// Every target shares the machine's LLC: they take turns to profile and search, and
    /// the searching one is judged by their combined throughput.
    group: Mutex<LlcGroup>,
}

/// Start the scanner; it starts and stops the target tasks.
pub fn start(
    daemon: &Arc<Daemon>,
    setup: LinuxSetup,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let shared = Arc::new(Shared {
        capability: setup.capability,
        plan: setup.plan,
        counter_events: setup.counter_events,
        shim: setup.shim,
        shim_pollute: setup.shim_pollute,
        page_shift: setup.page_shift,
        colours: daemon.colours,
        window: Duration::from_millis(daemon.config.window_ms),
        group: Mutex::new(LlcGroup::new()),
    });
    vec![tokio::spawn(scan_loop(daemon.clone(), shared, shutdown))]
}

/// A running target task, as the scanner knows it.
struct Attached {
    policy: String,
    knobs: Knobs,
    host: mpsc::Sender<HostCommand>,
    task: JoinHandle<()>,
}

/// The result of matching one process: its policy name and knobs, if any.
type Verdict = Option<(String, Knobs)>;

/// A scan to make (all processes again?, with these policies), and where to answer: the
/// processes gone, and a verdict for each new or changed one.
type ScanRequest = (
    bool,
    Arc<LoadedPolicies>,
    oneshot::Sender<(Vec<Pid>, Vec<(Pid, String, Verdict)>)>,
);

async fn scan_loop(daemon: Arc<Daemon>, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut policies = daemon.subscribe_policies();
    let mut tick = tokio::time::interval(Duration::from_millis(daemon.config.scan_interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Reading /proc is blocking I/O: one thread of its own does it, for as long as this
    // loop runs (a fixed thread rather than the runtime's pool, so that rocsd's thread count
    // does not wander with the load).
    let (scan_requests, scan_rx) = std::sync::mpsc::channel::<ScanRequest>();
    let scanner_thread = std::thread::Builder::new()
        .name("rocsd-scan".into())
        .spawn(move || {
            let mut scanner = Scanner::new();
            for (all, loaded, reply) in scan_rx {
                let delta = scanner.scan(all);
                let verdicts: Vec<(Pid, String, Verdict)> = delta
                    .check
                    .into_iter()
                    .map(|(pid, comm)| {
                        let v = verdict(&loaded, pid, &comm);
                        (pid, comm, v)
                    })
                    .collect();
                let _ = reply.send((delta.gone, verdicts));
            }
        });
    if let Err(e) = scanner_thread {
        tracing::error!("cannot start the /proc scanner thread: {e}");
        return;
    }
    let mut attached: HashMap<Pid, Attached> = HashMap::new();
    let mut rescan_all = false;
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Ok(()) = policies.changed() => {
                policies.borrow_and_update();
                rescan_all = true;
            }
            _ = tick.tick() => {}
        }
        let loaded = daemon.policies();
        let all = std::mem::take(&mut rescan_all);
        let (reply_tx, reply_rx) = oneshot::channel();
        if scan_requests.send((all, loaded, reply_tx)).is_err() {
            tracing::error!("the /proc scanner thread is gone");
            break;
        }
        let Ok((gone, verdicts)) = reply_rx.await else {
            tracing::error!("the /proc scanner thread failed");
            break;
        };
        for pid in gone {
            if let Some(a) = attached.remove(&pid) {
                let _ = a.host.try_send(HostCommand::Exited { pid });
            }
        }
        for (pid, comm, v) in verdicts {
            let same = match (attached.get(&pid), &v) {
                (Some(a), Some((p, k))) => a.policy == *p && a.knobs == *k,
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            if let Some(a) = attached.remove(&pid) {
                // Its policy no longer applies (or changed): let it go, pages restored.
                let _ = a.host.try_send(HostCommand::Stop { restore: true });
            }
            if let Some((policy, knobs)) = v {
                let (tx, rx) = mpsc::channel(16);
                let task = tokio::spawn(run_target(
                    daemon.clone(),
                    shared.clone(),
                    pid,
                    comm,
                    policy.clone(),
                    knobs.clone(),
                    tx.clone(),
                    rx,
                ));
                attached.insert(
                    pid,
                    Attached {
                        policy,
                        knobs,
                        host: tx,
                        task,
                    },
                );
            }
        }
        attached.retain(|_, a| !a.task.is_finished());
    }
    // Stopping: every target releases what it holds (restoring pages when configured).
    let restore = daemon.config.restore_on_exit;
    for a in attached.values() {
        let _ = a.host.try_send(HostCommand::Stop { restore });
    }
    for (_, a) in attached {
        let _ = a.task.await;
    }
}

/// The machine's LLC group. A task that panicked while holding it left it consistent
/// enough (each call completes its bookkeeping before the next), so a poisoned lock is
/// taken over rather than spreading the panic to every target.
fn lock_group(shared: &Shared) -> std::sync::MutexGuard<'_, LlcGroup> {
    shared
        .group
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Which policy applies to the process, reading only what the policies look at.
fn verdict(loaded: &LoadedPolicies, pid: Pid, comm: &str) -> Verdict {
    let info = process_info(pid, comm, loaded.set.uses_exe(), loaded.set.uses_cgroups());
    loaded
        .matching(&info)
        .map(|(p, k)| (p.name.clone(), k.clone()))
}

#[allow(clippy::too_many_arguments)]
async fn run_target(
    daemon: Arc<Daemon>,
    shared: Arc<Shared>,
    pid: Pid,
    comm: String,
    policy: String,
    mut knobs: Knobs,
    tx: mpsc::Sender<HostCommand>,
    mut rx: mpsc::Receiver<HostCommand>,
) {
    if shared.capability == Capability::ObserveOnly {
        // Software stand-ins are not cache events: thresholds on them mean nothing, so
        // every target goes on to profile its page faults (and nothing is ever moved).
        knobs.min_llc_miss_rate = 0.0;
        knobs.min_mpki = 0.0;
    }
    let mut driver = match TargetDriver::new(
        pid,
        pid,
        comm.clone(),
        policy.clone(),
        knobs,
        shared.page_shift,
        shared.colours,
        shared.capability,
    ) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(pid, comm = %comm, "cannot attach: {e}");
            return;
        }
    };
    let mut platform = LinuxPlatform {
        sampler: LinuxSampler::new(shared.plan.clone()),
        counters: LinuxCounters::new(shared.counter_events),
        shim: shared.shim.clone(),
    };
    tracing::info!(pid, comm = %comm, "attached under policy {policy}");
    if shared.shim.is_some() && driver.controller().pollute_colours() != shared.shim_pollute {
        tracing::warn!(
            pid,
            comm = %comm,
            "policy {policy} names pollute colours {:?}, but the shim's buffer is {:?} (from \
             rocsd.toml's [knobs]): pages go to the shim's",
            driver.controller().pollute_colours(),
            shared.shim_pollute
        );
    }
    daemon.register(
        pid,
        TargetEntry {
            summary: driver.summary(),
            host: tx,
        },
    );
    if daemon.paused() {
        driver.command(&mut platform, Command::Pause);
    }
    lock_group(&shared).join(pid);
    let proc_dir = format!("/proc/{pid}");
    let mut tick = tokio::time::interval(shared.window);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                None => break,
                Some(HostCommand::Exited { .. }) => {
                    driver.exited(&mut platform);
                    break;
                }
                Some(HostCommand::Stop { restore }) => {
                    driver.release(&mut platform, restore);
                    break;
                }
                Some(HostCommand::Query { query, reply, .. }) => {
                    let _ = reply.send(driver.query(query));
                }
                Some(HostCommand::Operator { command, reply, .. }) => {
                    driver.command(&mut platform, command);
                    let _ = reply.send(());
                }
            },
            _ = tick.tick() => {
                // An exit between two scans: wind down now rather than fail a read.
                if !Path::new(&proc_dir).exists() {
                    driver.exited(&mut platform);
                    break;
                }
                if let Some(delta) = driver.end_window(&mut platform) {
                    // No await while the group is held: the other targets' tasks wait
                    // for at most one window's moves.
                    let mut group = lock_group(&shared);
                    group.note_counters(pid, delta);
                    driver.observe_window(&mut platform, delta, &mut group);
                }
                if driver.first_measure() {
                    daemon.note_measured();
                }
            }
        }
    }
    lock_group(&shared).leave(pid);
    daemon.unregister(pid);
    drop(platform);
    tracing::debug!(pid, "released");
}
