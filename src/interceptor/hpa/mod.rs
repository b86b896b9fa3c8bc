//! The `horizontalpodautoscaler.autoscaling.k8s.io` interceptor (SPEC 5.4, seed 000 "Pod Surge
//! Example": "can also be applied to ... HorizontalPodAutoscaler"): drain the pods of an
//! autoscaled workload without losing availability, by raising the autoscaler's floor first.
//!
//! Raising `spec.replicas` of a workload an autoscaler scales is undone by the autoscaler; raising
//! its `spec.minReplicas` is not. For a pod of a workload a HorizontalPodAutoscaler scales (the
//! pod's controller, or a ReplicaSet's Deployment: [`target`]) the interceptor raises
//! `minReplicas` by one per pod being evicted, above the replicas the workload had (and
//! `maxReplicas` with it where the workload was at it), within the workload's surge room (a
//! Deployment's `maxSurge`, one pod at a time for other workloads), records the surge in the
//! autoscaler's annotation [`RECORD_ANNOTATION`] in the same patch, waits until the workload has
//! that many available replicas, and completes; the next interceptor (in the end the Eviction API,
//! which the PodDisruptionBudget now allows) removes the pod. The [`settler`] puts the limits
//! back once the pod is terminating or gone or its request ended (canceled or deleted), or hands
//! the place of a pod that left to the next pod of the Deployment waiting for one
//! ([`decide::hand_over`]). Every autoscaler write
//! tests its resourceVersion and the limits it replaces, so a user's change is never overwritten:
//! it wins.
//!
//! HorizontalPodAutoscalers are read and patched in the newest `autoscaling` version the server
//! serves ([`discovery`]). Built only on [`crate::interceptor`], the Deployment interceptor's pure
//! surge functions and the Kubernetes API (convention 16).

pub mod decide;
pub mod discovery;
mod interceptor;
mod reads;
pub mod record;
mod settler;
pub mod target;
pub mod workload;

use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use interceptor::HpaInterceptor;

use crate::interceptor::autoscalers::Autoscalers;
use crate::interceptor::deployment::surge::DeploymentFacts;
use crate::interceptor::deployments::DeploymentWatch;
use crate::interceptor::replicasets::ReplicaSets;
use crate::interceptor::workload_pods::WorkloadPods;
use crate::interceptor::{PodCache, Runner, Settings, Waiters};

/// The interceptor's name, as pods declare it.
pub const NAME: &str = "horizontalpodautoscaler.autoscaling.k8s.io";
/// HorizontalPodAutoscaler annotation holding the [`record::HpaSurgeRecord`] while a surge lasts.
pub const RECORD_ANNOTATION: &str = "evictord.dev/hpa-surge";
/// How often an active request is looked at again without a wake: a fallback for a request
/// whose target is a Deployment, since its looks are woken by every change of what they wait for
/// (the Deployment's facts, its pods' readiness, the settler freeing room in the surge).
pub const POLL: Duration = Duration::from_secs(30);
/// How often a request that waits with no watch to wake it is looked at again: its target is
/// another kind of workload (a StatefulSet, a custom resource: read live at each look), or the
/// interceptor's own write wants a second look.
pub const UNWATCHED_POLL: Duration = Duration::from_secs(2);
/// How often the settler looks at a raised autoscaler again (from caches: no request to
/// kube-apiserver unless it writes), until its surge is settled: nothing wakes it when a
/// covered pod leaves.
pub const SETTLE_POLL: Duration = Duration::from_secs(2);

/// Errors of the HPA interceptor's API calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an object failed.
    #[error("reading {0}: {1}")]
    Read(String, #[source] kube::Error),
    /// Patching a HorizontalPodAutoscaler failed.
    #[error("patching HorizontalPodAutoscaler {0}: {1}")]
    Patch(String, #[source] kube::Error),
}

impl From<crate::interceptor::deployment::Error> for Error {
    fn from(e: crate::interceptor::deployment::Error) -> Self {
        match e {
            crate::interceptor::deployment::Error::Read(what, e) => Error::Read(what, e),
            crate::interceptor::deployment::Error::Patch(what, e) => Error::Patch(what, e),
        }
    }
}

/// True for 409 Conflict and for 422 from a failed `test` of a JSON patch.
fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Patch(_, kube::Error::Api(s)) if s.code == 409 || s.code == 422)
}

/// The `autoscaling` version to use, from discovery; `None` when the server serves no
/// HorizontalPodAutoscalers. When discovery fails, `v1` (served by every release).
pub async fn discover_version(client: &Client) -> Option<&'static str> {
    match client.list_api_groups().await {
        Ok(groups) => discovery::autoscaling_version_in(&groups),
        Err(e) => {
            warn!(error = %e, "API discovery failed; using autoscaling/v1 HorizontalPodAutoscalers");
            Some("v1")
        }
    }
}

/// Runs the interceptor (on active requests) and the settler (on raised autoscalers) until
/// `shutdown`. `settings` are the webhook's heartbeat settings; the poll interval is [`POLL`]
/// (and [`UNWATCHED_POLL`] for the requests no watch wakes); `deployments` is the shared watch of
/// Deployments, subscribed to here (the wakes of the requests that wait for a Deployment to
/// scale, and the store a Deployment target is read from), to be started after; `pods` the
/// interceptors' shared watch cache of pods. The pods' ReplicaSets come from the process's one
/// watch cache of their owners ([`ReplicaSets::shared`], the Deployment interceptor's too), the
/// readiness of a Deployment target's pods from their watch ([`WorkloadPods`]: the Deployment
/// interceptor's watches are of the Deployments no autoscaler scales, these of those one does).
pub fn run(
    client: Client,
    settings: Settings,
    version: Option<&'static str>,
    autoscalers: Autoscalers,
    deployments: &DeploymentWatch,
    pods: PodCache,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let settings = Settings {
        poll_interval: POLL,
        ..settings
    };
    let runner = Runner::new(client.clone(), settings).pods(pods.clone());
    let requests = runner.requests();
    let waiters = Waiters::default();
    // Apart: a request waits for its pods' readiness only once the surge is available.
    let readiness_waiters = Waiters::default();
    let polled = Waiters::default();
    let (workload_pods, readiness_changes) = WorkloadPods::new(client.clone());
    // The settler frees room in a Deployment's surge: the requests waiting for it look again.
    let (room_freed, room_changes) = tokio::sync::mpsc::unbounded_channel();
    let room_changes = futures::stream::unfold(room_changes, |mut rx| async move {
        rx.recv().await.map(|k| (k, rx))
    });
    let ticks = futures::stream::unfold((), |()| async {
        tokio::time::sleep(UNWATCHED_POLL).await;
        Some(((), ()))
    });
    let wakes = futures::stream::select_all([
        deployments
            .wakes(&waiters, |d| DeploymentFacts::read(d, None))
            .boxed(),
        waiters.woken_by(room_changes).boxed(),
        readiness_waiters.woken_by(readiness_changes).boxed(),
        polled.woken_by(ticks).boxed(),
    ]);
    let replicasets = ReplicaSets::shared(&client, &shutdown);
    let deployments_store = deployments.store();
    let interceptor = HpaInterceptor::new(client.clone(), version, autoscalers)
        .reading(
            deployments.store(),
            replicasets,
            workload_pods,
            readiness_waiters,
        )
        .woken_by(waiters)
        .polled_by(polled);
    async move {
        match version {
            Some(v) => info!("HorizontalPodAutoscalers in autoscaling/{v}"),
            None => warn!(
                "the server serves no autoscaling API: the {NAME} interceptor completes every request at once"
            ),
        }
        let token = shutdown.clone();
        let stop = async move { token.cancelled().await };
        match version {
            Some(v) => {
                tokio::join!(
                    runner.run_woken(interceptor, wakes, stop),
                    settler::run(
                        client,
                        pods,
                        requests,
                        deployments_store,
                        v,
                        room_freed,
                        shutdown
                    ),
                );
            }
            None => runner.run_woken(interceptor, wakes, stop).await,
        }
    }
}
