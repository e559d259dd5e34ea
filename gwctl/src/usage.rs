//! `gwctl usage`: the usage ledger, most recently applied first. A list
//! gathers as many server pages as `--limit` asks for, and prints the token
//! to continue from when more records match.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::flags;
use crate::output::{self, Output, Render};
use crate::{resolve, schema};

/// Records asked for per call; the control plane answers at most 10,000.
const PAGE: u32 = 10_000;

/// Usage verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List usage records, most recent first.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
        gwctl usage list --account acme --since 24h\n  \
        gwctl usage list --model gpt-4o --since 2027-01-01 --until 2027-02-01 --limit 0 -o json\n  \
        gwctl usage list --token ci --limit 50 --continue 49:req_7f3k2"
    )]
    List(ListArgs),
    /// Sum usage by hour or day and account, token, model or channel, from
    /// the rollups (kept longer than the records).
    #[command(after_help = "Examples:\n  \
        gwctl usage summary --by day,model --from 7d\n  \
        gwctl usage summary --by hour --from 2027-01-01 --to 2027-01-02 --account acme -o csv\n  \
        gwctl usage summary --by account --from 30d -o json")]
    Summary(crate::summary::SummaryArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this token's records (id or name).
    #[arg(long)]
    token: Option<String>,
    /// Only this account's records (id or name).
    #[arg(long)]
    account: Option<String>,
    /// Only this model's records.
    #[arg(long)]
    model: Option<String>,
    /// Only records of this group.
    #[arg(long)]
    group: Option<String>,
    /// Only records served by this channel (id or name).
    #[arg(long)]
    channel: Option<String>,
    #[command(flatten)]
    range: flags::Since,
    /// At most this many records; when more match, the continue token is
    /// printed (on stderr for tables). 0 lists every match.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// Token printed by the previous list, to list the records after it.
    #[arg(long = "continue", value_name = "TOKEN")]
    continue_token: Option<String>,
}

/// Runs one usage verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::List(args) => {
            let (from, to) = args.range.range()?;
            let (account_id, token_id, channel_id) =
                resolve::filters(admin, args.account.as_deref(), args.token.as_deref(), args.channel.as_deref())
                    .await?;
            let mut request = pb::ListUsageRequest {
                token_id,
                account_id,
                channel_id,
                model: args.model.unwrap_or_default(),
                group: args.group.unwrap_or_default(),
                from,
                to,
                limit: 0,
                page_token: args.continue_token.unwrap_or_default(),
            };
            let (items, next) = gather(admin, &mut request, args.limit).await?;
            output::render_list(out, &items, &next)
        }
        Command::Summary(args) => crate::summary::run(args, admin, out).await,
    }
}

/// Pages through the ledger until `limit` records (every one for 0) or the
/// end; returns them and the token after the last, empty at the end.
async fn gather(
    admin: &mut Admin,
    request: &mut pb::ListUsageRequest,
    limit: u32,
) -> Result<(Vec<pb::UsageRecord>, String)> {
    let mut items = Vec::new();
    loop {
        let want = match limit {
            0 => PAGE,
            limit => (limit - items.len() as u32).min(PAGE),
        };
        request.limit = want;
        let page = admin.list_usage(request.clone()).await.rpc()?;
        items.extend(page.items);
        let full = limit != 0 && items.len() as u32 >= limit;
        if page.next_page_token.is_empty() || full {
            return Ok((items, page.next_page_token));
        }
        request.page_token = page.next_page_token;
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

    const WIDE: &'static [&'static str] =
        &["WRITE 5M", "WRITE 1H", "REASONING", "TIER", "SEARCH UNITS", "ACCOUNT", "GROUP", "ENDPOINT", "NODE"];
    type Json = schema::Usage;

    fn json(&self) -> schema::Usage {
        self.into()
    }

    fn name(&self) -> String {
        self.request_id.clone()
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

    fn wide_row(&self) -> Vec<String> {
        vec![
            self.cache_write_5m_tokens.to_string(),
            self.cache_write_1h_tokens.to_string(),
            self.reasoning_tokens.to_string(),
            self.tier.to_string(),
            self.search_units.to_string(),
            self.account_id.clone(),
            self.group.clone(),
            self.endpoint.clone(),
            self.node_id.clone(),
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
            ("5-minute cache write tokens", self.cache_write_5m_tokens.to_string()),
            ("1-hour cache write tokens", self.cache_write_1h_tokens.to_string()),
            ("reasoning tokens", self.reasoning_tokens.to_string()),
            ("price tier", self.tier.to_string()),
            ("search units", self.search_units.to_string()),
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
    fn usage_json_has_cost_as_micros_and_exact_dollars() {
        let record = pb::UsageRecord {
            request_id: "req_1".into(),
            cost_micros: 12_345,
            prompt_tokens: 11,
            ..Default::default()
        };
        let json = serde_json::to_value(record.json()).unwrap();
        assert_eq!(json["cost_usd"], "0.012345");
        assert_eq!(json["cost_micros"], 12_345);
        assert_eq!(json["prompt_tokens"], 11);
        assert_eq!(record.row()[9], "$0.012345");
    }
}
