//! Console users: the list, inviting one (the link that sets the password
//! is shown once), enabling or disabling one, and resetting a password
//! (which ends the user's sessions and shows a new link once).

use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::html;
use serde::Deserialize;

use super::{done, link_page, path_of, writes};
use crate::api::console::page::{self, csrf, notice, scroll, time};
use crate::api::console::tokens::Notice;
use crate::api::console::{Console, ConsoleError};
use crate::domain::access::Role;

/// The invite form and each user's buttons.
#[derive(Debug, Default, Deserialize)]
pub struct UserForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    account: String,
}

/// The user list and the invite form.
pub async fn list(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let users =
        console
            .call(&signed, "ListUsers", pb::ListRequest::default(), |api, r| async move {
                Admin::list_users(&*api, r).await
            })
            .await?;
    let accounts = console
        .call(&signed, "ListAccounts", pb::ListRequest::default(), |api, r| async move {
            Admin::list_accounts(&*api, r).await
        })
        .await?;
    let writes = writes(&signed);
    let account_name = |id: &str| accounts.items.iter().find(|a| a.id == id).map(|a| a.name.clone());
    let body = html! {
        h1 { "Users" }
        (notice(Some(&notice_text.done)))
        p { "People who sign in to this console. Each has a role as admin credentials do." }
        (scroll(html! {
            table id="users" {
                thead { tr {
                    th scope="col" { "Name" } th scope="col" { "Role" } th scope="col" { "Account" }
                    th scope="col" { "Status" } th scope="col" { "Password set" } th scope="col" { "Created" }
                    th scope="col" { "Last sign-in" }
                    @if writes { th scope="col" { "Actions" } }
                } }
                tbody {
                    @for user in &users.items {
                        tr {
                            td { (user.name) }
                            td { (user.role) }
                            td {
                                @if !user.account_id.is_empty() {
                                    a href=(console.link(&path_of("/accounts", &user.account_id))) {
                                        (account_name(&user.account_id).unwrap_or_else(|| user.account_id.clone()))
                                    }
                                }
                            }
                            td { (user.status) }
                            td { @if user.has_password { "yes" } @else { "not yet" } }
                            td { (time(user.created_at)) }
                            td { (time(user.last_login_at)) }
                            @if writes {
                                td {
                                    form.inline method="post" action=(console.link("/users")) {
                                        (csrf(&signed))
                                        input type="hidden" name="name" value=(user.name);
                                        @if user.status == "enabled" {
                                            input type="hidden" name="action" value="disable";
                                            button.danger type="submit" aria-label={ "Disable " (user.name) } { "Disable" }
                                        } @else {
                                            input type="hidden" name="action" value="enable";
                                            button type="submit" aria-label={ "Enable " (user.name) } { "Enable" }
                                        }
                                    }
                                    form.inline method="post" action=(console.link("/users"))
                                        data-confirm="Reset this password? The user is signed out everywhere." {
                                        (csrf(&signed))
                                        input type="hidden" name="name" value=(user.name);
                                        input type="hidden" name="action" value="reset";
                                        button type="submit" aria-label={ "Reset the password of " (user.name) } { "Reset password" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }))
        @if writes {
            h2 { "Invite a user" }
            form.narrow method="post" action=(console.link("/users")) id="invite-user" {
                (csrf(&signed))
                input type="hidden" name="action" value="invite";
                label for="name" { "User name (they sign in with it)" }
                input id="name" name="name" required autocomplete="off";
                label for="role" { "Role" }
                select id="role" name="role" {
                    @for role in Role::ALL { option value=(role.as_str()) selected[role == Role::Account] { (role.as_str()) } }
                }
                label for="account" { "Account (for the account role)" }
                select id="account" name="account" {
                    option value="" { "— none (operators) —" }
                    @for account in &accounts.items { option value=(account.id) { (account.name) " (" (account.id) ")" } }
                }
                button type="submit" { "Invite" }
            }
        }
    };
    Ok(page::page(&console, &signed, "Users", body))
}

/// Invites, enables, disables a user or resets its password.
pub async fn change(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<UserForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let name = form.name.trim().to_owned();
    let enabled = match form.action.as_str() {
        "invite" => {
            let request = invite_request(&form);
            let link = console
                .call(&signed, "CreateUser", request, |api, r| async move { Admin::create_user(&*api, r).await })
                .await?;
            return Ok(link_page(
                &console,
                &signed,
                "User invited",
                "invite-link",
                &link,
                ("/users", "Back to the users"),
            ));
        }
        "reset" => {
            let request = pb::UserRef { name };
            let link = console
                .call(&signed, "ResetUserPassword", request, |api, r| async move {
                    Admin::reset_user_password(&*api, r).await
                })
                .await?;
            return Ok(link_page(
                &console,
                &signed,
                "Password reset",
                "reset-link",
                &link,
                ("/users", "Back to the users"),
            ));
        }
        "enable" => true,
        "disable" => false,
        other => return Err(ConsoleError::Invalid(format!("unknown action {other:?}"))),
    };
    let request = pb::UpdateUserRequest { name: name.clone(), enabled: Some(enabled) };
    console.call(&signed, "UpdateUser", request, |api, r| async move { Admin::update_user(&*api, r).await }).await?;
    Ok(done(&console, "/users", &format!("{name} {}", if enabled { "enabled" } else { "disabled" })))
}

/// The invite form as a request; an operator role takes no account, so the
/// account picked by mistake is dropped rather than refused.
fn invite_request(form: &UserForm) -> pb::CreateUserRequest {
    let role = form.role.trim();
    let account_id = if role == Role::Account.as_str() { form.account.trim().to_owned() } else { String::new() };
    pb::CreateUserRequest { name: form.name.trim().to_owned(), role: role.to_owned(), account_id }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_account_users_are_invited_with_an_account() {
        let form =
            UserForm { name: " ana ".into(), role: "account".into(), account: "acc_1".into(), ..Default::default() };
        let request = invite_request(&form);
        assert_eq!((request.name.as_str(), request.account_id.as_str()), ("ana", "acc_1"));
        let operator = UserForm { role: "admin".into(), account: "acc_1".into(), ..Default::default() };
        assert_eq!(invite_request(&operator).account_id, "");
    }
}
