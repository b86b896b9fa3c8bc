//! Pure gathering of what the decisions read, from snapshots of the shared caches: which nodes
//! a maintenance selects, which maintenances hold a node, and the whole-cluster input of
//! [`plan_drain`](crate::drain::plan_drain).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::api::{EvictionRequest, NodeMaintenance};
use crate::cluster::CachedPod;
use crate::drain::holds::selects_node;
pub use crate::drain::holds::{holds_nodes, is_draining};
pub use crate::drain::leaving::has_node_agent;
use crate::drain::{DrainInput, DrainPod, Leaving, MaintenanceInput};

/// True when the maintenance selects the node.
pub fn selects(nm: &NodeMaintenance, node: &Node) -> bool {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match &node.metadata.labels {
        Some(labels) => selects_node(nm, name, labels),
        None => selects_node(nm, name, &BTreeMap::new()),
    }
}

/// The names of the nodes the maintenance selects: those its status already lists first, in
/// that order (so that statuses do not reshuffle), then the others by name.
pub fn selected_nodes(nm: &NodeMaintenance, nodes: &[Arc<Node>]) -> Vec<String> {
    let mut matched: BTreeSet<String> = nodes
        .iter()
        .filter(|n| selects(nm, n))
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let mut ordered = Vec::with_capacity(matched.len());
    for s in nm.status.iter().flat_map(|s| &s.node_statuses) {
        if matched.remove(&s.node_ref.name) {
            ordered.push(s.node_ref.name.clone());
        }
    }
    ordered.extend(matched);
    ordered
}

/// Pods pending evacuation and pods evacuating over the draining maintenances, for the gauges.
/// A node drained by several maintenances counts once, with the largest counts any of them
/// recorded for it (their status entries describe the same pods).
pub fn evacuation_totals(maintenances: &[Arc<NodeMaintenance>]) -> (i64, i64) {
    let mut per_node: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for nm in maintenances.iter().filter(|nm| is_draining(nm)) {
        for s in nm.status.iter().flat_map(|s| &s.node_statuses) {
            let e = per_node.entry(s.node_ref.name.as_str()).or_default();
            e.0 = e.0.max(i64::from(s.pods_pending_evacuation));
            e.1 = e.1.max(i64::from(s.pods_evacuating));
        }
    }
    per_node
        .values()
        .fold((0, 0), |(p, e), (np, ne)| (p + np, e + ne))
}

/// The input of `plan_drain` for every draining maintenance among `maintenances`, with the
/// pods of the nodes they select. `request(namespace, uid)` is a pod's EvictionRequest, if it
/// has one; `daemonset_interceptor` says whether `daemonset.apps.k8s.io` runs (with the nodes'
/// node agents, it decides which DaemonSet and static pods can leave).
pub fn drain_input<R: std::ops::Deref<Target = EvictionRequest>>(
    maintenances: &[Arc<NodeMaintenance>],
    nodes: &[Arc<Node>],
    pods: &[Arc<CachedPod>],
    request: impl Fn(&str, &str) -> Option<R>,
    daemonset_interceptor: bool,
) -> DrainInput {
    let mut draining: Vec<&Arc<NodeMaintenance>> =
        maintenances.iter().filter(|m| is_draining(m)).collect();
    // A stable order: the algorithm sorts by age itself, but output order follows the input.
    draining.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let inputs: Vec<MaintenanceInput> = draining
        .iter()
        .map(|nm| {
            let status = nm.status.clone().unwrap_or_default();
            MaintenanceInput {
                name: nm.metadata.name.clone().unwrap_or_default(),
                created: nm
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
                plan: nm.spec.drain_plan.clone(),
                drain_plan_position: status.drain_plan_position,
                node_statuses: status.node_statuses,
                nodes: selected_nodes(nm, nodes),
            }
        })
        .collect();
    let wanted: BTreeSet<&str> = inputs
        .iter()
        .flat_map(|m| m.nodes.iter().map(String::as_str))
        .collect();
    let with_agent: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| has_node_agent(n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let mut by_node: BTreeMap<String, Vec<DrainPod>> = BTreeMap::new();
    for pod in pods {
        let Some(node) = pod.spec.node_name.as_deref() else {
            continue;
        };
        if wanted.contains(node) {
            let leaving = Leaving {
                daemonset_interceptor,
                node_agent: with_agent.contains(node),
            };
            let request = request(pod.namespace(), pod.uid());
            let drain_pod = DrainPod::from_cached(pod, request.as_deref(), leaving);
            by_node.entry(node.to_string()).or_default().push(drain_pod);
        }
    }
    // Pods in a stable order, so that messages naming pods do not flap.
    for list in by_node.values_mut() {
        list.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    }
    DrainInput {
        maintenances: inputs,
        pods: by_node,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Stage;
    use crate::api::{
        NodeMaintenanceNodeStatus, NodeMaintenanceSpec, NodeMaintenanceStatus, NodeReference,
    };
    use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn node(name: &str, pool: &str) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some([("pool".to_string(), pool.to_string())].into());
        Arc::new(n)
    }

    fn maintenance(
        name: &str,
        stage: Stage,
        pool: &str,
        recorded: &[&str],
    ) -> Arc<NodeMaintenance> {
        let selector = NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "pool".into(),
                    operator: "In".into(),
                    values: Some(vec![pool.into()]),
                }]),
                match_fields: None,
            }],
        };
        let mut nm = NodeMaintenance::new(
            name,
            NodeMaintenanceSpec {
                node_selector: selector,
                stage: Some(stage),
                ..Default::default()
            },
        );
        nm.metadata.creation_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        nm.status = Some(NodeMaintenanceStatus {
            node_statuses: recorded
                .iter()
                .map(|n| NodeMaintenanceNodeStatus {
                    node_ref: NodeReference {
                        name: n.to_string(),
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        Arc::new(nm)
    }

    fn pod(name: &str, node: &str) -> Arc<CachedPod> {
        let mut p = CachedPod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some(format!("uid-{name}"));
        p.spec.node_name = Some(node.into());
        Arc::new(p)
    }

    #[test]
    fn recorded_nodes_keep_their_order_then_new_ones_by_name() {
        let nodes = [
            node("c", "a"),
            node("a", "a"),
            node("b", "a"),
            node("x", "other"),
        ];
        let nm = maintenance("m", Stage::Drain, "a", &["c", "gone"]);
        assert_eq!(selected_nodes(&nm, &nodes), vec!["c", "a", "b"]);
    }

    /// A draining maintenance recording (node, pending, evacuating).
    fn counted(name: &str, stage: Stage, rows: &[(&str, i32, i32)]) -> Arc<NodeMaintenance> {
        let mut nm = (*maintenance(name, stage, "a", &[])).clone();
        let status = nm.status.get_or_insert_with(Default::default);
        status.node_statuses = rows
            .iter()
            .map(|(n, p, e)| NodeMaintenanceNodeStatus {
                node_ref: NodeReference {
                    name: n.to_string(),
                },
                pods_pending_evacuation: *p,
                pods_evacuating: *e,
                ..Default::default()
            })
            .collect();
        Arc::new(nm)
    }

    #[rstest::rstest]
    #[case::none(vec![], (0, 0))]
    #[case::one_maintenance_sums_its_nodes(vec![counted("m", Stage::Drain, &[("a", 3, 1), ("b", 2, 4)])], (5, 5))]
    #[case::shared_node_counts_once(vec![counted("m", Stage::Drain, &[("a", 3, 1)]), counted("n", Stage::Drain, &[("a", 3, 1), ("b", 1, 0)])], (4, 1))]
    #[case::shared_node_takes_the_larger_counts(vec![counted("m", Stage::Drain, &[("a", 1, 2)]), counted("n", Stage::Drain, &[("a", 3, 0)])], (3, 2))]
    #[case::not_draining_is_not_counted(vec![counted("m", Stage::Cordon, &[("a", 3, 1)]), counted("n", Stage::Complete, &[("b", 2, 2)])], (0, 0))]
    fn evacuation_totals_rows(#[case] ms: Vec<Arc<NodeMaintenance>>, #[case] expected: (i64, i64)) {
        assert_eq!(evacuation_totals(&ms), expected);
    }

    #[test]
    fn stage_predicates() {
        let rows = [
            (Stage::Idle, false, false, false),
            (Stage::Cordon, false, false, true),
            (Stage::Drain, false, true, true),
            (Stage::Drain, true, false, false),
            (Stage::Complete, false, false, false),
        ];
        for (stage, deleting, draining, holding) in rows {
            let mut nm = (*maintenance("m", stage, "a", &[])).clone();
            if deleting {
                nm.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            }
            assert_eq!(is_draining(&nm), draining, "{stage} deleting={deleting}");
            assert_eq!(holds_nodes(&nm), holding, "{stage} deleting={deleting}");
        }
    }

    #[test]
    fn drain_input_takes_draining_maintenances_and_the_pods_of_their_nodes() {
        let nodes = [node("one", "a"), node("two", "b")];
        let ms = [
            maintenance("m2", Stage::Drain, "a", &[]),
            maintenance("m1", Stage::Cordon, "b", &[]),
        ];
        let pods = [pod("p2", "one"), pod("p1", "one"), pod("q", "two")];
        let request = |_: &str, uid: &str| {
            (uid == "uid-p1").then(|| {
                Arc::new(EvictionRequest::new(
                    uid,
                    crate::api::EvictionRequestSpec::default(),
                ))
            })
        };
        let input = drain_input(&ms, &nodes, &pods, request, true);
        assert_eq!(input.maintenances.len(), 1);
        assert_eq!(input.maintenances[0].name, "m2");
        assert_eq!(input.maintenances[0].nodes, vec!["one"]);
        let on_one: Vec<(&str, bool)> = input.pods["one"]
            .iter()
            .map(|p| (p.name.as_str(), p.has_request))
            .collect();
        assert_eq!(on_one, vec![("p1", true), ("p2", false)]);
        assert!(!input.pods.contains_key("two"));
    }
}
