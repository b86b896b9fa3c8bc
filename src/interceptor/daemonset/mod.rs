//! The `daemonset.apps.k8s.io` interceptor (SPEC 5.3; seed 001, "DaemonSet Controller"): a node
//! maintenance removes DaemonSet pods in plan order and keeps them off the node until it
//! completes, which the DaemonSet controller does not do on its own.
//!
//! The eviction request controller makes it the implicit interceptor of every DaemonSet pod
//! (SPEC 2.3 step 5). For a pod that a NodeMaintenance in Drain targets (its recorded drain
//! targets for the pod's node cover the pod: type DaemonSet, priority, selector) it waits until
//! the node carries the `NoSchedule` taint `evictord.dev/maintenance` (the node maintenance
//! controller places it before any request for such a pod exists and removes it when no
//! maintenance holds the node), then deletes the pod with a UID precondition and the pod's own
//! grace period, and completes once the pod is gone (the controller then records the request as
//! Evicted). A DaemonSet whose pod template tolerates the taint would get its pod back at once:
//! that pod is left running and the interceptor completes saying so. A pod no maintenance
//! targets (another requester, or a maintenance whose plan has not reached it): complete at once
//! with the reason; the Eviction API then declines it, as it always did.
//!
//! It keeps no state of its own (its watch caches mirror the cluster): the maintenance's status,
//! the taint on the node and the pod's deletion are the record, so a restarted or newly elected evictord carries on. Built only on
//! [`crate::interceptor`], shared pure modules and the Kubernetes API (convention 16).

mod caches;
pub mod decide;
mod interceptor;

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

pub use caches::Caches;
pub use interceptor::DaemonSetInterceptor;

use crate::interceptor::{PodCache, Runner, Settings};

pub use crate::api::DAEMONSET_INTERCEPTOR as NAME;
/// How often an active request is looked at again (a terminating pod, a taint to wait for).
pub const POLL: Duration = Duration::from_secs(2);

/// Errors of the DaemonSet interceptor's API calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an object failed.
    #[error("reading {0}: {1}")]
    Read(String, #[source] kube::Error),
    /// Deleting the pod failed.
    #[error("deleting pod {0}: {1}")]
    Delete(String, #[source] kube::Error),
}

/// Runs the interceptor until `shutdown`. `settings` are the webhook's heartbeat settings; the
/// poll interval is [`POLL`]; `pods` is the interceptors' shared watch cache of pods.
pub async fn run(client: Client, settings: Settings, pods: PodCache, shutdown: CancellationToken) {
    let settings = Settings {
        poll_interval: POLL,
        ..settings
    };
    let caches = Caches::start(&client, &shutdown);
    // A request whose reason was just recorded is looked at again at once, to delete its pod.
    let (again, looks) = tokio::sync::mpsc::unbounded_channel();
    let wakes = futures::stream::unfold(
        looks,
        |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
    );
    let interceptor = DaemonSetInterceptor::new(client.clone(), caches).looking_again_with(again);
    Runner::new(client, settings)
        .pods(pods)
        .run_woken(
            interceptor,
            wakes,
            async move { shutdown.cancelled().await },
        )
        .await;
}
