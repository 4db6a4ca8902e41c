//! rocsctl linux commands (being built).

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum LinuxCommand {}

pub fn run(cmd: LinuxCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}
