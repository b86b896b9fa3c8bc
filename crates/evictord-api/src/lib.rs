//! The API of evictord: the `evictord.dev/v1alpha1` custom resources and the well-known names
//! (annotations, finalizer, reserved interceptor and requester names) shared by the webhook and
//! the controllers. These Rust types are the source of truth; the CRD YAML is generated from them
//! (`evictord crds`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod conditions;
mod crds;
mod eviction_interceptor;
mod eviction_request;
pub mod identity;
mod maintenance_budget;
mod node_maintenance;
pub mod taint;
pub mod time;

pub use conditions::with_condition;
pub use crds::{all_crds, crds_yaml};
pub use eviction_interceptor::*;
pub use eviction_request::*;
pub use maintenance_budget::*;
pub use node_maintenance::*;

/// API group of the custom resources.
pub const GROUP: &str = "evictord.dev";
/// API version of the custom resources.
pub const VERSION: &str = "v1alpha1";

/// Pod annotation that declares the pod's interceptors: a comma-separated, ordered list of names.
pub const INTERCEPTORS_ANNOTATION: &str = "evictord.dev/eviction-interceptors";
/// Annotation of mirror (static) pods, set by the kubelet.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The default interceptor, appended by the controller to every request: it calls the Eviction API.
pub const IMPERATIVE_INTERCEPTOR: &str = "imperative-eviction.k8s.io";
/// The requester name the node maintenance controller uses.
pub const NODE_MAINTENANCE_REQUESTER: &str = "nodemaintenance.evictord.dev";
/// The requester name of the Eviction API bridge: evictord joins a pod's EvictionRequest under
/// this name when a drainer (`kubectl drain`, an autoscaler, the descheduler) calls the pod's
/// Eviction API.
pub const EVICTION_API_REQUESTER: &str = "eviction-api.evictord.dev";
/// Annotation on an EvictionRequest: when the Eviction API bridge last saw a call for the pod
/// (RFC 3339). The bridged requester expires a TTL after it.
pub const EVICTION_API_LAST_CALL_ANNOTATION: &str = "evictord.dev/eviction-api-last-call";
/// Annotation on an EvictionRequest: who last called the pod's Eviction API (a readable tool
/// name and the user name).
pub const EVICTION_API_CALLER_ANNOTATION: &str = "evictord.dev/eviction-api-caller";
/// Annotation on the Eviction objects evictord itself sends as `imperative-eviction.k8s.io`:
/// the name of the EvictionRequest it acts for, so the bridge lets that call through.
pub const IMPERATIVE_EVICTION_ANNOTATION: &str = "evictord.dev/eviction-request";
/// Finalizer on NodeMaintenance objects that are not Idle.
pub const MAINTENANCE_FINALIZER: &str = "evictord.dev/maintenance-completion";
/// Node annotation remembering `spec.unschedulable` from before a maintenance cordoned the node.
pub const UNSCHEDULABLE_BEFORE_ANNOTATION: &str = "evictord.dev/unschedulable-before";
/// Annotation on the EvictionRequests the controller creates: the node the pod was on.
pub const REQUESTED_FOR_NODE_ANNOTATION: &str = "evictord.dev/requested-for-node";
/// The implicit interceptor of DaemonSet pods (SPEC 5.3): evictord's DaemonSet interceptor, which
/// keeps the DaemonSet controller off the node and deletes the pod while a maintenance drains it.
pub const DAEMONSET_INTERCEPTOR: &str = "daemonset.apps.k8s.io";
/// The implicit interceptor of mirror (static) pods on a node whose `evictord node-agent` runs
/// (SPEC 5.3): the agent moves the pod's manifest out of the kubelet's directory.
pub const KUBELET_INTERCEPTOR: &str = "kubelet.k8s.io";
/// Node annotation by which an `evictord node-agent` announces that it serves
/// [`KUBELET_INTERCEPTOR`] on that node (value: the agent's pod name).
pub const NODE_AGENT_ANNOTATION: &str = "evictord.dev/node-agent";
/// Key of the `NoSchedule` taint that keeps the DaemonSet controller from recreating drained
/// DaemonSet pods on a node under maintenance (SPEC 5.3).
pub const MAINTENANCE_TAINT: &str = "evictord.dev/maintenance";
/// Node annotation remembering whether the node carried the maintenance taint before a
/// maintenance placed it (`"true"`: someone else did, and Complete leaves it).
pub const MAINTENANCE_TAINT_BEFORE_ANNOTATION: &str = "evictord.dev/maintenance-taint-before";
/// Node label by which the service controller leaves a node out of the external load balancers
/// that target nodes (SPEC 6.4): a maintenance sets it to `"true"` while it holds the node.
pub const EXCLUDE_FROM_EXTERNAL_LB_LABEL: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";
/// Node annotation remembering the exclusion label from before a maintenance set it (JSON: the
/// previous value as a string, or `null` when the label was absent), so that Complete restores
/// it exactly.
pub const EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION: &str =
    "evictord.dev/exclude-from-external-load-balancers-before";
/// Node label marking control-plane nodes.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// Interceptor names under `*.k8s.io` that pods may declare without operator configuration.
pub const BUILTIN_K8S_IO_ALLOWLIST: &[&str] = &[
    "deployment.apps.k8s.io",
    "replicaset.apps.k8s.io",
    "statefulset.apps.k8s.io",
    "daemonset.apps.k8s.io",
    "horizontalpodautoscaler.autoscaling.k8s.io",
    "kubelet.k8s.io",
];

/// Condition type: the target pod has been evicted (or is otherwise gone).
pub const CONDITION_EVICTED: &str = "Evicted";
/// Condition type: the request was canceled.
pub const CONDITION_CANCELED: &str = "Canceled";
/// Condition type on NodeMaintenance: every targeted pod is gone from every selected node.
pub const CONDITION_DRAINED: &str = "Drained";
/// Condition type on NodeMaintenance (SPEC 6.2): a node's drain deadline passed with targeted
/// pods left on it.
pub const CONDITION_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Pod label (SPEC 6.2) that decides how maintenances drain the pod: `skip` (never requested,
/// stays), `wait-completed` (not requested, the node waits until it finished) or `drain`; it
/// wins over a maintenance's `spec.podRules`.
pub const DRAIN_LABEL: &str = "evictord.dev/drain";

/// Parses the interceptor annotation: comma-separated names, white space around commas ignored.
/// Empty items are kept (as empty strings) so that validation can report them.
pub fn parse_interceptor_list(value: &str) -> Vec<String> {
    if value.trim().is_empty() {
        return Vec::new();
    }
    value.split(',').map(|s| s.trim().to_string()).collect()
}

/// Label of the objects `kubectl evictord rollout` creates (its MaintenanceBudget and its
/// NodeMaintenances): the rollout's name. The same command finds them by it to resume.
pub const ROLLOUT_LABEL: &str = "evictord.dev/rollout";
/// Annotation on a rollout's NodeMaintenance: the state of the rollout's per-node step (JSON:
/// state, boot ID before, times), so that a resumed rollout never runs a finished step again.
pub const ROLLOUT_STEP_ANNOTATION: &str = "evictord.dev/rollout-step";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interceptor_list_trims_and_keeps_order() {
        assert_eq!(
            parse_interceptor_list(" a.b , c.d,e.f "),
            vec!["a.b", "c.d", "e.f"]
        );
        assert_eq!(parse_interceptor_list("a.b,,c.d"), vec!["a.b", "", "c.d"]);
        assert!(parse_interceptor_list("  ").is_empty());
    }
}
