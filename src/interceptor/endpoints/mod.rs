//! The `endpoints.evictord.dev` interceptor (SPEC 6.4): a pod leaves every Service's ready
//! endpoints, and stays out for its deregistration delay, before its eviction goes on, so that no
//! load balancer still sends it requests when it gets SIGTERM.
//!
//! Pods that declare it carry the readiness gate `evictord.dev/serving` (added by the pod webhook,
//! rule P9), which evictord keeps `True` ([`crate::controller::serving_keeper`], on every
//! replica). When the interceptor becomes active, and only while the pod's PodDisruptionBudgets
//! allow one more disruption ([`decide::on_budgets`]: an unready pod counts against them, so a
//! workload's surge interceptor goes first), it sets the condition `False`: the kubelet makes the
//! pod unready and the endpoints controllers drop it from the ready addresses of its Services. It
//! waits, at most `--endpoints-wait-timeout`, until no Service that selects the pod lists it as
//! a ready address in its Endpoints or EndpointSlices ([`services`]; Services that publish
//! not-ready addresses or have no selector are named, not waited for), then for the pod's
//! deregistration delay, and completes: the next interceptor, in the end the Eviction API, takes
//! the pod. A pod without the gate waits for the delay only, and says so.
//!
//! The condition is the record (its reason, `lastTransitionTime` and `lastProbeTime`, see
//! [`crate::serving`]): a restarted or newly elected evictord carries on. A canceled request, or
//! an eviction still refused `--serving-restore-after` after this interceptor completed, gets the
//! condition back to `True` from the keeper. Built only on [`crate::interceptor`], the shared
//! pure modules and the Kubernetes API (convention 16).

pub mod decide;
pub mod discovery;
mod interceptor;
pub mod services;

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use interceptor::EndpointsInterceptor;

use crate::interceptor::{PodCache, Runner, Settings};

pub use crate::serving::ENDPOINTS_INTERCEPTOR as NAME;
/// How often an active request is looked at again: the delay ends within a second of its time.
pub const POLL: Duration = Duration::from_secs(1);

/// The interceptor's own settings (from flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointsSettings {
    /// `--deregistration-delay`: the delay of a pod without a valid annotation.
    pub default_delay: Duration,
    /// `--endpoints-wait-timeout`: how long to wait for the Services to drop the pod.
    pub wait_timeout: Duration,
}

/// The API versions the interceptor reads in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Versions {
    /// `policy` version of PodDisruptionBudgets; `None`: the server serves none.
    pub budgets: Option<&'static str>,
    /// `discovery.k8s.io` version of EndpointSlices; `None`: only Endpoints are read.
    pub slices: Option<&'static str>,
}

/// Errors of the interceptor's API calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an object failed.
    #[error("reading {0}: {1}")]
    Read(String, #[source] kube::Error),
    /// Writing the pod's condition failed.
    #[error("writing the evictord.dev/serving condition of pod {0}: {1}")]
    Condition(String, #[source] kube::Error),
}

/// The versions to read in, from discovery; when discovery fails, the GA versions (`policy/v1`,
/// `discovery.k8s.io/v1`).
pub async fn discover_versions(client: &Client) -> Versions {
    match client.list_api_groups().await {
        Ok(groups) => Versions {
            budgets: crate::disruption::budget_version_in(&groups),
            slices: discovery::slice_version_in(&groups),
        },
        Err(e) => {
            warn!(error = %e, "API discovery failed; reading policy/v1 and discovery.k8s.io/v1");
            Versions {
                budgets: Some("v1"),
                slices: Some("v1"),
            }
        }
    }
}

/// Runs the interceptor until `shutdown`. `settings` are the webhook's heartbeat settings; the
/// poll interval is [`POLL`]; `pods` is the interceptors' shared watch cache of pods.
pub async fn run(
    client: Client,
    settings: Settings,
    endpoints: EndpointsSettings,
    pods: PodCache,
    shutdown: CancellationToken,
) {
    let versions = discover_versions(&client).await;
    info!(
        budgets = versions.budgets.unwrap_or("-"),
        endpoint_slices = versions.slices.unwrap_or("-"),
        "the {NAME} interceptor reads PodDisruptionBudgets and EndpointSlices in these versions"
    );
    let settings = Settings {
        poll_interval: POLL,
        ..settings
    };
    Runner::new(client.clone(), settings)
        .pods(pods)
        .run(
            EndpointsInterceptor::new(client, versions, endpoints),
            async move { shutdown.cancelled().await },
        )
        .await;
}
