//! Groups: the list with each group's ratio, limits and the channels
//! serving it, creating one, and editing one (`?edit=<name>`).

use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::{Markup, html};
use serde::Deserialize;

use super::{done, whole, writes};
use crate::api::console::page::{self, csrf, notice, scroll};
use crate::api::console::{Console, ConsoleError};
use crate::services::console::Signed;

#[derive(Debug, Default, Deserialize)]
pub struct GroupsQuery {
    #[serde(default)]
    done: String,
    /// The group whose edit form the page shows.
    #[serde(default)]
    edit: String,
}

/// The create and edit forms.
#[derive(Debug, Default, Deserialize)]
pub struct GroupForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    ratio: String,
    #[serde(default)]
    deprecated: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    rate_max: String,
    #[serde(default)]
    rate_window: String,
    #[serde(default)]
    tokens_per_minute: String,
    #[serde(default)]
    max_in_flight: String,
}

/// The group list, the create form, and the edit form of `?edit=<name>`.
pub async fn list(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<GroupsQuery>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let groups =
        console
            .call(&signed, "ListGroups", pb::ListRequest::default(), |api, r| async move {
                Admin::list_groups(&*api, r).await
            })
            .await?;
    let channels = console
        .call(&signed, "ListChannels", pb::ListRequest::default(), |api, r| async move {
            Admin::list_channels(&*api, r).await
        })
        .await?;
    let serving = |group: &str| channels.items.iter().filter(|c| c.groups.iter().any(|g| g == group)).count();
    let writes = writes(&signed);
    let editing = groups.items.iter().find(|g| writes && !query.edit.is_empty() && g.name == query.edit);
    let limit = |n: u32| if n == 0 { "—".to_owned() } else { n.to_string() };
    let body = html! {
        h1 { "Groups" }
        (notice(Some(&query.done)))
        p { "A group sets the price ratio and the limits of the accounts and tokens in it, and which channels serve them." }
        @if let Some(group) = editing {
            h2 { "Edit group " (group.name) }
            (group_form(&console, &signed, Some(group)))
        }
        (scroll(html! {
            table id="groups" {
                thead { tr {
                    th scope="col" { "Name" } th scope="col" { "Ratio" } th scope="col" { "Deprecated" }
                    th scope="col" { "Description" } th scope="col" { "Requests" } th scope="col" { "Tokens per minute" }
                    th scope="col" { "In flight" } th scope="col" { "Channels" }
                    @if writes { th scope="col" { "Edit" } }
                } }
                tbody {
                    @for group in &groups.items {
                        tr {
                            td { (group.name) }
                            td { (group.ratio) }
                            td { @if group.deprecated { "yes" } @else { "no" } }
                            td { (group.description) }
                            td { (rate(group.rate_limit.as_ref())) }
                            td { (limit(group.tokens_per_minute)) }
                            td { (limit(group.max_in_flight)) }
                            td { (serving(&group.name)) }
                            @if writes {
                                td {
                                    a href=(console.link(&format!("/groups?edit={}#edit-group", page::encode(&group.name))))
                                        aria-label={ "Edit group " (group.name) } { "Edit" }
                                }
                            }
                        }
                    }
                }
            }
        }))
        @if groups.items.is_empty() { p { "No groups yet." } }
        @if writes {
            h2 { "Create a group" }
            (group_form(&console, &signed, None))
        }
    };
    Ok(page::page(&console, &signed, "Groups", body))
}

fn rate(limit: Option<&pb::RateLimit>) -> String {
    match limit {
        Some(l) if l.window_minutes > 0 => format!("{} per {} min", l.max_requests, l.window_minutes),
        _ => "—".into(),
    }
}

/// The create form (`group` is `None`) or the edit form of `group`.
fn group_form(console: &Console, signed: &Signed, group: Option<&pb::Group>) -> Markup {
    let (id, prefix) = if group.is_some() { ("edit-group", "edit-") } else { ("create-group", "new-") };
    let rate = group.and_then(|g| g.rate_limit.as_ref()).filter(|r| r.window_minutes > 0);
    let number = |n: u32| if n == 0 { String::new() } else { n.to_string() };
    html! {
        form.narrow method="post" action=(console.link("/groups")) id=(id) {
            (csrf(signed))
            @if let Some(group) = group {
                input type="hidden" name="action" value="update";
                input type="hidden" name="name" value=(group.name);
            } @else {
                input type="hidden" name="action" value="create";
                label for="new-name" { "Name" }
                input id="new-name" name="name" required autocomplete="off";
            }
            label for={ (prefix) "ratio" } { "Price ratio (1 is list price)" }
            input id={ (prefix) "ratio" } name="ratio" inputmode="decimal" required value=(group.map_or(1.0, |g| g.ratio));
            label for={ (prefix) "description" } { "Description" }
            input id={ (prefix) "description" } name="description" value=(group.map(|g| g.description.as_str()).unwrap_or_default());
            label.check {
                input type="checkbox" name="deprecated" value="on" id={ (prefix) "deprecated" } checked[group.is_some_and(|g| g.deprecated)];
                " Deprecated (account owners are told so on their models page)"
            }
            fieldset {
                legend { "Limits per account (empty: none)" }
                label for={ (prefix) "rate_max" } { "Requests per window" }
                input id={ (prefix) "rate_max" } name="rate_max" inputmode="numeric" value=(rate.map(|r| r.max_requests.to_string()).unwrap_or_default());
                label for={ (prefix) "rate_window" } { "Window in minutes" }
                input id={ (prefix) "rate_window" } name="rate_window" inputmode="numeric" value=(rate.map(|r| r.window_minutes.to_string()).unwrap_or_default());
                label for={ (prefix) "tokens_per_minute" } { "Tokens per minute" }
                input id={ (prefix) "tokens_per_minute" } name="tokens_per_minute" inputmode="numeric" value=(number(group.map_or(0, |g| g.tokens_per_minute)));
                label for={ (prefix) "max_in_flight" } { "Requests in flight at once" }
                input id={ (prefix) "max_in_flight" } name="max_in_flight" inputmode="numeric" value=(number(group.map_or(0, |g| g.max_in_flight)));
            }
            button type="submit" { @if group.is_some() { "Save group" } @else { "Create group" } }
        }
    }
}

/// Creates a group or saves one's ratio, description, deprecation and
/// limits.
pub async fn change(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<GroupForm>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    let group = read_group(&form)?;
    let name = group.name.clone();
    match form.action.as_str() {
        "create" => {
            console
                .call(&signed, "CreateGroup", group, |api, r| async move { Admin::create_group(&*api, r).await })
                .await?;
            Ok(done(&console, "/groups", &format!("Group {name} created")))
        }
        "update" => {
            let request = pb::UpdateGroupRequest {
                name: group.name,
                ratio: Some(group.ratio),
                deprecated: Some(group.deprecated),
                description: Some(group.description),
                rate_limit: Some(group.rate_limit.unwrap_or_default()),
                tokens_per_minute: Some(group.tokens_per_minute),
                max_in_flight: Some(group.max_in_flight),
            };
            console
                .call(&signed, "UpdateGroup", request, |api, r| async move { Admin::update_group(&*api, r).await })
                .await?;
            Ok(done(&console, "/groups", &format!("Group {name} saved")))
        }
        other => Err(ConsoleError::Invalid(format!("unknown action {other:?}"))),
    }
}

/// A group form as a group: a rate limit needs both its numbers.
fn read_group(form: &GroupForm) -> Result<pb::Group, ConsoleError> {
    let ratio: f64 = form
        .ratio
        .trim()
        .parse()
        .ok()
        .filter(|r: &f64| r.is_finite())
        .ok_or_else(|| ConsoleError::Invalid(format!("the ratio {:?} is not a number", form.ratio)))?;
    let window_minutes = whole("the window", &form.rate_window)?;
    let max_requests = whole("the request limit", &form.rate_max)?;
    let rate_limit = match (window_minutes, max_requests) {
        (0, 0) => None,
        (0, _) | (_, 0) => {
            return Err(ConsoleError::Invalid("a request limit needs both a number and a window".into()));
        }
        _ => Some(pb::RateLimit { window_minutes, max_requests }),
    };
    Ok(pb::Group {
        name: form.name.trim().to_owned(),
        ratio,
        deprecated: form.deprecated.is_some(),
        description: form.description.trim().to_owned(),
        rate_limit,
        tokens_per_minute: whole("the tokens per minute", &form.tokens_per_minute)?,
        max_in_flight: whole("the requests in flight", &form.max_in_flight)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_form_reads_ratio_and_limits() {
        let form = GroupForm {
            name: " vip ".into(),
            ratio: "0.8".into(),
            deprecated: Some("on".into()),
            rate_max: "60".into(),
            rate_window: "1".into(),
            max_in_flight: "4".into(),
            ..Default::default()
        };
        let group = read_group(&form).expect("valid");
        assert_eq!(group.name, "vip");
        assert_eq!(group.ratio, 0.8);
        assert!(group.deprecated);
        assert_eq!(group.rate_limit, Some(pb::RateLimit { window_minutes: 1, max_requests: 60 }));
        assert_eq!((group.tokens_per_minute, group.max_in_flight), (0, 4));
    }

    #[test]
    fn a_half_rate_limit_or_a_bad_ratio_is_refused() {
        let half = GroupForm { ratio: "1".into(), rate_max: "10".into(), ..Default::default() };
        assert!(read_group(&half).is_err());
        for ratio in ["", "x", "NaN", "inf"] {
            assert!(read_group(&GroupForm { ratio: ratio.into(), ..Default::default() }).is_err(), "{ratio}");
        }
        let plain = read_group(&GroupForm { ratio: "2".into(), ..Default::default() }).expect("valid");
        assert_eq!(plain.rate_limit, None);
    }
}
