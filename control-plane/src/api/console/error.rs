//! The one place console failures become responses. Handlers return a
//! `ConsoleError`; it travels out as an empty response carrying the error,
//! and `render` (a layer with the console's state) turns it into a page in
//! words, with the status the admin service's answer maps to, or a redirect
//! to the sign-in page.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use tonic::{Code, Status};

use super::{Console, page};
use crate::services::console::{LoginError, SessionError, UserError};

/// Why a console request failed.
#[derive(Debug, Clone)]
pub enum ConsoleError {
    /// No live session: sign in, then come back to `next`.
    SignIn { next: String },
    /// A write without the session's CSRF token.
    Forged,
    /// The admin service refused or failed.
    Refused(Status),
    /// No such page.
    NotFound,
    /// A form the page cannot take; the text says why.
    Invalid(String),
}

// === impl ConsoleError ===

impl ConsoleError {
    fn status(&self) -> StatusCode {
        match self {
            ConsoleError::SignIn { .. } => StatusCode::SEE_OTHER,
            ConsoleError::Forged => StatusCode::FORBIDDEN,
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::Invalid(_) => StatusCode::BAD_REQUEST,
            ConsoleError::Refused(status) => match status.code() {
                Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
                Code::Unauthenticated => StatusCode::UNAUTHORIZED,
                Code::PermissionDenied => StatusCode::FORBIDDEN,
                Code::NotFound => StatusCode::NOT_FOUND,
                Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
                Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
                Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
                Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
        }
    }

    /// What the page says.
    pub fn words(&self) -> String {
        match self {
            ConsoleError::SignIn { .. } => "sign in to continue".into(),
            ConsoleError::Forged => SessionError::Forged.to_string(),
            ConsoleError::NotFound => "there is no such page".into(),
            ConsoleError::Invalid(why) => why.clone(),
            ConsoleError::Refused(status) if status.code() == Code::Internal || status.code() == Code::Unknown => {
                "something went wrong on our side; try again, and tell the operator if it keeps happening".into()
            }
            ConsoleError::Refused(status) => status.message().to_owned(),
        }
    }
}

impl From<Status> for ConsoleError {
    fn from(status: Status) -> ConsoleError {
        ConsoleError::Refused(status)
    }
}

impl From<UserError> for ConsoleError {
    fn from(error: UserError) -> ConsoleError {
        match error {
            UserError::Store(error) => ConsoleError::Refused(error.into()),
            other => ConsoleError::Invalid(other.to_string()),
        }
    }
}

impl From<LoginError> for ConsoleError {
    fn from(error: LoginError) -> ConsoleError {
        match error {
            LoginError::Store(error) => ConsoleError::Refused(error.into()),
            other => ConsoleError::Invalid(other.to_string()),
        }
    }
}

impl From<SessionError> for ConsoleError {
    fn from(error: SessionError) -> ConsoleError {
        match error {
            SessionError::Ended => ConsoleError::SignIn { next: String::new() },
            SessionError::Forged => ConsoleError::Forged,
            SessionError::Store(error) => ConsoleError::Refused(error.into()),
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let mut response = self.status().into_response();
        response.extensions_mut().insert(self);
        response
    }
}

/// Renders the `ConsoleError` a handler answered with, if any.
pub async fn render(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    let path = request.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let mut response = next.run(request).await;
    let Some(error) = response.extensions_mut().remove::<ConsoleError>() else { return response };
    match &error {
        ConsoleError::SignIn { next } => {
            let next = if next.is_empty() { path.strip_prefix(&console.prefix).unwrap_or(&path) } else { next };
            let location = format!("{}?next={}", console.link("/login"), page::encode(next));
            return Redirect::to(&location).into_response();
        }
        ConsoleError::Refused(status) if error.status() == StatusCode::INTERNAL_SERVER_ERROR => {
            tracing::error!(code = ?status.code(), message = status.message(), "console request failed");
        }
        _ => {}
    }
    let body = html! {
        h1 { "Something is not right" }
        p.error role="alert" { (error.words()) }
        p { a href=(console.link("/")) { "Back to the start page" } }
    };
    let mut page = page::bare(&console, "Error", body).into_response();
    *page.status_mut() = error.status();
    page.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    page
}

/// The answer to an unknown path.
pub async fn not_found() -> ConsoleError {
    ConsoleError::NotFound
}
