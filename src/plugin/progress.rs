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

use crate::api::{CONDITION_DRAINED, DrainBehavior, EvictionRequest, NodeMaintenance, Stage};
use crate::cluster::CachedPod;
use crate::controller::node_maintenance::gather::{
    apply_pod_rules, drain_input, has_node_agent, is_draining, selected_nodes,
};
use crate::drain::messages::{MAX_NAMED_PODS, with_rules};
use crate::drain::{DrainPod, Leaving, TargetSet, plan_drain, stays};

use super::blockers::{Budget, Holdup, holdup, node_note};
use super::deadline::NodeDeadline;
use super::drain_rules::{NamespaceLabels, labels_of};
use super::planned::ASSUMED_DAEMONSET_INTERCEPTOR;

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
    /// The node's drain deadline, once evictord recorded it.
    pub deadline: Option<NodeDeadline>,
    /// The pods the drain waits to complete (`namespace/name`): not evicted, they hold the node.
    pub waiting: Vec<String>,
    /// The pods the rules skip (`namespace/name`): they stay and hold nothing.
    pub skipped: Vec<String>,
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
    /// When it was read.
    pub at: Timestamp,
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
    /// The labels of those namespaces, for pod rules with a `namespaceSelector` (see
    /// [`reads_namespaces`](super::drain_rules::reads_namespaces)).
    pub namespaces: &'a NamespaceLabels,
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
    let (targeted, ruled) = if is_draining(nm) {
        decided(input, &name, &request_of)
    } else {
        (BTreeSet::new(), BTreeMap::new())
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
            let recorded = status
                .node_statuses
                .iter()
                .find(|s| &s.node_ref.name == node);
            let message = recorded.map_or("", |s| s.drain_message.as_str());
            let rules = ruled.get(node.as_str()).cloned().unwrap_or_default();
            NodeProgress {
                node: node.clone(),
                evicted: evicted as u64,
                total: expected.len() as u64,
                note: stage_note(nm.spec.stage()).or_else(|| {
                    node_note(without_rules(message, &rules), &name, input.maintenances)
                }),
                deadline: recorded.and_then(|s| NodeDeadline::of(s, &nm.spec)),
                waiting: rules.waiting.iter().map(drain_key).collect(),
                skipped: rules.skipped.iter().map(drain_key).collect(),
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
        at: input.now,
    }
}

fn key(p: &CachedPod) -> String {
    format!("{}/{}", p.namespace(), p.name())
}

fn drain_key(p: &DrainPod) -> String {
    format!("{}/{}", p.namespace, p.name)
}

/// The pods of a node the drain waits to complete and those it skips (SPEC 6.2).
#[derive(Clone, Debug, Default)]
struct Ruled {
    waiting: Vec<DrainPod>,
    skipped: Vec<DrainPod>,
}

/// What the controller decides now for the maintenance `name`: the pods it asks to leave (UIDs),
/// and on each of its nodes those it waits for and those it skips — the non-terminal pods the
/// node's targets match, by behaviour, as [`plan_drain`] lists them in the node status.
fn decided(
    input: &FrameInput<'_>,
    name: &str,
    request_of: &BTreeMap<(&str, &str), &EvictionRequest>,
) -> (BTreeSet<String>, BTreeMap<String, Ruled>) {
    let all: Vec<Arc<NodeMaintenance>> = input.maintenances.iter().cloned().map(Arc::new).collect();
    let pods: Vec<Arc<CachedPod>> = input.pods.iter().cloned().map(Arc::new).collect();
    let mut drain = drain_input(
        &all,
        input.nodes,
        &pods,
        |ns, uid| request_of.get(&(ns, uid)).copied(),
        ASSUMED_DAEMONSET_INTERCEPTOR,
    );
    apply_pod_rules(
        &mut drain,
        &all,
        input.nodes,
        &pods,
        labels_of(input.namespaces),
    );
    let mut targeted = BTreeSet::new();
    let mut ruled: BTreeMap<String, Ruled> = BTreeMap::new();
    for m in plan_drain(&drain)
        .maintenances
        .into_iter()
        .filter(|m| m.name == name)
    {
        targeted.extend(m.pods_to_request.into_iter().map(|p| p.uid));
        for s in &m.node_statuses {
            let targets = TargetSet::from_entries(&s.drain_targets);
            let r = ruled.entry(s.node_ref.name.clone()).or_default();
            for p in drain.pods.get(&s.node_ref.name).into_iter().flatten() {
                if p.terminal || !targets.matches(p.pod_type, p.priority, &p.labels) {
                    continue;
                }
                match p.behavior {
                    DrainBehavior::WaitCompleted => r.waiting.push(p.clone()),
                    DrainBehavior::Skip => r.skipped.push(p.clone()),
                    DrainBehavior::Drain => {}
                }
            }
        }
    }
    (targeted, ruled)
}

/// The node's message without what the controller appended about the pods it waits for and
/// skips ([`with_rules`]): the frame shows those on lines of their own.
fn without_rules<'m>(message: &'m str, r: &Ruled) -> &'m str {
    let waiting: Vec<&DrainPod> = r.waiting.iter().collect();
    let skipped: Vec<&DrainPod> = r.skipped.iter().collect();
    let appended = with_rules(String::new(), &waiting, &skipped);
    message.strip_suffix(appended.as_str()).unwrap_or(message)
}

/// `ns/a, ns/b and 3 more`.
fn named(pods: &[String]) -> String {
    let mut out = pods
        .iter()
        .take(MAX_NAMED_PODS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if pods.len() > MAX_NAMED_PODS {
        out.push_str(&format!(" and {} more", pods.len() - MAX_NAMED_PODS));
    }
    out
}

/// The words for the pods of a node the rules skip.
pub fn skipped_text(pods: &[String]) -> String {
    format!("skipped, they stay on the node: {}", named(pods))
}

/// The words for a pod the drain waits to complete.
pub const WAITING_TEXT: &str =
    "waited for to complete (not evicted; the node is drained once it finished)";

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

/// The frame as plain lines, without a terminal. A deadline's line says the time left when the
/// frame was made (it is printed once, and again when the deadline passes).
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
        if let Some(d) = &n.deadline {
            out.push(PlainLine {
                key: format!("node {} {}", n.node, d.key()),
                text: format!("node {}: {}", n.node, d.text(Some(f.at))),
            });
        }
        if !n.skipped.is_empty() {
            let text = format!("node {}: {}", n.node, skipped_text(&n.skipped));
            out.push(PlainLine {
                key: text.clone(),
                text,
            });
        }
        for p in &n.waiting {
            let text = format!("node {}: pod {p}: {WAITING_TEXT}", n.node);
            out.push(PlainLine {
                key: text.clone(),
                text,
            });
        }
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
    use crate::plugin::maintenance::maintenance_for;

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
                namespaces: &NamespaceLabels::new(),
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

    /// SPEC 6.2: a skipped pod holds nothing and is named once; a pod waited for is not counted as
    /// evicted and has its own line; the controller's note about them is not repeated; the
    /// recorded deadline is shown with the time left, and again once it is exceeded.
    #[test]
    fn skipped_waited_for_and_the_deadline() {
        use crate::api::{DRAIN_LABEL, DeadlinePolicy};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut nm =
            draining("Evacuating; 1 pod waits to complete: ns/job; 1 pod skipped: ns/kept");
        nm.spec.drain_deadline_seconds = Some(600);
        nm.spec.deadline_policy = Some(DeadlinePolicy::Force);
        let status = &mut nm.status.as_mut().unwrap().node_statuses[0];
        status.deadline_time = Some(Time(t(300)));
        let pods = [
            pod("a").build(),
            pod("job").label(DRAIN_LABEL, "wait-completed").build(),
            pod("kept").label(DRAIN_LABEL, "skip").build(),
        ];
        let mut seen = BTreeMap::new();
        let f = run(&nm, &pods, &[], &mut seen);
        let n = &f.nodes[0];
        assert_eq!((n.evicted, n.total), (0, 1));
        assert_eq!(n.pods.len(), 1, "{:?}", n.pods);
        assert_eq!(n.waiting, ["ns/job"]);
        assert_eq!(n.skipped, ["ns/kept"]);
        assert_eq!(
            n.note, None,
            "the rules' part of the message is shown on its own lines"
        );
        let mut printed = BTreeSet::new();
        assert_eq!(
            new_lines(&mut printed, &plain_lines(&f)),
            vec![
                "node n1: 0/1 pods evicted".to_string(),
                "node n1: drain deadline in 5 m, then its pods are forced out".to_string(),
                "node n1: skipped, they stay on the node: ns/kept".to_string(),
                format!("node n1: pod ns/job: {WAITING_TEXT}"),
                "node n1: pod ns/a: waiting for its EvictionRequest to be created".to_string(),
            ]
        );
        // The job finished, `a` is gone, the deadline passed: only the news is printed.
        let status = &mut nm.status.as_mut().unwrap().node_statuses[0];
        status.deadline_exceeded = true;
        status.drain_message = "Drained; 1 pod skipped: ns/kept".into();
        let done = [
            pod("job")
                .label(DRAIN_LABEL, "wait-completed")
                .phase("Succeeded")
                .build(),
            pod("kept").label(DRAIN_LABEL, "skip").build(),
        ];
        let f = run(&nm, &done, &[], &mut seen);
        assert!(f.nodes[0].waiting.is_empty());
        assert_eq!(
            new_lines(&mut printed, &plain_lines(&f)),
            vec![
                "node n1: 1/1 pods evicted".to_string(),
                "node n1: drain deadline exceeded 0 s ago: remaining pods deleted".to_string(),
            ]
        );
    }
}
