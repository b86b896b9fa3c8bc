//! `MaintenanceBudget` (SPEC 6.1, beyond the seeds): how many nodes NodeMaintenances may take
//! away at once, for every actor that creates them (an administrator, a reboot daemon, an upgrade
//! controller, `kubectl evictord rollout`), and when (maintenance windows).
//!
//! A NodeMaintenance in Cordon or Drain acts on its nodes only once the node maintenance
//! controller has *admitted* it ([`NodeMaintenanceAdmission`](super::NodeMaintenanceAdmission)):
//! every budget selecting one of its nodes is open and stays within `maxUnavailable` counting the
//! nodes the maintenance would make unavailable.

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// At most this many windows per budget.
pub const MAX_WINDOWS: usize = 16;
/// At most this many node names in each list of a budget's status; the counts are exact.
pub const MAX_LISTED_BUDGET_NODES: usize = 100;

/// Condition type on NodeMaintenance (SPEC 6.1): `True` once its nodes are admitted by every
/// MaintenanceBudget selecting them, `False` while it is queued (reasons
/// [`REASON_BUDGET_EXHAUSTED`], [`REASON_OUTSIDE_WINDOW`], [`REASON_TOO_LARGE`]).
pub const CONDITION_ADMITTED: &str = "Admitted";
/// `Admitted=True`: the budgets selecting its nodes let it act.
pub const REASON_ADMITTED: &str = "Admitted";
/// `Admitted=True`: no budget selects its nodes.
pub const REASON_NO_BUDGET: &str = "NoBudget";
/// `Admitted=False`: a budget has no room for its nodes now.
pub const REASON_BUDGET_EXHAUSTED: &str = "BudgetExhausted";
/// `Admitted=False`: a budget selecting its nodes is outside its windows.
pub const REASON_OUTSIDE_WINDOW: &str = "OutsideWindow";
/// `Admitted=False`: it selects more of a budget's nodes than the budget ever allows at once.
pub const REASON_TOO_LARGE: &str = "TooLarge";

/// Spec of a MaintenanceBudget.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "evictord.dev",
    version = "v1alpha1",
    kind = "MaintenanceBudget",
    plural = "maintenancebudgets",
    shortname = "mb",
    status = "MaintenanceBudgetStatus",
    printcolumn = r#"{"name":"Max unavailable","type":"string","jsonPath":".spec.maxUnavailable"}"#,
    printcolumn = r#"{"name":"Selected","type":"integer","jsonPath":".status.selectedNodes"}"#,
    printcolumn = r#"{"name":"Unavailable","type":"integer","jsonPath":".status.currentUnavailable"}"#,
    printcolumn = r#"{"name":"Queued","type":"integer","jsonPath":".status.queuedCount"}"#,
    printcolumn = r#"{"name":"Open","type":"boolean","jsonPath":".status.open"}"#,
    printcolumn = r#"{"name":"Next open","type":"date","jsonPath":".status.nextOpen","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceBudgetSpec {
    /// The nodes the budget covers, as a NodeMaintenance selects them (terms ORed;
    /// matchExpressions on labels, matchFields on `metadata.name`). Absent: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    /// How many of the selected nodes may be unavailable at once: an integer of at least 1, or a
    /// percentage of the selected nodes (`"25%"`, rounded up, at least 1). Default 1. A node is
    /// unavailable while an admitted maintenance holds it, or while its `Ready` condition is not
    /// `True`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub max_unavailable: Option<IntOrString>,
    /// When maintenances may be admitted. None: always. A maintenance already admitted carries on
    /// when a window closes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub windows: Vec<MaintenanceWindow>,
}

/// A recurring maintenance window: open for `duration` from each time `schedule` fires.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// When the window opens: a five-field cron expression (minute hour day-of-month month
    /// day-of-week; day-of-week 0-7, 0 and 7 are Sunday; names such as MON and JAN; when both
    /// day fields are restricted either one matches), e.g. `"0 22 * * 1-5"`.
    #[schemars(length(max = 256))]
    pub schedule: String,
    /// How long the window stays open, e.g. `"6h"`, `"90m"`, `"1h30m"` (at most 31 days).
    #[schemars(length(max = 64))]
    pub duration: String,
    /// The IANA time zone of the schedule, e.g. `"Europe/Berlin"`. Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub time_zone: Option<String>,
}

/// Status of a MaintenanceBudget, written by the node maintenance controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceBudgetStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many nodes the budget selects.
    #[serde(default)]
    pub selected_nodes: i32,
    /// `maxUnavailable` resolved against the selected nodes.
    #[serde(default)]
    pub allowed_unavailable: i32,
    /// How many selected nodes are unavailable now.
    #[serde(default)]
    pub current_unavailable: i32,
    /// The unavailable nodes and why (at most 100 listed, by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable_nodes: Vec<UnavailableNode>,
    /// Selected Ready nodes cordoned by someone else than an admitted maintenance (at most 100
    /// listed, by name). They still run their pods and are not counted as unavailable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cordoned_nodes: Vec<String>,
    /// The admitted maintenances holding some of the selected nodes, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admitted: Vec<String>,
    /// The maintenances this budget holds back, oldest first, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<QueuedMaintenance>,
    /// How many maintenances this budget holds back.
    #[serde(default)]
    pub queued_count: i32,
    /// Whether a window is open now (always, without windows).
    #[serde(default)]
    pub open: bool,
    /// When the open window closes (none when always open).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub window_end: Option<Time>,
    /// When the next window opens, while none is open.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub next_open: Option<Time>,
    /// `Valid`: `False` while the spec is invalid (written while the webhook was down); such a
    /// budget admits nothing new until it is fixed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// Condition type on MaintenanceBudget: `False` while its spec is invalid.
pub const CONDITION_VALID: &str = "Valid";

/// A node a budget counts as unavailable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnavailableNode {
    /// The node.
    pub name: String,
    /// `Maintenance` (an admitted maintenance holds it) or `NotReady`.
    pub reason: String,
    /// The admitted maintenance holding it (the oldest, when several do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<String>,
}

/// A maintenance a budget holds back.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedMaintenance {
    /// The NodeMaintenance.
    pub name: String,
    /// `BudgetExhausted`, `OutsideWindow` or `TooLarge`.
    pub reason: String,
}

/// `UnavailableNode::reason` of a node an admitted maintenance holds.
pub const UNAVAILABLE_MAINTENANCE: &str = "Maintenance";
/// `UnavailableNode::reason` of a node whose `Ready` condition is not `True`.
pub const UNAVAILABLE_NOT_READY: &str = "NotReady";
