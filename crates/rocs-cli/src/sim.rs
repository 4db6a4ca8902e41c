//! rocsctl sim commands (being built).

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum SimCommand {}

pub fn run(cmd: SimCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}
