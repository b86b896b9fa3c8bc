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
    /// `Drained`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
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
}

impl NodeMaintenanceSpec {
    /// The stage, `Idle` when unset.
    pub fn stage(&self) -> Stage {
        self.stage.unwrap_or_default()
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
