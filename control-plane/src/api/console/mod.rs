//! The web console: pages for account owners and operators, served on a
//! listener of its own. A signed-in user calls the admin service's handlers
//! in-process as a `Caller` of its role, through the same role table and
//! audit log as gwctl (`api::guard::Admitted`), so the console can do exactly
//! what the user's role may and nothing more.
//!
//! Pages are rendered on the server and readable without JavaScript; the
//! stylesheet and the one script are compiled in. Routes are served at the
//! root and, when the public URL has a path, under that path too, so a
//! proxy may strip the prefix or pass it on.

mod account;
mod assets;
mod chart;
mod error;
mod form;
mod operator;
mod page;
mod playground;
mod session;
mod sign_in;
#[cfg(test)]
mod tests;
mod tokens;
mod usage;

use std::{future::Future, net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use axum::Router;
use axum::routing::{get, post};
use tokio::{net::TcpListener, task::JoinHandle};
use tonic::Status;

use crate::api::admin::AdminApi;
use crate::api::guard::Admitted;
use crate::services::access::{Authenticator, Caller};
use crate::services::console::{AttemptLimits, SessionLimits, Sessions, Signed, Users};

pub use self::error::ConsoleError;

/// The console's settings.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Where it listens; `None` keeps it off.
    pub listen: Option<SocketAddr>,
    /// The public base URL browsers use (scheme, host and any path prefix a
    /// proxy adds); empty for `http://<bound address>`. An `https` URL makes
    /// cookies `Secure`.
    pub public_url: String,
    /// The data plane's base URL the playground sends requests to, and the
    /// token page shows; empty turns the playground off.
    pub gateway_url: String,
    pub sessions: SessionLimits,
    pub attempts: AttemptLimits,
}

/// What every console handler shares.
pub struct Console {
    admin: Arc<AdminApi>,
    auth: Arc<Authenticator>,
    users: Arc<Users>,
    sessions: Sessions,
    /// The public base URL, without a trailing slash.
    base_url: String,
    /// The path part of `base_url` ("" or "/prefix"): links start with it.
    prefix: String,
    /// Cookies are `Secure` (the public URL is https).
    secure: bool,
    /// The data plane's base URL, without a trailing slash; empty: no
    /// playground.
    gateway_url: String,
    http: reqwest::Client,
}

// === impl Config ===

impl Config {
    /// The public base URL for a console bound at `addr`.
    pub fn base_url(&self, addr: SocketAddr) -> String {
        if self.public_url.is_empty() {
            format!("http://{addr}")
        } else {
            self.public_url.trim_end_matches('/').to_owned()
        }
    }
}

// === impl Console ===

impl Console {
    /// The console serving `base_url` over the given services.
    pub fn new(
        config: &Config,
        base_url: String,
        admin: Arc<AdminApi>,
        auth: Arc<Authenticator>,
        users: Arc<Users>,
        sessions: Sessions,
    ) -> Console {
        let prefix =
            base_url.parse::<http::Uri>().map(|uri| uri.path().trim_end_matches('/').to_owned()).unwrap_or_default();
        Console {
            admin,
            auth,
            users,
            sessions,
            secure: base_url.starts_with("https://"),
            prefix,
            base_url,
            gateway_url: config.gateway_url.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// `path` (starting with `/`) as a link on the console's pages.
    pub fn link(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
    }

    /// `path` as an absolute URL, for links shown outside the console.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Calls the admin handler `run` for RPC `method` as the signed-in user:
    /// admitted by the role table and audited exactly as the same call from
    /// gwctl would be.
    pub async fn call<T, R, F, Fut>(&self, signed: &Signed, method: &str, message: T, run: F) -> Result<R, Status>
    where
        F: FnOnce(Arc<AdminApi>, tonic::Request<T>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let admitted = Admitted::check(&self.auth, Caller::of_user(&signed.user), method).await?;
        let answer = run(self.admin.clone(), admitted.request(message)).await;
        admitted.finish(&self.auth, answer.as_ref().map_or_else(Status::code, |_| tonic::Code::Ok)).await;
        answer.map(tonic::Response::into_inner)
    }

    fn routes(self: Arc<Console>) -> Router {
        let routes = Router::new()
            .route("/", get(account::home))
            .route("/assets/console.css", get(assets::css))
            .route("/assets/console.js", get(assets::js))
            .route("/login", get(sign_in::form).post(sign_in::submit))
            .route("/logout", post(sign_in::logout))
            .route("/logout-everywhere", post(sign_in::logout_everywhere))
            .route("/welcome", get(sign_in::welcome).post(sign_in::welcome_submit))
            .route("/tokens", get(tokens::list).post(tokens::create))
            .route("/tokens/{id}", get(tokens::show).post(tokens::change))
            .route("/models", get(account::models))
            .route("/usage", get(usage::page))
            .route("/usage.csv", get(usage::csv))
            .route("/topup", get(account::topup).post(account::redeem))
            .route("/playground", get(playground::page))
            .route("/playground/send", post(playground::send))
            .merge(operator::routes())
            .fallback(error::not_found)
            .layer(axum::middleware::from_fn_with_state(self.clone(), error::render));
        let routes = routes.with_state(self.clone());
        if self.prefix.is_empty() { routes } else { Router::new().nest(&self.prefix, routes.clone()).merge(routes) }
    }
}

/// Serves `console` on `listener` until `shutdown` completes.
pub fn spawn(
    listener: TcpListener,
    console: Arc<Console>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<anyhow::Result<()>> {
    let app = console.routes().into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(shutdown).await.context("serving the console")
    })
}
