//! rocsd: the rocs daemon.
//!
//! Policies opt workloads in; each matched process becomes a target with its own controller
//! task driving the platform (this machine, or simulated machines for the demo); the control
//! socket lets rocsctl inspect and steer it; systemd is told when it is ready, kept alive by
//! the watchdog, and told when it stops.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use rocs_config::{DaemonConfig, Platform};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

mod domain;
mod linux;
mod metrics;
mod notify;
mod procscan;
mod report;
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

/// What the platform can do here, found before anything starts.
enum Prepared {
    Sim(sim::SimSetup),
    Linux(linux::LinuxSetup),
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = load_config(&args)?;
    let (prepared, capability, notices, llc) = match config.platform {
        Platform::Sim => {
            let setup = sim::SimSetup::resolve(&config)?;
            let llc = setup.geometry();
            let mut notices = Vec::new();
            if config.geometry.is_some() {
                notices.push(
                    "[geometry] is ignored on the sim platform: the machine spec gives the LLC"
                        .to_string(),
                );
            }
            (Prepared::Sim(setup), Capability::Full, notices, Some(llc))
        }
        Platform::Linux => {
            let setup = linux::LinuxSetup::probe(&config)?;
            let (cap, notices, llc) = (setup.capability, setup.notices.clone(), setup.llc);
            (Prepared::Linux(setup), cap, notices, llc)
        }
    };
    for n in &notices {
        // Said once, here; `rocsctl status` repeats them.
        tracing::warn!("{n}");
    }
    let colours = llc.map_or(1, |g| g.colours());
    let policies = LoadedPolicies::load(&config, colours)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("the policies cannot be used")?;
    if args.check {
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
        return Ok(());
    }
    if policies.set.is_empty() {
        tracing::warn!(
            "no policies in {}: rocsd attaches to nothing until one is added and reloaded",
            config.policy_dir.display()
        );
    }
    let daemon = Daemon::new(config, capability, notices, llc, policies);
    let (stop_tx, stop_rx) = watch::channel(false);

    let listener = server::bind(
        &daemon.config.socket,
        daemon.config.socket_mode,
        daemon.rocs_gid,
    )?;
    let socket_file = server::SocketFile(daemon.config.socket.clone());
    let mut tasks = vec![tokio::spawn(server::serve(
        listener,
        daemon.clone(),
        stop_rx.clone(),
    ))];
    if let Some(addr) = daemon.config.metrics {
        let l = metrics::bind(addr).await?;
        tracing::info!("metrics on http://{addr}/metrics");
        tasks.push(tokio::spawn(metrics::serve(
            l,
            daemon.clone(),
            stop_rx.clone(),
        )));
    }
    let hosts = match prepared {
        Prepared::Sim(setup) => sim::start(&daemon, setup, stop_rx.clone()),
        Prepared::Linux(setup) => linux::start(&daemon, setup, stop_rx.clone()),
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
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); break; }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); break; }
            _ = watchdog_tick.tick() => {
                if watchdog.is_some() {
                    notifier.notify("WATCHDOG=1");
                }
            }
        }
    }

    // Stop: no new clients or targets; every host releases its targets (restoring pages
    // when configured) within the budget; then the socket goes.
    notifier.notify("STOPPING=1");
    let restore = daemon.config.restore_on_exit;
    let _ = stop_tx.send(true);
    for host in daemon.hosts() {
        let _ = host.try_send(HostCommand::Stop { restore });
    }
    let deadline = tokio::time::Instant::now() + STOP_BUDGET;
    for h in hosts.into_iter().chain(tasks) {
        if tokio::time::timeout_at(deadline, h).await.is_err() {
            tracing::warn!("a task did not stop within {STOP_BUDGET:?}; leaving it");
            break;
        }
    }
    drop(socket_file);
    tracing::info!(
        "stopped; {} targets were attached since start",
        daemon
            .targets_seen
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}
