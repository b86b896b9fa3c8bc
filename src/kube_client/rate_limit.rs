//! The client-side rate limit of a process's Kubernetes API requests (`--kube-api-qps`,
//! `--kube-api-burst`): a token bucket, as client-go's `QPS` and `Burst`, shared by every
//! component of the process. A request waits for a token before it is sent; a watch takes one
//! token when it starts. Off (no limit) when the QPS is 0.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// The limit: `qps` requests a second on average, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Tokens added per second (> 0).
    pub qps: f64,
    /// Tokens the bucket holds at most (at least 1).
    pub burst: u32,
}

impl RateLimit {
    /// The limit of the flags, `None` when `qps` is 0 (or not a positive number).
    pub fn from_flags(qps: f64, burst: u32) -> Option<Self> {
        (qps.is_finite() && qps > 0.0).then_some(Self {
            qps,
            burst: burst.max(1),
        })
    }
}

/// A token bucket, full at the start. The clock is an input.
#[derive(Debug)]
pub struct TokenBucket {
    limit: RateLimit,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(limit: RateLimit, now: Instant) -> Self {
        Self {
            limit,
            tokens: f64::from(limit.burst),
            last: now,
        }
    }

    /// Takes a token at `now`, or tells how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limit.qps).min(f64::from(self.limit.burst));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.limit.qps,
            ))
        }
    }
}

/// Holds each request until the bucket gives it a token.
#[derive(Clone, Copy, Debug)]
pub struct RateLimitLayer(pub RateLimit);

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: TokenBucket::new(self.0, Instant::now()),
            wait: None,
            token: false,
        }
    }
}

/// The service of [`RateLimitLayer`]. Not `Clone`: one bucket, behind the shared client's
/// buffer, for every component.
pub struct RateLimited<S> {
    inner: S,
    bucket: TokenBucket,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next call.
    token: bool,
}

impl<S, Request> Service<Request> for RateLimited<S>
where
    S: Service<Request>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.token {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.token = true,
                Err(after) => self.wait = Some(Box::pin(tokio::time::sleep(after))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        self.token = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_turn_the_limit_on() {
        assert_eq!(RateLimit::from_flags(0.0, 100), None);
        assert_eq!(RateLimit::from_flags(-1.0, 100), None);
        assert_eq!(RateLimit::from_flags(f64::NAN, 100), None);
        assert_eq!(
            RateLimit::from_flags(20.0, 0),
            Some(RateLimit {
                qps: 20.0,
                burst: 1
            })
        );
    }

    #[test]
    fn a_burst_at_once_then_qps() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut bucket = TokenBucket::new(
            RateLimit {
                qps: 10.0,
                burst: 3,
            },
            t0,
        );
        // rows: (time in ms, taken, or the wait)
        let rows: &[(u64, Result<(), u64>)] = &[
            (0, Ok(())),
            (0, Ok(())),
            (0, Ok(())),
            (0, Err(100)),
            (50, Err(50)),
            (100, Ok(())),
            (100, Err(100)),
            // idle for long: back to a full burst, not more
            (10_000, Ok(())),
            (10_000, Ok(())),
            (10_000, Ok(())),
            (10_000, Err(100)),
        ];
        for &(at, expected) in rows {
            let got = bucket.take(ms(at)).map_err(|d| d.as_millis() as u64);
            assert_eq!(got, expected, "at {at} ms");
        }
    }

    /// Through the layer: with 20 requests a second and a burst of 2, the 3rd request waits
    /// 50 ms for its token and the 5th 150 ms (on the real clock: at least that long).
    #[tokio::test]
    async fn the_layer_holds_requests_for_their_token() {
        use tower::ServiceExt as _;
        let start = Instant::now();
        let inner =
            tower::service_fn(|()| async { Ok::<_, std::convert::Infallible>(Instant::now()) });
        let mut service = RateLimitLayer(RateLimit {
            qps: 20.0,
            burst: 2,
        })
        .layer(inner);
        let mut sent = Vec::new();
        for _ in 0..5 {
            sent.push(service.ready().await.unwrap().call(()).await.unwrap() - start);
        }
        for (i, at_least) in [(2, 45), (3, 95), (4, 145)] {
            assert!(
                sent[i] >= Duration::from_millis(at_least),
                "request {i} sent after {:?}: {sent:?}",
                sent[i]
            );
        }
    }
}
