//! The HTTP API on a Tokio runtime of its own, so a flood of requests
//! cannot delay the supervisors and the renewer on theirs.
//!
//! Why: the request budgets ([`crate::api::serve::Limiter`]) bound the work
//! a flood gets done, not the work of turning it away. Clients that never
//! back off send thousands of requests a second, and every accept, parse
//! and 503 is a task on the runtime that runs it. On one shared runtime
//! each renewal (its timer, the authority connection's I/O, the reply) then
//! waits behind those tasks at every step: measured in the starvation test
//! on two cores, renewals took 50-100 ms (p50) instead of under 5 ms. On
//! its own runtime with at most half the cores
//! ([`crate::limits::HTTP_RUNTIME_CORES_PERCENT`]) the flood gets no more
//! than those threads, and the host's own tasks find theirs idle.
//!
//! Database connections the API opens run their I/O on this runtime; the
//! lease authority's pool is never used from it (the API reads over the
//! main pool), so renewals never depend on it.
//!
//! Must never: be dropped inside an async context (the runtime is shut
//! down on its own thread once the server returned).

use std::net::SocketAddr;

use tokio::sync::{oneshot, watch};

use super::ServiceError;
use crate::api::ServeLimits;
use crate::limits::HTTP_RUNTIME_CORES_PERCENT;

/// The API server running on its own thread and runtime.
pub(super) struct ApiServer {
    /// Resolves once the server returned and its runtime shut down; an
    /// error means its thread panicked.
    finished: oneshot::Receiver<()>,
    /// Worker threads of its runtime.
    threads: usize,
}

/// Worker threads for the API's runtime on a machine with `cores`: the
/// share [`HTTP_RUNTIME_CORES_PERCENT`], at least one.
pub fn worker_threads(cores: usize) -> usize {
    (cores.saturating_mul(HTTP_RUNTIME_CORES_PERCENT) / 100).max(1)
}

/// Serve `app` on `listener` within `limits` on a runtime of its own until
/// `stop` turns true, then drain (see [`crate::api::serve`]).
pub(super) fn start(
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    app: axum::Router,
    limits: ServeLimits,
    tls: Option<std::sync::Arc<crate::tls::ServerTls>>,
    mut stop: watch::Receiver<bool>,
) -> Result<ApiServer, ServiceError> {
    let failed = |what: &str, e: std::io::Error| ServiceError::Listen {
        addr,
        reason: format!("{what}: {e}"),
    };
    // The socket moves to the new runtime's reactor: a listener stays
    // registered with the runtime that made it.
    let listener = listener
        .into_std()
        .map_err(|e| failed("cannot hand the listener to the HTTP runtime", e))?;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let threads = worker_threads(cores);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("leasehold-http")
        .enable_all()
        .build()
        .map_err(|e| failed("cannot start the HTTP runtime", e))?;
    let (finished_tx, finished) = oneshot::channel();
    std::thread::Builder::new()
        .name("leasehold-http-main".into())
        .spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => {
                        crate::api::serve(listener, app, limits, tls, async move {
                            let _ = stop.wait_for(|s| *s).await;
                        })
                        .await;
                    }
                    Err(e) => {
                        tracing::error!(listen = %addr, error = %e, "the HTTP API cannot serve");
                    }
                }
            });
            // Outside any async context: tasks still left (a handler past
            // the drain) are dropped with the runtime.
            drop(runtime);
            let _ = finished_tx.send(());
        })
        .map_err(|e| failed("cannot start the HTTP thread", e))?;
    Ok(ApiServer { finished, threads })
}

impl ApiServer {
    /// Worker threads of its runtime, for the start-up log.
    pub(super) fn threads(&self) -> usize {
        self.threads
    }

    /// Wait until the server returned and its runtime shut down.
    pub(super) async fn stopped(self) {
        if self.finished.await.is_err() {
            tracing::warn!("the HTTP server thread failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_gets_a_share_of_the_cores_and_at_least_one_thread() {
        assert_eq!(worker_threads(1), 1);
        assert_eq!(worker_threads(2), 1);
        assert_eq!(worker_threads(16), 16 * HTTP_RUNTIME_CORES_PERCENT / 100);
        assert!(worker_threads(16) < 16);
        assert_eq!(worker_threads(0), 1);
    }

    /// The server answers from its own runtime, and stopping it returns
    /// once its runtime is gone.
    #[tokio::test]
    async fn the_api_serves_on_its_own_runtime_and_stops() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/which",
            axum::routing::get(|| async {
                std::thread::current()
                    .name()
                    .unwrap_or_default()
                    .to_string()
            }),
        );
        let (stop_tx, stop) = watch::channel(false);
        let server = start(
            listener,
            addr,
            app,
            ServeLimits::for_this_process().0,
            None,
            stop,
        )
        .unwrap();
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /which HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.ends_with("leasehold-http"), "{reply}");
        stop_tx.send(true).unwrap();
        tokio::time::timeout(crate::timeouts::SHUTDOWN_GRACE, server.stopped())
            .await
            .expect("the server stops");
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
