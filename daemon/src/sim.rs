//! The sim platform: each configured workload runs on its own simulated machine in one
//! task; its processes become targets with synthetic pids, matched by the same policies as
//! real processes (comm = the workload process's name, exe = /sim/WORKLOAD/PROCESS, cgroup
//! = /rocs-sim/WORKLOAD). The machine advances one window at a time on a blocking thread,
//! with a pause between windows so that the demo does not take a whole core. When a
//! workload ends, its targets exit and the workload starts again with the next seed, so
//! targets come and go as real processes do.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rocs_config::{parse_proc_cgroup, ConfigError, DaemonConfig, ProcessInfo, SimWorkload};
use rocs_core::{CacheGeometry, Command, Pid};
use rocs_sim::{Machine, MachineSpec, Workload};
use tokio::sync::{mpsc, watch};

use crate::domain::Domain;
use crate::state::{Capability, Daemon, HostCommand, LoadedPolicies, TargetEntry};
use crate::targets::Target;

/// Synthetic pids, unique across the daemon's simulated machines.
static NEXT_PID: AtomicU32 = AtomicU32::new(1000);

/// The machine spec and workloads named in the configuration, resolved.
pub struct SimSetup {
    pub profile: MachineSpec,
    pub workloads: Vec<(SimWorkload, Workload)>,
}

impl SimSetup {
    /// Resolve every name now, so that a misspelt one stops rocsd at start with its place.
    pub fn resolve(config: &DaemonConfig) -> anyhow::Result<SimSetup> {
        let place = |at: Option<&rocs_config::Location>, e: String| -> anyhow::Error {
            match at {
                Some(at) => ConfigError::at(at.clone(), e).into(),
                None => anyhow::anyhow!(e),
            }
        };
        let profile = MachineSpec::resolve(&config.sim.machine)
            .map_err(|e| place(config.sim.machine_at.as_ref(), e.to_string()))?;
        if config.sim.workloads.is_empty() {
            anyhow::bail!(
                "{}: the sim platform needs at least one [[sim.workload]] (name = \"art-like\")",
                config
                    .file
                    .as_ref()
                    .map_or("rocsd.toml".into(), |f| f.display().to_string())
            );
        }
        let mut workloads = Vec::new();
        for w in &config.sim.workloads {
            let mut wl =
                Workload::resolve(&w.name).map_err(|e| place(Some(&w.at), e.to_string()))?;
            if let Some(s) = w.scale {
                wl = wl.scaled(s);
            }
            workloads.push((w.clone(), wl));
        }
        Ok(SimSetup { profile, workloads })
    }

    pub fn geometry(&self) -> CacheGeometry {
        self.profile.llc_geometry()
    }
}

/// Start one task per workload. Returns their join handles.
pub fn start(
    daemon: &Arc<Daemon>,
    setup: SimSetup,
    shutdown: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let profile = Arc::new(setup.profile);
    setup
        .workloads
        .into_iter()
        .enumerate()
        .map(|(i, (spec, workload))| {
            let host = SimHost {
                daemon: daemon.clone(),
                profile: profile.clone(),
                seed: spec
                    .seed
                    .unwrap_or(daemon.config.sim.seed.wrapping_add(i as u64)),
                workload,
            };
            tokio::spawn(host.run(shutdown.clone()))
        })
        .collect()
}

struct SimHost {
    daemon: Arc<Daemon>,
    profile: Arc<MachineSpec>,
    seed: u64,
    workload: Workload,
}

/// One run of the workload on a fresh machine.
struct Run {
    machine: Machine,
    /// (shown pid, machine pid, process name) of every process.
    procs: Vec<(Pid, Pid, String)>,
    /// Every process of the machine shares its LLC: one domain, whose targets take turns
    /// to profile and search, the searching one judged by their combined throughput.
    domain: Domain,
}

impl SimHost {
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let name = self.workload.name.clone();
        let (tx, mut rx) = mpsc::channel::<HostCommand>(64);
        let mut policies = self.daemon.subscribe_policies();
        let pause = Duration::from_millis(self.daemon.config.sim.pause_ms);
        let cpu_share = self.daemon.config.sim.cpu_share;
        let window = self.daemon.config.sim.window_cycles;
        let mut generation = 0u64;
        'runs: loop {
            let machine = match Machine::new(
                &self.profile,
                &self.workload,
                self.seed.wrapping_add(generation),
            )
            .with_context(|| format!("starting simulated workload {name}"))
            {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!("{e:#}");
                    return;
                }
            };
            let procs: Vec<(Pid, Pid, String)> = machine
                .pids()
                .into_iter()
                .zip(self.workload.processes.iter().map(|p| p.name.clone()))
                .map(|(mpid, pname)| (NEXT_PID.fetch_add(1, Ordering::Relaxed), mpid, pname))
                .collect();
            let mut domain = Domain::new();
            // Messages about the machine's other processes (whose search a target waits
            // for) name them by the pids users see.
            domain.set_shown_pids(procs.iter().map(|&(shown, mp, _)| (mp, shown)).collect());
            let mut run = Run {
                machine,
                procs,
                domain,
            };
            let loaded = self.daemon.policies();
            self.attach(&mut run, &loaded, &tx);
            let mut next = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    biased;
                    _ = shutdown.changed() => {
                        self.release_all(&mut run, self.daemon.config.restore_on_exit);
                        return;
                    }
                    Some(cmd) = rx.recv() => match cmd {
                        HostCommand::Stop { restore } => {
                            self.release_all(&mut run, restore);
                            return;
                        }
                        other => self.command(&mut run, other),
                    },
                    Ok(()) = policies.changed() => {
                        let loaded = policies.borrow_and_update().clone();
                        self.reattach(&mut run, &loaded, &tx);
                    }
                    _ = tokio::time::sleep_until(next) => {
                        // The simulation is CPU work: run it off the runtime's workers.
                        let began = std::time::Instant::now();
                        let Run { machine, procs, domain } = run;
                        let (machine, domain, alive, measured) = match tokio::task::spawn_blocking(move || {
                            let mut machine = machine;
                            let mut domain = domain;
                            let alive = machine.run_for(window);
                            let measured = domain.end_window(&mut machine, &|_, _| false);
                            (machine, domain, alive, measured)
                        }).await {
                            Ok(r) => r,
                            Err(e) => {
                                tracing::error!("simulated workload {name} failed: {e}");
                                return;
                            }
                        };
                        run = Run { machine, procs, domain };
                        for _ in 0..measured {
                            self.daemon.note_measured();
                        }
                        self.daemon.add_sampling_cpu(run.domain.take_sampling_cpu());
                        // A process that ran to its end exits (as it would on Linux),
                        // while the others run on: its controller leaves the LLC's domain
                        // and gives back the turn if it held it.
                        if alive {
                            let finished = run.machine.finished_pids();
                            let gone: Vec<Pid> = run
                                .domain
                                .targets()
                                .filter(|t| finished.contains(&t.platform_pid))
                                .map(|t| t.pid)
                                .collect();
                            for pid in gone {
                                run.domain.exited(&mut run.machine, pid);
                                self.daemon.unregister(pid);
                            }
                        }
                        if !alive {
                            tracing::info!("simulated workload {name} finished; starting it again");
                            let pids: Vec<Pid> = run.domain.targets().map(|t| t.pid).collect();
                            for pid in pids {
                                run.domain.exited(&mut run.machine, pid);
                                self.daemon.unregister(pid);
                            }
                            generation += 1;
                            tokio::time::sleep(pause).await;
                            continue 'runs;
                        }
                        // Rest so that this machine uses at most `cpu_share` of a core.
                        let rest = began.elapsed().mul_f64(1.0 / cpu_share - 1.0).max(pause);
                        next = tokio::time::Instant::now() + rest;
                    }
                }
            }
        }
    }

    fn info(&self, pid: Pid, pname: &str) -> ProcessInfo {
        let w = &self.workload.name;
        ProcessInfo {
            pid,
            comm: pname.chars().take(15).collect(),
            exe: Some(format!("/sim/{w}/{pname}").into()),
            cgroups: parse_proc_cgroup(&format!("0::/rocs-sim/{w}\n")),
        }
    }

    fn attach(&self, run: &mut Run, loaded: &LoadedPolicies, tx: &mpsc::Sender<HostCommand>) {
        let geometry = run.machine.llc_geometry();
        for (pid, mpid, pname) in run.procs.clone() {
            if run.domain.contains(pid) {
                continue;
            }
            let info = self.info(pid, &pname);
            let Some((policy, knobs)) = loaded.matching(&info) else {
                continue;
            };
            let made = Target::new(
                pid,
                mpid,
                info.comm.clone(),
                policy.name.clone(),
                knobs.clone(),
                run.machine.page_shift(),
                geometry.colours(),
                Capability::Full,
            );
            let (target, mut controller) = match made {
                Ok(made) => made,
                Err(e) => {
                    tracing::warn!(pid, comm = %info.comm, "cannot attach: {e}");
                    continue;
                }
            };
            controller.set_llc(&geometry);
            controller.set_sampling_pauses_prefetch(run.machine.pauses_prefetch_while_sampling());
            // The machine's pollute buffer follows the policy of its targets.
            if let Err(e) = run
                .machine
                .set_pollute_colours(controller.pollute_colours())
            {
                tracing::warn!(pid, "pollute colours: {e}");
            }
            tracing::info!(
                pid,
                comm = %info.comm,
                "attached simulated process of {} under policy {}",
                self.workload.name,
                policy.name
            );
            self.daemon.register(
                pid,
                TargetEntry {
                    summary: target.summary(),
                    host: tx.clone(),
                },
            );
            run.domain.attach(target, controller);
            if self.daemon.paused() {
                run.domain.command(&mut run.machine, pid, Command::Pause);
            }
        }
    }

    /// Apply new policies: targets whose policy or knobs changed are released (pages
    /// restored) and attached again; processes that no longer match are let go.
    fn reattach(&self, run: &mut Run, loaded: &LoadedPolicies, tx: &mpsc::Sender<HostCommand>) {
        let mut dropped = Vec::new();
        for t in run.domain.targets() {
            let pname = run
                .procs
                .iter()
                .find(|(p, _, _)| *p == t.pid)
                .map(|(_, _, n)| n.clone())
                .unwrap_or_default();
            let same = loaded
                .matching(&self.info(t.pid, &pname))
                .is_some_and(|(p, k)| p.name == t.policy && k == t.given_knobs());
            if !same {
                dropped.push(t.pid);
            }
        }
        for pid in dropped {
            tracing::info!(pid, "policy changed: releasing the target");
            run.domain.release(&mut run.machine, pid, true);
            self.daemon.unregister(pid);
        }
        self.attach(run, loaded, tx);
    }

    fn command(&self, run: &mut Run, cmd: HostCommand) {
        match cmd {
            HostCommand::Query { pid, query, reply } => {
                let _ = reply.send(run.domain.query(pid, query));
            }
            HostCommand::Operator {
                pid,
                command,
                reply,
            } => {
                run.domain.command(&mut run.machine, pid, command);
                let _ = reply.send(());
            }
            HostCommand::Exited { pid } => {
                if run.domain.exited(&mut run.machine, pid).is_some() {
                    self.daemon.unregister(pid);
                }
            }
            HostCommand::Release { pid, restore } => {
                if run.domain.release(&mut run.machine, pid, restore).is_some() {
                    self.daemon.unregister(pid);
                }
            }
            HostCommand::Confine { pid, what, reply } => {
                let _ = reply.send(run.domain.confine(&mut run.machine, pid, what));
            }
            // A simulated machine attaches its own processes.
            HostCommand::Attach { .. } => {}
            // Stop ends the loop before it gets here.
            HostCommand::Stop { .. } => {}
        }
    }

    fn release_all(&self, run: &mut Run, restore: bool) {
        let pids: Vec<Pid> = run.domain.targets().map(|t| t.pid).collect();
        for pid in pids {
            run.domain.release(&mut run.machine, pid, restore);
            self.daemon.unregister(pid);
        }
    }
}
