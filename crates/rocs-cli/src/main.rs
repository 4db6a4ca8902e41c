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
    #[command(flatten)]
    global: client::Global,
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
    // `rocsctl stack art | head` must end quietly when the reader goes away, as other
    // Unix tools do, not panic on a failed print: let SIGPIPE end the process.
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(cmd) => sim::run(cmd),
        Command::Linux(cmd) => linux::run(cmd, cli.global.json),
        Command::Client(cmd) => client::run(cmd, &cli.global),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn socket_and_json_go_before_or_after_the_command() {
        for args in [
            &["rocsctl", "--socket", "/s", "--json", "status"][..],
            &["rocsctl", "status", "--socket", "/s", "--json"],
            &["rocsctl", "--json", "stack", "art", "--socket", "/s"],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(cli.global.socket, std::path::Path::new("/s"), "{args:?}");
            assert!(cli.global.json, "{args:?}");
        }
        let cli = Cli::try_parse_from(["rocsctl", "doctor", "--json"]).unwrap();
        assert!(cli.global.json);
        let cli = Cli::try_parse_from(["rocsctl", "targets"]).unwrap();
        assert_eq!(
            cli.global.socket,
            std::path::Path::new(rocs_config::daemon::DEFAULT_SOCKET)
        );
        assert!(!cli.global.json);
    }
}
