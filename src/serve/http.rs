//! The HTTP endpoints: `/health`, `/readyz`, `/livez` and `/metrics`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;

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

/// What one client may take of the HTTP server: the probes and scrapes are
/// small requests on loopback or the pod network, so anything slower or
/// larger is a client to drop, not to wait for.
pub mod limits {
    use std::time::Duration;

    /// The whole header of a request must arrive within this.
    pub const HEADER_READ: Duration = Duration::from_secs(5);
    /// A connection's read buffer (a request's header must fit; hyper's
    /// smallest is 8 KiB).
    pub const BUFFER_BYTES: usize = 16 * 1024;
    /// Headers per request.
    pub const HEADERS: usize = 64;
    /// A connection lives at most this long (a keep-alive scraper opens a
    /// new one).
    pub const LIFETIME: Duration = Duration::from_secs(60);
    /// Open connections; a new one closes the oldest, so unfinished
    /// connections never keep the kubelet's probes out.
    pub const CONNECTIONS: usize = 64;
}

/// Serves until `shutdown` resolves, then lets requests in flight finish for
/// at most [`SHUTDOWN_GRACE`] and returns; connections still open then are
/// closed. Each connection is bounded by [`limits`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    let mut connections = Connections::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.serve(stream, router.clone());
                    // Let the new connection read its request before the
                    // next accept: a flood cannot close a probe unread.
                    tokio::task::yield_now().await;
                }
                // A client that went before its accept, or a file limit:
                // the next accept may work.
                Err(error) => {
                    tracing::debug!(%error, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.tasks.join_next(), if !connections.tasks.is_empty() => {}
        }
    }
    connections.finish().await;
    Ok(())
}

/// Where a connection is, as the accept loop sees it when it makes room.
mod heard {
    /// Nothing read yet: a client whose request is still on its way.
    pub(super) const NOTHING: u8 = 0;
    /// Something read and no request being answered: an unfinished
    /// header or an idle keep-alive connection.
    pub(super) const SOMETHING: u8 = 1;
    /// A request of it is being answered.
    pub(super) const ANSWERING: u8 = 2;
}

type Heard = Arc<std::sync::atomic::AtomicU8>;

/// One open connection: its id, what closes it, and what it has sent
/// ([`heard`]).
struct Open {
    id: u64,
    close: tokio_util::sync::CancellationToken,
    heard: Heard,
}

/// The open connections, oldest first, each closed by its token.
#[derive(Default)]
struct Connections {
    tasks: tokio::task::JoinSet<()>,
    open: std::collections::VecDeque<Open>,
    next: u64,
    ended: Arc<std::sync::Mutex<Vec<u64>>>,
}

/// Marks a connection [`heard::ANSWERING`] while a request of it is
/// answered.
struct Busy(Heard);

impl Busy {
    fn new(heard: &Heard) -> Self {
        heard.store(heard::ANSWERING, std::sync::atomic::Ordering::Relaxed);
        Busy(heard.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0
            .store(heard::SOMETHING, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A connection's stream that marks it [`heard::SOMETHING`] at its first
/// byte.
struct Listened {
    stream: tokio::net::TcpStream,
    heard: Heard,
}

impl tokio::io::AsyncRead for Listened {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            let _ = self.heard.compare_exchange(
                heard::NOTHING,
                heard::SOMETHING,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Listened {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Connections {
    /// Makes room for one more while [`limits::CONNECTIONS`] are open:
    /// closes the oldest connection that sent something and is not being
    /// answered (an unfinished header or an idle one), else the oldest
    /// that sent nothing yet (a request on its way loses only to those);
    /// only past twice the limit, the oldest of any.
    fn make_room(&mut self) {
        let ended: Vec<u64> = std::mem::take(&mut *crate::sync::lock(&self.ended));
        self.open.retain(|open| !ended.contains(&open.id));
        while self.open.len() >= limits::CONNECTIONS {
            let oldest = |wanted: u8| {
                self.open.iter().position(|open| {
                    open.heard.load(std::sync::atomic::Ordering::Relaxed) == wanted
                })
            };
            let idle = oldest(heard::SOMETHING).or_else(|| oldest(heard::NOTHING));
            let closed = match idle {
                Some(index) => self.open.remove(index),
                None if self.open.len() >= 2 * limits::CONNECTIONS => self.open.pop_front(),
                None => break,
            };
            if let Some(closed) = closed {
                closed.close.cancel();
            }
        }
    }

    fn serve(&mut self, stream: tokio::net::TcpStream, router: Router) {
        self.make_room();
        let id = self.next;
        self.next += 1;
        let close = tokio_util::sync::CancellationToken::new();
        let heard = Heard::default();
        self.open.push_back(Open {
            id,
            close: close.clone(),
            heard: heard.clone(),
        });
        let ended = self.ended.clone();
        self.tasks.spawn(async move {
            let stream = Listened {
                stream,
                heard: heard.clone(),
            };
            let inner = hyper_util::service::TowerToHyperService::new(router);
            let service = hyper::service::service_fn(move |request| {
                let busy = Busy::new(&heard);
                let answer = hyper::service::Service::call(&inner, request);
                async move {
                    let _busy = busy;
                    answer.await
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits::HEADER_READ)
                .max_buf_size(limits::BUFFER_BYTES)
                .max_headers(limits::HEADERS);
            let connection =
                builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%error, "an HTTP connection ended with an error");
                    }
                }
                // Closed to make room: an unfinished or idle connection.
                () = close.cancelled() => {}
                // At the end of its life a request in flight is finished
                // (with `Connection: close`) within the header limit.
                () = tokio::time::sleep(limits::LIFETIME) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(limits::HEADER_READ, connection).await;
                }
            }
            crate::sync::lock(&ended).push(id);
        });
    }

    /// After the shutdown: requests in flight get [`SHUTDOWN_GRACE`], then
    /// every connection is closed.
    async fn finish(mut self) {
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::debug!("HTTP connections still open after the shutdown grace; closing them");
            self.tasks.abort_all();
        }
    }
}

#[cfg(test)]
mod tests;
