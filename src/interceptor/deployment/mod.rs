//! The `deployment.apps.k8s.io` interceptor (SPEC 5.2, seed 000 "Pod Surge Example"): drain a
//! Deployment's pods without losing availability by surging first.
//!
//! For a pod of a RollingUpdate Deployment (pod → ReplicaSet → Deployment) it raises
//! `spec.replicas` by one per pod being evicted, within `maxSurge`, records the surge in the
//! Deployment's annotation [`SURGE_ANNOTATION`] in the same patch, waits until the Deployment
//! has that many available replicas, and completes; the next interceptor (in the end the
//! Eviction API, which the PodDisruptionBudget now allows) removes the pod. The [`settler`]
//! brings `spec.replicas` back once the pod is terminating or gone, or undoes the surge when the request is
//! canceled; a place that a pod which left frees goes to the next pod of the Deployment waiting
//! for one instead ([`decide::hand_over`]), `spec.replicas` staying up, and is kept for a while
//! when none waits yet but another pod of the Deployment is on a cordoned node
//! ([`decide::hold`]). Every Deployment write tests its resourceVersion and the replicas it replaces, so
//! a user's scale is never overwritten: it wins, and the record is dropped.
//!
//! Built only on [`crate::interceptor`] and the Kubernetes API (convention 16).

pub mod decide;
mod interceptor;
mod settler;
pub mod surge;
pub mod unobserved;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

pub use interceptor::DeploymentInterceptor;
pub(crate) use settler::{count_settled, count_times, fate, waiting_to_join};

use crate::interceptor::autoscalers::Autoscalers;
use crate::interceptor::deployments::DeploymentWatch;
use crate::interceptor::replicasets::ReplicaSets;
use crate::interceptor::workload_pods::WorkloadPods;
use crate::interceptor::{PodCache, Runner, Settings, Waiters};
use surge::DeploymentFacts;

/// The interceptor's name, as pods declare it.
pub const NAME: &str = "deployment.apps.k8s.io";
/// Deployment annotation holding the [`surge::SurgeRecord`] while a surge lasts.
pub const SURGE_ANNOTATION: &str = "evictord.dev/surge";
/// How often an active request is looked at again without a wake: a fallback, since a look is
/// woken by every change of what it waits for (its Deployment's facts, its pods' readiness).
pub const POLL: Duration = Duration::from_secs(30);
/// How often the settler looks at a surged Deployment again (from caches: no request to
/// kube-apiserver unless it writes), until its surge is settled.
pub const SETTLE_POLL: Duration = Duration::from_secs(2);

/// How many active pods of Deployment `name` (second argument) in namespace `ns` (first) run on
/// cordoned nodes, the pods of the given UIDs (those a surge covers) left out: the process's
/// count from its cluster caches, given to the settler, which keeps the places of pods that
/// left for them ([`decide::hold`]).
pub type CordonedPods = Arc<dyn Fn(&str, &str, &[&str]) -> usize + Send + Sync>;

/// Errors of the Deployment interceptor's API calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an object failed.
    #[error("reading {0}: {1}")]
    Read(String, #[source] kube::Error),
    /// Patching a Deployment failed.
    #[error("patching Deployment {0}: {1}")]
    Patch(String, #[source] kube::Error),
}

/// Runs the interceptor (on active requests) and the settler (on surged Deployments) until
/// `shutdown`. `settings` are the webhook's heartbeat settings; the poll interval is [`POLL`];
/// `autoscalers` is the shared HorizontalPodAutoscaler cache; `deployments` the shared watch of
/// Deployments, subscribed to here (the settler's trigger, and the wakes of the requests that
/// wait for a surge), to be started after; `pods` the interceptors' shared watch cache of pods
/// (the runner's reads and the settler's). A request is woken when its Deployment's facts change
/// ([`surge::DeploymentFacts`]: not its resourceVersion or managed fields) and when the readiness
/// of the Deployment's pods does (their watch, [`WorkloadPods`]) while it waits for them;
/// ReplicaSets come from the process's one watch cache of their owners
/// ([`ReplicaSets::shared`], the HPA interceptor's too). `cordoned` counts a Deployment's pods
/// on cordoned nodes, for which the settler keeps the places of pods that left
/// ([`decide::hold`]).
pub fn run(
    client: Client,
    settings: Settings,
    autoscalers: Autoscalers,
    deployments: &DeploymentWatch,
    pods: PodCache,
    cordoned: CordonedPods,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let settings = Settings {
        poll_interval: POLL,
        ..settings
    };
    let runner = Runner::new(client.clone(), settings).pods(pods.clone());
    let waiters = Waiters::default();
    // Apart: a request waits for its pods' readiness only once the surge is available.
    let readiness_waiters = Waiters::default();
    let (workload_pods, readiness_changes) = WorkloadPods::new(client.clone());
    let wakes = futures::stream::select(
        deployments.wakes(&waiters, |d| DeploymentFacts::read(d, None)),
        readiness_waiters.woken_by(readiness_changes),
    );
    // The process's one watch of them, shared with the HPA interceptor.
    let replicasets = ReplicaSets::shared(&client, &shutdown);
    let settler = settler::run(
        client.clone(),
        pods,
        runner.requests(),
        autoscalers.clone(),
        cordoned,
        deployments.subscribe(),
        deployments.store(),
        shutdown.clone(),
    );
    let interceptor = DeploymentInterceptor::new(client, autoscalers)
        .reading(
            deployments.store(),
            replicasets,
            workload_pods,
            readiness_waiters,
        )
        .woken_by(waiters);
    async move {
        let token = shutdown.clone();
        tokio::join!(
            runner.run_woken(interceptor, wakes, async move { token.cancelled().await }),
            settler,
        );
    }
}
