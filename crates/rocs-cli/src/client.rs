//! rocsctl client commands (being built).

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ClientCommand {}

pub fn run(cmd: ClientCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}
