//! The drain-target algorithm of the node maintenance controller (SPEC 3.3 and 3.4), as a pure
//! function: given every NodeMaintenance in stage Drain, the nodes each selects and the pods on
//! those nodes, [`plan_drain`] decides each maintenance's plan position, each node's effective
//! drain targets and message, which pods to request, whether the maintenance is drained, and which
//! events to emit. The controller's shell gathers the input from its caches and applies the output
//! (status patches, EvictionRequests, events); nothing here does I/O.
//!
//! [`targets`] holds the target lists and their order; [`plan`] resolves intersecting maintenances;
//! [`holds`] says which maintenances hold a node and which one targets a pod.

pub mod admission;
pub mod deadline;
pub mod holds;
pub mod leaving;
pub mod messages;
pub mod plan;
pub mod rules;
pub mod targets;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod kep_examples;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::api::{
    DrainBehavior, DrainPlanEntry, EvictionRequest, NodeMaintenanceNodeStatus, PodType,
};
use crate::cluster::{CachedPod, pod_type};

pub use leaving::{Leaving, Stay, stays};

pub use plan::plan_drain;
pub use targets::{TargetSet, covers, least_powerful, never_backwards, target_set_at, targets_at};

/// Everything [`plan_drain`] decides on, for the whole cluster at once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainInput {
    /// Every NodeMaintenance in stage Drain (any order; they are resolved oldest first).
    pub maintenances: Vec<MaintenanceInput>,
    /// The pods of every node some maintenance selects, by node name. A node without an entry
    /// has no pods.
    pub pods: BTreeMap<String, Vec<DrainPod>>,
}

/// One NodeMaintenance in stage Drain.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MaintenanceInput {
    /// Name (cluster-scoped).
    pub name: String,
    /// `metadata.creationTimestamp`: decides which maintenance is older (ties by name).
    pub created: Timestamp,
    /// `spec.drainPlan`.
    pub plan: Vec<DrainPlanEntry>,
    /// `status.drainPlanPosition` as recorded (absent at the start of the drain).
    pub drain_plan_position: Option<i32>,
    /// `status.nodeStatuses` as recorded: what each node already reached (targets never move
    /// backwards), and the previous message (to emit each fast-forward event once).
    pub node_statuses: Vec<NodeMaintenanceNodeStatus>,
    /// Names of the selected nodes. Their order is the order of the output statuses; keep the
    /// recorded order first so that statuses do not reshuffle.
    pub nodes: Vec<String>,
}

/// A pod, reduced to what the drain decides on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainPod {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID (the name of its EvictionRequest).
    pub uid: String,
    /// Default, DaemonSet or Static.
    pub pod_type: PodType,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Labels, for plan entries with a pod selector.
    pub labels: BTreeMap<String, String>,
    /// Succeeded or Failed: needs no request and blocks nothing.
    pub terminal: bool,
    /// An EvictionRequest for this pod exists (whoever requested it).
    pub has_request: bool,
    /// Why the pod stays although targeted (a DaemonSet or static pod nothing will remove, see
    /// [`leaving`]); such pods never block progress (SPEC 3.3). `None`: it can leave.
    pub stays: Option<Stay>,
    /// The interceptors still to come for the pod (not yet processed) that no
    /// `EvictionInterceptor` registers (SPEC 5.5): the node's message names them. Empty when
    /// registration is off or unknown.
    pub unregistered: Vec<String>,
    /// How the maintenances drain it (SPEC 6.2, [`rules`]): `Skip` and `WaitCompleted` pods get
    /// no request; a `WaitCompleted` pod holds the node until it finished.
    pub behavior: DrainBehavior,
    /// Deletion has started.
    pub terminating: bool,
    /// No controller will recreate it (SPEC 6.2: `kubectl drain` refuses it without `--force`).
    pub unmanaged: bool,
    /// It has an `emptyDir` volume (SPEC 6.2: `kubectl drain` refuses it without
    /// `--delete-emptydir-data`).
    pub local_data: bool,
}

impl DrainPod {
    /// Builds the drain view of a cached pod and its EvictionRequest, if any.
    pub fn from_cached(
        pod: &CachedPod,
        request: Option<&EvictionRequest>,
        leaving: Leaving,
    ) -> Self {
        DrainPod {
            name: pod.name().to_string(),
            namespace: pod.namespace().to_string(),
            uid: pod.uid().to_string(),
            pod_type: pod_type(pod),
            priority: pod.priority(),
            labels: pod.labels().to_map(),
            terminal: pod.is_terminal(),
            has_request: request.is_some(),
            stays: stays(pod, request, leaving),
            unregistered: Vec::new(),
            behavior: DrainBehavior::Drain,
            terminating: pod.is_terminating(),
            unmanaged: pod.is_unmanaged(),
            local_data: pod.spec.empty_dir,
        }
    }

    /// The same pod, drained by `behavior`.
    pub fn with_behavior(mut self, behavior: DrainBehavior) -> Self {
        self.behavior = behavior;
        self
    }

    /// True when the pod can leave its node (see [`DrainPod::stays`]).
    pub fn leaves(&self) -> bool {
        self.stays.is_none()
    }
}

/// What [`plan_drain`] decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainOutput {
    /// One per input maintenance, in input order.
    pub maintenances: Vec<MaintenanceOutput>,
}

/// The decision for one maintenance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MaintenanceOutput {
    /// Name of the maintenance.
    pub name: String,
    /// New `status.drainPlanPosition`.
    pub drain_plan_position: i32,
    /// New `status.nodeStatuses`, in the order of [`MaintenanceInput::nodes`].
    pub node_statuses: Vec<NodeMaintenanceNodeStatus>,
    /// `Drained`: the whole plan is reached on every selected node and no evictable,
    /// non-terminal, targeted pod remains.
    pub drained: bool,
    /// Events to record on the maintenance.
    pub events: Vec<DrainEvent>,
    /// Every non-terminal pod on a selected node that the node's effective targets match, also
    /// those that already have a request (the maintenance joins it) and those that stay (their
    /// interceptors may still act, and the request shows why they stay). Maintenances sharing a node list the same
    /// pods; the shell creates or joins one request per pod.
    pub pods_to_request: Vec<PodRef>,
}

/// A pod to request an eviction for.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// Something worth an event on the maintenance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainEvent {
    /// The maintenance reached a further plan entry.
    PlanAdvanced {
        /// Previous position.
        from: usize,
        /// New position.
        to: usize,
    },
    /// On this node, the maintenance's own targets are below what the node already reached
    /// because of another maintenance, so it skips part of its plan there.
    FastForwarded {
        /// The node.
        node: String,
        /// The maintenance that drove the node further (`None` when it is gone).
        by: Option<String>,
        /// Whether `by` is older than this maintenance.
        older: bool,
    },
    /// Maintenances on this node had incomparable targets and none could ever advance; the
    /// node's targets were raised to those of the oldest of them.
    DeadlockResolved {
        /// The node.
        node: String,
        /// The maintenance whose targets the node now follows.
        winner: String,
    },
}

impl DrainEvent {
    /// Event reason (PascalCase).
    pub fn reason(&self) -> &'static str {
        match self {
            DrainEvent::PlanAdvanced { .. } => "DrainPlanAdvanced",
            DrainEvent::FastForwarded { .. } => "DrainFastForwarded",
            DrainEvent::DeadlockResolved { .. } => "DrainDeadlockResolved",
        }
    }

    /// Event message for humans.
    pub fn message(&self) -> String {
        match self {
            DrainEvent::PlanAdvanced { from, to } => {
                format!("Drain plan advanced from entry {from} to entry {to}")
            }
            DrainEvent::FastForwarded {
                node,
                by: Some(by),
                older,
            } => format!(
                "Fast-forwarded on node {node} by {}{by}: pods this maintenance's plan would keep for later may already be gone",
                if *older { "older " } else { "" }
            ),
            DrainEvent::FastForwarded { node, by: None, .. } => {
                format!(
                    "Fast-forwarded on node {node}: the node had already been drained further by an earlier maintenance"
                )
            }
            DrainEvent::DeadlockResolved { node, winner } => format!(
                "Maintenances on node {node} waited on each other; the node now follows the targets of the oldest, {winner}"
            ),
        }
    }
}
