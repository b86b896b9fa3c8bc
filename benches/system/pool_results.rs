//! Part 5's results (issues 35 and 41), what `report.json` holds under `pool`: per mode, the
//! drain's times and the processes it ran (`kubectl drain`, the script's steps and uncordons,
//! `kubectl evictord rollout`), each row of the workload mix's availability, the pool's nodes
//! (the most unavailable at once, each drained node's roll), how many times the pods moved, the
//! workloads that lost the most, what the drain cost kube-apiserver, etcd and evictord, and what
//! its EvictionRequests said.

use serde::Serialize;

use crate::pool_mode::Mode;
use crate::pool_nodes::{NodeRoll, RollSummary};
use crate::support::pool::measure::Departure;
use crate::support::pool::nodes::Peak;
use crate::support::pool::workloads::{Kind, Row};

/// One process a drain ran: `drain`, `uncordon` (kubectl), `step` (the script's per-node
/// step), `evictord rollout`.
#[derive(Clone, Debug, Serialize)]
pub struct Call {
    pub what: String,
    pub nodes: Vec<String>,
    /// Seconds since the drain started.
    pub started_at: f64,
    pub seconds: f64,
    /// `None`: killed at the mode's timeout.
    pub exit_code: Option<i32>,
    /// Its last line of output.
    pub last_line: String,
}

/// One row of the mix in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct RowFigures {
    pub row: String,
    pub what: String,
    pub kind: Kind,
    /// The interceptors the row declares, and those its pods carried (served by the build).
    pub declared: Vec<String>,
    pub carried: Vec<String>,
    pub goal: bool,
    pub workloads: usize,
    /// Workloads with a pod that left a drained node.
    pub moved: usize,
    pub replica_seconds: f64,
    pub min_ratio: f64,
    pub worst: String,
    pub with_loss: usize,
    pub floors_broken: usize,
}

/// How long one interceptor was active on the mode's EvictionRequests.
#[derive(Clone, Debug, Serialize)]
pub struct InterceptorFigures {
    pub name: String,
    pub activations: usize,
    pub median_active_seconds: f64,
    pub max_active_seconds: f64,
}

/// The mode's EvictionRequests at the end.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RequestFigures {
    pub requests: usize,
    pub evicted: usize,
    /// From creation to `Evicted`.
    pub median_seconds: f64,
    pub max_seconds: f64,
    /// Requests whose Eviction API call was refused at least once (a PDB's 429), and the calls.
    pub with_refused_evictions: usize,
    pub refused_evictions: i64,
    pub interceptors: Vec<InterceptorFigures>,
    /// Pods whose request had an interceptor besides `imperative-eviction.k8s.io` (issue 44's
    /// *intercepted* pods).
    pub intercepted_pods: usize,
}

/// The workload that lost the most, with what its EvictionRequests said.
#[derive(Clone, Debug, Serialize)]
pub struct Worst {
    pub workload: String,
    pub row: String,
    pub desired: i32,
    pub replica_seconds: f64,
    pub min_available: i32,
    pub messages: Vec<String>,
    /// (seconds, available ÷ desired) at each change.
    pub ratio: Vec<(f64, f64)>,
}

/// One mode's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ModeResult {
    pub mode: Mode,
    pub id: String,
    pub pods: usize,
    pub create_seconds: f64,
    pub settle_seconds: f64,
    pub evictord_start_seconds: Option<f64>,
    pub completed: bool,
    pub completion_seconds: f64,
    pub stopped_at_timeout: bool,
    pub calls: Vec<Call>,
    pub restored: bool,
    pub restore_seconds: f64,
    pub samples: usize,
    pub sampled_seconds: f64,
    pub rows: Vec<RowFigures>,
    /// Σ over every Deployment (under the goal or not).
    pub deployment_replica_seconds: f64,
    pub deployment_min_ratio: f64,
    pub statefulset_replica_seconds: f64,
    pub floors_broken: Vec<String>,
    pub pods_left_on_drained: Vec<String>,
    pub daemonset_pods_left_on_drained: usize,
    /// Pods that left a drained node (a pod moved twice counts twice; DaemonSet pods apart).
    pub pods_evicted: usize,
    /// Issue 43: the pods behind a Service, out of its ready addresses before their deletion.
    pub endpoints: crate::pool_endpoints::EndpointsFigures,
    /// Pods (DaemonSet pods apart) on the drained nodes when the drain started.
    pub pods_at_start: usize,
    /// `pods_evicted ÷ pods_at_start`: 1.0 when every pod moved once.
    pub moves_per_pod: Option<f64>,
    /// The most of the pool's nodes cordoned or not Ready at once.
    pub most_unavailable: Peak,
    /// The most held by an admitted NodeMaintenance or not Ready at once (a
    /// MaintenanceBudget's count).
    pub most_held: Option<Peak>,
    /// What `--max-unavailable` allows of the drained nodes (the rollouts).
    pub allowed_unavailable: Option<usize>,
    /// The per-node step's seconds (the drainers that run one).
    pub step_seconds: Option<f64>,
    /// Each drained node: taken, emptied, given back.
    pub node_rolls: Vec<NodeRoll>,
    pub roll_summary: RollSummary,
    pub last_departures: Vec<Departure>,
    pub api_requests_per_evicted_pod: f64,
    pub api_writes_per_evicted_pod: f64,
    pub api_requests_top: Vec<(String, f64)>,
    pub webhook_calls_per_evicted_pod: Vec<(String, f64)>,
    pub apiserver_histograms: Vec<crate::prom::Delta>,
    pub kube_apiserver_cpu_cores: Option<f64>,
    pub etcd_cpu_cores: Option<f64>,
    pub evictord_cpu_seconds: Option<f64>,
    pub evictord_cpu_cores: Option<f64>,
    pub evictord_peak_rss_bytes: Option<u64>,
    pub requests: Option<RequestFigures>,
    /// kube-apiserver's requests by client (issue 44; `None` without the audit log).
    pub clients: Option<crate::pool_clients::ClientFigures>,
    /// The Deployment or StatefulSet that lost the most.
    pub worst: Option<Worst>,
    /// The Deployment under the goal that lost the most (of those whose pods moved).
    pub worst_deployment: Option<Worst>,
    pub played: String,
    pub files: Vec<String>,
    pub clean_up_seconds: f64,
}

/// A mode and its outcome.
#[derive(Clone, Debug, Serialize)]
pub struct ModeOutcome {
    pub id: String,
    pub result: Result<ModeResult, String>,
}

/// Part 5's results.
#[derive(Clone, Debug, Serialize)]
pub struct PoolResults {
    pub nodes: usize,
    pub drained: usize,
    pub pods: usize,
    pub timeout_seconds: f64,
    pub node_timeout_seconds: f64,
    pub step_seconds: f64,
    pub max_unavailable: String,
    pub start_delay_seconds: f64,
    pub grace_seconds: f64,
    /// The HorizontalPodAutoscaler controller's sync period, seconds.
    pub hpa_sync_seconds: f64,
    /// Whether kube-controller-manager's garbage collector ran.
    pub garbage_collector: bool,
    pub kubectl_flags: Vec<String>,
    pub evictord_flags: Vec<String>,
    pub served: Vec<String>,
    pub mix: Vec<Row>,
    pub modes: Vec<ModeOutcome>,
}
