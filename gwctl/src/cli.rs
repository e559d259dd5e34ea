//! The command tree and its dispatch: every resource verb connects to the
//! control plane's AdminService; `up` runs a whole single-node gateway;
//! `config` and `completion` work offline.

use anyhow::Result;
use clap::CommandFactory as _;

use crate::config::Global;
use crate::{
    account, audit, batch, channel, client, config::contexts, credentials, dataplanes, declare, doctor, group, model,
    secrets, store, token, topup, up, usage, user, video, whoami,
};

/// Operate the LLM API gateway.
#[derive(Debug, clap::Parser)]
#[command(
    name = "gwctl",
    version,
    about,
    propagate_version = true,
    after_help = "Examples:\n  \
        gwctl up                                   # a gateway on this machine\n  \
        gwctl config set-context prod --endpoint https://cp.prod:7070 --admin-key-file ~/.config/gwctl/prod.key\n  \
        gwctl --context prod account list -o json\n  \
        gwctl completion bash > ~/.local/share/bash-completion/completions/gwctl\n\n\
        Exit codes: 0 success, 1 failure, 2 usage error (bad flags, a delete not confirmed)."
)]
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
    /// Make groups, models, channels, accounts and tokens what YAML or JSON
    /// documents say (docs/gwctl.md, "Declarative configuration").
    #[command(after_help = "Examples:\n  \
        gwctl apply -f gateway/ --dry-run\n  \
        gwctl apply -f gateway/\n  \
        gwctl apply -f gateway/ --prune --yes\n  \
        gwctl export | gwctl apply -f -")]
    Apply(declare::ApplyArgs),
    /// What `apply -f` would change, field by field; exit code 1 when
    /// something would.
    #[command(after_help = "Examples:\n  \
        gwctl diff -f gateway/\n  \
        gwctl diff -f models.yaml -f channels.yaml --prune -o json")]
    Diff(declare::DiffArgs),
    /// The current configuration as documents `apply` takes, secrets left
    /// out.
    #[command(after_help = "Examples:\n  \
        gwctl export > gateway.yaml\n  \
        gwctl export model channel -o json\n  \
        gwctl export --schema > config.schema.json")]
    Export(declare::ExportArgs),
    /// Usage records.
    #[command(subcommand)]
    Usage(usage::Command),
    /// Video generation tasks.
    #[command(subcommand, alias = "videos")]
    Video(video::Command),
    /// Batches (/v1/batches, /v1/messages/batches): holds and what they cost.
    #[command(subcommand, alias = "batches")]
    Batch(batch::Command),
    /// Credentials of the admin API and their roles.
    #[command(subcommand, alias = "credential")]
    Credentials(credentials::Command),
    /// The log of admin writes.
    #[command(subcommand)]
    Audit(audit::Command),
    /// Console users: who signs in to the web console, with which role.
    #[command(subcommand, alias = "users")]
    User(user::Command),
    /// Top-up codes: balance an account owner redeems.
    #[command(subcommand, alias = "topup-codes")]
    TopupCode(topup::Command),
    /// Data planes connected to the control plane.
    #[command(subcommand, alias = "dataplane")]
    Dataplanes(dataplanes::Command),
    /// The control plane's store: lineage, persistence, confirmation.
    #[command(subcommand)]
    Store(store::Command),
    /// Diagnose a key against a data plane (docs/errors.md): list its models, send
    /// a minimal chat, tell configuration from link and name the remedy.
    #[command(after_help = "Examples:\n  \
        gwctl doctor --base-url http://127.0.0.1:8080 --key-file ~/.config/gw/client.key\n  \
        printf %s \"$KEY\" | gwctl doctor --base-url https://gw.example.com/v1 --key-file - --model gpt-4o\n  \
        GW_API_KEY=sk-… gwctl doctor -o json\n\n\
        Exit code 1 when the diagnosis found a problem.")]
    Doctor(doctor::Args),
    /// Upstream keys at rest: re-seal them under a master key.
    #[command(subcommand, alias = "secret")]
    Secrets(secrets::Command),
    /// Run a single-node gateway (control plane and data plane) until ctrl-c.
    #[command(after_help = "Examples:\n  \
        gwctl up\n  \
        gwctl up --data-dir /srv/gw --listen 0.0.0.0:8080\n  \
        gwctl up --store redis://127.0.0.1:6379")]
    Up(up::Args),
    /// Contexts: which control plane gwctl talks to.
    #[command(subcommand)]
    Config(contexts::Command),
    /// The credential gwctl uses, its role and account, and which control
    /// plane answers.
    #[command(after_help = "Examples:\n  \
        gwctl whoami\n  \
        gwctl whoami -o json | jq -r .role")]
    Whoami,
    /// gwctl's version and the control plane's.
    #[command(after_help = "Examples:\n  \
        gwctl version\n  \
        gwctl version --endpoint https://cp.example.com:7070")]
    Version,
    /// Print a shell completion script.
    #[command(after_help = "Examples:\n  \
        gwctl completion bash > ~/.local/share/bash-completion/completions/gwctl\n  \
        gwctl completion zsh > \"${fpath[1]}/_gwctl\"\n  \
        gwctl completion fish > ~/.config/fish/completions/gwctl.fish")]
    Completion {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Runs the parsed command; returns what to print on stdout.
pub async fn run(cli: Cli) -> Result<String> {
    let Cli { global, command } = cli;
    let out = global.output;
    match command {
        Command::Up(args) => up::run(args, &global).await.map(|()| String::new()),
        Command::Config(cmd) => contexts::run(cmd, &global, &contexts::path()?),
        Command::Whoami => whoami::run(&mut client::connect(&global).await?, global.target()?.endpoint, out).await,
        Command::Version => Ok(whoami::version(client::connect(&global).await).await),
        Command::Doctor(args) => doctor::run(args, out).await,
        Command::Apply(args) => declare::apply(args, &global).await,
        Command::Diff(args) => declare::diff(args, &global).await,
        Command::Export(args) => declare::export(args, &global).await,
        Command::Completion { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "gwctl", &mut script);
            Ok(String::from_utf8_lossy(&script).into_owned())
        }
        Command::Account(cmd) => account::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Group(cmd) => group::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Token(cmd) => token::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Channel(cmd) => channel::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Model(cmd) => model::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Usage(cmd) => usage::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Video(cmd) => video::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Batch(cmd) => batch::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Credentials(cmd) => credentials::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Audit(cmd) => audit::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::User(cmd) => user::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::TopupCode(cmd) => topup::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Dataplanes(cmd) => dataplanes::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Store(cmd) => store::run(cmd, &mut client::connect(&global).await?, out).await,
        Command::Secrets(cmd) => secrets::run(cmd, &mut client::connect(&global).await?, out).await,
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

    /// Every flag and argument says what it is for, every verb shows
    /// examples, and no help shows two defaults.
    #[test]
    fn every_flag_has_help_and_every_verb_has_examples() {
        fn walk(command: &clap::Command, path: &str, problems: &mut Vec<String>) {
            let path = format!("{path} {}", command.get_name());
            for arg in command.get_arguments() {
                if arg.get_help().is_none() && !matches!(arg.get_id().as_str(), "help" | "version") {
                    problems.push(format!("{path}: --{} has no help", arg.get_id()));
                }
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                if help.contains("[default:") && !arg.get_default_values().is_empty() {
                    problems.push(format!("{path}: --{} shows two defaults", arg.get_id()));
                }
            }
            let leaf = command.get_subcommands().next().is_none();
            let examples = command.get_after_help().is_some_and(|h| h.to_string().contains("Examples:"));
            if leaf && command.get_name() != "help" && !examples {
                problems.push(format!("{path}: no Examples"));
            }
            for sub in command.get_subcommands() {
                walk(sub, &path, problems);
            }
        }
        let mut problems = Vec::new();
        walk(&Cli::command(), "", &mut problems);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn completion_scripts_name_the_verbs() {
        for shell in ["bash", "zsh", "fish"] {
            let cli = Cli::try_parse_from(["gwctl", "completion", shell]).unwrap();
            let Command::Completion { shell } = cli.command else { panic!("not completion") };
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "gwctl", &mut script);
            let script = String::from_utf8(script).unwrap();
            assert!(script.contains("use-context") && script.contains("topup"), "{shell}");
        }
    }

    #[test]
    fn global_flags_parse_after_the_verb() {
        let cli =
            Cli::try_parse_from(["gwctl", "account", "list", "-o", "json", "--endpoint", "10.0.0.1:7070"]).unwrap();
        assert_eq!(cli.global.output, Output::Json);
        assert_eq!(cli.global.endpoint.as_deref(), Some("10.0.0.1:7070"));
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

    #[test]
    fn unlimited_is_a_switch_on_create_and_update_alike() {
        let unlimited = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Token(command) => format!("{command:?}"),
            other => panic!("parsed as {other:?}"),
        };
        assert!(unlimited(&["gwctl", "token", "create", "--account", "a", "--unlimited"]).contains("unlimited: true"));
        assert!(unlimited(&["gwctl", "token", "update", "t", "--unlimited"]).contains("unlimited: Some(true)"));
        assert!(
            unlimited(&["gwctl", "token", "update", "t", "--unlimited", "--name", "x"])
                .contains("unlimited: Some(true)")
        );
        assert!(
            unlimited(&["gwctl", "token", "update", "t", "--unlimited", "false"]).contains("unlimited: Some(false)")
        );
        assert!(unlimited(&["gwctl", "token", "update", "t", "--name", "x"]).contains("unlimited: None"));
        let account = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Account(command) => format!("{command:?}"),
            other => panic!("parsed as {other:?}"),
        };
        assert!(account(&["gwctl", "account", "update", "a", "--unlimited"]).contains("unlimited: Some(true)"));
        assert!(
            account(&["gwctl", "account", "update", "a", "--unlimited", "false"]).contains("unlimited: Some(false)")
        );
    }
}
