//! `gwctl video`: video generation tasks as the control plane stores them
//! (operators see every account's; nothing here asks the upstream).

use anyhow::Result;
use gw_proto::pb;
use serde_json::Value;

use crate::client::{Admin, RpcResult};
use crate::output::{self, Output, Render};

/// Video task verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List video tasks, newest first.
    #[command(alias = "ls")]
    List(ListArgs),
    /// Show one video task.
    Get { id: String },
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this account's tasks.
    #[arg(long)]
    account: Option<String>,
    /// Only tasks in this status.
    #[arg(long, value_parser = ["queued", "in_progress", "completed", "failed"])]
    status: Option<String>,
    /// At most this many tasks.
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

/// Runs one video verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::List(args) => {
            let request = pb::ListVideoTasksRequest {
                account_id: args.account.unwrap_or_default(),
                status: args.status.unwrap_or_default(),
                limit: args.limit,
            };
            let list = admin.list_video_tasks(request).await.rpc()?;
            output::render_list(out, &list.items)
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

    fn to_json(&self) -> Value {
        let mut object = output::to_object(self);
        output::add_usd(&mut object, &[("cost", self.cost_micros)]);
        // The pass-through fields as JSON rather than as a string.
        if let Ok(extra @ Value::Object(_)) = serde_json::from_str::<Value>(&self.extra_json) {
            object.insert("extra".to_string(), extra);
        }
        object.remove("extra_json");
        Value::Object(object)
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
    fn video_json_has_cost_in_usd_and_extra_as_an_object() {
        let task = pb::VideoTask {
            id: "video_1".into(),
            status: "failed".into(),
            refunded: true,
            cost_micros: 600_000,
            extra_json: r#"{"size":"1280x720"}"#.into(),
            ..Default::default()
        };
        let json = task.to_json();
        assert_eq!(json["cost"], 0.6);
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
