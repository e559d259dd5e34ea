//! The admin listener each binary may open beside its public one: `GET
//! /metrics` (Prometheus text) and `GET /healthz`. It is never the public
//! `/v1` port; binaries keep it off unless an address is given.

use std::{future::Future, net::SocketAddr};

use axum::{Router, http::header, response::IntoResponse as _, routing::get};
use tokio::net::TcpListener;

/// Binds `addr` for `serve`; port 0 picks a free one.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// The admin routes.
pub fn router() -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|| async {
                ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], crate::prometheus_text())
                    .into_response()
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
}

/// Serves the admin routes on `listener` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    axum::serve(listener, router()).with_graceful_shutdown(shutdown).await
}
