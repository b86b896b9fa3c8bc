//! Driving a watch cache of the interceptors (the autoscalers', the Deployments'): one loop that
//! polls a reflector's stream until shutdown, shared so both caches stop, log and report their
//! first list the same way.

use evictord_interceptor::pods::is_forbidden;
use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Polls `stream` (a reflector over a `watcher` with backoff) until `shutdown` or its end; logs
/// its errors (the watcher retries them with its backoff) and calls `synced` each time a list is
/// complete. `kind` names the resource in the logs.
pub(crate) async fn drive<K>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    kind: &'static str,
    shutdown: CancellationToken,
    synced: impl Fn(),
) {
    drive_until(stream, kind, shutdown, synced, None::<fn()>).await;
}

/// As [`drive`], but a refused list or watch (403) calls `forbidden` and ends the watch instead
/// of retrying it for ever: the caller then reads live.
pub(crate) async fn drive_unless_forbidden<K>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    kind: &'static str,
    shutdown: CancellationToken,
    forbidden: impl FnOnce(),
) {
    drive_until(stream, kind, shutdown, || {}, Some(forbidden)).await;
}

async fn drive_until<K>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    kind: &'static str,
    shutdown: CancellationToken,
    synced: impl Fn(),
    mut forbidden: Option<impl FnOnce()>,
) {
    futures::pin_mut!(stream);
    loop {
        let item = tokio::select! {
            () = shutdown.cancelled() => break,
            item = stream.next() => item,
        };
        match item {
            Some(Ok(watcher::Event::InitDone)) => {
                debug!(kind, "watch cache synced");
                synced();
            }
            Some(Ok(_)) => {}
            Some(Err(e)) if forbidden.is_some() && is_forbidden(&e) => {
                if let Some(f) = forbidden.take() {
                    f();
                }
                break;
            }
            Some(Err(e)) => warn!(kind, error = %e, "watch error; retrying with backoff"),
            None => break,
        }
    }
}
