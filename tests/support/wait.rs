//! Polling helpers: wait for a condition with a timeout (never assert on elapsed time).

use std::future::Future;
use std::time::Duration;

/// Polls `probe` every 200 ms until it returns `Some`, or panics after `timeout` with `what`.
pub async fn until<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// [`until`], panicking with the last 80 lines of `log()` (e.g. evictord's log) when it times out.
pub async fn until_logged<T, F, Fut>(
    timeout: Duration,
    what: &str,
    log: impl Fn() -> String,
    mut probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n--- log (tail) ---\n{}",
                super::control_plane::tail(&log(), 80)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
