//! The webhooks (EvictionRequests, Pods and NodeMaintenances validating and mutating,
//! EvictionInterceptors, MaintenanceBudgets, and the Eviction API bridge) and the router that serves them, one typed
//! route each: the pure reviews through the one generic handler, the bridge through its own thin shell (it writes the
//! EvictionRequest it hands the call to).

use std::borrow::Cow;
use std::sync::Arc;

use axum::Router;

use super::http::{AdmissionState, Webhook, route};
use super::registration::{
    PATH_MUTATE_NODE_MAINTENANCES, PATH_MUTATE_PODS, PATH_VALIDATE_EVICTION_INTERCEPTORS,
    PATH_VALIDATE_EVICTION_REQUESTS, PATH_VALIDATE_MAINTENANCE_BUDGETS,
    PATH_VALIDATE_NODE_MAINTENANCES, PATH_VALIDATE_POD_EVICTIONS, PATH_VALIDATE_PODS,
};
use super::{
    Lookups, ReviewRequest, eviction_interceptor, eviction_request, maintenance_budget,
    node_maintenance, pod, pod_eviction, pod_serving,
};
use crate::admission::partial::{AdmittedEvictionRequest, AdmittedPod};
use crate::api::{EvictionInterceptor, EvictionRequest, MaintenanceBudget, NodeMaintenance};
use crate::cluster::{ClusterView, PodLookup};

/// The EvictionRequest rules' view of a decoded request.
fn eviction_request<'a>(
    req: &ReviewRequest<'a, AdmittedEvictionRequest>,
) -> ReviewRequest<'a, EvictionRequest> {
    req.map_objects(|o| &*o.0)
}

fn eviction_request_lookups<'a>(
    req: &ReviewRequest<'a, AdmittedEvictionRequest>,
    _view: &dyn ClusterView,
) -> Lookups<'a> {
    let req = &eviction_request(req);
    let uid = req
        .object
        .or(req.old_object)
        .map(|o| Cow::Borrowed(o.spec.target.pod.uid.as_str()));
    Lookups {
        pods: eviction_request::target_pod(req)
            .map(|(namespace, name)| PodLookup {
                namespace: Cow::Borrowed(namespace),
                name: Cow::Borrowed(name),
                uid,
            })
            .into_iter()
            .collect(),
        checks: eviction_request::access_checks(req),
        fallback_checks: Vec::new(),
    }
}

fn node_maintenance_lookups<'a>(
    req: &ReviewRequest<'a, NodeMaintenance>,
    view: &dyn ClusterView,
) -> Lookups<'a> {
    if !node_maintenance::needs_node_authorization(req) {
        return Lookups::default();
    }
    let (cluster_wide, per_node) = node_maintenance::node_access_checks(req, view);
    Lookups {
        pods: Vec::new(),
        checks: vec![cluster_wide],
        fallback_checks: per_node,
    }
}

fn no_lookups<'a, K>(_: &ReviewRequest<'a, K>, _: &dyn ClusterView) -> Lookups<'a> {
    Lookups::default()
}

fn always<K>(_: &ReviewRequest<'_, K>) -> bool {
    true
}

fn never<K>(_: &ReviewRequest<'_, K>) -> bool {
    false
}

/// Validates EvictionRequests (main resource and status).
pub static VALIDATE_EVICTION_REQUESTS: Webhook<AdmittedEvictionRequest> = Webhook {
    resource: "evictionrequests",
    kind: "validate",
    lookups: eviction_request_lookups,
    review: |req, view, settings| {
        eviction_request::review_eviction_request(&eviction_request(req), view, settings)
    },
    // Status updates (S1-S7: heartbeats, hand-offs) read only the two objects and the
    // interceptor registrations.
    needs_cluster: |req| !req.is_status(),
    sub_resources: &["status"],
};

/// Validates the interceptor annotation of Pods (reads only the interceptor registrations).
pub static VALIDATE_PODS: Webhook<AdmittedPod> = Webhook {
    resource: "pods",
    kind: "validate",
    lookups: no_lookups,
    review: |req, view, settings| {
        let verdict = pod::review_pod_with_registrations(req, view, settings);
        let unregistered = pod::p8_warnings(&verdict);
        if unregistered > 0 {
            crate::metrics::metrics()
                .unregistered_interceptors
                .get_or_create(&crate::metrics::SourceLabel {
                    source: "pod_admission",
                })
                .inc_by(unregistered as u64);
        }
        verdict
    },
    needs_cluster: never,
    sub_resources: &[],
};

/// Adds the `evictord.dev/serving` readiness gate to created pods that declare
/// `endpoints.evictord.dev` (rules P9, P10; needs no cluster).
pub static MUTATE_PODS: Webhook<pod_serving::GatedPod> = Webhook {
    resource: "pods",
    kind: "mutate",
    lookups: no_lookups,
    review: |req, _view, settings| pod_serving::mutate_pod(req, settings),
    needs_cluster: never,
    sub_resources: &[],
};

/// Validates NodeMaintenances.
pub static VALIDATE_NODE_MAINTENANCES: Webhook<NodeMaintenance> = Webhook {
    resource: "nodemaintenances",
    kind: "validate",
    lookups: node_maintenance_lookups,
    review: node_maintenance::review_node_maintenance,
    needs_cluster: always,
    sub_resources: &["status"],
};

/// Defaults NodeMaintenances on creation (needs no cluster).
pub static MUTATE_NODE_MAINTENANCES: Webhook<NodeMaintenance> = Webhook {
    resource: "nodemaintenances",
    kind: "mutate",
    lookups: no_lookups,
    review: |req, _view, _settings| node_maintenance::mutate_node_maintenance(req),
    needs_cluster: never,
    sub_resources: &[],
};

/// Validates EvictionInterceptors, the interceptor registrations (needs no cluster).
pub static VALIDATE_EVICTION_INTERCEPTORS: Webhook<EvictionInterceptor> = Webhook {
    resource: "evictioninterceptors",
    kind: "validate",
    lookups: no_lookups,
    review: |req, _view, settings| eviction_interceptor::review_eviction_interceptor(req, settings),
    needs_cluster: never,
    sub_resources: &["status"],
};

/// Validates MaintenanceBudgets (SPEC 6.1; the MB4 warning reads the nodes).
pub static VALIDATE_MAINTENANCE_BUDGETS: Webhook<MaintenanceBudget> = Webhook {
    resource: "maintenancebudgets",
    kind: "validate",
    lookups: no_lookups,
    review: |req, view, _settings| maintenance_budget::review_maintenance_budget(req, view),
    needs_cluster: |req| !req.is_status(),
    sub_resources: &[],
};

/// The webhook router (POST routes; bodies of at most 3 MiB, read within 10 s).
pub fn router(state: Arc<AdmissionState>) -> Router {
    let r = Router::new();
    let r = route(
        r,
        PATH_VALIDATE_EVICTION_REQUESTS,
        &VALIDATE_EVICTION_REQUESTS,
    );
    let r = route(r, PATH_VALIDATE_PODS, &VALIDATE_PODS);
    let r = route(r, PATH_MUTATE_PODS, &MUTATE_PODS);
    let r = route(
        r,
        PATH_VALIDATE_NODE_MAINTENANCES,
        &VALIDATE_NODE_MAINTENANCES,
    );
    let r = route(r, PATH_MUTATE_NODE_MAINTENANCES, &MUTATE_NODE_MAINTENANCES);
    let r = route(
        r,
        PATH_VALIDATE_EVICTION_INTERCEPTORS,
        &VALIDATE_EVICTION_INTERCEPTORS,
    );
    let r = route(
        r,
        PATH_VALIDATE_MAINTENANCE_BUDGETS,
        &VALIDATE_MAINTENANCE_BUDGETS,
    );
    let r = r.route(
        PATH_VALIDATE_POD_EVICTIONS,
        axum::routing::post(pod_eviction::shell::handle),
    );
    r.with_state(state)
}
