//! Pure gathering of what the decisions read, from snapshots of the shared caches: which nodes
//! a maintenance selects, which maintenances hold a node, and the whole-cluster input of
//! [`plan_drain`](crate::drain::plan_drain).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::api::{Admitted, EvictionRequest, MaintenanceBudget, NodeMaintenance, Registration};
use crate::cluster::CachedPod;
use crate::drain::admission::{AdmissionInput, BudgetInput, MaintenanceState, NodeState};
use crate::drain::holds::selects_node;
pub use crate::drain::holds::{holds_nodes, is_draining};
pub use crate::drain::leaving::has_node_agent;
use crate::drain::{DrainInput, DrainPod, Leaving, MaintenanceInput};

/// True when the node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The admission's view of a node (SPEC 6.1).
pub fn node_state(node: &Node) -> NodeState {
    NodeState {
        name: node.metadata.name.clone().unwrap_or_default(),
        labels: node.metadata.labels.clone().unwrap_or_default(),
        ready: is_ready(node),
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
    }
}

/// The admission's view of a maintenance (SPEC 6.1): whether it wants its nodes (Cordon or
/// Drain, not being deleted), the nodes it selects, those admitted, and whether they count.
pub fn maintenance_state(nm: &NodeMaintenance, nodes: &[Arc<Node>]) -> MaintenanceState {
    let selected: BTreeSet<String> = nodes
        .iter()
        .filter(|n| selects(nm, n))
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let admitted = nm.admitted();
    MaintenanceState {
        name: nm.metadata.name.clone().unwrap_or_default(),
        created: nm
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
        wants: holds_nodes(nm),
        admitted: match admitted {
            Admitted::Nothing => BTreeSet::new(),
            Admitted::Nodes(a) => a.nodes.iter().map(|n| n.name.clone()).collect(),
            Admitted::Every => selected.clone(),
        },
        selected,
        recorded: matches!(admitted, Admitted::Nodes(_)),
        holding: !matches!(admitted, Admitted::Nothing) && !admitted.released(),
    }
}

/// The input of [`admit`](crate::drain::admission::admit) over every node, budget and
/// maintenance.
pub fn admission_input(
    nodes: &[Arc<Node>],
    budgets: &[Arc<MaintenanceBudget>],
    maintenances: &[Arc<NodeMaintenance>],
) -> AdmissionInput {
    AdmissionInput {
        nodes: nodes.iter().map(|n| node_state(n)).collect(),
        budgets: budgets.iter().map(|b| BudgetInput::of(b)).collect(),
        maintenances: maintenances
            .iter()
            .map(|m| maintenance_state(m, nodes))
            .collect(),
    }
}

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

/// The selected nodes the maintenance was admitted to act on (SPEC 6.1), in the order of
/// [`selected_nodes`].
pub fn admitted_nodes(nm: &NodeMaintenance, nodes: &[Arc<Node>]) -> Vec<String> {
    let admitted = nm.admitted();
    selected_nodes(nm, nodes)
        .into_iter()
        .filter(|n| admitted.admits(n))
        .collect()
}

/// The selected nodes still waiting for their admission (SPEC 6.1).
pub fn waiting_nodes(nm: &NodeMaintenance, nodes: &[Arc<Node>]) -> Vec<String> {
    let admitted = nm.admitted();
    selected_nodes(nm, nodes)
        .into_iter()
        .filter(|n| !admitted.admits(n))
        .collect()
}

/// The maintenance as if admitted on every node it selects (when no admission is recorded):
/// previews show the order in which its pods leave once it is admitted.
pub fn as_admitted(mut nm: NodeMaintenance) -> NodeMaintenance {
    if nm.admitted() == Admitted::Nothing {
        let status = nm.status.get_or_insert_with(Default::default);
        status.admission = None;
        status.conditions = crate::api::with_condition(
            &status.conditions,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: crate::api::CONDITION_ADMITTED.into(),
                status: "True".into(),
                reason: crate::api::REASON_ADMITTED.into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    Timestamp::UNIX_EPOCH,
                ),
            },
        );
    }
    nm
}

/// When the maintenance joined the drain: its first admission, or its creation when the
/// admission time is not recorded. A maintenance a budget queued joins as if created then
/// (SPEC 6.1), so that one that waited does not count as older than those that drained meanwhile.
pub fn joined(nm: &NodeMaintenance) -> Timestamp {
    let created = nm
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    match nm.admitted() {
        Admitted::Nodes(a) => a
            .nodes
            .iter()
            .filter_map(|n| n.admitted_time.as_ref().map(|t| t.0))
            .min()
            .map_or(created, |t| t.max(created)),
        _ => created,
    }
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
    // A queued maintenance takes no part (SPEC 6.1).
    let mut draining: Vec<&Arc<NodeMaintenance>> = maintenances
        .iter()
        .filter(|m| is_draining(m) && m.admitted() != Admitted::Nothing)
        .collect();
    // A stable order: the algorithm sorts by age itself, but output order follows the input.
    draining.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let inputs: Vec<MaintenanceInput> = draining
        .iter()
        .map(|nm| {
            let status = nm.status.clone().unwrap_or_default();
            MaintenanceInput {
                name: nm.metadata.name.clone().unwrap_or_default(),
                created: joined(nm),
                plan: nm.spec.drain_plan.clone(),
                drain_plan_position: status.drain_plan_position,
                node_statuses: status.node_statuses,
                nodes: admitted_nodes(nm, nodes),
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

/// Sets each pod's [`DrainPod::behavior`] (SPEC 6.2): its `evictord.dev/drain` label, else the
/// first matching rule of the oldest maintenance holding its node. `namespace_labels` gives a
/// namespace's labels.
pub fn apply_pod_rules(
    input: &mut DrainInput,
    maintenances: &[Arc<NodeMaintenance>],
    nodes: &[Arc<Node>],
    pods: &[Arc<CachedPod>],
    namespace_labels: impl Fn(&str) -> BTreeMap<String, String>,
) {
    let by_uid: BTreeMap<&str, &CachedPod> = pods.iter().map(|p| (p.uid(), p.as_ref())).collect();
    let no_labels = BTreeMap::new();
    for (node_name, list) in input.pods.iter_mut() {
        let Some(node) = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node_name))
        else {
            continue;
        };
        let labels = node.metadata.labels.as_ref().unwrap_or(&no_labels);
        let rules = crate::drain::rules::node_rules(crate::drain::holds::holders(
            maintenances.iter().map(|m| m.as_ref()),
            node_name,
            labels,
        ));
        for pod in list.iter_mut() {
            if let Some(cached) = by_uid.get(pod.uid.as_str()) {
                pod.behavior = crate::drain::rules::behavior(
                    &cached.labels(),
                    &namespace_labels(&pod.namespace),
                    rules,
                );
            }
        }
    }
}

/// Fills each pod's [`DrainPod::unregistered`] (SPEC 5.5): the interceptors still to come for it
/// — its request's `targetInterceptors` not yet processed, or, before it has a request, the ones
/// its annotation declares — that `registration` says no EvictionInterceptor registers.
pub fn mark_unregistered<R: std::ops::Deref<Target = EvictionRequest>>(
    input: &mut DrainInput,
    pods: &[Arc<CachedPod>],
    request: impl Fn(&str, &str) -> Option<R>,
    registration: impl Fn(&str) -> Registration,
) {
    let by_uid: BTreeMap<&str, &CachedPod> = pods.iter().map(|p| (p.uid(), p.as_ref())).collect();
    for pod in input.pods.values_mut().flatten() {
        let Some(cached) = by_uid.get(pod.uid.as_str()) else {
            continue;
        };
        let status = request(&pod.namespace, &pod.uid).and_then(|r| r.status.clone());
        let to_come: Vec<String> = match status.filter(|s| !s.target_interceptors.is_empty()) {
            Some(s) => s
                .target_interceptors
                .into_iter()
                .map(|t| t.name)
                .filter(|n| !s.processed_interceptors.contains(n))
                .collect(),
            None => cached.interceptors(),
        };
        pod.unregistered = to_come
            .into_iter()
            .filter(|n| registration(n) == Registration::NotRegistered)
            .collect();
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
        // Admitted everywhere (SPEC 6.1); the rows below that need a queued one remove it.
        let nm = as_admitted(nm);
        let mut nm = nm;
        nm.status = Some(NodeMaintenanceStatus {
            conditions: nm.status.take().unwrap_or_default().conditions,
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

    /// SPEC 5.5: before its request, a pod's declared interceptors; then its request's targets
    /// not yet processed; only those known not to be registered (never the imperative one).
    #[test]
    fn unregistered_interceptors_still_to_come() {
        use crate::api::{INTERCEPTORS_ANNOTATION, InterceptorReference};
        let nodes = [node("one", "a")];
        let ms = [maintenance("m", Stage::Drain, "a", &[])];
        let annotated = |name: &str| {
            let mut p = (*pod(name, "one")).clone();
            p.metadata.annotations = Some(
                [(
                    INTERCEPTORS_ANNOTATION.to_string(),
                    "typo.example.com, ok.example.com, unknown.example.com".to_string(),
                )]
                .into(),
            );
            Arc::new(p)
        };
        let pods = [annotated("fresh"), annotated("requested")];
        let request = |_: &str, uid: &str| {
            (uid == "uid-requested").then(|| {
                let mut r = EvictionRequest::new(uid, crate::api::EvictionRequestSpec::default());
                let status = r.status.get_or_insert_with(Default::default);
                status.target_interceptors = [
                    "typo.example.com",
                    "late.example.com",
                    "imperative-eviction.k8s.io",
                ]
                .iter()
                .map(|n| InterceptorReference {
                    name: n.to_string(),
                })
                .collect();
                status.processed_interceptors = vec!["typo.example.com".into()];
                Arc::new(r)
            })
        };
        let mut input = drain_input(&ms, &nodes, &pods, request, true);
        let registration = |name: &str| {
            Registration::of(
                name,
                match name {
                    "ok.example.com" => Some(true),
                    "unknown.example.com" => None,
                    _ => Some(false),
                },
            )
        };
        mark_unregistered(&mut input, &pods, request, registration);
        let marked: Vec<(&str, Vec<&str>)> = input.pods["one"]
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.unregistered.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            marked,
            vec![
                ("fresh", vec!["typo.example.com"]),
                ("requested", vec!["late.example.com"])
            ]
        );
    }
}
