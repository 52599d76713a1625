//! The HTTP endpoints: `/health`, `/readyz`, `/livez` and `/metrics`.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::serve::health::Health;
use crate::serve::metrics::{self, Metrics};

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {address} (CANADA_KAKTUS_LISTEN_ADDRESS / ListenAddress): {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the HTTP server stopped: {0}")]
    Serve(#[source] std::io::Error),
}

pub fn router(health: Arc<Health>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/health", get(readiness))
        .route("/readyz", get(readiness))
        .route("/livez", get(liveness))
        .with_state(health)
        .route("/metrics", get(scrape).with_state(metrics))
}

/// Prometheus/OpenMetrics text.
async fn scrape(State(metrics): State<Arc<Metrics>>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics.render(),
    )
        .into_response()
}

/// 200 when the last reconcile succeeded, 503 before the first success and
/// after a failure: the Go version's contract, which readiness probes rely on.
async fn readiness(State(health): State<Arc<Health>>) -> Response {
    let report = health.report();
    let status = if report.is_healthy() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report)).into_response()
}

/// 200 while the loop turns, whatever Hetzner does; a liveness probe on this
/// restarts a stuck process but not one that is waiting out an outage.
async fn liveness(State(health): State<Arc<Health>>) -> Response {
    let report = health.liveness();
    let status = if report.alive {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report)).into_response()
}

pub async fn bind(address: SocketAddr) -> Result<TcpListener, HttpError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| HttpError::Bind { address, source })
}

/// How long requests in flight may still finish after shutdown begins; a
/// scraper that never completes its request must not hold the process.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(300);

/// Serves until `shutdown` resolves, then lets requests in flight finish for
/// at most [`SHUTDOWN_GRACE`] and returns; connections still open then are
/// dropped with the runtime.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    let begun = Arc::new(Notify::new());
    let signal = {
        let begun = begun.clone();
        async move {
            shutdown.await;
            begun.notify_one();
        }
    };
    let server = axum::serve(listener, router)
        .with_graceful_shutdown(signal)
        .into_future();
    tokio::select! {
        result = server => result.map_err(HttpError::Serve),
        _ = async {
            begun.notified().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::debug!("HTTP connections still open after the shutdown grace; closing them");
            Ok(())
        }
    }
}
