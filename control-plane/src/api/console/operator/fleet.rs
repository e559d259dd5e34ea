//! The read-mostly operator pages: the data planes connected to the
//! control plane (forgetting one that is gone), and the audit log of admin
//! writes, newest first, a page at a time.

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

use super::{done, writes};
use crate::api::console::page::{self, csrf, notice, scroll, time};
use crate::api::console::tokens::Notice;
use crate::api::console::{Console, ConsoleError};

/// Audit entries per page.
const AUDIT_PAGE: u32 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct ForgetForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    node: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct AuditQuery {
    /// Only entries of this actor (a user or credential id).
    #[serde(default)]
    actor: String,
    /// Only entries about this resource kind.
    #[serde(default)]
    kind: String,
    /// The page token of the previous page's answer; empty for the newest.
    #[serde(default)]
    page: String,
}

/// The data planes and how far each is in sync.
pub async fn fleet(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(notice_text): Query<Notice>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let fleet = console
        .call(&signed, "ListDataPlanes", pb::ListRequest::default(), |api, r| async move {
            Admin::list_data_planes(&*api, r).await
        })
        .await?;
    let writes = writes(&signed);
    let body = html! {
        h1 { "Data planes" }
        (notice(Some(&notice_text.done)))
        p { "The control plane is at revision " strong id="revision" { (fleet.revision) } "." }
        (scroll(html! {
            table id="fleet" {
                thead { tr {
                    th scope="col" { "Node" } th scope="col" { "Address" } th scope="col" { "Version" }
                    th scope="col" { "State" } th scope="col" { "Applied revision" } th scope="col" { "Sent revision" }
                    th scope="col" { "Usage backlog" } th scope="col" { "Requests/s" } th scope="col" { "Connected since" }
                    th scope="col" { "Last seen" } th scope="col" { "Replica" } th scope="col" { "Last error" }
                    @if writes { th scope="col" { "Actions" } }
                } }
                tbody {
                    @for node in &fleet.items {
                        tr {
                            td { code { (node.node_id) } }
                            td { (node.address) }
                            td { (node.version) }
                            td { (node.liveness) }
                            td {
                                (node.acked_revision)
                                @if node.acked_revision == fleet.revision { " (in sync)" }
                            }
                            td { (node.sent_revision) }
                            td { (node.spool_backlog) }
                            td { (format!("{:.1}", node.requests_per_second)) }
                            td { (time(node.connected_at)) }
                            td { (time(node.last_seen)) }
                            td { (node.replica) }
                            td { (node.last_error) }
                            @if writes {
                                td {
                                    @if node.liveness != "connected" {
                                        form.inline method="post" action=(console.link("/fleet")) {
                                            (csrf(&signed))
                                            input type="hidden" name="node" value=(node.node_id);
                                            button type="submit" aria-label={ "Forget " (node.node_id) } { "Forget" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }))
        @if fleet.items.is_empty() { p { "No data plane has connected yet." } }
    };
    Ok(page::page(&console, &signed, "Data planes", body))
}

/// Forgets a data plane that is gone.
pub async fn forget(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<ForgetForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let node = form.node.trim().to_owned();
    let request = pb::GetRequest { id: node.clone() };
    console
        .call(&signed, "RemoveDataPlane", request, |api, r| async move { Admin::remove_data_plane(&*api, r).await })
        .await?;
    Ok(done(&console, "/fleet", &format!("Forgot {node}")))
}

/// One page of the audit log, with its filters.
pub async fn audit(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<AuditQuery>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let request = pb::ListAuditRequest {
        limit: AUDIT_PAGE,
        page_token: query.page.clone(),
        actor_id: query.actor.trim().to_owned(),
        kind: query.kind.trim().to_owned(),
        ..Default::default()
    };
    let entries =
        console.call(&signed, "ListAudit", request, |api, r| async move { Admin::list_audit(&*api, r).await }).await?;
    let users =
        console
            .call(&signed, "ListUsers", pb::ListRequest::default(), |api, r| async move {
                Admin::list_users(&*api, r).await
            })
            .await?;
    let names: HashMap<&str, &str> = users.items.iter().map(|u| (u.id.as_str(), u.name.as_str())).collect();
    let older = (!entries.next_page_token.is_empty()).then(|| audit_link(&query, &entries.next_page_token));
    let body = html! {
        h1 { "Audit log" }
        p { "Every admin write, and every refused attempt at one, newest first." }
        form.filters method="get" action=(console.link("/audit")) id="audit-filters" {
            div {
                label for="actor" { "Actor id" }
                input id="actor" name="actor" value=(query.actor) placeholder="usr_… or cred_…";
            }
            div {
                label for="kind" { "Resource kind" }
                input id="kind" name="kind" value=(query.kind) placeholder="account, token, channel…";
            }
            button type="submit" { "Filter" }
        }
        (scroll(html! {
            table id="audit" {
                thead { tr {
                    th scope="col" { "#" } th scope="col" { "When" } th scope="col" { "Actor" }
                    th scope="col" { "Role" } th scope="col" { "Method" } th scope="col" { "Kind" }
                    th scope="col" { "Target" } th scope="col" { "Outcome" }
                } }
                tbody {
                    @for entry in &entries.items {
                        tr {
                            td { (entry.seq) }
                            td { (time(entry.at)) }
                            td {
                                @if let Some(name) = names.get(entry.actor_id.as_str()) { (name) " " }
                                code { (entry.actor_id) }
                            }
                            td { (entry.actor_role) }
                            td { (entry.method) }
                            td { (entry.kind) }
                            td { (entry.target) }
                            td { (entry.outcome) }
                        }
                    }
                }
            }
        }))
        @if entries.items.is_empty() { p { "No entries." } }
        ul.actions {
            @if !query.page.is_empty() { li { a href=(console.link(&audit_link(&query, ""))) { "Newest entries" } } }
            @if let Some(older) = older { li { a id="older" href=(console.link(&older)) { "Older entries" } } }
        }
    };
    Ok(page::page(&console, &signed, "Audit log", body))
}

/// The audit path with `query`'s filters at the page of `token`.
fn audit_link(query: &AuditQuery, token: &str) -> String {
    let pairs = [("actor", query.actor.trim()), ("kind", query.kind.trim()), ("page", token)];
    let query: Vec<String> =
        pairs.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={}", page::encode(v))).collect();
    if query.is_empty() { "/audit".into() } else { format!("/audit?{}", query.join("&")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_pages_keep_their_filters() {
        let query = AuditQuery { actor: "usr_1".into(), kind: String::new(), page: "p1".into() };
        assert_eq!(audit_link(&query, "p 2"), "/audit?actor=usr_1&page=p%202");
        assert_eq!(audit_link(&query, ""), "/audit?actor=usr_1");
        assert_eq!(audit_link(&AuditQuery::default(), ""), "/audit");
    }
}
