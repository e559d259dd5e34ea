//! Signing in and out, and the one-time links: the setup link that creates
//! the first admin, and the invite and reset links that set a password.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Form;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::{Console, ConsoleError, page};
use crate::domain::console::TicketPurpose;
use crate::services::console::users::MIN_PASSWORD;

#[derive(Debug, Default, Deserialize)]
pub struct Next {
    #[serde(default)]
    next: String,
}

#[derive(Deserialize)]
pub struct Credentials {
    name: String,
    password: String,
    #[serde(default)]
    next: String,
    /// The sign-in form's token (see `session`).
    #[serde(default)]
    csrf: String,
}

#[derive(Deserialize)]
pub struct Csrf {
    #[serde(default)]
    csrf: String,
}

#[derive(Deserialize)]
pub struct Ticket {
    #[serde(default)]
    ticket: String,
}

#[derive(Deserialize)]
pub struct NewPassword {
    ticket: String,
    #[serde(default)]
    name: String,
    password: String,
    confirm: String,
}

/// The sign-in form.
pub async fn form(State(console): State<Arc<Console>>, Query(next): Query<Next>) -> Response {
    login_page(&console, &next.next, "", None)
}

/// The sign-in form with a new token, its cookie set.
fn login_page(console: &Console, next: &str, name: &str, error: Option<&str>) -> Response {
    let (token, cookie) = console.login_form();
    let body = html! {
        h1 { "Sign in" }
        @if let Some(error) = error { p.error role="alert" id="login-error" { (error) } }
        form.narrow method="post" action=(console.link("/login")) {
            input type="hidden" name="next" value=(next);
            input type="hidden" name="csrf" value=(token);
            label for="name" { "User name" }
            input id="name" name="name" autocomplete="username" required value=(name) autofocus;
            label for="password" { "Password" }
            input id="password" name="password" type="password" autocomplete="current-password" required;
            button type="submit" { "Sign in" }
        }
        p.hint { "Forgot your password? Ask an operator for a reset link." }
    };
    let mut response = page::bare(console, "Sign in", body);
    response.headers_mut().append(header::SET_COOKIE, cookie);
    if error.is_some() {
        *response.status_mut() = StatusCode::UNAUTHORIZED;
    }
    response
}

/// Checks a sign-in (sent from this console's own form) and opens a
/// session.
pub async fn submit(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<Credentials>,
) -> Result<Response, ConsoleError> {
    if !console.login_form_is_ours(&headers, &form.csrf) {
        tracing::info!(address = %peer.ip(), "console sign-in refused: not sent from its form");
        let problem = "this sign-in form has expired or was not sent from this console; sign in again";
        let mut page = login_page(&console, &form.next, &form.name, Some(problem));
        *page.status_mut() = StatusCode::FORBIDDEN;
        return Ok(page);
    }
    let user = match console.users.sign_in(&form.name, &form.password, &peer.ip().to_string()).await {
        Ok(user) => user,
        Err(crate::services::console::LoginError::Store(error)) => return Err(ConsoleError::Refused(error.into())),
        Err(refused) => {
            tracing::info!(address = %peer.ip(), "console sign-in refused");
            let mut page = login_page(&console, &form.next, &form.name, Some(&refused.to_string()));
            if matches!(refused, crate::services::console::LoginError::Limited { .. }) {
                *page.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            }
            return Ok(page);
        }
    };
    let (secret, _) = console.sessions.open(&user).await?;
    tracing::info!(user = %user.id, "console sign-in");
    // Only a path of our own: never an absolute URL someone else chose.
    let next = if form.next.starts_with('/') && !form.next.starts_with("//") { form.next.as_str() } else { "/" };
    let mut response = Redirect::to(&console.link(next)).into_response();
    response.headers_mut().insert(header::SET_COOKIE, console.session_cookie(&secret));
    response.headers_mut().append(header::SET_COOKIE, console.cleared_login_form());
    Ok(response)
}

/// Ends this session.
pub async fn logout(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<Csrf>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    console.sessions.close(&signed).await?;
    let mut response = Redirect::to(&console.link("/login")).into_response();
    response.headers_mut().insert(header::SET_COOKIE, console.cleared_cookie());
    Ok(response)
}

/// Ends every session of the signed-in user, on every browser.
pub async fn logout_everywhere(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<Csrf>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed_write(&headers, Some(&form.csrf)).await?;
    console.users.sign_out_everywhere(&signed.user.id).await?;
    let mut response = Redirect::to(&console.link("/login")).into_response();
    response.headers_mut().insert(header::SET_COOKIE, console.cleared_cookie());
    Ok(response)
}

/// The form behind a one-time link.
pub async fn welcome(
    State(console): State<Arc<Console>>,
    Query(ticket): Query<Ticket>,
) -> Result<Response, ConsoleError> {
    let (found, user) = console.users.check_link(&ticket.ticket).await?;
    Ok(welcome_page(&console, &ticket.ticket, found.purpose, user.map(|u| u.name).as_deref(), None))
}

fn welcome_page(
    console: &Console,
    ticket: &str,
    purpose: TicketPurpose,
    name: Option<&str>,
    error: Option<&str>,
) -> Response {
    let (title, intro) = match purpose {
        TicketPurpose::Setup => {
            ("Create the first admin", "This console has no admin yet. Choose the admin's user name and password.")
        }
        TicketPurpose::Invite => ("Welcome", "You were invited to the console. Choose your password to finish."),
        TicketPurpose::Reset => ("Choose a new password", "Choose a new password for your console user."),
    };
    let body = html! {
        h1 { (title) }
        p { (intro) }
        @if let Some(error) = error { p.error role="alert" { (error) } }
        form.narrow method="post" action=(console.link("/welcome")) {
            input type="hidden" name="ticket" value=(ticket);
            label for="name" { "User name" }
            @if purpose == TicketPurpose::Setup {
                input id="name" name="name" autocomplete="username" required value=(name.unwrap_or("admin"));
            } @else {
                input id="name" name="name" autocomplete="username" readonly value=(name.unwrap_or_default());
            }
            label for="password" { "Password (at least " (MIN_PASSWORD) " characters)" }
            input id="password" name="password" type="password" autocomplete="new-password" required minlength=(MIN_PASSWORD);
            label for="confirm" { "The same password again" }
            input id="confirm" name="confirm" type="password" autocomplete="new-password" required minlength=(MIN_PASSWORD);
            button type="submit" { "Save and sign in" }
        }
    };
    let mut response = page::bare(console, title, body);
    if error.is_some() {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response
}

/// Uses a one-time link: sets the password (or creates the first admin)
/// and signs in.
pub async fn welcome_submit(
    State(console): State<Arc<Console>>,
    Form(form): Form<NewPassword>,
) -> Result<Response, ConsoleError> {
    let (found, user) = console.users.check_link(&form.ticket).await?;
    let name = user.as_ref().map_or(form.name.as_str(), |user| user.name.as_str()).to_owned();
    let problem = if form.password != form.confirm {
        Some("the two passwords differ".to_owned())
    } else {
        crate::services::console::users::check_password(&form.password).err().map(|e| e.to_string())
    };
    if let Some(problem) = problem {
        return Ok(welcome_page(&console, &form.ticket, found.purpose, Some(&name), Some(&problem)));
    }
    let user = console.users.use_link(&form.ticket, &name, &form.password).await?;
    tracing::info!(user = %user.id, purpose = ?found.purpose, "console password set through a link");
    let (secret, _) = console.sessions.open(&user).await?;
    let mut response = Redirect::to(&console.link("/")).into_response();
    response.headers_mut().insert(header::SET_COOKIE, console.session_cookie(&secret));
    Ok(response)
}
