//! The linux platform: processes of this machine found by scanning /proc, and one task per
//! LLC domain (a socket, an AMD CCX: the CPUs that share one last-level cache) that runs
//! its targets' windows on one shared tick, over perf events and the kernel shim (when it
//! is loaded), through rocs-linux's `LinuxPlatform`.
//!
//! What can be done here is decided once at start and said once:
//! - no shim: observe and profile only (the controller runs dry: it ranks, never moves);
//! - no hardware PMU: refuse to start, unless `allow_observe_only`; then counting uses
//!   software stand-ins and sampling the page-fault plan, which exercise the perf plumbing
//!   but measure no cache event (labelled "observe-only" everywhere): nothing is searched,
//!   and with the shim only the pages named by `rocsctl confine` or a policy move;
//! - `pmu = "replay:FILE"`: samples and counters from a script (tests; said as a notice);
//! - `prefetchers_off_while_profiling`: each domain's L2 prefetchers off while one of its
//!   targets profiles (said as a notice); refused at start where the CPU or the msr driver
//!   does not allow it.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use rocs_config::daemon::PmuChoice;
use rocs_config::DaemonConfig;
use rocs_core::{CacheGeometry, Colour, Command, Knobs, Pid, State, VirtPage};
use rocs_linux::counters::CounterEvents;
use rocs_linux::plan::software_page_fault_plan;
use rocs_linux::shim::{ShimClient, ShimConfig};
use rocs_linux::{
    detect_geometry, domain_of, llc_domains, mapped_ranges, present_pages, process_cpus,
    select_plan, CpuInfo, EventChoice, EventPlan, KernelVersion, L2PrefetchSwitch, LinuxPlatform,
    PmuInventory, ReplayPmu, ReplayScript,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::domain::{Confine, Domain};
use crate::procscan::{process_info, Scanner};
use crate::state::{Capability, Daemon, HostCommand, LoadedPolicies, TargetEntry};
use crate::targets::Target;

/// What the machine offers, found at start.
pub struct LinuxSetup {
    pub capability: Capability,
    pub notices: Vec<String>,
    pub llc: Option<CacheGeometry>,
    pmu: PmuSource,
    shim: Option<Arc<Mutex<ShimClient>>>,
    /// The colours the shim's pollute buffer was configured with.
    shim_pollute: Vec<Colour>,
    page_shift: u32,
    /// The machine's LLC domains: the CPUs of each.
    domains: Vec<Vec<u32>>,
    /// Each domain's L2 prefetcher switch, with `prefetchers_off_while_profiling`.
    prefetch: Option<Vec<L2PrefetchSwitch>>,
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

        let (pmu, observe_only) = match &config.pmu {
            PmuChoice::Replay(file) => {
                let script = ReplayScript::load(file).context("the replay PMU named by pmu")?;
                notices.push(format!(
                    "REPLAY PMU: samples and counters are played from {} (pmu in rocsd.toml), \
                     not measured on this machine: a test set-up; every search follows the script",
                    file.display()
                ));
                (PmuSource::Replay(Arc::new(script)), false)
            }
            PmuChoice::Auto => {
                let (plan, events, observe_only) =
                    hardware_pmu(config, &cpu, &pmus, kernel, &mut notices)?;
                (PmuSource::Perf(plan, events), observe_only)
            }
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
                        pool_limit: stash_limit(knobs.page_budget),
                        prefill: true,
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
        let domains = llc_domains(Path::new("/sys"));
        let prefetch = if config.prefetchers_off_while_profiling {
            let register = rocs_linux::prefetch::register_here(&cpu)
                .context("prefetchers_off_while_profiling = true in rocsd.toml")?;
            let switches = domains
                .iter()
                .map(|cpus| L2PrefetchSwitch::open(Path::new("/dev/cpu"), cpus, register))
                .collect::<Result<Vec<_>, _>>()
                .context("prefetchers_off_while_profiling = true in rocsd.toml")?;
            notices.push(format!(
                "L2 PREFETCHERS OFF WHILE PROFILING: while a target profiles, the L2 \
                 prefetchers of the CPUs of its LLC domain it may run on are off (MSR {:#x}, \
                 bits {:#x}), for every program on them, and back as they were after \
                 (prefetchers_off_while_profiling in rocsd.toml)",
                register.msr, register.off_bits
            ));
            Some(switches)
        } else {
            None
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
            pmu,
            shim,
            shim_pollute,
            page_shift: page_size.trailing_zeros(),
            domains,
            prefetch,
        })
    }
}

/// Where samples and counters come from.
#[derive(Clone)]
enum PmuSource {
    /// perf events: the sampling plan and the counting events.
    Perf(EventPlan, CounterEvents),
    /// A replay script (pmu = "replay:FILE").
    Replay(Arc<ReplayScript>),
}

/// The hardware's sampling plan and counting events; without precise sampling, software
/// stand-ins when `allow_observe_only` (the third value: observe-only), else an error.
fn hardware_pmu(
    config: &DaemonConfig,
    cpu: &CpuInfo,
    pmus: &PmuInventory,
    kernel: KernelVersion,
    notices: &mut Vec<String>,
) -> anyhow::Result<(EventPlan, CounterEvents, bool)> {
    match select_plan(cpu, pmus, kernel, EventChoice::Auto) {
        Ok(plan) => Ok((plan, CounterEvents::HARDWARE, false)),
        Err(no) if config.allow_observe_only => {
            notices.push(format!(
                "OBSERVE-ONLY: no precise memory sampling here ({}). Running on software \
                 events: counters are task-clock/page-fault stand-ins and samples are page \
                 faults, which show the perf plumbing at work but measure no cache event; \
                 nothing is searched, and only pages named by `rocsctl confine` or a \
                 policy's confine mappings move",
                no.why
            ));
            let events = if pmus.core_pmu().is_some() {
                CounterEvents::HARDWARE
            } else {
                CounterEvents::SOFTWARE_STAND_INS
            };
            Ok((software_page_fault_plan(), events, true))
        }
        Err(no) => bail!(
            "no precise memory sampling on this machine: {}; {}. rocsd cannot profile \
             here. To run anyway on software events (no cache data, no migration), set \
             allow_observe_only = true in rocsd.toml",
            no.why,
            no.fix
        ),
    }
}

/// The shim's stash bound per NUMA node. Half of it is kept filled with frames of the
/// pollute colours (PREFILL, topped up in the background after every move to the buffer):
/// two search steps' worth (a step moves at most the page budget), so that a step takes its
/// frames from the stash rather than finding each one the hard way while the target waits,
/// even when the top-up of the step before has not finished (the VM suite saw the stash
/// sized to one step fall behind: MIGRATE only 1.06 times move_pages(2)).
fn stash_limit(page_budget: u32) -> u64 {
    (4 * u64::from(page_budget)).min(rocs_linux::shim::abi::MAX_POOL_LIMIT)
}

/// What every domain's task needs from the setup.
struct Shared {
    capability: Capability,
    pmu: PmuSource,
    shim: Option<Arc<Mutex<ShimClient>>>,
    shim_pollute: Vec<Colour>,
    page_shift: u32,
    colours: u32,
    /// The LLC's geometry, if known.
    llc: Option<CacheGeometry>,
    window: Duration,
}

/// Start one task per LLC domain, and the scanner that hands them their targets.
pub fn start(
    daemon: &Arc<Daemon>,
    setup: LinuxSetup,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let shared = Arc::new(Shared {
        capability: setup.capability,
        pmu: setup.pmu,
        shim: setup.shim,
        shim_pollute: setup.shim_pollute,
        page_shift: setup.page_shift,
        colours: daemon.colours,
        llc: daemon.llc,
        window: Duration::from_millis(daemon.config.window_ms),
    });
    let cpus = setup.domains;
    let mut prefetch = setup.prefetch.map(Vec::into_iter);
    tracing::info!(
        "{} LLC domain(s): {}",
        cpus.len(),
        cpus.iter()
            .map(|d| format!("CPUs {d:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut tasks = Vec::new();
    let mut hosts = Vec::new();
    for index in 0..cpus.len() {
        let (tx, rx) = mpsc::channel(64);
        let mut host = DomainHost {
            daemon: daemon.clone(),
            shared: shared.clone(),
            index,
            tx: tx.clone(),
            domain: Domain::new(),
            named: HashMap::new(),
            platform: match &shared.pmu {
                PmuSource::Perf(plan, events) => {
                    LinuxPlatform::new(plan.clone(), *events, shared.shim.clone())
                }
                PmuSource::Replay(script) => LinuxPlatform::with_replay(
                    ReplayPmu::new(script.clone(), 1 << shared.page_shift),
                    shared.shim.clone(),
                ),
            },
        };
        if let Some(mut switch) = prefetch.as_mut().and_then(Iterator::next) {
            recover_prefetchers(&mut switch, &daemon.config.socket);
            host.platform.switch_prefetchers(switch);
        }
        tasks.push(tokio::spawn(host.run(rx)));
        hosts.push(tx);
    }
    let domains = Domains { cpus, hosts };
    tasks.push(tokio::spawn(scan_loop(daemon.clone(), domains, shutdown)));
    tasks
}

/// Keep the domain's prefetcher ledger beside the control socket (in /run/rocs under
/// systemd), and first give back the prefetchers a rocsd killed while a target profiled
/// left off there.
fn recover_prefetchers(switch: &mut L2PrefetchSwitch, socket: &Path) {
    let ledger = socket
        .parent()
        .unwrap_or(Path::new("/run/rocs"))
        .join("prefetchers");
    match switch.recover(&ledger) {
        Ok(cpus) if cpus.is_empty() => {}
        Ok(cpus) => tracing::warn!(
            "the L2 prefetchers of CPUs {cpus:?} were left off by a rocsd that stopped while a \
             target profiled ({}): given back as they were",
            ledger.display()
        ),
        Err(e) => tracing::error!("giving back the L2 prefetchers an earlier rocsd left off: {e}"),
    }
}

/// The machine's LLC domains and the task that serves each.
struct Domains {
    cpus: Vec<Vec<u32>>,
    hosts: Vec<mpsc::Sender<HostCommand>>,
}

impl Domains {
    /// The domain a process runs in now.
    fn of(&self, pid: Pid) -> usize {
        let (allowed, last) = process_cpus(Path::new("/proc"), pid);
        domain_of(&self.cpus, &allowed, last)
    }
}

/// A target as the scanner knows it.
struct Attached {
    policy: String,
    knobs: Knobs,
    confine: Vec<String>,
    domain: usize,
}

/// The result of matching one process: its policy's name, knobs and mappings to confine,
/// if any.
type Verdict = Option<(String, Knobs, Vec<String>)>;

/// A scan to make (all processes again?, with these policies), and where to answer: the
/// processes gone, and a verdict for each new or changed one.
type ScanRequest = (
    bool,
    Arc<LoadedPolicies>,
    oneshot::Sender<(Vec<Pid>, Vec<(Pid, String, Verdict)>)>,
);

async fn scan_loop(daemon: Arc<Daemon>, domains: Domains, mut shutdown: watch::Receiver<bool>) {
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
                let _ = domains.hosts[a.domain].try_send(HostCommand::Exited { pid });
            }
        }
        for (pid, comm, v) in verdicts {
            let same = match (attached.get(&pid), &v) {
                (Some(a), Some((p, k, c))) => a.policy == *p && a.knobs == *k && a.confine == *c,
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            if let Some(a) = attached.remove(&pid) {
                // Its policy no longer applies (or changed): let it go, pages restored.
                let release = HostCommand::Release { pid, restore: true };
                let _ = domains.hosts[a.domain].send(release).await;
            }
            if let Some((policy, knobs, confine)) = v {
                let domain = domains.of(pid);
                let attach = HostCommand::Attach {
                    pid,
                    comm,
                    policy: policy.clone(),
                    knobs: Box::new(knobs.clone()),
                    confine: confine.clone(),
                };
                if domains.hosts[domain].send(attach).await.is_ok() {
                    let a = Attached {
                        policy,
                        knobs,
                        confine,
                        domain,
                    };
                    attached.insert(pid, a);
                }
            }
        }
    }
    // Stopping: every domain releases what it holds (restoring pages when configured).
    let restore = daemon.config.restore_on_exit;
    for host in &domains.hosts {
        let _ = host.send(HostCommand::Stop { restore }).await;
    }
}

/// Which policy applies to the process, reading only what the policies look at.
fn verdict(loaded: &LoadedPolicies, pid: Pid, comm: &str) -> Verdict {
    let info = process_info(pid, comm, loaded.set.uses_exe(), loaded.set.uses_cgroups());
    loaded
        .matching(&info)
        .map(|(p, k)| (p.name.clone(), k.clone(), p.confine.clone()))
}

/// The task of one LLC domain: its targets' windows end together, on one tick.
struct DomainHost {
    daemon: Arc<Daemon>,
    shared: Arc<Shared>,
    index: usize,
    tx: mpsc::Sender<HostCommand>,
    domain: Domain,
    platform: LinuxPlatform,
    /// Targets whose policy names mappings to confine.
    named: HashMap<Pid, NamedMappings>,
}

/// A target's mappings to confine by name. Their pages are asked for once they are present
/// (a page never touched has nothing to move), and a page asked for is not asked again
/// until the mappings change, so that a page the shim refuses is not retried every window.
struct NamedMappings {
    patterns: Vec<String>,
    /// The mappings' address ranges at the last look.
    ranges: Vec<(u64, u64)>,
    asked: BTreeSet<VirtPage>,
    /// Windows since the last look for newly present pages.
    windows: u32,
}

/// Windows between two looks for pages of named mappings that became present (the
/// mappings themselves are read every window: a change is looked at at once).
const NAMED_LOOK_WINDOWS: u32 = 10;

/// Most pages taken from named mappings in one look (16 GiB of 4 KiB pages).
const MAX_NAMED_PAGES: usize = 1 << 22;

impl DomainHost {
    async fn run(mut self, mut rx: mpsc::Receiver<HostCommand>) {
        let mut tick = tokio::time::interval(self.shared.window);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    None => break,
                    Some(HostCommand::Stop { restore }) => {
                        self.release_all(restore);
                        break;
                    }
                    Some(cmd) => self.command(cmd),
                },
                _ = tick.tick() => self.end_window(),
            }
        }
        tracing::debug!(domain = self.index, "LLC domain released");
    }

    fn command(&mut self, cmd: HostCommand) {
        match cmd {
            HostCommand::Attach {
                pid,
                comm,
                policy,
                knobs,
                confine,
            } => {
                self.attach(pid, comm, policy, *knobs);
                if !confine.is_empty() && self.domain.contains(pid) {
                    let named = NamedMappings {
                        patterns: confine,
                        ranges: Vec::new(),
                        asked: BTreeSet::new(),
                        windows: 0,
                    };
                    self.named.insert(pid, named);
                    self.confine_mappings(pid);
                }
            }
            HostCommand::Confine { pid, what, reply } => {
                let _ = reply.send(self.domain.confine(&mut self.platform, pid, what));
            }
            HostCommand::Query { pid, query, reply } => {
                let _ = reply.send(self.domain.query(pid, query));
            }
            HostCommand::Operator {
                pid,
                command,
                reply,
            } => {
                self.domain.command(&mut self.platform, pid, command);
                let _ = reply.send(());
            }
            HostCommand::Exited { pid } => {
                self.named.remove(&pid);
                if self.domain.exited(&mut self.platform, pid).is_some() {
                    self.forget(pid);
                    self.daemon.unregister(pid);
                }
            }
            HostCommand::Release { pid, restore } => {
                self.named.remove(&pid);
                if self
                    .domain
                    .release(&mut self.platform, pid, restore)
                    .is_some()
                {
                    self.forget(pid);
                    self.daemon.unregister(pid);
                }
            }
            HostCommand::Stop { .. } => {}
        }
    }

    fn attach(&mut self, pid: Pid, comm: String, policy: String, mut knobs: Knobs) {
        let shared = &self.shared;
        if shared.shim.is_none() {
            knobs.dry_run = true;
        }
        if shared.capability == Capability::ObserveOnly {
            // Software stand-ins are not cache events: thresholds on them mean nothing, so
            // every target goes on to profile its page faults (and nothing is ever moved).
            knobs.min_llc_miss_rate = 0.0;
            knobs.min_mpki = 0.0;
        }
        let made = Target::new(
            pid,
            pid,
            comm.clone(),
            policy.clone(),
            knobs,
            shared.page_shift,
            shared.colours,
            shared.capability,
        );
        let (target, mut controller) = match made {
            Ok(made) => made,
            Err(e) => {
                tracing::warn!(pid, comm = %comm, "cannot attach: {e}");
                return;
            }
        };
        if let Some(llc) = &shared.llc {
            controller.set_llc(llc);
        }
        controller.set_sampling_pauses_prefetch(self.platform.pauses_prefetch());
        tracing::info!(pid, comm = %comm, domain = self.index, "attached under policy {policy}");
        if shared.shim.is_some() && controller.pollute_colours() != shared.shim_pollute {
            tracing::warn!(
                pid,
                comm = %comm,
                "policy {policy} names pollute colours {:?}, but the shim's buffer is {:?} (from \
                 rocsd.toml's [knobs]): pages go to the shim's",
                controller.pollute_colours(),
                shared.shim_pollute
            );
        }
        self.daemon.register(
            pid,
            TargetEntry {
                summary: target.summary(),
                host: self.tx.clone(),
            },
        );
        self.domain.attach(target, controller);
        if self.daemon.paused() {
            self.domain.command(&mut self.platform, pid, Command::Pause);
        }
    }

    /// Close `pid`'s events; were it profiling, its domain's prefetchers no longer wait for it.
    fn forget(&mut self, pid: Pid) {
        if let Err(e) = self.platform.forget(pid) {
            tracing::error!(pid, domain = self.index, "{e}");
        }
    }

    /// End the window of every target of the domain at once.
    fn end_window(&mut self) {
        // An exit between two scans: wind down now rather than fail a read.
        let gone: Vec<Pid> = self
            .domain
            .targets()
            .map(|t| t.pid)
            .filter(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            .collect();
        for pid in gone {
            self.command(HostCommand::Exited { pid });
        }
        if self.domain.is_empty() {
            return;
        }
        let named: Vec<Pid> = self.named.keys().copied().collect();
        for pid in named {
            self.confine_mappings(pid);
        }
        let measured = self.domain.end_window(&mut self.platform, &|_, _| false);
        for _ in 0..measured {
            self.daemon.note_measured();
        }
        self.daemon
            .add_sampling_cpu(self.domain.take_sampling_cpu());
    }

    /// Confine the pages of the target's named mappings that are present and were not
    /// asked for yet. Not while it is paused (the operator wants its pages where they are),
    /// nor when it runs dry (no page of it moves; `rocsctl status` says why).
    fn confine_mappings(&mut self, pid: Pid) {
        let Some(named) = self.named.get_mut(&pid) else {
            return;
        };
        if self
            .domain
            .controller(pid)
            .is_none_or(|c| c.state() == State::Paused || c.knobs().dry_run)
        {
            return;
        }
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        let patterns = &named.patterns;
        let ranges = mapped_ranges(&maps, |name| {
            patterns.iter().any(|p| rocs_config::glob_match(p, name))
        });
        if ranges != named.ranges {
            named.ranges = ranges;
            named.asked.clear();
        } else if named.windows < NAMED_LOOK_WINDOWS {
            named.windows += 1;
            return;
        }
        named.windows = 0;
        let Ok(present) = present_pages(pid, &named.ranges, self.shared.page_shift) else {
            return;
        };
        let pages: Vec<VirtPage> = present
            .into_iter()
            .filter(|p| !named.asked.contains(p))
            .take(MAX_NAMED_PAGES)
            .collect();
        if pages.is_empty() {
            return;
        }
        named.asked.extend(pages.iter().copied());
        match self
            .domain
            .confine(&mut self.platform, pid, Confine::Pages(pages))
        {
            Ok(r) => tracing::info!(
                pid,
                "policy mappings {:?}: {} of {} confined",
                self.named[&pid].patterns,
                r.confined,
                rocs_config::report::count(r.pages, "page", "pages")
            ),
            Err(e) => tracing::warn!(pid, "policy mappings not confined: {}", e.message),
        }
    }

    fn release_all(&mut self, restore: bool) {
        let pids: Vec<Pid> = self.domain.targets().map(|t| t.pid).collect();
        for pid in pids {
            self.command(HostCommand::Release { pid, restore });
        }
    }
}
