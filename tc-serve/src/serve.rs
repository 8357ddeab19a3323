//! The server's accept loop: HTTP/1.1 connections with a header read
//! timeout, a cap on open connections (503 + `Retry-After` past it), and a
//! graceful drain on shutdown (stop accepting, let in-flight requests finish
//! up to a deadline).
//!
//! Why not `axum::serve`: axum 0.8's `serve` sets no header read timeout and
//! no connection cap, so a client that opens connections and trickles header
//! bytes could hold sockets forever. hyper's HTTP/1 builder has the timeout;
//! hyper-util's `GracefulShutdown` drains the connections; [`WriteTimeout`]
//! closes a connection whose client stopped reading (a stalled stream).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Response, StatusCode};
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::app::{AppState, Config};

/// Resolves on SIGTERM or Ctrl-C (SIGINT): what the binary drains on.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM: draining"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C: draining"),
                }
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM ({e}); Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C: draining");
    }
}

/// A socket whose writes fail once one has stayed blocked for `timeout`:
/// a client that stops reading a stream fills the socket's buffers, the
/// write blocks, and past the timeout the connection fails, which drops
/// the response body and with it the sequence's place in the batch.
pub struct WriteTimeout<T> {
    inner: T,
    timeout: Duration,
    blocked: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteTimeout<T> {
    /// Wrap `inner`.
    pub fn new(inner: T, timeout: Duration) -> Self {
        WriteTimeout {
            inner,
            timeout,
            blocked: None,
        }
    }

    /// A write returned `Pending`: start (or check) the deadline.
    fn pending<R>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<R>> {
        let timeout = self.timeout;
        let sleep = self
            .blocked
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading (write timeout)",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<R>(
        &mut self,
        r: Poll<std::io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<R>> {
        match r {
            Poll::Pending => self.pending(cx),
            done => {
                self.blocked = None;
                done
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(r, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(r, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The answer on a connection over the cap: 503, retry later, close.
fn saturated() -> Response<Body> {
    let body = serde_json::json!({"error": {
        "message": "the server has too many open connections; retry later",
        "type": "server_error", "param": null, "code": "overloaded"}});
    Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::RETRY_AFTER, "1")
        .header(header::CONNECTION, "close")
        .body(Body::from(body.to_string()))
        .expect("static response")
}

/// Serve `app` on `listener` until `shutdown` resolves, then stop accepting
/// and wait for open connections to finish their requests, at most
/// `config.shutdown_timeout`. Returns once drained (or the deadline passed).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let config: Config = state.config.clone();
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off, go on.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(WriteTimeout::new(stream, config.write_timeout));
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let conn = builder.serve_connection(io, TowerToHyperService::new(app.clone()));
                let conn = graceful.watch(conn);
                let st = state.clone();
                st.metrics.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let _ = conn.await;
                    st.metrics.connections.fetch_sub(1, Ordering::Relaxed);
                    drop(slot);
                });
            }
            Err(_) => {
                state.metrics.shed.fetch_add(1, Ordering::Relaxed);
                let mut b = builder.clone();
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(saturated())
                });
                let conn = b.keep_alive(false).serve_connection(io, svc);
                tokio::spawn(conn);
            }
        }
    }
    drop(listener);
    state.set_ready(false);
    tracing::info!(
        connections = graceful.count(),
        "stopped accepting; draining"
    );
    let deadline = config.shutdown_timeout;
    match tokio::time::timeout(deadline, graceful.shutdown()).await {
        Ok(()) => tracing::info!("drained"),
        Err(_) => tracing::warn!("drain deadline ({deadline:?}) passed; closing"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A peer that never reads: its 64-byte buffer fills, the write
    /// blocks, and the timeout turns that into an error.
    #[tokio::test]
    async fn a_client_that_stops_reading_times_out() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let timeout = Duration::from_millis(300);
        let mut w = WriteTimeout::new(ours, timeout);
        let t = std::time::Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(10), w.write_all(&[7u8; 4096]))
            .await
            .expect("the write timed out by itself")
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= timeout);
    }

    /// A peer that keeps reading, however slowly, is never cut off: each
    /// write that completes restarts the deadline.
    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_is_served() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut w = WriteTimeout::new(ours, Duration::from_secs(2));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 32];
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                match theirs.read(&mut buf).await {
                    Ok(0) => return got,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => panic!("read: {e}"),
                }
            }
        });
        let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        w.write_all(&data)
            .await
            .expect("a reading client is served");
        w.shutdown().await.expect("shutdown");
        drop(w);
        assert_eq!(reader.await.expect("reader"), data);
    }
}
