//! The `deployment.apps.k8s.io` interceptor (SPEC 5.2, seed 000 "Pod Surge Example"): drain a
//! Deployment's pods without losing availability by surging first.
//!
//! For a pod of a RollingUpdate Deployment (pod → ReplicaSet → Deployment) it raises
//! `spec.replicas` by one per pod being evicted, within `maxSurge`, records the surge in the
//! Deployment's annotation [`SURGE_ANNOTATION`] in the same patch, waits until the Deployment
//! has that many available replicas, and completes; the next interceptor (in the end the
//! Eviction API, which the PodDisruptionBudget now allows) removes the pod. The [`settler`]
//! brings `spec.replicas` back once the pod is terminating or gone, or undoes the surge when the request is
//! canceled. Every Deployment write tests its resourceVersion and the replicas it replaces, so
//! a user's scale is never overwritten: it wins, and the record is dropped.
//!
//! Built only on [`crate::interceptor`] and the Kubernetes API (convention 16).

pub mod decide;
mod interceptor;
mod settler;
pub mod surge;
pub mod unobserved;

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

pub use interceptor::DeploymentInterceptor;
pub(crate) use settler::fate;

use crate::interceptor::autoscalers::Autoscalers;
use crate::interceptor::deployments::DeploymentWatch;
use crate::interceptor::{PodCache, Runner, Settings, Waiters};

/// The interceptor's name, as pods declare it.
pub const NAME: &str = "deployment.apps.k8s.io";
/// Deployment annotation holding the [`surge::SurgeRecord`] while a surge lasts.
pub const SURGE_ANNOTATION: &str = "evictord.dev/surge";
/// How often a surged Deployment and an active request are looked at again.
pub const POLL: Duration = Duration::from_secs(2);

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
/// (the runner's reads and the settler's).
pub fn run(
    client: Client,
    settings: Settings,
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
    let waiters = Waiters::default();
    let wakes = deployments.wakes(&waiters);
    let settler = settler::run(
        client.clone(),
        pods,
        runner.requests(),
        deployments.subscribe(),
        deployments.store(),
        shutdown.clone(),
    );
    let interceptor = DeploymentInterceptor::new(client, autoscalers).woken_by(waiters);
    async move {
        let token = shutdown.clone();
        tokio::join!(
            runner.run_woken(interceptor, wakes, async move { token.cancelled().await }),
            settler,
        );
    }
}
