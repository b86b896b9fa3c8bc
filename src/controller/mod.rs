//! The controllers that make the evictord APIs work. Each one is split into a pure decision core
//! (`decide`: object, cached pod, clock → [`eviction_request::Decision`]) and a thin shell that
//! applies the decision (status patch, eviction call, events, requeue). They run on the elected
//! leader only when leader election is on; the [`serving_keeper`] runs on every replica.

pub mod events;
pub mod eviction_api;
pub mod eviction_request;
mod leader;
pub mod node_maintenance;
pub mod own_writes;
pub mod serving_keeper;

use std::sync::Arc;

use futures::StreamExt;
use kube::Client;

use self::events::EventQueue;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cli::ServeArgs;
use crate::cluster::Caches;
use crate::kube_client::{Component, KubeClients};
use crate::recorder::{Recorder, reporter};

/// True when a write failed because the object changed meanwhile (409 Conflict, or 422 from a
/// failed `test` of a guarded JSON patch): reconciling again at once reads the new version.
pub(crate) fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409 || s.code == 422)
}

/// True when the object of a write is gone (404): deleted meanwhile, nothing left to write.
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

/// The requeue after a failed reconcile, shared by the controllers: a conflict is retried at
/// once, anything else after a short pause; both count as a retry in the metrics.
pub(crate) fn requeue_after_error(
    controller: &'static str,
    conflict: bool,
    error: &dyn std::fmt::Display,
) -> kube::runtime::controller::Action {
    use std::time::Duration;
    crate::metrics::metrics()
        .reconcile_retries
        .get_or_create(&crate::metrics::ControllerLabel { controller })
        .inc();
    if conflict {
        tracing::debug!(%error, controller, "concurrent write; reconciling again");
        kube::runtime::controller::Action::requeue(Duration::from_millis(200))
    } else {
        tracing::warn!(%error, controller, "reconcile failed; retrying");
        kube::runtime::controller::Action::requeue(Duration::from_secs(2))
    }
}

/// A tick at once, then one every [`crate::cluster::RESYNC`]: the controllers reconcile
/// every object on each.
pub(crate) fn resync_ticks() -> impl futures::Stream<Item = ()> + Send + 'static {
    let period = crate::cluster::RESYNC;
    futures::stream::once(async {}).chain(futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    }))
}

/// Runs the enabled controllers until `shutdown` (on the leader only, with leader election).
/// The controllers and leader election use the `controller` client of `clients`, the
/// interceptors the `interceptor` one.
pub async fn run(
    clients: KubeClients,
    caches: Arc<Caches>,
    args: ServeArgs,
    shutdown: CancellationToken,
) {
    if args.controllers.iter().all(|c| c == "none") {
        info!("controllers disabled (--controllers=none)");
        return;
    }
    let client = clients.client(Component::Controller);
    let interceptors = clients.client(Component::Interceptor);
    if args.leader_election {
        let election = args.clone();
        leader::run_while_leader(client.clone(), &election, shutdown, move |term| {
            start(
                client.clone(),
                interceptors.clone(),
                caches.clone(),
                args.clone(),
                term,
            )
        })
        .await;
    } else {
        start(client, interceptors, caches, args, shutdown).await;
    }
}

/// Starts the enabled controllers and waits for them to stop (on `term`); the interceptors
/// send their requests with `interceptors`.
async fn start(
    client: Client,
    interceptors: Client,
    caches: Arc<Caches>,
    args: ServeArgs,
    term: CancellationToken,
) {
    let mut tasks = Vec::new();
    let events = EventQueue::start(Recorder::new(client.clone(), reporter("evictord")));
    if args.controller_enabled("evictionrequest") {
        let ctx = Arc::new(eviction_request::reconciler::Context {
            client: client.clone(),
            caches: caches.clone(),
            settings: eviction_request::DecideSettings {
                interceptor_deadline: args.rules.interceptor_deadline,
                min_heartbeat_interval: args.rules.min_heartbeat_interval,
                backoff_base: args.eviction_backoff_base,
                backoff_cap: args.eviction_backoff_cap,
                extra_k8s_io_interceptors: args.rules.settings().extra_k8s_io_interceptors,
                eviction_api_requester_ttl: args.rules.eviction_api_requester_ttl,
                ended_request_retention: args.ended_request_retention,
                daemonset_interceptor: args.daemonset_interceptor,
                interceptor_registration: args.rules.interceptor_registration,
                unregistered_interceptor_grace: args.rules.unregistered_interceptor_grace,
                ..Default::default()
            },
            events: events.clone(),
            stop: term.clone(),
            eviction: Default::default(),
            own_writes: Default::default(),
            evicted_pods: Default::default(),
            told_evicted: Default::default(),
            gone_targets: Default::default(),
        });
        info!("starting the eviction request controller");
        tasks.push(tokio::spawn(eviction_request::reconciler::run(
            ctx,
            term.clone(),
        )));
    }
    if args.controller_enabled("nodemaintenance") {
        // The reconciler's and the admission's writes of maintenances, until the cache shows them.
        let own_writes: Arc<own_writes::OwnWrites> = Default::default();
        let ctx = Arc::new(node_maintenance::reconciler::Context {
            client: client.clone(),
            caches: caches.clone(),
            recorder: Recorder::new(client.clone(), reporter("evictord")),
            daemonset_interceptor: args.daemonset_interceptor,
            interceptor_registration: args.rules.interceptor_registration,
            exclude_from_load_balancers: args.exclude_from_external_load_balancers,
            status_writes: Default::default(),
            own_writes: own_writes.clone(),
            created_requests: Default::default(),
        });
        info!("starting the node maintenance controller");
        tasks.push(tokio::spawn(node_maintenance::reconciler::run(
            ctx,
            term.clone(),
        )));
        // The admission of maintenances by MaintenanceBudgets (SPEC 6.1): one loop, so that
        // decisions never overlap.
        let admission = Arc::new(node_maintenance::admission::Context {
            client: client.clone(),
            caches: caches.clone(),
            recorder: Recorder::new(client.clone(), reporter("evictord")),
            own_writes,
        });
        tasks.push(tokio::spawn(node_maintenance::admission::run(
            admission,
            term.clone(),
        )));
    }
    // One HorizontalPodAutoscaler cache for the Deployment and HPA interceptors.
    let (autoscaling, autoscalers) = if args.deployment_interceptor || args.hpa_interceptor {
        let version = crate::interceptor::hpa::discover_version(&interceptors).await;
        let cache = crate::interceptor::autoscalers::Autoscalers::start(
            &interceptors,
            version,
            term.clone(),
        );
        (version, cache)
    } else {
        (None, crate::interceptor::autoscalers::Autoscalers::none())
    };
    // One watch cache of pods for every interceptor's runner and the settlers: the pods of the
    // nodes the requests' pods run on (`PodCache`).
    let pods = crate::interceptor::PodCache::new(interceptors.clone());
    // Where a pod runs, from the controllers' cluster cache of pods: a first look at a pod
    // reads it from its node's watch, not with a GET.
    let cluster_pods = caches.clone();
    pods.set_node_hint(Arc::new(move |ns: &str, name: &str| {
        cluster_pods
            .pods
            .get(Some(ns), name)?
            .spec
            .node_name
            .clone()
    }));
    // One watch of Deployments for the Deployment interceptor's settler and both interceptors'
    // wakes, started once they have subscribed.
    let deployments = (args.deployment_interceptor || args.hpa_interceptor)
        .then(crate::interceptor::deployments::DeploymentWatch::new);
    if let Some(deployments) = deployments.as_ref().filter(|_| args.deployment_interceptor) {
        let settings = crate::interceptor::Settings {
            min_heartbeat_interval: args.rules.min_heartbeat_interval,
            default_deadline: args.rules.interceptor_deadline,
            ..Default::default()
        };
        info!("starting the deployment.apps.k8s.io interceptor");
        tasks.push(tokio::spawn(crate::interceptor::deployment::run(
            interceptors.clone(),
            settings,
            autoscalers.clone(),
            deployments,
            pods.clone(),
            cordoned_pods(caches.clone()),
            term.clone(),
        )));
    }
    if args.daemonset_interceptor {
        let settings = crate::interceptor::Settings {
            min_heartbeat_interval: args.rules.min_heartbeat_interval,
            default_deadline: args.rules.interceptor_deadline,
            ..Default::default()
        };
        info!("starting the daemonset.apps.k8s.io interceptor");
        tasks.push(tokio::spawn(crate::interceptor::daemonset::run(
            interceptors.clone(),
            settings,
            pods.clone(),
            term.clone(),
        )));
    }
    if args.endpoints_interceptor {
        let settings = crate::interceptor::Settings {
            min_heartbeat_interval: args.rules.min_heartbeat_interval,
            default_deadline: args.rules.interceptor_deadline,
            ..Default::default()
        };
        let endpoints = crate::interceptor::endpoints::EndpointsSettings {
            default_delay: args.rules.deregistration_delay,
            wait_timeout: args.endpoints_wait_timeout,
        };
        info!("starting the endpoints.evictord.dev interceptor");
        tasks.push(tokio::spawn(crate::interceptor::endpoints::run(
            interceptors.clone(),
            settings,
            endpoints,
            pods.clone(),
            term.clone(),
        )));
    }
    if let Some(deployments) = deployments.as_ref().filter(|_| args.hpa_interceptor) {
        let settings = crate::interceptor::Settings {
            min_heartbeat_interval: args.rules.min_heartbeat_interval,
            default_deadline: args.rules.interceptor_deadline,
            ..Default::default()
        };
        info!("starting the horizontalpodautoscaler.autoscaling.k8s.io interceptor");
        tasks.push(tokio::spawn(crate::interceptor::hpa::run(
            interceptors.clone(),
            settings,
            autoscaling,
            autoscalers,
            deployments,
            pods.clone(),
            term.clone(),
        )));
    }
    if let Some(deployments) = deployments {
        deployments.start(&interceptors, term.clone());
    }
    for t in tasks {
        let _ = t.await;
    }
    // The controllers stopped (and dropped their clones): write what they queued.
    events.flush().await;
}

/// The Deployment interceptor's count of a Deployment's active pods on cordoned nodes
/// ([`crate::interceptor::deployment::CordonedPods`]), from the cluster caches of pods and
/// nodes: pods of the namespace controlled by one of the Deployment's ReplicaSets, not
/// terminating, not among `covered`, bound to a node whose `spec.unschedulable` is set.
fn cordoned_pods(caches: Arc<Caches>) -> crate::interceptor::deployment::CordonedPods {
    Arc::new(move |ns: &str, name: &str, covered: &[&str]| {
        let cordoned = |node: &str| {
            caches
                .nodes
                .get(None, node)
                .and_then(|n| n.spec.as_ref()?.unschedulable)
                .unwrap_or(false)
        };
        caches
            .pods
            .all()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| !covered.contains(&p.metadata.uid.as_deref().unwrap_or_default()))
            .filter(|p| {
                crate::interceptor::deployment::decide::owned_by(
                    name,
                    p.compact_labels.get("pod-template-hash"),
                    p.metadata.owner_references.iter().flatten(),
                )
            })
            .filter(|p| p.spec.node_name.as_deref().is_some_and(cordoned))
            .count()
    })
}
