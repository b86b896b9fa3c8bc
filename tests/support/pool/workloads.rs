//! The pool's workloads: one table ([`MIX`]) of rows — kind, replicas, PodDisruptionBudget, the
//! interceptors a user would declare on the pods — sized to a pod count ([`plan`]), and the
//! objects each row creates. Adding a row (a workload kind, an interceptor as it lands) is one
//! entry in [`MIX`]; an interceptor this build does not serve is listed in the row but left out
//! of the pods' annotation (a name nobody serves would hold each eviction for the whole interceptor
//! deadline), so the row shows what happens without it.

use serde::Serialize;
use serde_json::{Value, json};

use evictord::api::INTERCEPTORS_ANNOTATION;

/// Pod label naming the workload a pod belongs to (and the PodDisruptionBudgets' selector).
pub const WORKLOAD_LABEL: &str = "pool.evictord.dev/workload";
/// Pod label naming the row of [`MIX`] a pod's workload comes from.
pub const ROW_LABEL: &str = "pool.evictord.dev/row";

/// The Deployment interceptor.
pub const DEPLOYMENT: &str = "deployment.apps.k8s.io";
/// The HorizontalPodAutoscaler interceptor (SPEC 5.4).
pub const HPA: &str = "horizontalpodautoscaler.autoscaling.k8s.io";
/// The interceptor that takes a pod out of its Services' ready endpoints first (SPEC 6.4).
pub const ENDPOINTS: &str = "endpoints.evictord.dev";

/// The interceptors the pool serves unless told otherwise (the surge interceptors; the
/// endpoints interceptor adds its deregistration delay to every drain, so a pool serves it only
/// when asked: `EVICTORD_BENCH_POOL_SERVED`, or a mode ending in `+endpoints`). A row's
/// interceptor missing here is left out of its pods' annotation.
pub const SERVED: &[&str] = &[DEPLOYMENT, HPA];

/// The deregistration delay the pods declaring [`ENDPOINTS`] ask for (their
/// `evictord.dev/deregistration-delay` annotation), in seconds: what a load balancer that
/// deregisters late would need, short enough for a benchmark.
pub const DEREGISTRATION_DELAY_SECONDS: u64 = 5;

/// What a row creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Kind {
    Deployment,
    StatefulSet,
    /// One DaemonSet over the pool's nodes (its row's count is ignored: one).
    DaemonSet,
    /// Pods without a controller (`kubectl drain` needs `--force` for them).
    BarePod,
}

/// A row's PodDisruptionBudget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Budget {
    None,
    MinAvailable(i32),
    MaxUnavailable(i32),
}

/// One row of the workload mix.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Row {
    /// Short name, used in object names and the report.
    pub name: &'static str,
    /// What it is, for the report.
    pub what: &'static str,
    pub kind: Kind,
    /// Replicas per workload (Deployments, StatefulSets).
    pub replicas: i32,
    /// Scaled by a HorizontalPodAutoscaler (`minReplicas` = replicas, `maxReplicas` = twice).
    pub hpa: bool,
    pub budget: Budget,
    /// The interceptors a user declares on the pods, in order.
    pub interceptors: &'static [&'static str],
    /// Share of the pool's pods, besides the DaemonSet's (one per node).
    pub share: f64,
    /// `kubectl drain` alone waits forever on these pods: the finishable pool leaves them out.
    pub blocks_kubectl_drain: bool,
}

/// The workload mix of a pool.
pub const MIX: &[Row] = &[
    Row {
        name: "d1",
        what: "1-replica Deployment, PDB minAvailable 1",
        kind: Kind::Deployment,
        replicas: 1,
        hpa: false,
        budget: Budget::MinAvailable(1),
        interceptors: &[DEPLOYMENT],
        share: 0.16,
        blocks_kubectl_drain: true,
    },
    Row {
        name: "d3",
        what: "3-replica Deployment, PDB maxUnavailable 1",
        kind: Kind::Deployment,
        replicas: 3,
        hpa: false,
        budget: Budget::MaxUnavailable(1),
        interceptors: &[DEPLOYMENT],
        share: 0.25,
        blocks_kubectl_drain: false,
    },
    Row {
        name: "dw",
        what: "3-replica Deployment behind a Service, PDB maxUnavailable 1, out of its endpoints before it stops",
        kind: Kind::Deployment,
        replicas: 3,
        hpa: false,
        budget: Budget::MaxUnavailable(1),
        interceptors: &[DEPLOYMENT, ENDPOINTS],
        share: 0.12,
        blocks_kubectl_drain: false,
    },
    Row {
        name: "dh",
        what: "3-replica Deployment scaled by an HPA (min 3, max 6), PDB maxUnavailable 1",
        kind: Kind::Deployment,
        replicas: 3,
        hpa: true,
        budget: Budget::MaxUnavailable(1),
        interceptors: &[HPA, DEPLOYMENT],
        share: 0.16,
        blocks_kubectl_drain: false,
    },
    Row {
        name: "s3",
        what: "StatefulSet of 3, PDB maxUnavailable 1",
        kind: Kind::StatefulSet,
        replicas: 3,
        hpa: false,
        budget: Budget::MaxUnavailable(1),
        interceptors: &[],
        share: 0.19,
        blocks_kubectl_drain: false,
    },
    Row {
        name: "ds",
        what: "DaemonSet, one pod per node",
        kind: Kind::DaemonSet,
        replicas: 1,
        hpa: false,
        budget: Budget::None,
        interceptors: &[],
        share: 0.0,
        blocks_kubectl_drain: false,
    },
    Row {
        name: "bare",
        what: "bare pod (no controller)",
        kind: Kind::BarePod,
        replicas: 1,
        hpa: false,
        budget: Budget::None,
        interceptors: &[],
        share: 0.12,
        blocks_kubectl_drain: false,
    },
];

/// Which rows a pool holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Variant {
    /// Every row.
    Full,
    /// Without the rows `kubectl drain` alone never finishes ([`Row::blocks_kubectl_drain`]),
    /// the other rows as in the full pool.
    Finishable,
}

impl Variant {
    pub fn label(self) -> &'static str {
        match self {
            Variant::Full => "full",
            Variant::Finishable => "finishable",
        }
    }
}

/// How many workloads of each row a pool of about `pods` pods on `nodes` nodes holds: the
/// DaemonSet takes one pod per node, the other rows share the rest by [`Row::share`] (rounded;
/// with `at_least_one`, every row has a workload). Rows left out by `variant` have none.
pub fn plan(
    rows: &[Row],
    pods: usize,
    nodes: usize,
    variant: Variant,
    at_least_one: bool,
) -> Vec<(Row, usize)> {
    let rest = pods.saturating_sub(nodes) as f64;
    let shares: f64 = rows.iter().map(|r| r.share).sum();
    rows.iter()
        .map(|r| {
            let n = match r.kind {
                Kind::DaemonSet => 1,
                _ if shares <= 0.0 => 0,
                _ => (rest * r.share / shares / f64::from(r.replicas.max(1))).round() as usize,
            };
            let n = if at_least_one { n.max(1) } else { n };
            let kept = variant == Variant::Full || !r.blocks_kubectl_drain;
            (*r, if kept { n } else { 0 })
        })
        .collect()
}

/// The interceptor annotation of a row's pods: its interceptors that `served` holds, in order.
pub fn declared(row: &Row, served: &[String]) -> Vec<String> {
    row.interceptors
        .iter()
        .filter(|i| served.iter().any(|s| s == *i))
        .map(|i| i.to_string())
        .collect()
}

/// True when a row's workloads are under the pool's zero-downtime goal: Deployments whose
/// surge interceptors (the Deployment's and the autoscaler's: those that keep replicas
/// available) are all served. Whether [`ENDPOINTS`] is served changes when a pod stops serving,
/// not how many replicas are available.
pub fn under_goal(row: &Row, served: &[String]) -> bool {
    row.kind == Kind::Deployment
        && row
            .interceptors
            .iter()
            .filter(|i| **i != ENDPOINTS)
            .all(|i| served.iter().any(|s| s == i))
}

/// True when a row's pods declare [`ENDPOINTS`] and `served` serves it.
pub fn leaves_endpoints_first(row: &Row, served: &[String]) -> bool {
    declared(row, served).iter().any(|i| i == ENDPOINTS)
}

/// One workload of the pool.
#[derive(Clone, Debug, Serialize)]
pub struct Workload {
    pub name: String,
    pub row: Row,
    /// The interceptor annotation its pods carry.
    pub interceptors: Vec<String>,
}

/// True when a row's workloads have a Service selecting their pods: the rows whose pods may
/// declare [`ENDPOINTS`].
pub fn has_service(row: &Row) -> bool {
    row.interceptors.contains(&ENDPOINTS)
}

fn template(w: &Workload, pool: &str, daemonset: bool) -> Value {
    let mut annotations = serde_json::Map::new();
    if !w.interceptors.is_empty() {
        annotations.insert(
            INTERCEPTORS_ANNOTATION.into(),
            json!(w.interceptors.join(",")),
        );
    }
    if w.interceptors.iter().any(|i| i == ENDPOINTS) {
        annotations.insert(
            evictord::serving::DEREGISTRATION_DELAY_ANNOTATION.into(),
            json!(format!("{DEREGISTRATION_DELAY_SECONDS}s")),
        );
    }
    let mut spec = json!({
        // Kubernetes' default; the played kubelet stops a pod within its own 2 s.
        "terminationGracePeriodSeconds": 30,
        "automountServiceAccountToken": false,
        "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
    });
    if daemonset {
        spec["nodeSelector"] = json!({super::POOL_LABEL: pool});
    }
    json!({
        "metadata": {
            "labels": {WORKLOAD_LABEL: w.name, ROW_LABEL: w.row.name},
            "annotations": annotations,
        },
        "spec": spec,
    })
}

/// The objects of a workload, in creation order (API version, kind, object).
pub fn objects(w: &Workload, pool: &str) -> Vec<Value> {
    let selector = json!({"matchLabels": {WORKLOAD_LABEL: w.name}});
    let mut out = Vec::new();
    match w.row.kind {
        Kind::Deployment => out.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": w.name},
            "spec": {"replicas": w.row.replicas, "selector": selector, "template": template(w, pool, false)},
        })),
        Kind::StatefulSet => out.push(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": w.name},
            "spec": {"replicas": w.row.replicas, "serviceName": w.name, "selector": selector,
                     "template": template(w, pool, false)},
        })),
        Kind::DaemonSet => out.push(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": w.name},
            "spec": {"selector": selector, "template": template(w, pool, true)},
        })),
        Kind::BarePod => {
            let mut pod = template(w, pool, false);
            pod["apiVersion"] = json!("v1");
            pod["kind"] = json!("Pod");
            pod["metadata"]["name"] = json!(w.name);
            out.push(pod);
        }
    }
    if has_service(&w.row) {
        out.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": w.name},
            "spec": {"selector": {WORKLOAD_LABEL: w.name},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        }));
    }
    if w.row.hpa {
        out.push(json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": w.name},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": w.name},
                "minReplicas": w.row.replicas, "maxReplicas": 2 * w.row.replicas,
                "targetCPUUtilizationPercentage": 80,
            },
        }));
    }
    let budget = match w.row.budget {
        Budget::None => None,
        Budget::MinAvailable(n) => Some(json!({"minAvailable": n})),
        Budget::MaxUnavailable(n) => Some(json!({"maxUnavailable": n})),
    };
    if let Some(mut spec) = budget {
        spec["selector"] = selector;
        out.push(json!({
            "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
            "metadata": {"name": w.name},
            "spec": spec,
        }));
    }
    out
}
