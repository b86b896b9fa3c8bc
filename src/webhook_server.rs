//! The HTTPS server of the admission webhook, with bounds on what a client can hold: the webhook
//! sits on the write path of the whole cluster, so an idle, slow or hostile client must not be
//! able to pile up connections or memory.
//!
//! - TLS handshakes: 10 s (axum-server's own bound); TCP_NODELAY on every connection.
//! - The first bytes after the handshake: [`FIRST_BYTES_TIMEOUT`]. hyper-util's HTTP/1-or-2
//!   detection waits for them without any timeout, so without this bound an idle TLS
//!   connection would be kept forever ([`FirstBytesDeadline`]).
//! - HTTP/1 request heads, and idle keep-alive connections: [`HEADER_READ_TIMEOUT`] (hyper applies
//!   it only with a timer, which axum-server does not set).
//! - HTTP/2: a peer that does not answer a ping within [`HTTP2_KEEP_ALIVE`] is dropped.
//! - Bodies: size and time bounded by the router ([`crate::admission::body`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::{Accept, NoDelayAcceptor};
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a client may take to send a request head over HTTP/1, counted from when the server
/// waits for it: bounds slow-loris heads and idle keep-alive connections.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may stay silent after the TLS handshake before its first bytes.
pub const FIRST_BYTES_TIMEOUT: Duration = HEADER_READ_TIMEOUT;

/// HTTP/2 keep-alive: a connection whose peer does not answer a ping within this time after this
/// much silence is closed.
pub const HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The server on `listener` with the bounds of the module docs.
///
/// # Errors
/// When the listener cannot be handed to the runtime.
pub fn webhook_server(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
) -> io::Result<axum_server::Server<std::net::SocketAddr, FirstBytesAcceptor>> {
    // TCP_NODELAY as Go's net/http (kube-apiserver's client) sets it: without it a response
    // written in two segments waits for the peer's delayed ACK (40 ms).
    let acceptor = FirstBytesAcceptor {
        inner: RustlsAcceptor::new(tls).acceptor(NoDelayAcceptor::new()),
        timeout: FIRST_BYTES_TIMEOUT,
    };
    let mut server = axum_server::from_tcp(listener)?.acceptor(acceptor);
    let builder = server.http_builder();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(HTTP2_KEEP_ALIVE)
        .keep_alive_timeout(HTTP2_KEEP_ALIVE);
    Ok(server)
}

/// An acceptor that hands out the TLS streams of `inner` wrapped in a [`FirstBytesDeadline`].
#[derive(Clone, Debug)]
pub struct FirstBytesAcceptor<A = RustlsAcceptor<NoDelayAcceptor>> {
    inner: A,
    timeout: Duration,
}

impl<A, I, S> Accept<I, S> for FirstBytesAcceptor<A>
where
    A: Accept<I, S>,
    A::Future: Send + 'static,
{
    type Stream = FirstBytesDeadline<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, A::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let timeout = self.timeout;
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            Ok((FirstBytesDeadline::new(stream, timeout), service))
        })
    }
}

/// A stream whose first read must return data within a deadline; after that it is the inner
/// stream unchanged (HTTP/1 and HTTP/2 then bound the connection themselves).
#[derive(Debug)]
pub struct FirstBytesDeadline<S> {
    inner: S,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<S> FirstBytesDeadline<S> {
    /// Wraps `inner`: its first bytes must arrive within `timeout` from now.
    pub fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytesDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.deadline = None;
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let expired = this
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request within the first-bytes timeout after the TLS handshake",
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstBytesDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Once `stopping` is set (SIGTERM, for the whole shutdown delay), every HTTP/1 response says
/// `Connection: close`: the client closes that connection after reading the answer, and so never
/// sends a request on a keep-alive connection at the moment the server closes it. Such a request
/// is lost ("EOF"), and a lost webhook call fails open. HTTP/2 connections need nothing: the
/// server's graceful close (GOAWAY) tells the client which requests it will answer.
pub async fn close_when_stopping(
    axum::extract::State(stopping): axum::extract::State<std::sync::Arc<AtomicBool>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let http1 = request.version() < http::Version::HTTP_2;
    let mut response = next.run(request).await;
    if http1 && stopping.load(Ordering::Acquire) {
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tower::ServiceExt;

    use super::*;

    #[rstest::rstest]
    #[case::http1_stopping(http::Version::HTTP_11, true, Some("close"))]
    #[case::http1_serving(http::Version::HTTP_11, false, None)]
    #[case::http2_stopping(http::Version::HTTP_2, true, None)]
    #[case::http2_serving(http::Version::HTTP_2, false, None)]
    #[tokio::test]
    async fn http1_responses_close_their_connection_once_stopping(
        #[case] version: http::Version,
        #[case] stopping: bool,
        #[case] expected: Option<&str>,
    ) {
        let flag = std::sync::Arc::new(AtomicBool::new(stopping));
        let app = axum::Router::new()
            .route("/", axum::routing::post(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(
                flag,
                close_when_stopping,
            ));
        let request = http::Request::post("/")
            .version(version)
            .body(axum::body::Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(
            response
                .headers()
                .get(http::header::CONNECTION)
                .map(|v| v.to_str().unwrap()),
            expected
        );
    }

    #[tokio::test]
    async fn a_silent_peer_times_out_a_talking_one_never_does() {
        let (client, server) = tokio::io::duplex(64);
        let mut silent = FirstBytesDeadline::new(server, Duration::from_millis(50));
        let mut buf = [0u8; 8];
        let err = silent.read(&mut buf).await.expect_err("timed out");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(client);

        let (mut client, server) = tokio::io::duplex(64);
        let mut talking = FirstBytesDeadline::new(server, Duration::from_millis(50));
        client.write_all(b"GET").await.unwrap();
        assert_eq!(talking.read(&mut buf).await.unwrap(), 3);
        // After the first bytes the deadline is gone: a long silence is the protocol's business.
        let pending =
            tokio::time::timeout(Duration::from_millis(200), talking.read(&mut buf)).await;
        assert!(
            pending.is_err(),
            "a read after the first bytes must not time out"
        );
        client.write_all(b"/").await.unwrap();
        assert_eq!(talking.read(&mut buf).await.unwrap(), 1);
    }
}
