//! gwctl, the operator CLI of the gateway: resource verbs over the control
//! plane's AdminService, a documented JSON contract for scripts (`schema`),
//! contexts for several control planes, and `up` for a single node.

mod account;
mod audit;
mod batch;
mod channel;
mod cli;
mod client;
mod config;
mod confirm;
mod credentials;
mod dataplanes;
mod declare;
mod doctor;
#[cfg(test)]
mod e2e;
mod flags;
mod group;
mod import;
mod model;
mod money;
mod output;
mod resolve;
mod schema;
mod secrets;
mod store;
mod summary;
mod token;
mod topup;
mod up;
mod usage;
mod user;
mod video;
mod whoami;
mod window;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli::run(cli).await.and_then(|text| output::emit(&text)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            // A mistake in the call, like clap's own errors; else a failure.
            if err.downcast_ref::<confirm::UsageError>().is_some() { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}
