//! Spending and usage over a chosen range: the cost-per-day chart, a table
//! of requests that pages through the range, and the same rows as CSV.
//! Operators may narrow to one account; account owners see their own.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::html;
use serde::Deserialize;

use super::chart::{self, Bar};
use super::form::dollars_value;
use super::page::{self, money, scroll, time};
use super::{Console, ConsoleError};
use crate::domain::access::Role;
use crate::services::console::Signed;

/// Rows of the table per page.
const PAGE: u32 = 50;
/// Rows a CSV download holds at most.
const CSV_MAX: usize = 100_000;
const DAY: i64 = 86_400;

#[derive(Debug, Default, Deserialize)]
pub struct Range {
    /// `YYYY-MM-DD`, inclusive; default 7 days ago.
    #[serde(default)]
    from: String,
    /// `YYYY-MM-DD`, inclusive; default today.
    #[serde(default)]
    to: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    account: String,
    #[serde(default)]
    page: String,
}

/// The range asked for, as Unix seconds `[from, to)`.
fn bounds(range: &Range) -> Result<(i64, i64), ConsoleError> {
    let today = crate::domain::now_unix() / DAY * DAY;
    let parse = |text: &str, default: i64| match text.trim() {
        "" => Ok(default),
        text => page::parse_date(text).ok_or_else(|| ConsoleError::Invalid(format!("{text:?} is not a date"))),
    };
    let from = parse(&range.from, today - 6 * DAY)?;
    let to = parse(&range.to, today)? + DAY;
    if to <= from {
        return Err(ConsoleError::Invalid("the range ends before it starts".into()));
    }
    Ok((from, to))
}

/// The chart, the table and the download link.
pub async fn page(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(range): Query<Range>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let (from, to) = bounds(&range)?;
    let summary = pb::SummarizeUsageRequest {
        group_by: vec![pb::UsageDimension::Day as i32, pb::UsageDimension::Model as i32],
        from,
        to,
        account_id: range.account.clone(),
        model: range.model.clone(),
        ..Default::default()
    };
    let summary = console
        .call(&signed, "SummarizeUsage", summary, |api, r| async move { Admin::summarize_usage(&*api, r).await })
        .await?;
    let bars: Vec<Bar> = summary
        .rows
        .iter()
        .map(|row| Bar { day: row.bucket_start, model: row.model.clone(), cost_micros: row.cost_micros })
        .collect();
    let total: i64 = summary.rows.iter().map(|row| row.cost_micros).sum();
    let requests: i64 = summary.rows.iter().map(|row| row.requests).sum();
    let records = list(&console, &signed, &range, from, to, PAGE, range.page.clone()).await?;
    let names = token_names(&console, &signed).await?;
    let query = |page_token: &str| {
        format!(
            "?from={}&to={}&model={}&account={}&page={}",
            page::date(from),
            page::date(to - DAY),
            page::encode(&range.model),
            page::encode(&range.account),
            page::encode(page_token)
        )
    };
    let body = html! {
        h1 { "Usage" }
        form.filters method="get" action=(console.link("/usage")) {
            label for="from" { "From" } input id="from" name="from" type="date" value=(page::date(from));
            label for="to" { "To" } input id="to" name="to" type="date" value=(page::date(to - DAY));
            label for="model" { "Model" } input id="model" name="model" value=(range.model);
            @if signed.user.role != Role::Account {
                label for="account" { "Account id" } input id="account" name="account" value=(range.account);
            }
            button type="submit" { "Show" }
        }
        p { "Total " strong id="usage-total" { (money(total)) } " over " (requests) " requests." }
        (chart::cost_per_day(&bars, from, to))
        p { a id="csv" href=(console.link(&format!("/usage.csv{}", query("")))) download { "Download as CSV" } }
        h2 { "Requests" }
        (scroll(html! {
            table id="usage" {
                thead { tr {
                    th scope="col" { "Time" } th scope="col" { "Token" } th scope="col" { "Model" }
                    th scope="col" { "Endpoint" } th scope="col" { "Input" } th scope="col" { "Output" }
                    th scope="col" { "Cost" } th scope="col" { "Status" } th scope="col" { "Latency" }
                } }
                tbody {
                    @for record in &records.items {
                        tr {
                            td { (time(record.created_at)) }
                            td { (names.get(&record.token_id).map_or(record.token_id.as_str(), String::as_str)) }
                            td { (record.model) }
                            td { (record.endpoint) }
                            td { (record.prompt_tokens) }
                            td { (record.completion_tokens) }
                            td { (money(record.cost_micros)) @if record.estimated { " (estimated)" } }
                            td { (record.status) }
                            td { (record.latency_ms) " ms" }
                        }
                    }
                }
            }
        }))
        @if records.items.is_empty() { p { "No requests in this range." } }
        @if !records.next_page_token.is_empty() {
            p { a rel="next" href=(console.link(&format!("/usage{}", query(&records.next_page_token)))) { "Older requests" } }
        }
    };
    Ok(page::page(&console, &signed, "Usage", body))
}

/// Every request of the range as CSV, newest first.
pub async fn csv(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(range): Query<Range>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let (from, to) = bounds(&range)?;
    let names = token_names(&console, &signed).await?;
    let mut out = String::from(
        "time,request_id,account_id,token_id,token_name,model,endpoint,prompt_tokens,completion_tokens,cached_tokens,cost_usd,status,latency_ms,estimated\n",
    );
    let (mut rows, mut page_token) = (0, String::new());
    loop {
        let records = list(&console, &signed, &range, from, to, 1_000, page_token).await?;
        for r in &records.items {
            let name = names.get(&r.token_id).map_or("", String::as_str);
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                time(r.created_at),
                field(&r.request_id),
                field(&r.account_id),
                field(&r.token_id),
                field(name),
                field(&r.model),
                field(&r.endpoint),
                r.prompt_tokens,
                r.completion_tokens,
                r.cached_tokens,
                dollars_value(r.cost_micros),
                r.status,
                r.latency_ms,
                r.estimated
            );
        }
        rows += records.items.len();
        if records.next_page_token.is_empty() || rows >= CSV_MAX {
            break;
        }
        page_token = records.next_page_token;
    }
    let file = format!("attachment; filename=\"usage-{}-to-{}.csv\"", page::date(from), page::date(to - DAY));
    Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()), (header::CONTENT_DISPOSITION, file)], out)
        .into_response())
}

async fn list(
    console: &Console,
    signed: &Signed,
    range: &Range,
    from: i64,
    to: i64,
    limit: u32,
    page_token: String,
) -> Result<pb::ListUsageResponse, ConsoleError> {
    let request = pb::ListUsageRequest {
        account_id: range.account.clone(),
        model: range.model.clone(),
        limit,
        from,
        to,
        page_token,
        ..Default::default()
    };
    Ok(console.call(signed, "ListUsage", request, |api, r| async move { Admin::list_usage(&*api, r).await }).await?)
}

/// Token id → name, for the tokens the user may see.
async fn token_names(console: &Console, signed: &Signed) -> Result<HashMap<String, String>, ConsoleError> {
    let tokens =
        console
            .call(signed, "ListTokens", pb::ListRequest::default(), |api, r| async move {
                Admin::list_tokens(&*api, r).await
            })
            .await?;
    Ok(tokens.items.into_iter().map(|t| (t.id, t.name)).collect())
}

/// A CSV field, quoted when it holds a comma, quote or line break, and
/// defused when a spreadsheet would read it as a formula.
fn field(text: &str) -> String {
    let text = if text.starts_with(['=', '+', '-', '@']) { format!("'{text}") } else { text.to_owned() };
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_and_defused() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("=SUM(A1)"), "'=SUM(A1)");
    }
}
