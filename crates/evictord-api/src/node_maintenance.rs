//! `NodeMaintenance` (KEP-4212): a declarative, staged maintenance of a set of nodes — cordon,
//! drain by a priority plan through EvictionRequests, complete.

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Maximal length of `spec.reason`.
pub const MAX_REASON_CHARS: usize = 1024;

/// Spec of a NodeMaintenance.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "evictord.dev",
    version = "v1alpha1",
    kind = "NodeMaintenance",
    plural = "nodemaintenances",
    shortname = "nm",
    status = "NodeMaintenanceStatus",
    printcolumn = r#"{"name":"Stage","type":"string","jsonPath":".spec.stage"}"#,
    printcolumn = r#"{"name":"Admitted","type":"string","jsonPath":".status.conditions[?(@.type==\"Admitted\")].status"}"#,
    printcolumn = r#"{"name":"Drained","type":"string","jsonPath":".status.conditions[?(@.type==\"Drained\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".spec.reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceSpec {
    /// Selects the nodes under maintenance. Terms are ORed. Immutable once the stage left Idle.
    pub node_selector: NodeSelector,
    /// Idle → Cordon → Drain → Complete (forward only; default Idle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Idle"))]
    pub stage: Option<Stage>,
    /// The order in which pods are drained. Defaults are inserted on creation. Immutable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_plan: Vec<DrainPlanEntry>,
    /// Why the maintenance happens (free text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// EXTENSION (SPEC 6.2): how long each node may take to drain, in seconds (at least 60),
    /// counted from the later of the node's admission and the maintenance entering Drain. Absent:
    /// no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub drain_deadline_seconds: Option<i64>,
    /// EXTENSION (SPEC 6.2): what a passed deadline does: `Report` (condition `DeadlineExceeded`,
    /// an event and a metric; the default) or `Force` (also delete the node's remaining Default
    /// pods its targets match, whatever their PodDisruptionBudgets say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Report"))]
    pub deadline_policy: Option<DeadlinePolicy>,
    /// EXTENSION (SPEC 6.2): how pods are drained, for administrators who cannot label the
    /// workloads: the first rule matching a pod decides (`Drain`, `Skip`, `WaitCompleted`); a pod's
    /// own label `evictord.dev/drain` wins over every rule. On a node several maintenances hold,
    /// the rules of the oldest apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub pod_rules: Vec<PodRule>,
}

/// What a passed drain deadline does (SPEC 6.2).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DeadlinePolicy {
    /// Report it (condition `DeadlineExceeded`, event, metric) and change nothing else.
    #[default]
    Report,
    /// Also delete the node's remaining Default pods (and those waited for) that its targets
    /// match, without consulting PodDisruptionBudgets.
    Force,
}

/// How a maintenance drains the pods a rule selects (SPEC 6.2).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DrainBehavior {
    /// Evicted as every pod (the default).
    #[default]
    Drain,
    /// Never requested by a maintenance: it stays on the node and does not hold `Drained`.
    Skip,
    /// Not requested: the node is drained only once the pod has finished (Succeeded or Failed)
    /// or is gone. A batch Job's pod finishes instead of restarting.
    WaitCompleted,
}

impl DrainBehavior {
    /// The name as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            DrainBehavior::Drain => "Drain",
            DrainBehavior::Skip => "Skip",
            DrainBehavior::WaitCompleted => "WaitCompleted",
        }
    }

    /// The behaviour a pod's `evictord.dev/drain` label value asks for: `drain`, `skip` or
    /// `wait-completed`; `None` for any other value.
    pub fn from_label(value: &str) -> Option<Self> {
        match value {
            "drain" => Some(DrainBehavior::Drain),
            "skip" => Some(DrainBehavior::Skip),
            "wait-completed" => Some(DrainBehavior::WaitCompleted),
            _ => None,
        }
    }
}

/// A pod drain rule (SPEC 6.2): the pods in the namespaces `namespaceSelector` selects (absent:
/// every namespace) whose labels `podSelector` matches (absent: every pod) are drained by
/// `behavior`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodRule {
    /// Selects the namespaces by their labels; absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Selects the pods by their labels; absent: every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// `Drain`, `Skip` or `WaitCompleted`.
    pub behavior: DrainBehavior,
}

/// Stage of a maintenance.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    JsonSchema,
)]
pub enum Stage {
    /// Planned; the cluster is not touched.
    #[default]
    Idle,
    /// The selected nodes are cordoned.
    Cordon,
    /// The selected nodes are cordoned and drained by the plan.
    Drain,
    /// The maintenance is over: requests withdrawn, nodes uncordoned.
    Complete,
}

impl Stage {
    /// All stages, in their order.
    pub const ALL: [Stage; 4] = [Stage::Idle, Stage::Cordon, Stage::Drain, Stage::Complete];

    /// The name as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Idle => "Idle",
            Stage::Cordon => "Cordon",
            Stage::Drain => "Drain",
            Stage::Complete => "Complete",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of a pod, for drain plans.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    JsonSchema,
)]
pub enum PodType {
    /// Every pod that is neither a DaemonSet pod nor a static pod.
    #[default]
    Default,
    /// Pods whose controller is a DaemonSet.
    DaemonSet,
    /// Static (mirror) pods.
    Static,
}

impl PodType {
    /// All pod types, in drain order.
    pub const ALL: [PodType; 3] = [PodType::Default, PodType::DaemonSet, PodType::Static];

    /// The name as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            PodType::Default => "Default",
            PodType::DaemonSet => "DaemonSet",
            PodType::Static => "Static",
        }
    }
}

impl std::fmt::Display for PodType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of a drain plan (also used for drain targets): pods of `podType` with priority
/// at most `podPriority`, optionally only those matching `podSelector`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainPlanEntry {
    /// Pods with a priority less than or equal to this value are selected.
    pub pod_priority: i32,
    /// Default, DaemonSet or Static.
    pub pod_type: PodType,
    /// Selects pods by label, to order pods of the same priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
}

/// Status of a NodeMaintenance, written by the node maintenance controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceStatus {
    /// When each stage was first seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage_statuses: Vec<StageStatus>,
    /// Index of the drain plan entry reached by this maintenance (EXTENSION: the KEP keeps it
    /// implicit; it is recorded so that progress survives restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub drain_plan_position: Option<i32>,
    /// Drain progress of each selected node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_statuses: Vec<NodeMaintenanceNodeStatus>,
    /// EXTENSION (SPEC 6.1): the nodes the MaintenanceBudgets admitted this maintenance to act
    /// on. Written before any of them is touched; absent while the maintenance is queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<NodeMaintenanceAdmission>,
    /// `Admitted` (SPEC 6.1), `Drained` and `DeadlineExceeded` (SPEC 6.2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Which nodes a maintenance was admitted to act on (SPEC 6.1).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceAdmission {
    /// The admitted nodes, in the order they were admitted. A node the selector matches later
    /// waits for its own admission.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub nodes: Vec<AdmittedNode>,
    /// When the Complete work gave the nodes back (their cordon restored): from then on no
    /// budget counts them as unavailable.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub released_time: Option<Time>,
}

/// A node a maintenance was admitted to act on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmittedNode {
    /// The node.
    pub name: String,
    /// When it was admitted.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub admitted_time: Option<Time>,
}

/// What a maintenance's status says of its admission (SPEC 6.1), see
/// [`NodeMaintenance::admitted`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admitted<'a> {
    /// Not admitted (yet): the maintenance touches nothing.
    Nothing,
    /// These nodes are admitted.
    Nodes(&'a NodeMaintenanceAdmission),
    /// Every selected node: the maintenance acted before admissions were recorded (created
    /// under an evictord without budgets), or its record was lost while `Admitted` stayed
    /// `True` (a status written by such a build).
    Every,
}

impl Admitted<'_> {
    /// True when the node of that name is admitted.
    pub fn admits(&self, node: &str) -> bool {
        match self {
            Admitted::Nothing => false,
            Admitted::Nodes(a) => a.nodes.iter().any(|n| n.name == node),
            Admitted::Every => true,
        }
    }

    /// True once the Complete work gave the admitted nodes back.
    pub fn released(&self) -> bool {
        matches!(self, Admitted::Nodes(a) if a.released_time.is_some())
    }

    /// When the node of that name was admitted, if recorded.
    pub fn admitted_time(&self, node: &str) -> Option<&Time> {
        match self {
            Admitted::Nodes(a) => a
                .nodes
                .iter()
                .find(|n| n.name == node)
                .and_then(|n| n.admitted_time.as_ref()),
            _ => None,
        }
    }
}

impl NodeMaintenance {
    /// What the status says of the maintenance's admission (SPEC 6.1): the recorded nodes;
    /// every node when it acted before admissions were recorded or lost its record with
    /// `Admitted=True`; otherwise nothing.
    pub fn admitted(&self) -> Admitted<'_> {
        let Some(status) = self.status.as_ref() else {
            return Admitted::Nothing;
        };
        if let Some(a) = &status.admission {
            return Admitted::Nodes(a);
        }
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == super::CONDITION_ADMITTED);
        let acted = status.stage_statuses.iter().any(|s| s.name != Stage::Idle);
        match condition {
            Some(c) if c.status == "True" => Admitted::Every,
            None if acted => Admitted::Every,
            _ => Admitted::Nothing,
        }
    }
}

/// When a stage started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageStatus {
    /// The stage.
    pub name: Stage,
    /// When the controller first saw it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub start_timestamp: Option<Time>,
}

/// A node, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NodeReference {
    /// Name of the node.
    pub name: String,
}

/// Drain progress of one node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceNodeStatus {
    /// The node.
    pub node_ref: NodeReference,
    /// The pods of this node now targeted for evacuation; never moves backwards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_targets: Vec<DrainPlanEntry>,
    /// State of the drain on this node and why the targets are what they are.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub drain_message: String,
    /// Targeted pods without an EvictionRequest yet.
    #[serde(default)]
    pub pods_pending_evacuation: i32,
    /// Targeted pods with an EvictionRequest.
    #[serde(default)]
    pub pods_evacuating: i32,
    /// EXTENSION (SPEC 6.2): when the node's drain started (the later of its admission and the
    /// maintenance entering Drain): its deadline counts from here.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub drain_start_time: Option<Time>,
    /// EXTENSION (SPEC 6.2): when the node's drain deadline passes (`spec.drainDeadlineSeconds`
    /// after the start).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub deadline_time: Option<Time>,
    /// EXTENSION (SPEC 6.2): the deadline passed while targeted pods were left on the node (it
    /// stays `true` once set).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deadline_exceeded: bool,
    /// EXTENSION (SPEC 6.2): pods the drain leaves on the node (`Skip`), at most 20,
    /// `namespace/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_pods: Vec<String>,
    /// EXTENSION (SPEC 6.2): pods the drain waits to finish (`WaitCompleted`), at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_pods: Vec<String>,
    /// EXTENSION (SPEC 6.2): targeted pods no controller will recreate (no controller owner, not
    /// a mirror pod), at most 20: `kubectl drain` refuses them without `--force`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmanaged_pods: Vec<String>,
    /// EXTENSION (SPEC 6.2): targeted Default pods with `emptyDir` volumes, whose data is lost
    /// when they leave, at most 20: `kubectl drain` refuses them without `--delete-emptydir-data`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local_data_pods: Vec<String>,
}

/// At most this many pods in each pod list of a node status (SPEC 6.2).
pub const MAX_LISTED_NODE_PODS: usize = 20;

impl NodeMaintenanceSpec {
    /// The stage, `Idle` when unset.
    pub fn stage(&self) -> Stage {
        self.stage.unwrap_or_default()
    }

    /// The deadline policy, `Report` when unset.
    pub fn deadline_policy(&self) -> DeadlinePolicy {
        self.deadline_policy.unwrap_or_default()
    }
}

impl NodeMaintenanceStatus {
    /// True when the condition of the given type is `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    }
}
