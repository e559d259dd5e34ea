//! Accounts: the list with the console users of each, creating one, and one
//! account's page to credit or deduct balance, set its groups, enable or
//! disable it, and invite its owner as a console user.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::html;
use serde::Deserialize;

use super::{dollars, done, link_page, path_of, signed_dollars, split_list, writes};
use crate::api::console::page::{self, csrf, money, notice, scroll, time};
use crate::api::console::tokens::Notice;
use crate::api::console::{Console, ConsoleError};

/// Every account form: create takes name, balance, unlimited and groups;
/// the account page's forms say what they do in `action`.
#[derive(Debug, Default, Deserialize)]
pub struct AccountForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    balance: String,
    #[serde(default)]
    unlimited: Option<String>,
    #[serde(default)]
    groups: String,
    #[serde(default)]
    amount: String,
    #[serde(default)]
    user: String,
}

/// The account list and the create form.
pub async fn list(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let accounts = console
        .call(&signed, "ListAccounts", pb::ListRequest::default(), |api, r| async move {
            Admin::list_accounts(&*api, r).await
        })
        .await?;
    let users =
        console
            .call(&signed, "ListUsers", pb::ListRequest::default(), |api, r| async move {
                Admin::list_users(&*api, r).await
            })
            .await?;
    let mut owners: HashMap<&str, Vec<&str>> = HashMap::new();
    for user in users.items.iter().filter(|u| !u.account_id.is_empty()) {
        owners.entry(user.account_id.as_str()).or_default().push(user.name.as_str());
    }
    let body = html! {
        h1 { "Accounts" }
        (notice(Some(&notice_text.done)))
        (scroll(html! {
            table id="accounts" {
                thead { tr {
                    th scope="col" { "Id" } th scope="col" { "Name" } th scope="col" { "Balance" }
                    th scope="col" { "Spent" } th scope="col" { "Unlimited" } th scope="col" { "Groups" }
                    th scope="col" { "Status" } th scope="col" { "Console users" }
                } }
                tbody {
                    @for account in &accounts.items {
                        tr {
                            td { a href=(console.link(&path_of("/accounts", &account.id))) { code { (account.id) } } }
                            td { (account.name) }
                            td { (money(account.balance_micros)) }
                            td { (money(account.used_micros)) }
                            td { @if account.unlimited { "yes" } @else { "no" } }
                            td { (account.groups.join(", ")) }
                            td { (account.status) }
                            td { (owners.get(account.id.as_str()).map(|names| names.join(", ")).unwrap_or_default()) }
                        }
                    }
                }
            }
        }))
        @if accounts.items.is_empty() { p { "No accounts yet." } }
        @if writes(&signed) {
            h2 { "Create an account" }
            form.narrow method="post" action=(console.link("/accounts")) id="create-account" {
                (csrf(&signed))
                label for="name" { "Name" }
                input id="name" name="name" required autocomplete="off";
                label for="balance" { "Starting balance in dollars" }
                input id="balance" name="balance" inputmode="decimal" value="0";
                label.check {
                    input type="checkbox" name="unlimited" value="on";
                    " Unlimited (never refused for its balance)"
                }
                label for="groups" { "Groups (comma-separated)" }
                input id="groups" name="groups" value="default";
                button type="submit" { "Create account" }
            }
        }
    };
    Ok(page::page(&console, &signed, "Accounts", body))
}

/// Creates an account and opens its page.
pub async fn create(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<AccountForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let request = create_request(&form)?;
    let account = console
        .call(&signed, "CreateAccount", request, |api, r| async move { Admin::create_account(&*api, r).await })
        .await?;
    Ok(done(&console, &path_of("/accounts", &account.id), "Account created"))
}

/// The create form as a request.
fn create_request(form: &AccountForm) -> Result<pb::CreateAccountRequest, ConsoleError> {
    Ok(pb::CreateAccountRequest {
        name: form.name.trim().to_owned(),
        balance_micros: dollars("the starting balance", &form.balance)?,
        unlimited: form.unlimited.is_some(),
        groups: split_list(&form.groups),
        window: None,
    })
}

/// One account's page.
pub async fn show(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let account = console
        .call(&signed, "GetAccount", pb::GetRequest { id: id.clone() }, |api, r| async move {
            Admin::get_account(&*api, r).await
        })
        .await?;
    let request = pb::ListRequest { account_id: id, ..Default::default() };
    let users =
        console.call(&signed, "ListUsers", request, |api, r| async move { Admin::list_users(&*api, r).await }).await?;
    let groups =
        console
            .call(&signed, "ListGroups", pb::ListRequest::default(), |api, r| async move {
                Admin::list_groups(&*api, r).await
            })
            .await?;
    let action = console.link(&path_of("/accounts", &account.id));
    let body = html! {
        h1 { "Account " (account.name) }
        (notice(Some(&notice_text.done)))
        dl {
            dt { "Id" } dd { code { (account.id) } }
            dt { "Balance" } dd id="account-balance" { (money(account.balance_micros)) }
            dt { "Unlimited" } dd { @if account.unlimited { "yes" } @else { "no" } }
            dt { "Spent" } dd { (money(account.used_micros)) }
            dt { "Groups" } dd id="account-group-list" { (account.groups.join(", ")) }
            dt { "Status" } dd id="account-status" { (account.status) }
            dt { "Created" } dd { (time(account.created_at)) }
            @if let Some(window) = account.window.as_ref().filter(|w| !w.period.is_empty() && w.period != "none") {
                dt { "This " (window.period) } dd { (money(window.used_micros)) " of " (money(window.quota_micros)) }
            }
        }
        h2 { "Console users" }
        (scroll(html! {
            table id="account-users" {
                thead { tr {
                    th scope="col" { "Name" } th scope="col" { "Status" } th scope="col" { "Password set" }
                    th scope="col" { "Last sign-in" }
                } }
                tbody {
                    @for user in &users.items {
                        tr {
                            td { (user.name) } td { (user.status) }
                            td { @if user.has_password { "yes" } @else { "not yet" } }
                            td { (time(user.last_login_at)) }
                        }
                    }
                }
            }
        }))
        @if users.items.is_empty() { p { "No one signs in for this account yet." } }
        @if writes(&signed) {
            h2 { "Invite the owner" }
            form.narrow method="post" action=(action) id="invite-owner" {
                (csrf(&signed))
                input type="hidden" name="action" value="invite";
                label for="user" { "User name (they sign in with it)" }
                input id="user" name="user" required autocomplete="off";
                button type="submit" { "Invite" }
            }
            h2 { "Credit or deduct" }
            form.narrow method="post" action=(action) id="credit-account" {
                (csrf(&signed))
                input type="hidden" name="action" value="credit";
                label for="amount" { "Amount in dollars (negative deducts)" }
                input id="amount" name="amount" required inputmode="decimal" placeholder="e.g. 25 or -5";
                button type="submit" { "Apply" }
            }
            h2 { "Groups" }
            form.narrow method="post" action=(action) id="account-groups" {
                (csrf(&signed))
                input type="hidden" name="action" value="groups";
                label for="groups" { "Groups (comma-separated)" }
                input id="groups" name="groups" value=(account.groups.join(", "));
                p.hint { "Groups: " (groups.items.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")) }
                button type="submit" { "Save groups" }
            }
            h2 { "Status" }
            (page::status_toggle(&signed, &action, "toggle-account", &account.status, "account"))
        }
        p { a href=(console.link("/accounts")) { "Back to the accounts" } }
    };
    Ok(page::page(&console, &signed, "Account", body))
}

/// Credits, sets groups, enables, disables, or invites the owner of an
/// account.
pub async fn change(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<AccountForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let here = path_of("/accounts", &id);
    let mut update = pb::UpdateAccountRequest { id: id.clone(), ..Default::default() };
    let text = match form.action.as_str() {
        "invite" => {
            let request =
                pb::CreateUserRequest { name: form.user.trim().to_owned(), role: "account".into(), account_id: id };
            let link = console
                .call(&signed, "CreateUser", request, |api, r| async move { Admin::create_user(&*api, r).await })
                .await?;
            return Ok(link_page(
                &console,
                &signed,
                "Owner invited",
                "invite-link",
                &link,
                (&here, "Back to the account"),
            ));
        }
        "credit" => {
            let amount_micros = signed_dollars("the amount", &form.amount)?;
            let request = pb::TopUpRequest { id, amount_micros };
            let account = console
                .call(&signed, "TopUpAccount", request, |api, r| async move { Admin::top_up_account(&*api, r).await })
                .await?;
            let verb = if amount_micros < 0 { "Deducted" } else { "Credited" };
            let text =
                format!("{verb} {}; the balance is {}", money(amount_micros.abs()), money(account.balance_micros));
            return Ok(done(&console, &here, &text));
        }
        "groups" => {
            update.set_groups = true;
            update.groups = split_list(&form.groups);
            "Groups saved"
        }
        action @ ("enable" | "disable") => {
            update.status = Some(format!("{action}d"));
            if action == "enable" { "Account enabled" } else { "Account disabled" }
        }
        other => return Err(ConsoleError::Invalid(format!("unknown action {other:?}"))),
    };
    console
        .call(&signed, "UpdateAccount", update, |api, r| async move { Admin::update_account(&*api, r).await })
        .await?;
    Ok(done(&console, &here, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_create_form_reads_dollars_and_groups() {
        let form = AccountForm {
            name: " Acme ".into(),
            balance: "12.5".into(),
            groups: "default, vip,".into(),
            ..Default::default()
        };
        let request = create_request(&form).expect("valid");
        assert_eq!(request.name, "Acme");
        assert_eq!(request.balance_micros, 12_500_000);
        assert_eq!(request.groups, ["default", "vip"]);
        assert!(!request.unlimited);
        let negative = AccountForm { balance: "-3".into(), ..Default::default() };
        assert!(create_request(&negative).is_err());
    }
}
