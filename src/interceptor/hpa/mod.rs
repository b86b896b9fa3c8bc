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
//! back once the pod is terminating or gone or its request ended (canceled or deleted). Every autoscaler write
//! tests its resourceVersion and the limits it replaces, so a user's change is never overwritten:
//! it wins.
//!
//! HorizontalPodAutoscalers are read and patched in the newest `autoscaling` version the server
//! serves ([`discovery`]). Built only on [`crate::interceptor`], the Deployment interceptor's pure
//! surge functions and the Kubernetes API (convention 16).

pub mod decide;
pub mod discovery;
mod interceptor;
pub mod record;
mod settler;
pub mod target;
pub mod workload;

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use interceptor::HpaInterceptor;

use crate::interceptor::autoscalers::Autoscalers;
use crate::interceptor::deployment::surge::DeploymentFacts;
use crate::interceptor::deployments::DeploymentWatch;
use crate::interceptor::{PodCache, Runner, Settings, Waiters};

/// The interceptor's name, as pods declare it.
pub const NAME: &str = "horizontalpodautoscaler.autoscaling.k8s.io";
/// HorizontalPodAutoscaler annotation holding the [`record::HpaSurgeRecord`] while a surge lasts.
pub const RECORD_ANNOTATION: &str = "evictord.dev/hpa-surge";
/// How often a raised autoscaler and an active request are looked at again.
pub const POLL: Duration = Duration::from_secs(2);

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
/// `shutdown`. `settings` are the webhook's heartbeat settings; the poll interval is [`POLL`];
/// `deployments` is the shared watch of Deployments, subscribed to here (the wakes of the
/// requests that wait for a Deployment to scale), to be started after.
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
    let wakes = deployments.wakes(&waiters, |d| DeploymentFacts::read(d, None));
    let interceptor = HpaInterceptor::new(client.clone(), version, autoscalers).woken_by(waiters);
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
                    settler::run(client, pods, requests, v, shutdown),
                );
            }
            None => runner.run_woken(interceptor, wakes, stop).await,
        }
    }
}
