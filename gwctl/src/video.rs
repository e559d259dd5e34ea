//! `gwctl video`: video generation tasks as the control plane stores them
//! (operators see every account's; nothing here asks the upstream).

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::output::{self, Output, Render};
use crate::{resolve, schema};

/// Video task verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List video tasks, newest first.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
        gwctl video list --status failed\n  \
        gwctl video list --account acme --limit 20 -o json"
    )]
    List(ListArgs),
    /// Show one video task.
    #[command(after_help = "Examples:\n  gwctl video get video_68d2f1")]
    Get {
        /// Id of the task (video_…).
        id: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this account's tasks (id or name).
    #[arg(long)]
    account: Option<String>,
    /// Only tasks in this status.
    #[arg(long, value_parser = ["queued", "in_progress", "completed", "failed"])]
    status: Option<String>,
    /// At most this many tasks (at most 10000); when more exist, the
    /// continue token is printed (on stderr for tables).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    limit: u32,
    /// Token printed by the previous page, to list the next.
    #[arg(long = "continue", value_name = "TOKEN")]
    continue_token: Option<String>,
}

/// Runs one video verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::List(args) => {
            let account_id = match &args.account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let request = pb::ListVideoTasksRequest {
                account_id,
                status: args.status.unwrap_or_default(),
                limit: args.limit,
                page_token: args.continue_token.unwrap_or_default(),
            };
            let list = admin.list_video_tasks(request).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
        }
        Command::Get { id } => output::render_one(out, &admin.get_video_task(pb::GetRequest { id }).await.rpc()?),
    }
}

/// `completed`, `failed (refunded)`, `in_progress 40%`.
fn state(task: &pb::VideoTask) -> String {
    match task.status.as_str() {
        "failed" if task.refunded => "failed (refunded)".to_string(),
        "queued" | "in_progress" => format!("{} {}%", task.status, task.progress),
        other => other.to_string(),
    }
}

// === impl Render for pb::VideoTask ===

impl Render for pb::VideoTask {
    const COLUMNS: &'static [&'static str] =
        &["ID", "CREATED", "ACCOUNT", "MODEL", "CHANNEL", "SECONDS", "STATUS", "COST", "ERROR"];

    const WIDE: &'static [&'static str] = &["TOKEN", "SIZE", "UPSTREAM ID"];
    type Json = schema::Video;

    fn json(&self) -> schema::Video {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
    }

    fn wide_row(&self) -> Vec<String> {
        vec![self.token_id.clone(), self.size.clone(), self.upstream_id.clone()]
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            output::time(self.created_at),
            self.account_id.clone(),
            self.model.clone(),
            self.channel_id.clone(),
            self.seconds.to_string(),
            state(self),
            output::usd(self.cost_micros),
            self.error_code.clone(),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("status", state(self)),
            ("progress", format!("{}%", self.progress)),
            ("account", self.account_id.clone()),
            ("token", self.token_id.clone()),
            ("group", self.group.clone()),
            ("model", self.model.clone()),
            ("channel", self.channel_id.clone()),
            ("upstream id", self.upstream_id.clone()),
            ("seconds", self.seconds.to_string()),
            ("size", self.size.clone()),
            ("cost", output::usd(self.cost_micros)),
            ("refunded", self.refunded.to_string()),
            ("created", output::time(self.created_at)),
            ("updated", output::time(self.updated_at)),
            ("completed", output::time(self.completed_at)),
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
    fn video_json_has_exact_cost_and_extra_as_an_object() {
        let task = pb::VideoTask {
            id: "video_1".into(),
            status: "failed".into(),
            refunded: true,
            cost_micros: 600_000,
            extra_json: r#"{"size":"1280x720"}"#.into(),
            ..Default::default()
        };
        let json = serde_json::to_value(task.json()).unwrap();
        assert_eq!(json["cost_usd"], "0.600000");
        assert_eq!(json["extra"]["size"], "1280x720");
        assert!(json.get("extra_json").is_none());
        assert_eq!(task.row()[6], "failed (refunded)");
        let running = pb::VideoTask { status: "in_progress".into(), progress: 40, ..Default::default() };
        assert_eq!(state(&running), "in_progress 40%");
    }

    #[test]
    fn list_filters_parse_and_bad_statuses_are_refused() {
        let cli = Cli::try_parse_from(["gwctl", "video", "list", "--account", "acc_1", "--status", "failed"]).unwrap();
        match cli.command {
            Top::Video(Command::List(args)) => {
                assert_eq!((args.account.as_deref(), args.status.as_deref()), (Some("acc_1"), Some("failed")))
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(Cli::try_parse_from(["gwctl", "video", "list", "--status", "done"]).is_err());
        assert!(Cli::try_parse_from(["gwctl", "video", "get", "video_1"]).is_ok());
    }
}
