//! The command tree and its dispatch: every resource verb connects to the
//! control plane's AdminService; `up` runs a whole single-node gateway.

use anyhow::Result;

use crate::config::Global;
use crate::{account, channel, client, dataplanes, group, model, token, up, usage, video};

/// Operate the LLM API gateway.
#[derive(Debug, clap::Parser)]
#[command(name = "gwctl", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Accounts: balances and allowed groups.
    #[command(subcommand)]
    Account(account::Command),
    /// Groups: price ratios and rate limits.
    #[command(subcommand)]
    Group(group::Command),
    /// Tokens: the API keys clients use.
    #[command(subcommand)]
    Token(token::Command),
    /// Channels: upstream providers.
    #[command(subcommand)]
    Channel(channel::Command),
    /// Models: the catalogue and prices.
    #[command(subcommand)]
    Model(model::Command),
    /// Usage records.
    #[command(subcommand)]
    Usage(usage::Command),
    /// Video generation tasks.
    #[command(subcommand, alias = "videos")]
    Video(video::Command),
    /// Data planes connected to the control plane.
    #[command(subcommand, alias = "dataplane")]
    Dataplanes(dataplanes::Command),
    /// Run a single-node gateway (control plane and data plane) until ctrl-c.
    Up(up::Args),
}

/// Runs the parsed command; returns what to print on stdout.
pub async fn run(cli: Cli) -> Result<String> {
    let Cli { global, command } = cli;
    let out = global.output;
    match command {
        Command::Up(args) => up::run(args, &global).await.map(|()| String::new()),
        Command::Account(cmd) => account::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Group(cmd) => group::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Token(cmd) => token::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Channel(cmd) => channel::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Model(cmd) => model::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Usage(cmd) => usage::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Video(cmd) => video::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Dataplanes(cmd) => dataplanes::run(cmd, &mut client::connect(&global).await?, out).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;
    use crate::output::Output;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_parse_after_the_verb() {
        let cli =
            Cli::try_parse_from(["gwctl", "account", "list", "-o", "json", "--endpoint", "10.0.0.1:7070"]).unwrap();
        assert_eq!(cli.global.output, Output::Json);
        assert_eq!(cli.global.endpoint, "10.0.0.1:7070");
    }

    #[test]
    fn negative_top_up_parses() {
        let cli = Cli::try_parse_from(["gwctl", "account", "topup", "acc_1", "--amount", "-2.5"]).unwrap();
        match cli.command {
            Command::Account(account::Command::Topup { amount, .. }) => {
                assert_eq!(amount, -2_500_000)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn quota_and_unlimited_are_exclusive() {
        let err = Cli::try_parse_from(["gwctl", "token", "create", "--account", "a", "--quota", "5", "--unlimited"])
            .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn bad_flag_values_are_reported_by_clap() {
        for args in [
            &["gwctl", "account", "create", "--name", "a", "--balance", "0.0000001"][..],
            &["gwctl", "group", "create", "--name", "g", "--rate-limit", "60"][..],
            &["gwctl", "token", "create", "--account", "a", "--expires", "soon"][..],
            &["gwctl", "channel", "update", "c", "--map", "gpt-4o"][..],
        ] {
            let err = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{args:?}");
        }
        let err = Cli::try_parse_from(["gwctl", "token", "update", "t", "--unlimited", "maybe"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
    }
}
