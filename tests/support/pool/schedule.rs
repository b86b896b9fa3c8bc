//! The played scheduler's and kubelet's decisions, pure: which node a pending pod may go to and
//! which of them it goes to (the least loaded), and what the kubelet does next with a bound pod
//! (mark it Running and Ready a start delay after it first saw it — `Ready` from its readiness
//! gates, as a kubelet computes it, then following them —, remove it a grace period after its
//! deletion began). The I/O shell is [`super::played`]; the rules are table-tested in
//! `tests/pool.rs`.
//!
//! The scheduler's filters are kube-scheduler's that matter without resources: `NodeUnschedulable`
//! (a cordoned node takes only pods tolerating `node.kubernetes.io/unschedulable:NoSchedule`, as
//! the DaemonSet controller makes its pods), `TaintToleration` (taints of effect `NoSchedule` and
//! `NoExecute`; `PreferNoSchedule` is a preference and never filters), `NodeAffinity` (the pod's
//! `nodeSelector` and its required node affinity, `matchFields` on `metadata.name` as the
//! DaemonSet controller writes it). Its score is the number of pods on the node: fewest first,
//! ties by node name. A `NoExecute` taint only keeps pods away: there is no taint manager
//! evicting running pods.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};

use super::super::kubelet::condition;

/// The taint kube-scheduler derives from `spec.unschedulable`.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Why a node does not fit a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unfit {
    /// `spec.unschedulable` and no toleration of [`UNSCHEDULABLE_TAINT`].
    Unschedulable,
    /// A `NoSchedule` or `NoExecute` taint the pod does not tolerate (its key).
    Taint(String),
    /// The pod's `nodeSelector` or required node affinity does not select the node.
    Affinity,
}

/// True when `toleration` tolerates `taint` (kube's `Toleration.ToleratesTaint`): same effect or
/// no effect given; the same key or no key given (only valid with `Exists`: tolerates every
/// key); `Exists` then tolerates any value, `Equal` (the default) needs the same value.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if toleration
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

fn tolerated(pod: &Pod, taint: &Taint) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| tolerates(t, taint)))
}

/// Whether `node` may take `pod`, and if not, the first reason.
pub fn fits(pod: &Pod, node: &Node) -> Result<(), Unfit> {
    let spec = node.spec.as_ref();
    if spec.and_then(|s| s.unschedulable) == Some(true) {
        let taint = Taint {
            key: UNSCHEDULABLE_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerated(pod, &taint) {
            return Err(Unfit::Unschedulable);
        }
    }
    for taint in spec.and_then(|s| s.taints.as_ref()).into_iter().flatten() {
        if matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerated(pod, taint) {
            return Err(Unfit::Taint(taint.key.clone()));
        }
    }
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let pod_spec = pod.spec.as_ref();
    if let Some(selector) = pod_spec.and_then(|s| s.node_selector.as_ref())
        && selector.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return Err(Unfit::Affinity);
    }
    let required = pod_spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(required) = required
        && !evictord::selector::node_selector_matches(required, name, &labels)
    {
        return Err(Unfit::Affinity);
    }
    Ok(())
}

/// The node a pending pod goes to: among the nodes it fits, the one with the fewest pods in
/// `load` (ties: the first by name); `None` when it fits none.
pub fn choose_node<'a>(
    pod: &Pod,
    nodes: &'a [Node],
    load: &BTreeMap<String, usize>,
) -> Option<&'a str> {
    nodes
        .iter()
        .filter(|n| fits(pod, n).is_ok())
        .filter_map(|n| n.metadata.name.as_deref())
        .min_by_key(|n| (load.get(*n).copied().unwrap_or(0), *n))
}

/// The pods counted on each node: every bound pod that has not ended (terminating ones too, as
/// kube-scheduler counts them until they are gone).
pub fn load(pods: &[std::sync::Arc<Pod>]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in pods {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_ref()) {
            *out.entry(node.clone()).or_insert(0) += 1;
        }
    }
    out
}

/// The played kubelet's settings.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// From the kubelet first seeing a pod bound to its node to the pod Running and Ready.
    pub start_delay: Duration,
    /// How long a deleted pod takes to stop, at most (a pod's own shorter grace period wins).
    pub grace: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            start_delay: Duration::from_secs(2),
            grace: Duration::from_secs(2),
        }
    }
}

/// What the kubelet remembers of a pod: when it first saw it bound, and when it first saw its
/// deletion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub bound: Option<Instant>,
    pub deleting: Option<Instant>,
}

/// The kubelet's next step for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do now (or ever).
    Wait,
    /// Start the pod: Running, an IP, its containers ready, and `Ready` from its readiness gates
    /// (`True` when it has none).
    Ready,
    /// Set the started pod's `Ready` to this: a kubelet's `Ready` is its containers' readiness
    /// and every readiness gate's condition (a gate's condition written by someone else, such
    /// as evictord's `evictord.dev/serving`, moves it).
    Gate(bool),
    /// Remove the pod (delete with grace 0 and its UID as precondition).
    Remove,
}

/// True when every readiness gate of the pod has its condition `True` (no gates: true).
pub fn gates_pass(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .all(|g| condition(pod, &g.condition_type) == Some("True"))
}

/// True when the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The grace period the kubelet gives a deleted pod: `timing.grace`, capped by the pod's own
/// (`metadata.deletionGracePeriodSeconds`, else `spec.terminationGracePeriodSeconds`).
pub fn grace_of(pod: &Pod, timing: &Timing) -> Duration {
    let own = pod.metadata.deletion_grace_period_seconds.or_else(|| {
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
    });
    match own {
        Some(s) => timing.grace.min(Duration::from_secs(s.max(0) as u64)),
        None => timing.grace,
    }
}

/// The kubelet's next step for a bound pod, given what it saw of it and `now`.
pub fn kubelet_step(pod: &Pod, seen: &Seen, now: Instant, timing: &Timing) -> Step {
    if pod.metadata.deletion_timestamp.is_some() {
        return match seen.deleting {
            Some(t) if now >= t + grace_of(pod, timing) => Step::Remove,
            _ => Step::Wait,
        };
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Step::Wait;
    }
    if condition(pod, "ContainersReady") == Some("True") {
        let want = gates_pass(pod);
        return if is_ready(pod) == want {
            Step::Wait
        } else {
            Step::Gate(want)
        };
    }
    if is_ready(pod) {
        return Step::Wait;
    }
    match seen.bound {
        Some(t) if now >= t + timing.start_delay => Step::Ready,
        _ => Step::Wait,
    }
}
