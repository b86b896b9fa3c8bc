//! Prometheus metrics: admission requests and the controllers (names of the KEP where it names
//! them). Labels take few values and come from `&'static str` matches, never object names.

use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of admission metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// `evictionrequests`, `pods`, `nodemaintenances`.
    pub resource: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`, `-` when unknown.
    pub operation: &'static str,
    /// `allowed`, `denied`, `error`.
    pub verdict: &'static str,
}

/// Label `result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// e.g. `success`, `failure`.
    pub result: &'static str,
}

/// Label `outcome` of the Eviction API bridge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `intercepted`, `intercepted_write_pending`, `allowed_no_interceptors`, ... or `error`.
    pub outcome: &'static str,
}

/// Label `controller`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// `evictionrequest` or `nodemaintenance`.
    pub controller: &'static str,
}

/// Label `interceptor` (the bounded set of interceptor names is operator-defined).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InterceptorLabel {
    /// Interceptor name.
    pub interceptor: String,
}

/// Labels `interceptor`, `reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcessedLabels {
    /// Interceptor name.
    pub interceptor: String,
    /// `completed`, `timed_out` or `evicted` (active when the pod went away).
    pub reason: &'static str,
}

/// Label `source` of the unregistered interceptor counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// `pod_admission` (rule P8 warned) or `activation` (an unregistered interceptor became
    /// active).
    pub source: &'static str,
}

/// Label `requester`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequesterLabel {
    /// Requester name.
    pub requester: String,
}

/// Label `reason` of the queued maintenances gauge (SPEC 6.1).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueReasonLabel {
    /// `BudgetExhausted`, `OutsideWindow` or `TooLarge`.
    pub reason: &'static str,
}

/// Label `stage`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    /// NodeMaintenance stage.
    pub stage: &'static str,
}

/// Labels of `evictord_kube_api_requests_total` (see [`crate::kube_client`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeApiRequestLabels {
    /// `webhook`, `controller`, `interceptor`, `node-agent`, `plugin`.
    pub component: &'static str,
    /// kube-apiserver's verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`.
    pub verb: &'static str,
    /// The resource's plural with its subresource (`pods/eviction`), or the path's first
    /// segment outside the resource paths (`/version`, `/apis`).
    pub resource: String,
    /// The HTTP status code, or `error` when no response came.
    pub code: String,
}

/// The `result` values of `evictionrequest_controller_imperative_evictions`.
pub const IMPERATIVE_EVICTION_RESULTS: &[&str] =
    &["success", "pod_gone", "too_many_requests", "failure"];
/// The `outcome` values of `evictord_eviction_api_calls`.
pub const EVICTION_API_OUTCOMES: &[&str] = &[
    "intercepted",
    "intercepted_write_pending",
    "allowed_no_interceptors",
    "allowed_own_eviction",
    "allowed_terminating",
    "allowed_evicted",
    "allowed_dry_run",
    "allowed_pod_not_found",
    "allowed_unknown",
    "error",
];
/// The `result` values of `evictord_deployment_interceptor_surges` and
/// `evictord_hpa_interceptor_surges`.
pub const SURGE_RESULTS: &[&str] = &["started", "finished", "undone", "abandoned", "skipped"];
/// The `result` values of `evictord_daemonset_interceptor_pods`.
pub const DAEMONSET_RESULTS: &[&str] = &["removed", "kept", "not_targeted", "not_daemonset"];
/// The `result` values of `evictord_endpoints_interceptor_pods` (SPEC 6.4).
pub const ENDPOINTS_RESULTS: &[&str] = &["left", "timed_out", "ungated", "pod_gone"];
/// The `result` values of `evictord_serving_gate_writes` (SPEC 6.4).
pub const SERVING_GATE_RESULTS: &[&str] = &["serving", "canceled", "refused"];
/// The `result` values of `evictord_node_agent_moves`.
pub const NODE_AGENT_MOVE_RESULTS: &[&str] = &["held", "restored"];
/// The `controller` values of the reconcile metrics.
pub const CONTROLLERS: &[&str] = &["evictionrequest", "nodemaintenance"];
/// The `reason` values of `nodemaintenance_controller_queued_maintenances` (SPEC 6.1).
pub const QUEUE_REASONS: &[&str] = &["BudgetExhausted", "OutsideWindow", "TooLarge"];
/// The `source` values of `evictord_unregistered_interceptors`.
pub const UNREGISTERED_SOURCES: &[&str] = &["pod_admission", "activation"];

/// Every metric of the process.
pub struct Metrics {
    /// Admission requests by resource, operation and verdict.
    pub admission_requests: Family<AdmissionLabels, Counter>,
    /// Admission latency by resource, operation and verdict.
    pub admission_duration: Family<AdmissionLabels, Histogram>,
    /// Eviction API calls seen by the bridge, by outcome.
    pub eviction_api_calls: Family<OutcomeLabel, Counter>,
    /// Bridged requesters removed because no call came within the TTL.
    pub eviction_api_requesters_expired: Counter,
    /// Ended EvictionRequests deleted after their retention.
    pub ended_requests_deleted: Counter,
    /// Events dropped because their queue was full (kube-apiserver slower than the controllers).
    pub events_dropped: Counter,
    /// API-initiated evictions by result.
    pub imperative_evictions: Family<ResultLabel, Counter>,
    /// Requests whose active interceptor is this one.
    pub active_interceptor: Family<InterceptorLabel, Gauge>,
    /// Interceptors processed, by reason.
    pub processed_interceptor: Family<ProcessedLabels, Counter>,
    /// Open requests per requester.
    pub active_requester: Family<RequesterLabel, Gauge>,
    /// Interceptors declared per pod.
    pub pod_interceptors: Histogram,
    /// Reconcile duration per controller.
    pub reconcile_duration: Family<ControllerLabel, Histogram>,
    /// Reconcile errors (retried) per controller.
    pub reconcile_retries: Family<ControllerLabel, Counter>,
    /// EvictionRequests not yet Evicted or Canceled.
    pub open_requests: Gauge,
    /// NodeMaintenances per stage.
    pub maintenances: Family<StageLabel, Gauge>,
    /// Targeted pods without an EvictionRequest yet.
    pub pods_pending_evacuation: Gauge,
    /// Targeted pods with an EvictionRequest.
    pub pods_evacuating: Gauge,
    /// Time from the Drain stage to Drained.
    pub drain_duration: Histogram,
    /// Surges of the Deployment interceptor by result: `started`, `finished`, `undone`,
    /// `abandoned` (someone else scaled), `skipped` (no surge possible).
    pub deployment_surges: Family<ResultLabel, Counter>,
    /// Time from the Deployment interceptor's start to its surge pods being available.
    pub deployment_time_to_available: Histogram,
    /// Static pod manifests the node agent moved, by result: `held`, `restored`.
    pub node_agent_moves: Family<ResultLabel, Counter>,
    /// Static pod manifests the node agent holds now.
    pub node_agent_held: Gauge,
    /// Held entries the node agent leaves to the administrator now (changed or removed by
    /// someone else).
    pub node_agent_conflicts: Gauge,
    /// Surges of the HorizontalPodAutoscaler interceptor by result: `started`, `finished`,
    /// `undone`, `abandoned` (someone else changed the floor), `skipped` (no surge possible).
    pub hpa_surges: Family<ResultLabel, Counter>,
    /// Time from the HPA interceptor's start to the raised replicas being available.
    pub hpa_time_to_available: Histogram,
    /// DaemonSet pods the `daemonset.apps.k8s.io` interceptor handled, by result: `removed`,
    /// `kept` (its DaemonSet tolerates the maintenance taint), `not_targeted` (no maintenance in
    /// Drain targets it), `not_daemonset`.
    pub daemonset_pods: Family<ResultLabel, Counter>,
    /// Unregistered interceptors met (SPEC 5.5), by source: `pod_admission`, `activation`.
    pub unregistered_interceptors: Family<SourceLabel, Counter>,
    /// Admissions of maintenances (or of nodes a maintenance selected later) by the
    /// MaintenanceBudgets (SPEC 6.1).
    pub admissions: Counter,
    /// Maintenances in Cordon or Drain held back by a MaintenanceBudget, by reason.
    pub queued_maintenances: Family<QueueReasonLabel, Gauge>,
    /// Nodes whose drain deadline passed with targeted pods left (SPEC 6.2).
    pub deadlines_exceeded: Counter,
    /// Pods deleted because their node's drain deadline passed under `deadlinePolicy: Force`.
    pub forced_pods: Counter,
    /// Pods the `endpoints.evictord.dev` interceptor handled, by how they left their endpoints:
    /// `left` (seen out of every ready endpoint), `timed_out` (still listed after
    /// `--endpoints-wait-timeout`), `ungated` (no readiness gate: the delay only), `pod_gone`.
    pub endpoints_pods: Family<ResultLabel, Counter>,
    /// Time from a pod's `evictord.dev/serving` going `False` to it being seen out of every
    /// ready endpoint of its Services.
    pub endpoints_time_to_leave: Histogram,
    /// Writes of `evictord.dev/serving=True` by the keeper, by result: `serving` (first sight),
    /// `canceled` (the eviction was canceled), `refused` (still refused after
    /// `--serving-restore-after`).
    pub serving_gate_writes: Family<ResultLabel, Counter>,
    /// evictord's own Kubernetes API requests by component, verb, resource and code.
    pub kube_api_requests: Family<KubeApiRequestLabels, Counter>,
    registry: Registry,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Metrics {
    fn new() -> Self {
        let mut m = Self {
            admission_requests: Family::default(),
            admission_duration: Family::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            ),
            eviction_api_calls: Family::default(),
            eviction_api_requesters_expired: Counter::default(),
            ended_requests_deleted: Counter::default(),
            events_dropped: Counter::default(),
            imperative_evictions: Family::default(),
            active_interceptor: Family::default(),
            processed_interceptor: Family::default(),
            active_requester: Family::default(),
            pod_interceptors: Histogram::new([0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 16.0]),
            reconcile_duration: Family::new_with_constructor(
                reconcile_histogram as fn() -> Histogram,
            ),
            reconcile_retries: Family::default(),
            open_requests: Gauge::default(),
            maintenances: Family::default(),
            pods_pending_evacuation: Gauge::default(),
            pods_evacuating: Gauge::default(),
            drain_duration: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            deployment_surges: Family::default(),
            deployment_time_to_available: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            node_agent_moves: Family::default(),
            node_agent_held: Gauge::default(),
            node_agent_conflicts: Gauge::default(),
            hpa_surges: Family::default(),
            hpa_time_to_available: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            daemonset_pods: Family::default(),
            unregistered_interceptors: Family::default(),
            admissions: Counter::default(),
            queued_maintenances: Family::default(),
            deadlines_exceeded: Counter::default(),
            forced_pods: Counter::default(),
            endpoints_pods: Family::default(),
            endpoints_time_to_leave: Histogram::new(exponential_buckets(0.25, 2.0, 12)),
            serving_gate_writes: Family::default(),
            kube_api_requests: Family::default(),
            registry: Registry::default(),
        };
        m.zero_series();
        let r = &mut m.registry;
        r.register(
            "evictord_admission_requests",
            "Admission requests by resource, operation and verdict",
            m.admission_requests.clone(),
        );
        r.register(
            "evictord_admission_duration_seconds",
            "Admission review latency",
            m.admission_duration.clone(),
        );
        r.register(
            "evictord_eviction_api_calls",
            "Eviction API calls seen by the bridge webhook, by outcome",
            m.eviction_api_calls.clone(),
        );
        r.register(
            "evictord_eviction_api_requesters_expired",
            "Bridged requesters removed after the TTL without a call",
            m.eviction_api_requesters_expired.clone(),
        );
        r.register(
            "evictord_events_dropped",
            "Events not recorded because their queue was full (kube-apiserver slower than the controllers)",
            m.events_dropped.clone(),
        );
        r.register(
            "evictionrequest_controller_ended_requests_deleted",
            "Ended EvictionRequests deleted after --ended-request-retention",
            m.ended_requests_deleted.clone(),
        );
        r.register(
            "evictionrequest_controller_imperative_evictions",
            "API-initiated evictions by result",
            m.imperative_evictions.clone(),
        );
        r.register(
            "evictionrequest_controller_active_interceptor",
            "EvictionRequests whose active interceptor is this one",
            m.active_interceptor.clone(),
        );
        r.register(
            "evictionrequest_controller_processed_interceptor",
            "Interceptors that finished their turn, by reason",
            m.processed_interceptor.clone(),
        );
        r.register(
            "evictionrequest_controller_active_requester",
            "Open EvictionRequests per requester",
            m.active_requester.clone(),
        );
        r.register(
            "evictionrequest_controller_pod_interceptors",
            "Interceptors declared per pod",
            m.pod_interceptors.clone(),
        );
        r.register(
            "evictord_reconcile_duration_seconds",
            "Reconcile duration per controller",
            m.reconcile_duration.clone(),
        );
        r.register(
            "evictord_reconcile_retries",
            "Failed reconciles (retried) per controller",
            m.reconcile_retries.clone(),
        );
        r.register(
            "evictionrequest_controller_open_requests",
            "EvictionRequests not yet Evicted or Canceled",
            m.open_requests.clone(),
        );
        r.register(
            "nodemaintenance_controller_maintenances",
            "NodeMaintenances per stage",
            m.maintenances.clone(),
        );
        r.register(
            "nodemaintenance_controller_pods_pending_evacuation",
            "Targeted pods without an EvictionRequest",
            m.pods_pending_evacuation.clone(),
        );
        r.register(
            "nodemaintenance_controller_pods_evacuating",
            "Targeted pods with an EvictionRequest",
            m.pods_evacuating.clone(),
        );
        r.register(
            "nodemaintenance_controller_drain_duration_seconds",
            "Time from the Drain stage to Drained",
            m.drain_duration.clone(),
        );
        r.register(
            "evictord_deployment_interceptor_surges",
            "Surges of the deployment.apps.k8s.io interceptor by result",
            m.deployment_surges.clone(),
        );
        r.register(
            "evictord_deployment_interceptor_time_to_available_seconds",
            "Time from the Deployment interceptor's start until its surge pods are available",
            m.deployment_time_to_available.clone(),
        );
        r.register(
            "evictord_node_agent_moves",
            "Static pod manifests the node agent moved, by result (held, restored)",
            m.node_agent_moves.clone(),
        );
        r.register(
            "evictord_node_agent_held_manifests",
            "Static pod manifests the node agent holds out of the kubelet's directory",
            m.node_agent_held.clone(),
        );
        r.register(
            "evictord_node_agent_conflicts",
            "Held static pod manifests changed or removed by someone else, left to the administrator",
            m.node_agent_conflicts.clone(),
        );
        r.register(
            "evictord_hpa_interceptor_surges",
            "Surges of the horizontalpodautoscaler.autoscaling.k8s.io interceptor by result",
            m.hpa_surges.clone(),
        );
        r.register(
            "evictord_hpa_interceptor_time_to_available_seconds",
            "Time from the HPA interceptor's start until the raised replicas are available",
            m.hpa_time_to_available.clone(),
        );
        r.register(
            "evictord_daemonset_interceptor_pods",
            "DaemonSet pods handled by the daemonset.apps.k8s.io interceptor, by result",
            m.daemonset_pods.clone(),
        );
        r.register(
            "evictord_unregistered_interceptors",
            "Interceptors no EvictionInterceptor registers, met at pod admission (rule P8) or on activation",
            m.unregistered_interceptors.clone(),
        );
        r.register(
            "nodemaintenance_controller_admissions",
            "NodeMaintenances (or nodes they selected later) admitted by the MaintenanceBudgets",
            m.admissions.clone(),
        );
        r.register(
            "nodemaintenance_controller_queued_maintenances",
            "NodeMaintenances in Cordon or Drain a MaintenanceBudget holds back, by reason",
            m.queued_maintenances.clone(),
        );
        r.register(
            "nodemaintenance_controller_deadlines_exceeded",
            "Nodes whose drain deadline passed with targeted pods left",
            m.deadlines_exceeded.clone(),
        );
        r.register(
            "nodemaintenance_controller_forced_pods",
            "Pods deleted because their node's drain deadline passed (deadlinePolicy Force)",
            m.forced_pods.clone(),
        );
        r.register(
            "evictord_endpoints_interceptor_pods",
            "Pods the endpoints.evictord.dev interceptor handled, by how they left their endpoints",
            m.endpoints_pods.clone(),
        );
        r.register(
            "evictord_endpoints_interceptor_time_to_leave_seconds",
            "Time from evictord.dev/serving False until the pod is out of every ready endpoint of its Services",
            m.endpoints_time_to_leave.clone(),
        );
        r.register(
            "evictord_serving_gate_writes",
            "evictord.dev/serving set True by the keeper, by result",
            m.serving_gate_writes.clone(),
        );
        r.register(
            "evictord_kube_api_requests",
            "evictord's own Kubernetes API requests by component, verb, resource and HTTP status code",
            m.kube_api_requests.clone(),
        );
        m
    }

    /// Creates every series whose labels take a known, fixed set of values, at zero: they are
    /// exposed before anything happens, so `rate()`, alerts and dashboards see zeros rather than
    /// nothing (and a scrape shows every family).
    fn zero_series(&self) {
        for &result in IMPERATIVE_EVICTION_RESULTS {
            drop(
                self.imperative_evictions
                    .get_or_create(&ResultLabel { result }),
            );
        }
        for &outcome in EVICTION_API_OUTCOMES {
            drop(
                self.eviction_api_calls
                    .get_or_create(&OutcomeLabel { outcome }),
            );
        }
        for &result in SURGE_RESULTS {
            drop(
                self.deployment_surges
                    .get_or_create(&ResultLabel { result }),
            );
            drop(self.hpa_surges.get_or_create(&ResultLabel { result }));
        }
        for &result in DAEMONSET_RESULTS {
            drop(self.daemonset_pods.get_or_create(&ResultLabel { result }));
        }
        for &result in ENDPOINTS_RESULTS {
            drop(self.endpoints_pods.get_or_create(&ResultLabel { result }));
        }
        for &result in SERVING_GATE_RESULTS {
            drop(
                self.serving_gate_writes
                    .get_or_create(&ResultLabel { result }),
            );
        }
        for &result in NODE_AGENT_MOVE_RESULTS {
            drop(self.node_agent_moves.get_or_create(&ResultLabel { result }));
        }
        for &controller in CONTROLLERS {
            let label = ControllerLabel { controller };
            drop(self.reconcile_retries.get_or_create(&label));
            drop(self.reconcile_duration.get_or_create(&label));
        }
        for &reason in QUEUE_REASONS {
            drop(
                self.queued_maintenances
                    .get_or_create(&QueueReasonLabel { reason }),
            );
        }
        for &source in UNREGISTERED_SOURCES {
            drop(
                self.unregistered_interceptors
                    .get_or_create(&SourceLabel { source }),
            );
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The process-wide metrics.
pub fn metrics() -> &'static Arc<Metrics> {
    static METRICS: OnceLock<Arc<Metrics>> = OnceLock::new();
    METRICS.get_or_init(|| Arc::new(Metrics::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_exposed() {
        let m = metrics();
        m.imperative_evictions
            .get_or_create(&ResultLabel { result: "success" })
            .inc();
        let text = m.encode();
        assert!(
            text.contains(
                "evictionrequest_controller_imperative_evictions_total{result=\"success\"}"
            ),
            "{text}"
        );
        m.admission_duration
            .get_or_create(&AdmissionLabels {
                resource: "pods",
                operation: "CREATE",
                verdict: "allowed",
            })
            .observe(0.001);
        let text = m.encode();
        assert!(
            text.contains("# TYPE evictord_admission_duration_seconds histogram"),
            "{text}"
        );
    }

    #[test]
    fn fixed_label_values_are_exposed_at_zero() {
        let text = Metrics::new().encode();
        for series in [
            "evictionrequest_controller_imperative_evictions_total{result=\"too_many_requests\"} 0",
            "evictord_eviction_api_calls_total{outcome=\"intercepted\"} 0",
            "evictord_deployment_interceptor_surges_total{result=\"undone\"} 0",
            "evictord_hpa_interceptor_surges_total{result=\"abandoned\"} 0",
            "evictord_daemonset_interceptor_pods_total{result=\"kept\"} 0",
            "evictord_reconcile_retries_total{controller=\"nodemaintenance\"} 0",
            "evictord_reconcile_duration_seconds_count{controller=\"evictionrequest\"} 0",
            "evictord_unregistered_interceptors_total{source=\"activation\"} 0",
            "nodemaintenance_controller_admissions_total 0",
            "nodemaintenance_controller_deadlines_exceeded_total 0",
            "nodemaintenance_controller_forced_pods_total 0",
            "evictord_endpoints_interceptor_pods_total{result=\"timed_out\"} 0",
            "evictord_endpoints_interceptor_time_to_leave_seconds_count 0",
            "evictord_serving_gate_writes_total{result=\"refused\"} 0",
            "nodemaintenance_controller_queued_maintenances{reason=\"TooLarge\"} 0",
        ] {
            assert!(text.contains(series), "{series} in\n{text}");
        }
    }
}
