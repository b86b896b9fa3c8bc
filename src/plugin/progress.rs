//! One frame of a drain's progress: per node, the pods evicted out of those to evict and one line
//! per pod that still holds the drain up, and the plain lines printed without a terminal.
//!
//! The pods a maintenance asks for are those the controller's [`plan_drain`] targets now (the
//! same gathering and resolution as the controller); a frame never guesses from messages.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use crate::api::{CONDITION_DRAINED, EvictionRequest, NodeMaintenance, Stage};
use crate::cluster::CachedPod;
use crate::controller::node_maintenance::gather::{
    drain_input, has_node_agent, is_draining, selected_nodes,
};
use crate::drain::{Leaving, plan_drain, stays};

use super::preview::ASSUMED_DAEMONSET_INTERCEPTOR;

use super::blockers::{Budget, Holdup, holdup, node_note};

/// A pod that holds its node's drain up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PodLine {
    /// `namespace/name`.
    pub pod: String,
    /// Why it is still there.
    pub holdup: Holdup,
}

/// Progress of one node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeProgress {
    /// Node name.
    pub node: String,
    /// Pods to evict that are gone.
    pub evicted: u64,
    /// Pods to evict (those seen so far).
    pub total: u64,
    /// What the node's status says when its bar does not, e.g. which node it waits for.
    pub note: Option<String>,
    /// The pods still holding the node up.
    pub pods: Vec<PodLine>,
}

/// A drain's progress at one moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Frame {
    /// The maintenance.
    pub maintenance: String,
    /// Its stage.
    pub stage: Stage,
    /// `Drained=True`.
    pub drained: bool,
    /// Per selected node.
    pub nodes: Vec<NodeProgress>,
}

/// What a frame is computed from: the cluster as read, and what the watcher saw before.
pub struct FrameInput<'a> {
    /// The maintenance being watched.
    pub maintenance: &'a NodeMaintenance,
    /// Every maintenance (the watched one included), as the controller resolves them together.
    pub maintenances: &'a [NodeMaintenance],
    /// The cluster's nodes.
    pub nodes: &'a [Arc<Node>],
    /// The pods on the selected nodes.
    pub pods: &'a [CachedPod],
    /// EvictionRequests of those pods' namespaces.
    pub requests: &'a [EvictionRequest],
    /// PodDisruptionBudgets of those namespaces.
    pub budgets: &'a [Budget],
    /// The time.
    pub now: Timestamp,
}

/// True when the pod can leave its node (it holds the drain until it is gone).
fn leaves(
    pod: &CachedPod,
    request_of: &BTreeMap<(&str, &str), &EvictionRequest>,
    nodes: &[Arc<Node>],
) -> bool {
    let node = pod.spec.node_name.as_deref();
    let leaving = Leaving {
        daemonset_interceptor: ASSUMED_DAEMONSET_INTERCEPTOR,
        node_agent: nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == node && has_node_agent(n)),
    };
    let request = request_of.get(&(pod.namespace(), pod.uid())).copied();
    stays(pod, request, leaving).is_none()
}

/// Computes the frame. `to_evict` (per node, `namespace/name`) is what the watcher has seen to
/// evict so far (e.g. from the preview); pods targeted now are added to it, so the bars' totals
/// never shrink.
pub fn frame(input: &FrameInput<'_>, to_evict: &mut BTreeMap<String, BTreeSet<String>>) -> Frame {
    let nm = input.maintenance;
    let name = nm.metadata.name.clone().unwrap_or_default();
    let status = nm.status.clone().unwrap_or_default();
    let selected = selected_nodes(nm, input.nodes);
    let request_of: BTreeMap<(&str, &str), &EvictionRequest> = input
        .requests
        .iter()
        .filter_map(|r| {
            Some((
                (
                    r.metadata.namespace.as_deref()?,
                    r.metadata.name.as_deref()?,
                ),
                r,
            ))
        })
        .collect();
    let targeted: BTreeSet<String> = if is_draining(nm) {
        let all: Vec<Arc<NodeMaintenance>> =
            input.maintenances.iter().cloned().map(Arc::new).collect();
        let pods: Vec<Arc<CachedPod>> = input.pods.iter().cloned().map(Arc::new).collect();
        let drain = drain_input(
            &all,
            input.nodes,
            &pods,
            |ns, uid| request_of.get(&(ns, uid)).copied(),
            ASSUMED_DAEMONSET_INTERCEPTOR,
        );
        plan_drain(&drain)
            .maintenances
            .into_iter()
            .filter(|m| m.name == name)
            .flat_map(|m| m.pods_to_request)
            .map(|p| p.uid)
            .collect()
    } else {
        BTreeSet::new()
    };
    let nodes = selected
        .iter()
        .map(|node| {
            let on_node: Vec<&CachedPod> = input
                .pods
                .iter()
                .filter(|p| p.spec.node_name.as_deref() == Some(node) && !p.is_terminal())
                .collect();
            let holding: Vec<&CachedPod> = on_node
                .iter()
                .copied()
                .filter(|p| targeted.contains(p.uid()) && leaves(p, &request_of, input.nodes))
                .collect();
            let expected = to_evict.entry(node.clone()).or_default();
            expected.extend(holding.iter().map(|p| key(p)));
            let present: BTreeSet<String> = on_node.iter().map(|p| key(p)).collect();
            let evicted = expected.iter().filter(|k| !present.contains(*k)).count();
            let message = status
                .node_statuses
                .iter()
                .find(|s| &s.node_ref.name == node)
                .map(|s| s.drain_message.as_str())
                .unwrap_or_default();
            NodeProgress {
                node: node.clone(),
                evicted: evicted as u64,
                total: expected.len() as u64,
                note: stage_note(nm.spec.stage())
                    .or_else(|| node_note(message, &name, input.maintenances)),
                pods: holding
                    .iter()
                    .map(|p| PodLine {
                        pod: key(p),
                        holdup: holdup(
                            p,
                            request_of.get(&(p.namespace(), p.uid())).copied(),
                            input.budgets,
                            input.now,
                        ),
                    })
                    .collect(),
            }
        })
        .collect();
    Frame {
        maintenance: name,
        stage: nm.spec.stage(),
        drained: status.is_true(CONDITION_DRAINED),
        nodes,
    }
}

fn key(p: &CachedPod) -> String {
    format!("{}/{}", p.namespace(), p.name())
}

/// Outside Drain the bars do not move; say why.
fn stage_note(stage: Stage) -> Option<String> {
    match stage {
        Stage::Idle => Some("stage Idle: nothing happens until the stage moves on".into()),
        Stage::Cordon => Some("stage Cordon: cordoned, not draining".into()),
        Stage::Complete => Some("stage Complete: uncordoning and withdrawing requests".into()),
        Stage::Drain => None,
    }
}

/// A plain line and what identifies it (a line is printed again only when its key changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlainLine {
    /// Identity of the situation.
    pub key: String,
    /// The words.
    pub text: String,
}

/// The frame as plain lines, without a terminal.
pub fn plain_lines(f: &Frame) -> Vec<PlainLine> {
    let mut out = Vec::new();
    for n in &f.nodes {
        let mut text = format!("node {}: {}/{} pods evicted", n.node, n.evicted, n.total);
        if let Some(note) = &n.note {
            text.push_str("; ");
            text.push_str(note);
        }
        out.push(PlainLine {
            key: text.clone(),
            text,
        });
        for p in &n.pods {
            out.push(PlainLine {
                key: format!("node {} pod {}: {}", n.node, p.pod, p.holdup.key),
                text: format!("node {}: pod {}: {}", n.node, p.pod, p.holdup.text),
            });
        }
    }
    if f.drained {
        let text = format!("maintenance {}: Drained", f.maintenance);
        out.push(PlainLine {
            key: text.clone(),
            text,
        });
    }
    out
}

/// The lines of `now` not printed before (by key); remembers them in `printed`.
pub fn new_lines(printed: &mut BTreeSet<String>, now: &[PlainLine]) -> Vec<String> {
    now.iter()
        .filter(|l| printed.insert(l.key.clone()))
        .map(|l| l.text.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeMaintenanceNodeStatus, NodeMaintenanceStatus, NodeReference};
    use crate::plugin::fixtures::{node, pod, request, t};
    use crate::plugin::preview::maintenance_for;

    const NM: &str = "nodemaintenance.evictord.dev";

    fn draining(message: &str) -> NodeMaintenance {
        let mut m = maintenance_for("mine", &["n1".into()], &[], None, Stage::Drain);
        m.spec.drain_plan = crate::admission::node_maintenance::canonical_drain_plan(&[]);
        m.status = Some(NodeMaintenanceStatus {
            node_statuses: vec![NodeMaintenanceNodeStatus {
                node_ref: NodeReference { name: "n1".into() },
                drain_message: message.into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        // Admitted (SPEC 6.1): a queued maintenance targets nothing.
        crate::controller::node_maintenance::gather::as_admitted(m)
    }

    fn run(
        nm: &NodeMaintenance,
        pods: &[CachedPod],
        requests: &[EvictionRequest],
        seen: &mut BTreeMap<String, BTreeSet<String>>,
    ) -> Frame {
        let all = [nm.clone()];
        let nodes = [node("n1")];
        frame(
            &FrameInput {
                maintenance: nm,
                maintenances: &all,
                nodes: &nodes,
                pods,
                requests,
                budgets: &[],
                now: t(0),
            },
            seen,
        )
    }

    /// Targeted, evictable pods hold the node; DaemonSet pods the API cannot evict do not.
    #[test]
    fn targeted_evictable_pods_hold_the_node() {
        let nm = draining("Evacuating");
        let pods = [
            pod("a").build(),
            pod("ds").daemonset().build(),
            pod("b").build(),
        ];
        let mut seen = BTreeMap::new();
        let f = run(&nm, &pods, &[request("a", &[NM]).build()], &mut seen);
        let n = &f.nodes[0];
        assert_eq!((n.evicted, n.total), (0, 2));
        let lines: Vec<(&str, &str)> = n
            .pods
            .iter()
            .map(|p| (p.pod.as_str(), p.holdup.text.as_str()))
            .collect();
        assert_eq!(
            lines,
            vec![
                (
                    "ns/a",
                    "waiting for the controller to select an interceptor"
                ),
                ("ns/b", "waiting for its EvictionRequest to be created"),
            ]
        );
        assert_eq!(n.note, None);
    }

    /// A pod gone counts as evicted, and the total does not shrink.
    #[test]
    fn gone_pods_count_as_evicted() {
        let nm = draining("Evacuating");
        let mut seen = BTreeMap::new();
        run(&nm, &[pod("a").build(), pod("b").build()], &[], &mut seen);
        let f = run(&nm, &[pod("b").build()], &[], &mut seen);
        assert_eq!((f.nodes[0].evicted, f.nodes[0].total), (1, 2));
    }

    /// Outside Drain nothing is targeted and the note says why.
    #[test]
    fn cordon_stage_targets_nothing() {
        let mut nm = draining("");
        nm.spec.stage = Some(Stage::Cordon);
        let f = run(&nm, &[pod("a").build()], &[], &mut BTreeMap::new());
        assert!(f.nodes[0].pods.is_empty());
        assert_eq!(
            f.nodes[0].note.as_deref(),
            Some("stage Cordon: cordoned, not draining")
        );
    }

    /// Plain output prints a line once per situation.
    #[test]
    fn plain_lines_print_changes_only() {
        let nm = draining("Evacuating");
        let mut seen = BTreeMap::new();
        let mut printed = BTreeSet::new();
        let f = run(&nm, &[pod("a").build()], &[], &mut seen);
        assert_eq!(
            new_lines(&mut printed, &plain_lines(&f)),
            vec![
                "node n1: 0/1 pods evicted".to_string(),
                "node n1: pod ns/a: waiting for its EvictionRequest to be created".to_string(),
            ]
        );
        assert!(new_lines(&mut printed, &plain_lines(&f)).is_empty());
        let mut done = draining("Drained");
        done.status.as_mut().unwrap().conditions.push(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: CONDITION_DRAINED.into(),
                status: "True".into(),
                reason: "Drained".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(0)),
                observed_generation: None,
            },
        );
        let f = run(&done, &[], &[], &mut seen);
        assert_eq!(
            new_lines(&mut printed, &plain_lines(&f)),
            vec![
                "node n1: 1/1 pods evicted".to_string(),
                "maintenance mine: Drained".to_string()
            ]
        );
    }
}
