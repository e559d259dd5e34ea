//! `gwctl usage summary`: usage summed from the control plane's hourly and
//! daily rollups, grouped by time and any of account, token, model and
//! channel; a table with a totals row, the `schema::UsageSummary` JSON, or
//! CSV rows for spreadsheets.

use anyhow::{Result, bail};
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::output::{self, Output};
use crate::{flags, resolve, schema};

/// What `--by` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    Hour,
    Day,
    Account,
    Token,
    Model,
    Channel,
}

#[derive(Debug, clap::Args)]
pub struct SummaryArgs {
    /// Group by these, comma-separated: hour or day (UTC), and any of
    /// account, token, model, channel. None: one row for the whole range.
    #[arg(long, value_enum, value_delimiter = ',')]
    by: Vec<By>,
    /// Usage made at or after this time (RFC 3339, a date, or a span ago:
    /// 7d), rounded down to its hour [default: 7 days before --to].
    #[arg(long, value_parser = flags::parse_time)]
    from: Option<i64>,
    /// Usage made before this time, rounded up to an hour [default: now].
    #[arg(long, value_parser = flags::parse_time)]
    to: Option<i64>,
    /// Only this account's usage (id or name).
    #[arg(long)]
    account: Option<String>,
    /// Only this token's usage (id or name).
    #[arg(long)]
    token: Option<String>,
    /// Only this model's usage.
    #[arg(long)]
    model: Option<String>,
    /// Only usage served by this channel (id or name).
    #[arg(long)]
    channel: Option<String>,
    /// Only usage of this group.
    #[arg(long)]
    group: Option<String>,
}

/// Runs `usage summary`; returns what to print.
pub async fn run(args: SummaryArgs, admin: &mut Admin, out: Output) -> Result<String> {
    if let (Some(from), Some(to)) = (args.from, args.to)
        && from >= to
    {
        bail!("--from must be before --to");
    }
    if args.by.contains(&By::Hour) && args.by.contains(&By::Day) {
        bail!("--by takes hour or day, not both");
    }
    let (account_id, token_id, channel_id) =
        resolve::filters(admin, args.account.as_deref(), args.token.as_deref(), args.channel.as_deref()).await?;
    let request = pb::SummarizeUsageRequest {
        group_by: args.by.iter().map(|by| dimension(*by) as i32).collect(),
        from: args.from.unwrap_or(0),
        to: args.to.unwrap_or(0),
        account_id,
        token_id,
        channel_id,
        model: args.model.unwrap_or_default(),
        group: args.group.unwrap_or_default(),
    };
    let summary = admin.summarize_usage(request).await.rpc()?;
    render(out, &args.by, &summary)
}

fn dimension(by: By) -> pb::UsageDimension {
    match by {
        By::Hour => pb::UsageDimension::Hour,
        By::Day => pb::UsageDimension::Day,
        By::Account => pb::UsageDimension::Account,
        By::Token => pb::UsageDimension::Token,
        By::Model => pb::UsageDimension::Model,
        By::Channel => pb::UsageDimension::Channel,
    }
}

fn name(by: By) -> &'static str {
    match by {
        By::Hour => "hour",
        By::Day => "day",
        By::Account => "account",
        By::Token => "token",
        By::Model => "model",
        By::Channel => "channel",
    }
}

/// The summary as JSON, YAML, CSV (no totals row) or a table with one.
pub fn render(out: Output, by: &[By], summary: &pb::SummarizeUsageResponse) -> Result<String> {
    // Time first, then the other dimensions in a fixed order.
    let order = [By::Hour, By::Day, By::Account, By::Token, By::Model, By::Channel];
    let by: Vec<By> = order.into_iter().filter(|b| by.contains(b)).collect();
    let json = || schema::UsageSummary {
        from: summary.from,
        to: summary.to,
        group_by: by.iter().map(|b| name(*b).to_owned()).collect(),
        rows: summary.rows.iter().map(Into::into).collect(),
        totals: schema::UsageCounts::sum(&summary.rows),
    };
    let people = matches!(out, Output::Table | Output::Wide | Output::Name);
    let mut columns: Vec<&str> = by
        .iter()
        .map(|b| match (b, people) {
            (By::Hour, _) => "HOUR",
            (By::Day, _) => "DAY",
            (By::Account, true) => "ACCOUNT",
            (By::Token, true) => "TOKEN",
            (By::Model, true) => "MODEL",
            (By::Channel, true) => "CHANNEL",
            (By::Account, false) => "account_id",
            (By::Token, false) => "token_id",
            (By::Model, false) => "model",
            (By::Channel, false) => "channel_id",
        })
        .collect();
    let dims = |row: &pb::UsageSummaryRow| -> Vec<String> {
        by.iter()
            .map(|b| match b {
                By::Hour => hour(row.bucket_start),
                By::Day => day(row.bucket_start),
                By::Account => row.account_id.clone(),
                By::Token => row.token_id.clone(),
                By::Model => row.model.clone(),
                By::Channel => row.channel_id.clone(),
            })
            .collect()
    };
    match out {
        Output::Json => output::json_text(&json()),
        Output::Yaml => output::yaml_text(&json()),
        Output::Csv => {
            if let Some(first) = columns.first_mut().filter(|c| matches!(**c, "HOUR" | "DAY")) {
                *first = if *first == "HOUR" { "hour" } else { "day" };
            }
            columns.extend([
                "requests",
                "prompt_tokens",
                "completion_tokens",
                "cached_tokens",
                "images",
                "audio_millis",
                "cost_micros",
                "cost_usd",
            ]);
            let rows: Vec<Vec<String>> = summary
                .rows
                .iter()
                .map(|row| {
                    let c = schema::UsageCounts::sum(std::iter::once(row));
                    let mut cells = dims(row);
                    cells.extend(
                        [c.requests, c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.images, c.audio_millis]
                            .map(|n| n.to_string()),
                    );
                    cells.extend([c.cost_micros.to_string(), c.cost_usd]);
                    cells
                })
                .collect();
            Ok(output::csv_text(&columns, &rows))
        }
        Output::Table | Output::Wide | Output::Name => {
            columns.extend(["REQUESTS", "INPUT", "OUTPUT", "CACHED", "IMAGES", "AUDIO", "COST"]);
            let counts = |c: &schema::UsageCounts| {
                vec![
                    c.requests.to_string(),
                    c.prompt_tokens.to_string(),
                    c.completion_tokens.to_string(),
                    c.cached_tokens.to_string(),
                    c.images.to_string(),
                    format!("{}s", seconds(c.audio_millis)),
                    output::usd(c.cost_micros),
                ]
            };
            let mut rows: Vec<Vec<String>> = summary
                .rows
                .iter()
                .map(|row| {
                    let mut cells = dims(row);
                    cells.extend(counts(&schema::UsageCounts::sum(std::iter::once(row))));
                    cells
                })
                .collect();
            let mut total = vec![String::new(); by.len()];
            match total.first_mut() {
                Some(first) => *first = "TOTAL".to_owned(),
                None => {
                    columns.insert(0, "");
                    total.push("TOTAL".to_owned());
                }
            }
            total.extend(counts(&schema::UsageCounts::sum(&summary.rows)));
            if by.is_empty() {
                for row in &mut rows {
                    row.insert(0, String::new());
                }
            }
            rows.push(total);
            let range = format!("usage from {} to {}\n", output::time(summary.from), output::time(summary.to));
            Ok(format!("{range}{}", output::table_text(&columns, &rows)))
        }
    }
}

/// `2027-01-01T05:00Z`.
fn hour(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0).map(|t| t.format("%Y-%m-%dT%H:%MZ").to_string()).unwrap_or_default()
}

/// `2027-01-01`.
fn day(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0).map(|t| t.format("%Y-%m-%d").to_string()).unwrap_or_default()
}

/// Milliseconds as seconds with up to three decimals: `1.5`, `0`.
fn seconds(millis: i64) -> String {
    let text = format!("{}.{:03}", millis / 1_000, (millis % 1_000).abs());
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn summary() -> pb::SummarizeUsageResponse {
        let row = |bucket_start, model: &str, requests, cost_micros| pb::UsageSummaryRow {
            bucket_start,
            model: model.into(),
            requests,
            prompt_tokens: requests * 10,
            audio_millis: 1_500,
            cost_micros,
            ..Default::default()
        };
        pb::SummarizeUsageResponse {
            rows: vec![row(1_798_761_600, "gpt-4o", 2, 1_000), row(1_798_761_600, "a,b", 1, 5)],
            from: 1_798_761_600,
            to: 1_798_848_000,
        }
    }

    #[test]
    fn the_table_ends_with_the_totals() {
        let text = render(Output::Table, &[By::Model, By::Day], &summary()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "usage from 2027-01-01T00:00:00Z to 2027-01-02T00:00:00Z");
        assert!(lines[1].starts_with("DAY         MODEL   REQUESTS"), "{text}");
        assert!(lines[2].starts_with("2027-01-01  gpt-4o  2"), "{text}");
        let total: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(total, ["TOTAL", "3", "30", "0", "0", "0", "3s", "$0.001005"], "{text}");
    }

    #[test]
    fn csv_has_one_line_per_row_and_no_totals() {
        let text = render(Output::Csv, &[By::Day, By::Model], &summary()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "day,model,requests,prompt_tokens,completion_tokens,cached_tokens,images,audio_millis,cost_micros,cost_usd"
        );
        assert_eq!(lines[2], "2027-01-01,\"a,b\",1,10,0,0,0,1500,5,0.000005");
        assert_eq!(lines.len(), 3, "{text}");
    }

    #[test]
    fn without_grouping_the_table_is_one_row_and_its_total() {
        let text = render(Output::Table, &[], &summary()).unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.lines().last().unwrap().starts_with("TOTAL"), "{text}");
    }
}
