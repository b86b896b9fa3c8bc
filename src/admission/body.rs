//! Reading webhook request bodies with bounds on size and time: [`AdmissionBody`], the extractor
//! every webhook route takes.
//!
//! A body over [`MAX_BODY_BYTES`] is answered with HTTP 413. The answer must reach the client:
//! if the server answered and closed the connection while the client was still sending, the
//! unread bytes left in the server's socket make the kernel reset the connection, and the
//! client sees "connection reset" instead of the 413 (which is what happened with axum's
//! `DefaultBodyLimit` alone). So the rest of an oversized body is read and discarded, up to
//! [`MAX_DRAIN_BYTES`], before answering; the connection then stays usable. Only a body declared
//! or found larger than that is answered at once with `Connection: close`, accepting the reset
//! for what is plainly an attack.
//!
//! A body that does not arrive within [`BODY_READ_TIMEOUT`] (a slow-loris client) is answered
//! with HTTP 408 and the connection closed. The request head has its own bound, the server's
//! header read timeout ([`crate::webhook_server`]).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

/// Largest accepted request body (kube-apiserver's own limit is 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How much of an oversized body is read and discarded so that the 413 reaches the client.
pub const MAX_DRAIN_BYTES: usize = 64 * 1024 * 1024;

/// How long a client may take to send a whole body. kube-apiserver sends it at once; its own
/// webhook timeout is at most 30 s (10 s by default).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a body was not read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Over the limit. `drained`: the rest was read, the connection can go on.
    TooLarge {
        /// Whether the whole body was read (and discarded).
        drained: bool,
    },
    /// Not complete within the timeout.
    Timeout,
    /// The client's stream failed (aborted, malformed chunking).
    Read(String),
}

impl IntoResponse for BodyError {
    fn into_response(self) -> Response {
        let (status, close, message) = match self {
            BodyError::TooLarge { drained } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                !drained,
                format!(
                    "request body larger than {MAX_BODY_BYTES} bytes; an AdmissionReview is never that large"
                ),
            ),
            BodyError::Timeout => (
                StatusCode::REQUEST_TIMEOUT,
                true,
                format!(
                    "request body not received within {}s",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            ),
            BodyError::Read(e) => (
                StatusCode::BAD_REQUEST,
                true,
                format!("reading the request body failed: {e}"),
            ),
        };
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{message}\n"),
        )
            .into_response();
        if close {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// Reads `body` whole when it holds at most `limit` bytes. A larger one is read on and
/// discarded up to `drain` bytes in all (`TooLarge { drained: true }` when it ended by then).
/// `declared` is the Content-Length, if any: a body declared larger than `drain` is not read.
///
/// # Errors
/// See [`BodyError`].
pub async fn read_bounded(
    mut body: Body,
    declared: Option<u64>,
    limit: usize,
    drain: usize,
) -> Result<Bytes, BodyError> {
    let fits = |n: u64, bound: usize| usize::try_from(n).is_ok_and(|n| n <= bound);
    if declared.is_some_and(|n| !fits(n, drain)) {
        return Err(BodyError::TooLarge { drained: false });
    }
    // A body that arrives in one piece (the usual case) is kept as it came, without a copy.
    let mut first: Option<Bytes> = None;
    let mut kept: Vec<u8> = Vec::new();
    let mut seen: usize = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        seen = seen.saturating_add(data.len());
        if seen > drain {
            return Err(BodyError::TooLarge { drained: false });
        }
        if seen > limit {
            first = None;
            kept = Vec::new();
        } else if first.is_none() && kept.is_empty() {
            first = Some(data);
        } else {
            if let Some(f) = first.take() {
                let expected = declared.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
                kept.reserve(expected.clamp(f.len() + data.len(), limit));
                kept.extend_from_slice(&f);
            }
            kept.extend_from_slice(&data);
        }
    }
    if seen > limit {
        return Err(BodyError::TooLarge { drained: true });
    }
    Ok(first.unwrap_or_else(|| Bytes::from(kept)))
}

/// A webhook request's body, read whole within [`MAX_BODY_BYTES`] and [`BODY_READ_TIMEOUT`], and
/// its `Content-Type`. As an extractor it answers 413, 408 or 400 before the handler runs; it
/// reads the body once, straight from the connection (no middleware handing a re-wrapped body on
/// to a second, limited read).
#[derive(Debug)]
pub struct AdmissionBody {
    /// The `Content-Type` header, if any.
    pub content_type: Option<HeaderValue>,
    /// The whole body.
    pub bytes: Bytes,
}

impl AdmissionBody {
    /// The `Content-Type` as text (`None` when absent or not visible ASCII).
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_ref().and_then(|v| v.to_str().ok())
    }
}

impl<S: Send + Sync> FromRequest<S> for AdmissionBody {
    type Rejection = BodyError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, BodyError> {
        let (mut parts, body) = request.into_parts();
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let read = read_bounded(body, declared, MAX_BODY_BYTES, MAX_DRAIN_BYTES);
        let bytes = tokio::time::timeout(BODY_READ_TIMEOUT, read)
            .await
            .map_err(|_| timed_out(declared))??;
        Ok(Self {
            content_type: parts.headers.remove(header::CONTENT_TYPE),
            bytes,
        })
    }
}

/// What a body that did not arrive in time is answered with: 413 when its Content-Length already
/// says it is too large (the time bound only ended the discarding, the size is what the client
/// must hear), else 408.
fn timed_out(declared: Option<u64>) -> BodyError {
    match declared {
        Some(n) if usize::try_from(n).map_or(true, |n| n > MAX_BODY_BYTES) => {
            BodyError::TooLarge { drained: false }
        }
        _ => BodyError::Timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(sizes: &[usize]) -> Body {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            sizes.iter().map(|&n| Ok(vec![b'x'; n])).collect();
        Body::from_stream(futures::stream::iter(chunks))
    }

    #[test]
    fn a_timed_out_body_declared_too_large_is_answered_413() {
        let over = u64::try_from(MAX_BODY_BYTES).unwrap() + 1;
        assert_eq!(
            timed_out(Some(over)),
            BodyError::TooLarge { drained: false }
        );
        assert_eq!(timed_out(Some(10)), BodyError::Timeout);
        assert_eq!(timed_out(None), BodyError::Timeout);
    }

    #[tokio::test]
    async fn bodies_within_the_limit_are_read_whole() {
        let bytes = read_bounded(chunked(&[3, 4, 3]), None, 10, 20)
            .await
            .unwrap();
        assert_eq!(bytes.len(), 10);
        let empty = read_bounded(Body::empty(), Some(0), 10, 20).await.unwrap();
        assert!(empty.is_empty());
        let one = read_bounded(chunked(&[7]), Some(7), 10, 20).await.unwrap();
        assert_eq!(one.len(), 7);
        let exact = read_bounded(chunked(&[5, 5]), Some(10), 10, 20)
            .await
            .unwrap();
        assert_eq!(exact.len(), 10);
        // Empty frames do not count as the first piece.
        let gaps = read_bounded(chunked(&[0, 4, 0, 6]), None, 10, 20)
            .await
            .unwrap();
        assert_eq!(gaps.len(), 10);
    }

    #[tokio::test]
    async fn larger_bodies_are_drained_up_to_the_drain_bound() {
        let over = read_bounded(chunked(&[8, 8]), None, 10, 20).await;
        assert_eq!(over, Err(BodyError::TooLarge { drained: true }));
        let far_over = read_bounded(chunked(&[8, 8, 8]), None, 10, 20).await;
        assert_eq!(far_over, Err(BodyError::TooLarge { drained: false }));
        // Declared beyond the drain bound: not read at all.
        let declared = read_bounded(chunked(&[1]), Some(21), 10, 20).await;
        assert_eq!(declared, Err(BodyError::TooLarge { drained: false }));
    }

    #[test]
    fn answers_close_the_connection_unless_the_body_was_drained() {
        let drained = BodyError::TooLarge { drained: true }.into_response();
        assert_eq!(drained.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(drained.headers().get(header::CONNECTION).is_none());
        for (e, status) in [
            (
                BodyError::TooLarge { drained: false },
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
            (BodyError::Timeout, StatusCode::REQUEST_TIMEOUT),
            (BodyError::Read("x".into()), StatusCode::BAD_REQUEST),
        ] {
            let r = e.into_response();
            assert_eq!(r.status(), status);
            assert_eq!(r.headers()[header::CONNECTION], "close");
        }
    }
}
