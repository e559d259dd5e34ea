//! The operators' pages: accounts, channels and their key pools, the price
//! catalogue, groups, data planes, the audit log, console users and top-up
//! codes. Every read and write is the admin service's RPC as the signed-in
//! user, so the role table decides: a read-only operator sees the pages
//! without their forms and is refused any write, and an account user is
//! refused the operator-only read each page makes.

mod accounts;
mod channels;
mod fleet;
mod groups;
mod prices;
mod topup;
mod users;

use std::sync::Arc;

use axum::Router;
use axum::response::Response;
use axum::routing::get;
use gw_proto::pb;
use maud::html;

use super::Console;
use super::form::{dollars, dollars_value, done, path_of, signed_dollars, split_list, whole};
use super::page::{self, time};
use crate::domain::access::Role;
use crate::services::console::Signed;

/// The operator pages' routes.
pub fn routes() -> Router<Arc<Console>> {
    Router::new()
        .route("/accounts", get(accounts::list).post(accounts::create))
        .route("/accounts/{id}", get(accounts::show).post(accounts::change))
        .route("/channels", get(channels::list).post(channels::create))
        .route("/channels/{id}", get(channels::show).post(channels::change))
        .route("/prices", get(prices::list).post(prices::change))
        .route("/groups", get(groups::list).post(groups::change))
        .route("/fleet", get(fleet::fleet).post(fleet::forget))
        .route("/audit", get(fleet::audit))
        .route("/users", get(users::list).post(users::change))
        .route("/topup-codes", get(topup::list).post(topup::change))
}

/// Whether a page shows its write forms. Only admins may write; the role
/// table refuses anyone else's writes, so this only spares read-only
/// operators controls they cannot use.
fn writes(signed: &Signed) -> bool {
    signed.user.role == Role::Admin
}

/// The page that shows a user's one-time link (an invitation or a password
/// reset), once, in a read-only field with a copy button.
fn link_page(
    console: &Console,
    signed: &Signed,
    title: &str,
    field: &str,
    link: &pb::UserLink,
    back: (&str, &str),
) -> Response {
    let name = link.user.as_ref().map(|user| user.name.as_str()).unwrap_or_default();
    let body = html! {
        h1 { (title) }
        p.notice role="status" { "Copy the link now: it is shown only this once." }
        div.key {
            label for=(field) { "One-time link for " (name) }
            input id=(field) readonly value=(link.link) data-copyable;
            button type="button" data-copy=(field) { "Copy" }
        }
        p {
            "Send it to " strong { (name) } " over a channel you trust: it sets the password and works until "
            (time(link.expires_at)) "."
        }
        p { a href=(console.link(back.0)) { (back.1) } }
    };
    page::page(console, signed, title, body)
}

#[cfg(test)]
mod tests;
