//! What the node agent's interceptor and keeper share: the cluster and directory they work on
//! ([`Context`]), and how they tell what they did — events on the Node, metrics, logs.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::runtime::reflector;
use kube::{Client, Resource};
use tokio::sync::Notify;
use tracing::warn;

use super::store::Store;
use crate::api::NodeMaintenance;
use crate::metrics::{ResultLabel, metrics};
use crate::recorder::{Event, EventType, Recorder, reporter};

/// Event reason: a manifest was moved out of the kubelet's directory.
pub const MANIFEST_HELD: &str = "StaticPodManifestHeld";
/// Event reason: a held manifest was put back.
pub const MANIFEST_RESTORED: &str = "StaticPodManifestRestored";
/// Event reason: a held entry was changed by someone else and is left to the administrator.
pub const HELD_MANIFEST_CONFLICT: &str = "HeldStaticPodManifestConflict";

/// The node agent's view of its node and cluster.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The agent's node.
    pub node: String,
    /// The value of the node's `evictord.dev/node-agent` annotation (the agent's pod name).
    pub agent: String,
    /// The static pod directory.
    pub store: Store,
    /// Every NodeMaintenance (a reflector store, synced before the agent acts).
    pub maintenances: reflector::Store<NodeMaintenance>,
    /// Event writer.
    pub recorder: Recorder,
    /// Wakes the keeper (a maintenance changed, or a manifest was held).
    pub wake: Arc<Notify>,
}

impl Context {
    /// The context for `node`.
    pub fn new(
        client: Client,
        node: String,
        agent: String,
        store: Store,
        maintenances: reflector::Store<NodeMaintenance>,
    ) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter("evictord-node-agent")),
            client,
            node,
            agent,
            store,
            maintenances,
            wake: Arc::new(Notify::new()),
        }
    }

    /// The NodeMaintenances as last seen.
    pub fn maintenances(&self) -> Vec<NodeMaintenance> {
        self.maintenances
            .state()
            .iter()
            .map(|m| (**m).clone())
            .collect()
    }

    /// A reference to the agent's Node (for events).
    pub fn node_ref(&self) -> ObjectReference {
        let mut node = Node::default();
        node.metadata.name = Some(self.node.clone());
        let mut r = node.object_ref(&());
        // Events about a Node name it by name, as the kubelet's own do.
        r.uid = Some(self.node.clone());
        r
    }

    /// Records an event on the Node (failures are logged only).
    pub async fn event(&self, type_: EventType, reason: &str, note: String) {
        let e = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "HoldStaticPod".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&e, &self.node_ref()).await {
            warn!(error = %err, reason, "could not record event");
        }
    }
}

/// Counts a move (`held` or `restored`).
pub fn count_move(result: &'static str) {
    metrics()
        .node_agent_moves
        .get_or_create(&ResultLabel { result })
        .inc();
}

/// Sets the gauges of held manifests and of conflicts.
pub fn set_gauges(held: usize, conflicts: usize) {
    let m = metrics();
    m.node_agent_held
        .set(i64::try_from(held).unwrap_or(i64::MAX));
    m.node_agent_conflicts
        .set(i64::try_from(conflicts).unwrap_or(i64::MAX));
}
