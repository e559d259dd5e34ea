//! Top-up codes: the list a page at a time, minting a batch (the codes are
//! shown once, for copying), and revoking an active code.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::html;
use serde::Deserialize;

use super::{dollars, done, path_of, whole, writes};
use crate::api::console::page::{self, csrf, money, notice, scroll, time};
use crate::api::console::{Console, ConsoleError};

/// Codes per page.
const PAGE: u32 = 100;

#[derive(Debug, Default, Deserialize)]
pub struct CodesQuery {
    #[serde(default)]
    done: String,
    /// The previous answer's page token; empty for the first page.
    #[serde(default)]
    page: String,
}

/// The mint form and each code's revoke button.
#[derive(Debug, Default, Deserialize)]
pub struct CodeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    amount: String,
    #[serde(default)]
    count: String,
    #[serde(default)]
    expires: String,
    #[serde(default)]
    id: String,
}

/// One page of codes and the mint form.
pub async fn list(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<CodesQuery>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let request = pb::ListRequest { page_size: PAGE, page_token: query.page.clone(), ..Default::default() };
    let codes = console
        .call(&signed, "ListTopupCodes", request, |api, r| async move { Admin::list_topup_codes(&*api, r).await })
        .await?;
    let users =
        console
            .call(&signed, "ListUsers", pb::ListRequest::default(), |api, r| async move {
                Admin::list_users(&*api, r).await
            })
            .await?;
    let minters: HashMap<&str, &str> = users.items.iter().map(|u| (u.id.as_str(), u.name.as_str())).collect();
    let writes = writes(&signed);
    let body = html! {
        h1 { "Top-up codes" }
        (notice(Some(&query.done)))
        p { "Each code adds its amount to the balance of the first account that redeems it." }
        (scroll(html! {
            table id="topup-codes" {
                thead { tr {
                    th scope="col" { "Code" } th scope="col" { "Amount" } th scope="col" { "Status" }
                    th scope="col" { "Created" } th scope="col" { "Expires" } th scope="col" { "Minted by" }
                    th scope="col" { "Redeemed by" } th scope="col" { "Redeemed" }
                    @if writes { th scope="col" { "Actions" } }
                } }
                tbody {
                    @for code in &codes.items {
                        tr {
                            td { code { (code.prefix) } }
                            td { (money(code.amount_micros)) }
                            td { (code.status) }
                            td { (time(code.created_at)) }
                            td { @if code.expires_at == 0 { "never" } @else { (time(code.expires_at)) } }
                            td { (minters.get(code.created_by.as_str()).copied().unwrap_or(&code.created_by)) }
                            td {
                                @if !code.redeemed_by.is_empty() {
                                    a href=(console.link(&path_of("/accounts", &code.redeemed_by))) { code { (code.redeemed_by) } }
                                }
                            }
                            td { (time(code.redeemed_at)) }
                            @if writes {
                                td {
                                    @if code.status == "active" {
                                        form.inline method="post" action=(console.link("/topup-codes"))
                                            data-confirm="Revoke this code? It can no longer be redeemed." {
                                            (csrf(&signed))
                                            input type="hidden" name="action" value="revoke";
                                            input type="hidden" name="id" value=(code.id);
                                            button.danger type="submit" aria-label={ "Revoke " (code.prefix) } { "Revoke" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }))
        @if codes.items.is_empty() { p { "No codes yet." } }
        ul.actions {
            @if !query.page.is_empty() { li { a href=(console.link("/topup-codes")) { "First page" } } }
            @if !codes.next_page_token.is_empty() {
                li { a id="next-codes" href=(console.link(&format!("/topup-codes?page={}", page::encode(&codes.next_page_token)))) { "Next page" } }
            }
        }
        @if writes {
            h2 { "Mint codes" }
            form.narrow method="post" action=(console.link("/topup-codes")) id="mint-codes" {
                (csrf(&signed))
                input type="hidden" name="action" value="mint";
                label for="amount" { "Amount of each code in dollars" }
                input id="amount" name="amount" required inputmode="decimal";
                label for="count" { "How many" }
                input id="count" name="count" required inputmode="numeric" value="1";
                label for="expires" { "Expires on (UTC midnight; empty: never)" }
                input id="expires" name="expires" type="date";
                button type="submit" { "Mint" }
            }
        }
    };
    Ok(page::page(&console, &signed, "Top-up codes", body))
}

/// Mints a batch (and shows it, once) or revokes a code.
pub async fn change(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<CodeForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    match form.action.as_str() {
        "mint" => {
            let request = mint_request(&form)?;
            let minted = console
                .call(&signed, "CreateTopupCodes", request, |api, r| async move {
                    Admin::create_topup_codes(&*api, r).await
                })
                .await?;
            let codes: Vec<&str> = minted.items.iter().map(|item| item.code.as_str()).collect();
            let amount = minted.items.first().and_then(|item| item.topup_code.as_ref()).map_or(0, |c| c.amount_micros);
            let body = html! {
                h1 { "Codes minted" }
                p.notice role="status" { "Copy the codes now: they are shown only this once." }
                div.key {
                    label for="minted-codes" { (codes.len()) " codes of " (money(amount)) ", one a line" }
                    textarea id="minted-codes" readonly rows=(codes.len().clamp(2, 20)) data-copyable { (codes.join("\n")) }
                    button type="button" data-copy="minted-codes" { "Copy" }
                }
                p { a href=(console.link("/topup-codes")) { "Back to the codes" } }
            };
            Ok(page::page(&console, &signed, "Codes minted", body))
        }
        "revoke" => {
            let request = pb::GetRequest { id: form.id.trim().to_owned() };
            let code =
                console
                    .call(&signed, "RevokeTopupCode", request, |api, r| async move {
                        Admin::revoke_topup_code(&*api, r).await
                    })
                    .await?;
            Ok(done(&console, "/topup-codes", &format!("Code {} revoked", code.prefix)))
        }
        other => Err(ConsoleError::Invalid(format!("unknown action {other:?}"))),
    }
}

/// The mint form as a request: a positive amount, a count, an optional
/// expiry date.
fn mint_request(form: &CodeForm) -> Result<pb::CreateTopupCodesRequest, ConsoleError> {
    let amount_micros = dollars("the amount", &form.amount)?;
    if amount_micros <= 0 {
        return Err(ConsoleError::Invalid("the amount must be more than zero".into()));
    }
    let count = whole("the count", &form.count)?;
    let expires_at = match form.expires.trim() {
        "" => 0,
        text => {
            page::parse_date(text).ok_or_else(|| ConsoleError::Invalid(format!("the expiry {text:?} is not a date")))?
        }
    };
    Ok(pb::CreateTopupCodesRequest { count, amount_micros, expires_at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mint_form_reads_amount_count_and_expiry() {
        let form =
            CodeForm { amount: "10".into(), count: "25".into(), expires: "2030-01-02".into(), ..Default::default() };
        let request = mint_request(&form).expect("valid");
        assert_eq!((request.amount_micros, request.count), (10_000_000, 25));
        assert_eq!(request.expires_at, page::parse_date("2030-01-02").expect("date"));
        let never = mint_request(&CodeForm { amount: "1".into(), count: "1".into(), ..Default::default() });
        assert_eq!(never.expect("valid").expires_at, 0);
        for (amount, count, expires) in [("0", "1", ""), ("", "1", ""), ("1", "x", ""), ("1", "1", "soon")] {
            let form =
                CodeForm { amount: amount.into(), count: count.into(), expires: expires.into(), ..Default::default() };
            assert!(mint_request(&form).is_err(), "{amount} {count} {expires}");
        }
    }
}
