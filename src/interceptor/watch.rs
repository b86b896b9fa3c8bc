//! Driving a watch cache of the interceptors (the autoscalers', the Deployments'): one loop that
//! polls a reflector's stream until shutdown, shared so both caches stop, log and report their
//! first list the same way.

use std::time::Duration;

use evictord_interceptor::pods::{REFUSAL_RECHECK, is_forbidden};
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
    drive_until(
        stream,
        kind,
        shutdown,
        synced,
        None::<(fn(), fn(), Duration)>,
    )
    .await;
}

/// As [`drive`], but a refused list or watch (403) calls `forbidden` and pauses the watch for
/// [`REFUSAL_RECHECK`] instead of retrying it at the watcher's backoff: the caller reads live
/// meanwhile. The watch is then asked again; the first event it yields after a refusal
/// calls `allowed` (the cache may be read again). A refusal is asked again rather than taken
/// for good because it can pass: a kube-apiserver that has just restarted refuses an account
/// bound by RBAC until its authorization caches are in.
pub(crate) async fn drive_unless_forbidden<K>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    kind: &'static str,
    shutdown: CancellationToken,
    forbidden: impl Fn(),
    allowed: impl Fn(),
) {
    drive_until(
        stream,
        kind,
        shutdown,
        || {},
        Some((forbidden, allowed, REFUSAL_RECHECK)),
    )
    .await;
}

async fn drive_until<K>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    kind: &'static str,
    shutdown: CancellationToken,
    synced: impl Fn(),
    refusals: Option<(impl Fn(), impl Fn(), Duration)>,
) {
    futures::pin_mut!(stream);
    let mut refused = false;
    loop {
        let item = tokio::select! {
            () = shutdown.cancelled() => break,
            item = stream.next() => item,
        };
        // A relist is in the store once it is done; a resumed watch's first event is live.
        let live = matches!(&item, Some(Ok(e))
            if !matches!(e, watcher::Event::Init | watcher::Event::InitApply(_)));
        if refused && live {
            refused = false;
            if let Some((_, allowed, _)) = &refusals {
                debug!(kind, "watch allowed again");
                allowed();
            }
        }
        match item {
            Some(Ok(watcher::Event::InitDone)) => {
                debug!(kind, "watch cache synced");
                synced();
            }
            Some(Ok(_)) => {}
            Some(Err(e)) if is_forbidden(&e) && refusals.is_some() => {
                if let Some((forbidden, _, recheck)) = &refusals {
                    if !refused {
                        forbidden();
                    }
                    refused = true;
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(*recheck) => {}
                    }
                }
            }
            Some(Err(e)) => warn!(kind, error = %e, "watch error; retrying with backoff"),
            None => break,
        }
    }
}
