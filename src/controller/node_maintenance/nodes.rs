//! The node writes of the node maintenance controller's shell: keeping the admitted nodes
//! cordoned (and tainted where DaemonSet pods are targeted) in Cordon and Drain, restoring them in
//! Complete, with an event per change.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::context::{Context, Note, keep, publish};
use super::cordon::{NodePatch, cordon, restore};
use super::exclusion;
use super::gather::{holds_nodes, selects};
use super::writes::{self, Error};
use crate::api::{NodeMaintenance, PodType};
use crate::drain::MaintenanceOutput;

/// The nodes whose drain targets (as `mine` records them) reach DaemonSet pods.
pub fn daemonset_targeted_nodes(mine: &MaintenanceOutput) -> impl Iterator<Item = &str> {
    mine.node_statuses
        .iter()
        .filter(|s| {
            s.drain_targets
                .iter()
                .any(|t| t.pod_type == PodType::DaemonSet)
        })
        .map(|s| s.node_ref.name.as_str())
}

/// Cordon and Drain: keeps every selected node cordoned, and the `tainted` ones tainted.
pub async fn cordon_nodes(
    ctx: &Context,
    nm: &NodeMaintenance,
    selected: &[String],
    nodes: &[Arc<Node>],
    tainted: &BTreeSet<&str>,
) -> Result<(), Error> {
    let mut first = None;
    for node in nodes.iter().filter(|n| selected.contains(&n.name_any())) {
        let name = node.name_any();
        let change = cordon(node, tainted.contains(name.as_str()));
        // SPEC 6.4: out of external load balancers while held (the flag can turn it off).
        let excluded = ctx
            .exclude_from_load_balancers
            .then(|| exclusion::exclude(node))
            .flatten();
        if let Some(change) = change.unwrap_or_default().and(excluded) {
            let result = writes::patch_node(&ctx.client, node, &change).await;
            if result.is_ok() {
                publish(ctx, nm, &node_notes(&change, &name)).await;
            }
            keep(&mut first, result);
        }
    }
    first.map_or(Ok(()), Err)
}

fn node_notes(change: &NodePatch, node: &str) -> Vec<Note> {
    change
        .events
        .iter()
        .map(|e| Note {
            reason: e.reason(),
            message: e.message(node),
            warning: e.is_warning(),
        })
        .collect()
}

/// Complete: restores `unschedulable`, the taint and the load balancer exclusion label on selected
/// nodes no other Cordon/Drain maintenance holds.
pub async fn restore_nodes(
    ctx: &Context,
    nm: &NodeMaintenance,
    selected: &[String],
    nodes: &[Arc<Node>],
) -> Result<(), Error> {
    let others: Vec<Arc<NodeMaintenance>> = ctx
        .caches
        .node_maintenances
        .all()
        .into_iter()
        .filter(|m| m.metadata.name != nm.metadata.name && holds_nodes(m))
        .collect();
    let mut first = None;
    for node in nodes.iter().filter(|n| selected.contains(&n.name_any())) {
        let name = node.name_any();
        let held = others
            .iter()
            .any(|m| selects(m, node) && m.admitted().admits(&name));
        let included = (!held).then(|| exclusion::include(node)).flatten();
        if let Some(change) = restore(node, held).unwrap_or_default().and(included) {
            let result = writes::patch_node(&ctx.client, node, &change).await;
            if result.is_ok() {
                publish(ctx, nm, &node_notes(&change, &node.name_any())).await;
            }
            keep(&mut first, result);
        }
    }
    first.map_or(Ok(()), Err)
}
