//! The account owner's pages besides tokens and usage: the overview with
//! the balance, the models the account may use with the prices it is billed
//! (its group's ratio applied), and redeeming a top-up code. Operators get
//! an overview of the gateway on the same start page.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::html;
use serde::Deserialize;

use super::page::{self, csrf, money, notice, scroll, time};
use super::tokens::Notice;
use super::{Console, ConsoleError};
use crate::domain::access::Role;

#[derive(Deserialize)]
pub struct Redeem {
    #[serde(default)]
    csrf: String,
    code: String,
}

/// The start page: an account's balance, or the gateway at a glance.
pub async fn home(State(console): State<Arc<Console>>, headers: HeaderMap) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    if signed.user.role != Role::Account {
        let accounts = console
            .call(&signed, "ListAccounts", pb::ListRequest::default(), |api, r| async move {
                Admin::list_accounts(&*api, r).await
            })
            .await?;
        let fleet = console
            .call(&signed, "ListDataPlanes", pb::ListRequest::default(), |api, r| async move {
                Admin::list_data_planes(&*api, r).await
            })
            .await?;
        let body = html! {
            h1 { "Overview" }
            dl {
                dt { "Accounts" } dd { (accounts.items.len()) }
                dt { "Data planes" } dd { (fleet.items.len()) }
            }
            p { "Signed in as " strong { (signed.user.name) } " (" (signed.user.role) ")." }
            (sessions_form(&console, &signed))
        };
        return Ok(page::page(&console, &signed, "Overview", body));
    }
    let request = pb::GetRequest::default();
    let account = console
        .call(&signed, "GetAccount", request, |api, r| async move { Admin::get_account(&*api, r).await })
        .await?;
    let body = html! {
        h1 { "Overview" }
        dl {
            dt { "Account" } dd { (account.name) }
            dt { "Balance" } dd id="balance" { @if account.unlimited { "unlimited" } @else { (money(account.balance_micros)) } }
            dt { "Spent" } dd { (money(account.used_micros)) }
            dt { "Groups" } dd { (account.groups.join(", ")) }
            @if let Some(window) = account.window.as_ref().filter(|w| !w.period.is_empty() && w.period != "none") {
                dt { "This " (window.period) } dd { (money(window.used_micros)) " of " (money(window.quota_micros)) }
            }
        }
        ul.actions {
            li { a href=(console.link("/tokens")) { "Manage tokens" } }
            li { a href=(console.link("/topup")) { "Top up" } }
            li { a href=(console.link("/usage")) { "See usage" } }
            li { a href=(console.link("/playground")) { "Open the playground" } }
        }
        (sessions_form(&console, &signed))
    };
    Ok(page::page(&console, &signed, "Overview", body))
}

fn sessions_form(console: &Console, signed: &crate::services::console::Signed) -> maud::Markup {
    html! {
        form method="post" action=(console.link("/logout-everywhere")) {
            (csrf(signed))
            button type="submit" { "Sign out on every browser" }
        }
    }
}

/// The models the account may use and what it pays for them.
pub async fn models(State(console): State<Arc<Console>>, headers: HeaderMap) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let models =
        console
            .call(&signed, "ListModels", pb::ListRequest::default(), |api, r| async move {
                Admin::list_models(&*api, r).await
            })
            .await?;
    let groups =
        console
            .call(&signed, "ListGroups", pb::ListRequest::default(), |api, r| async move {
                Admin::list_groups(&*api, r).await
            })
            .await?;
    let per_million = |micros: i64, ratio: f64| {
        if micros == 0 { "—".to_owned() } else { money((micros as f64 * ratio).round() as i64) }
    };
    let body = html! {
        h1 { "Models" }
        p { "Prices are per million tokens (or per request, image or second where the model bills so), with each group's ratio applied." }
        @for group in &groups.items {
            h2 { "Group " (group.name) @if group.ratio != 1.0 { " (prices × " (group.ratio) ")" } }
            @if group.deprecated { p.error { "This group is deprecated." } }
            (scroll(html! {
                table.models {
                    thead { tr {
                        th scope="col" { "Model" } th scope="col" { "Kind" } th scope="col" { "Input" }
                        th scope="col" { "Output" } th scope="col" { "Cached input" } th scope="col" { "Per request" }
                    } }
                    tbody {
                        @for model in &models.items {
                            tr {
                                td { code { (model.id) } }
                                td { (model.category) }
                                td { (per_million(model.input_price_micros, group.ratio)) }
                                td { (per_million(model.output_price_micros, group.ratio)) }
                                td { (per_million(model.cached_price_micros, group.ratio)) }
                                td { (per_million(model.request_price_micros, group.ratio)) }
                            }
                        }
                    }
                }
            }))
        }
        @if models.items.is_empty() { p { "No model is available yet." } }
    };
    Ok(page::page(&console, &signed, "Models", body))
}

/// The top-up form and the codes this account redeemed.
pub async fn topup(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let request = pb::ListRequest { account_id: signed.user.account_id.clone(), ..Default::default() };
    let codes = console
        .call(&signed, "ListTopupCodes", request, |api, r| async move { Admin::list_topup_codes(&*api, r).await })
        .await?;
    let balance = if signed.user.role == Role::Account {
        let account = console
            .call(&signed, "GetAccount", pb::GetRequest::default(), |api, r| async move {
                Admin::get_account(&*api, r).await
            })
            .await?;
        Some(if account.unlimited { "unlimited".to_owned() } else { money(account.balance_micros) })
    } else {
        None
    };
    let body = html! {
        h1 { "Top up" }
        (notice(Some(&notice_text.done)))
        @if let Some(balance) = balance { p { "Balance: " strong id="balance" { (balance) } } }
        @if signed.user.role == Role::Account {
            form.narrow method="post" action=(console.link("/topup")) id="redeem" {
                (csrf(&signed))
                label for="code" { "Top-up code" }
                input id="code" name="code" required autocomplete="off" placeholder="gwtopup-…";
                button type="submit" { "Redeem" }
            }
            p.hint { "Codes are sold or handed out by the gateway's operator." }
        }
        h2 { "Redeemed codes" }
        (scroll(html! {
            table id="redeemed" {
                thead { tr { th scope="col" { "Code" } th scope="col" { "Amount" } th scope="col" { "Redeemed" } } }
                tbody {
                    @for code in codes.items.iter().filter(|c| !c.redeemed_by.is_empty()) {
                        tr { td { code { (code.prefix) } } td { (money(code.amount_micros)) } td { (time(code.redeemed_at)) } }
                    }
                }
            }
        }))
    };
    Ok(page::page(&console, &signed, "Top up", body))
}

/// Redeems a code for the signed-in account.
pub async fn redeem(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<Redeem>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let request = pb::RedeemTopupCodeRequest { code: form.code.trim().to_owned(), account_id: String::new() };
    let redeemed = console
        .call(&signed, "RedeemTopupCode", request, |api, r| async move { Admin::redeem_topup_code(&*api, r).await })
        .await?;
    let amount = redeemed.topup_code.map_or(0, |code| code.amount_micros);
    let done = format!("Added {} to your balance, now {}", money(amount), money(redeemed.balance_micros));
    Ok(axum::response::IntoResponse::into_response(axum::response::Redirect::to(
        &console.link(&format!("/topup?done={}", page::encode(&done))),
    )))
}
