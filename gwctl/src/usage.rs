//! `gwctl usage`: the usage ledger, most recent first.

use anyhow::Result;
use gw_proto::pb;
use serde_json::Value;

use crate::client::{Admin, RpcResult};
use crate::output::{self, Output, Render};

/// Usage verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List usage records, most recent first.
    #[command(alias = "ls")]
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this token's records.
    #[arg(long)]
    token: Option<String>,
    /// Only this account's records.
    #[arg(long)]
    account: Option<String>,
    /// Only this model's records.
    #[arg(long)]
    model: Option<String>,
    /// At most this many records.
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

/// Runs one usage verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::List(args) => {
            let request = pb::ListUsageRequest {
                token_id: args.token.unwrap_or_default(),
                account_id: args.account.unwrap_or_default(),
                model: args.model.unwrap_or_default(),
                limit: args.limit,
            };
            let list = admin.list_usage(request).await.rpc()?;
            output::render_list(out, &list.items)
        }
    }
}

// === impl Render for pb::UsageRecord ===

impl Render for pb::UsageRecord {
    const COLUMNS: &'static [&'static str] = &[
        "TIME",
        "REQUEST ID",
        "TOKEN",
        "MODEL",
        "CHANNEL",
        "STATUS",
        "PROMPT",
        "COMPLETION",
        "CACHED",
        "COST",
        "LATENCY",
    ];

    fn to_json(&self) -> Value {
        let mut object = output::to_object(self);
        output::add_usd(&mut object, &[("cost", self.cost_micros)]);
        Value::Object(object)
    }

    fn row(&self) -> Vec<String> {
        let estimated = if self.estimated { "~" } else { "" };
        vec![
            output::time(self.created_at),
            self.request_id.clone(),
            self.token_id.clone(),
            self.model.clone(),
            self.channel_id.clone(),
            self.status.to_string(),
            format!("{estimated}{}", self.prompt_tokens),
            format!("{estimated}{}", self.completion_tokens),
            self.cached_tokens.to_string(),
            output::usd(self.cost_micros),
            format!("{}ms", self.latency_ms),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("request id", self.request_id.clone()),
            ("time", output::time(self.created_at)),
            ("token", self.token_id.clone()),
            ("account", self.account_id.clone()),
            ("group", self.group.clone()),
            ("model", self.model.clone()),
            ("channel", self.channel_id.clone()),
            ("endpoint", self.endpoint.clone()),
            ("status", self.status.to_string()),
            ("prompt tokens", self.prompt_tokens.to_string()),
            ("completion tokens", self.completion_tokens.to_string()),
            ("cached tokens", self.cached_tokens.to_string()),
            ("estimated", self.estimated.to_string()),
            ("cost", output::usd(self.cost_micros)),
            ("latency", format!("{}ms", self.latency_ms)),
            ("node", self.node_id.clone()),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn usage_json_has_cost_in_usd() {
        let record = pb::UsageRecord {
            request_id: "req_1".into(),
            cost_micros: 12_345,
            prompt_tokens: 11,
            ..Default::default()
        };
        let json = record.to_json();
        assert_eq!(json["cost"], 0.012345);
        assert_eq!(json["cost_micros"], 12_345);
        assert_eq!(json["prompt_tokens"], 11);
        assert_eq!(record.row()[9], "$0.012345");
    }
}
