//! rocsctl: simulate rocs, profile real programs, and inspect the daemon.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod client;
mod linux;
mod render;
mod sim;

#[derive(Parser)]
#[command(
    name = "rocsctl",
    version,
    about = "Simulate rocs, profile real programs, inspect rocsd"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The simulated machine: list, run workloads, replay traces, evaluate.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    #[command(flatten)]
    Linux(linux::LinuxCommand),
    #[command(flatten)]
    Client(client::ClientCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(cmd) => sim::run(cmd),
        Command::Linux(cmd) => linux::run(cmd),
        Command::Client(cmd) => client::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // `{:#}` prints the whole context chain: what failed, and why.
            eprintln!("rocsctl: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
