//! rocsd: the rocs daemon.
//!
//! Policies opt workloads in; each matched process becomes a target of the engine of its LLC
//! domain, whose task drives the platform (this machine, or simulated machines for the
//! demo); the control socket lets rocsctl inspect and steer it; systemd is told when it is
//! ready, kept alive by the watchdog, and told when it stops.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use rocs_config::{DaemonConfig, Platform};
use rocs_core::CacheGeometry;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod domain;
mod linux;
mod metrics;
mod notify;
mod procscan;
mod server;
mod sim;
mod state;
mod targets;

use state::{Capability, Daemon, HostCommand, LoadedPolicies};

#[derive(Parser)]
#[command(
    name = "rocsd",
    version,
    about = "The rocs daemon: keeps cache-polluting pages out of the way"
)]
struct Args {
    /// rocsd.toml (default /etc/rocs/rocsd.toml; built-in defaults when that is missing).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override the configured platform: linux or sim.
    #[arg(long)]
    platform: Option<Platform>,
    /// Override the configured control socket path.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Check the configuration and policies, print what would run, and exit.
    #[arg(long)]
    check: bool,
}

/// How long targets get to release everything when rocsd stops (systemd waits longer).
const STOP_BUDGET: Duration = Duration::from_secs(4);

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        // Scans and simulated windows use the blocking pool briefly; idle threads go soon.
        .thread_keep_alive(Duration::from_secs(1))
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rocsd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            for (i, line) in format!("{e:#}").lines().enumerate() {
                if i == 0 {
                    tracing::error!("{line}");
                } else {
                    tracing::error!("  {line}");
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// Logs for the journal: under systemd (JOURNAL_STREAM set) no timestamps (the journal adds
/// its own) and no colours; on a terminal, both.
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("ROCSD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr);
    if journal {
        builder.without_time().with_ansi(false).init();
    } else {
        use std::io::IsTerminal;
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

fn load_config(args: &Args) -> anyhow::Result<DaemonConfig> {
    let mut config = match &args.config {
        Some(path) => DaemonConfig::load(path)?,
        None => {
            let path = PathBuf::from(rocs_config::daemon::DEFAULT_CONFIG);
            if path.exists() {
                DaemonConfig::load(&path)?
            } else {
                tracing::info!("{} does not exist: using built-in defaults", path.display());
                DaemonConfig::default()
            }
        }
    };
    if let Some(p) = args.platform {
        config.platform = p;
    }
    if let Some(s) = &args.socket {
        config.socket = s.clone();
    }
    Ok(config)
}

/// The platform's own setup, found before anything starts.
enum HostSetup {
    Sim(sim::SimSetup),
    Linux(linux::LinuxSetup),
}

/// What the platform can do here.
struct Prepared {
    setup: HostSetup,
    capability: Capability,
    /// What the operator should know of the platform.
    notices: Vec<String>,
    llc: Option<CacheGeometry>,
}

fn prepare(config: &DaemonConfig) -> anyhow::Result<Prepared> {
    Ok(match config.platform {
        Platform::Sim => {
            let setup = sim::SimSetup::resolve(config)?;
            let llc = Some(setup.geometry());
            let mut notices = Vec::new();
            if config.geometry.is_some() {
                notices.push(
                    "[geometry] is ignored on the sim platform: the machine spec gives the LLC"
                        .to_string(),
                );
            }
            Prepared {
                setup: HostSetup::Sim(setup),
                capability: Capability::Full,
                notices,
                llc,
            }
        }
        Platform::Linux => {
            let setup = linux::LinuxSetup::probe(config)?;
            Prepared {
                capability: setup.capability,
                notices: setup.notices.clone(),
                llc: setup.llc,
                setup: HostSetup::Linux(setup),
            }
        }
    })
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = load_config(&args)?;
    let prepared = prepare(&config)?;
    for n in &prepared.notices {
        // Said once, here; `rocsctl status` repeats them.
        tracing::warn!("{n}");
    }
    let colours = prepared.llc.map_or(1, |g| g.colours());
    let policies = LoadedPolicies::load(&config, colours)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("the policies cannot be used")?;
    if args.check {
        print_check(&config, prepared.capability, colours, &policies);
        return Ok(());
    }
    if policies.set.is_empty() {
        tracing::warn!(
            "no policies in {}: rocsd attaches to nothing until one is added and reloaded",
            config.policy_dir.display()
        );
    }
    let capability = prepared.capability;
    let daemon = Daemon::new(config, capability, prepared.notices, prepared.llc, policies);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (socket_file, tasks) = start_serving(&daemon, &stop_rx).await?;
    let hosts = match prepared.setup {
        HostSetup::Sim(setup) => sim::start(&daemon, setup, stop_rx.clone()),
        HostSetup::Linux(setup) => linux::start(&daemon, setup, stop_rx.clone()),
    };

    let notifier = notify::Notifier::from_env();
    tracing::info!(
        "rocsd {} serving {} on the {} platform ({}), {} policies",
        env!("CARGO_PKG_VERSION"),
        daemon.config.socket.display(),
        daemon.config.platform,
        capability.as_str(),
        daemon.policies().set.policies().len()
    );
    notifier.notify(&format!(
        "READY=1\nSTATUS=serving {} ({})",
        daemon.config.socket.display(),
        capability.as_str()
    ));
    serve_signals(&daemon, &notifier).await?;

    notifier.notify("STOPPING=1");
    stop(&daemon, stop_tx, hosts.into_iter().chain(tasks)).await;
    drop(socket_file);
    tracing::info!(
        "stopped; {} targets were attached since start",
        daemon
            .targets_seen
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}

/// `rocsd --check`: what would run, on one line.
fn print_check(
    config: &DaemonConfig,
    capability: Capability,
    colours: u32,
    policies: &LoadedPolicies,
) {
    println!(
        "configuration {}: platform {}, capability {}, {} colours, policies: {}",
        config
            .file
            .as_ref()
            .map_or("(defaults)".into(), |f| f.display().to_string()),
        config.platform,
        capability.as_str(),
        colours,
        policies
            .summaries()
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Bind the control socket (and the metrics endpoint when configured) and serve them until
/// `stop` turns true. The socket file goes when the returned guard is dropped.
async fn start_serving(
    daemon: &Arc<Daemon>,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<(server::SocketFile, Vec<JoinHandle<()>>)> {
    let listener = server::bind(
        &daemon.config.socket,
        daemon.config.socket_mode,
        daemon.rocs_gid,
    )?;
    let socket_file = server::SocketFile(daemon.config.socket.clone());
    let mut tasks = vec![tokio::spawn(server::serve(
        listener,
        daemon.clone(),
        stop.clone(),
    ))];
    if let Some(addr) = daemon.config.metrics {
        let l = metrics::bind(addr).await?;
        // The address bound, not the one asked for: port 0 asks for any free port.
        let bound = l
            .local_addr()
            .context("reading the metrics address bound")?;
        tracing::info!("metrics on http://{bound}/metrics");
        tasks.push(tokio::spawn(metrics::serve(
            l,
            daemon.clone(),
            stop.clone(),
        )));
    }
    Ok((socket_file, tasks))
}

/// Reload on SIGHUP and keep systemd's watchdog fed, until SIGTERM or SIGINT.
async fn serve_signals(daemon: &Daemon, notifier: &notify::Notifier) -> anyhow::Result<()> {
    let watchdog = notify::Notifier::watchdog_interval();
    let mut watchdog_tick =
        tokio::time::interval(watchdog.map_or(Duration::from_secs(3600), |w| w / 2));
    let mut sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    loop {
        tokio::select! {
            _ = sighup.recv() => {
                tracing::info!("SIGHUP: reloading policies");
                notifier.notify("RELOADING=1");
                let r = daemon.reload().await;
                notifier.notify(&format!(
                    "READY=1\nSTATUS={}",
                    if r.is_ok() { "policies reloaded" } else { "policy reload refused; previous policies in force" }
                ));
            }
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); return Ok(()); }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); return Ok(()); }
            _ = watchdog_tick.tick() => {
                if watchdog.is_some() {
                    notifier.notify("WATCHDOG=1");
                }
            }
        }
    }
}

/// No new clients or targets; every host releases its targets (restoring pages when
/// configured) within the budget.
async fn stop(
    daemon: &Daemon,
    stop_tx: watch::Sender<bool>,
    tasks: impl Iterator<Item = JoinHandle<()>>,
) {
    let restore = daemon.config.restore_on_exit;
    let _ = stop_tx.send(true);
    for host in daemon.hosts() {
        let _ = host.try_send(HostCommand::Stop { restore });
    }
    let deadline = tokio::time::Instant::now() + STOP_BUDGET;
    for task in tasks {
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            tracing::warn!("a task did not stop within {STOP_BUDGET:?}; leaving it");
            break;
        }
    }
}
