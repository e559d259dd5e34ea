//! `gwctl batch`: batches (OpenAI `/v1/batches` and Anthropic message
//! batches) as the control plane stores them: operators see every
//! account's, with the hold and what the results cost; nothing here asks
//! the upstream.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::output::{self, Output, Render};
use crate::{resolve, schema};

/// Batch verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List batches, newest first.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
        gwctl batch list\n  \
        gwctl batch list --account acme --kind anthropic -o json"
    )]
    List(ListArgs),
    /// Show one batch.
    #[command(after_help = "Examples:\n  gwctl batch get batch_019a2c…")]
    Get {
        /// Id of the batch (batch_… or msgbatch_…).
        id: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this account's batches (id or name).
    #[arg(long)]
    account: Option<String>,
    /// Only batches of this API.
    #[arg(long, value_parser = ["openai", "anthropic"])]
    kind: Option<String>,
    /// At most this many batches (at most 100); when more exist, the
    /// continue token is printed (on stderr for tables).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100))]
    limit: u32,
    /// Token printed by the previous page, to list the next.
    #[arg(long = "continue", value_name = "TOKEN")]
    continue_token: Option<String>,
}

/// Runs one batch verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::List(args) => {
            let account_id = match &args.account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let request = pb::ListBatchItemsRequest {
                account_id,
                limit: args.limit,
                after: args.continue_token.unwrap_or_default(),
                kind: args.kind.unwrap_or_default(),
                ..Default::default()
            };
            let list = admin.list_batches(request).await.rpc()?;
            // The next page starts after this page's last batch.
            let next = match list.items.last() {
                Some(last) if list.has_more => last.id.clone(),
                _ => String::new(),
            };
            output::render_list(out, &list.items, &next)
        }
        Command::Get { id } => output::render_one(out, &admin.get_batch(pb::GetRequest { id }).await.rpc()?),
    }
}

/// `in_progress`, `completed (billed)`, `ended (settling)`.
fn state(batch: &pb::Batch) -> String {
    match (batch.ended, batch.settled) {
        (true, true) => format!("{} (billed)", batch.status),
        (true, false) => format!("{} (settling)", batch.status),
        _ => batch.status.clone(),
    }
}

// === impl Render for pb::Batch ===

impl Render for pb::Batch {
    const COLUMNS: &'static [&'static str] =
        &["ID", "CREATED", "ACCOUNT", "MODEL", "CHANNEL", "STATUS", "HOLD", "COST", "ERROR"];

    const WIDE: &'static [&'static str] = &["KIND", "TOKEN", "UPSTREAM ID"];
    type Json = schema::Batch;

    fn json(&self) -> schema::Batch {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
    }

    fn wide_row(&self) -> Vec<String> {
        vec![self.kind.clone(), self.token_id.clone(), self.upstream_id.clone()]
    }

    fn row(&self) -> Vec<String> {
        let cost = if self.settled { output::usd(self.cost_micros) } else { "-".to_string() };
        vec![
            self.id.clone(),
            output::time(self.created_at),
            self.account_id.clone(),
            self.model.clone(),
            self.channel_id.clone(),
            state(self),
            output::usd(self.hold_micros),
            cost,
            self.error_code.clone(),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("kind", self.kind.clone()),
            ("status", state(self)),
            ("account", self.account_id.clone()),
            ("token", self.token_id.clone()),
            ("model", self.model.clone()),
            ("channel", self.channel_id.clone()),
            ("upstream id", self.upstream_id.clone()),
            ("hold", output::usd(self.hold_micros)),
            ("cost", if self.settled { output::usd(self.cost_micros) } else { "-".to_string() }),
            ("created", output::time(self.created_at)),
            ("error", format!("{} {}", self.error_code, self.error_message).trim().to_string()),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command as Top};

    #[test]
    fn batch_json_has_exact_money_and_the_object_as_an_object() {
        let batch = pb::Batch {
            id: "batch_1".into(),
            kind: "openai".into(),
            status: "completed".into(),
            ended: true,
            settled: true,
            hold_micros: 5_000,
            cost_micros: 3_000,
            object_json: r#"{"id":"batch_1","object":"batch"}"#.into(),
            ..Default::default()
        };
        let json = serde_json::to_value(batch.json()).unwrap();
        assert_eq!((json["hold_usd"].as_str(), json["cost_usd"].as_str()), (Some("0.005000"), Some("0.003000")));
        assert_eq!(json["object"]["object"], "batch");
        assert_eq!(batch.row()[5], "completed (billed)");
        let running = pb::Batch { status: "in_progress".into(), ..Default::default() };
        assert_eq!((state(&running).as_str(), running.row()[7].as_str()), ("in_progress", "-"));
    }

    #[test]
    fn list_filters_parse_and_bad_kinds_are_refused() {
        let cli = Cli::try_parse_from(["gwctl", "batch", "list", "--account", "acc_1", "--kind", "anthropic"]).unwrap();
        match cli.command {
            Top::Batch(Command::List(args)) => {
                assert_eq!((args.account.as_deref(), args.kind.as_deref()), (Some("acc_1"), Some("anthropic")))
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(Cli::try_parse_from(["gwctl", "batch", "list", "--kind", "gemini"]).is_err());
        assert!(Cli::try_parse_from(["gwctl", "batches", "get", "batch_1"]).is_ok());
    }
}
