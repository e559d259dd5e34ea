//! gwctl, the operator CLI of the gateway: resource verbs over the control
//! plane's AdminService, JSON output for scripts, and `up` for a single node.

mod account;
mod channel;
mod cli;
mod client;
mod config;
mod dataplanes;
#[cfg(test)]
mod e2e;
mod flags;
mod group;
mod model;
mod money;
mod output;
mod token;
mod up;
mod usage;
mod video;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli::run(cli).await.and_then(|text| output::emit(&text)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
