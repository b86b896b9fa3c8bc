//! Which maintenances hold a node and which one targets a pod, read from the NodeMaintenance
//! objects alone (their spec and recorded status), so that every component answers the same way:
//! the node maintenance controller (cordon, taint, restore), the DaemonSet interceptor and the
//! node agent (SPEC 5.3: act only for pods a maintenance in Drain targets; give the node back when
//! no maintenance holds it).

use std::collections::BTreeMap;

use crate::api::{NodeMaintenance, PodType, Stage};
use crate::selector::node_selector_matches;

use super::targets::TargetSet;

/// True when the maintenance is being deleted.
pub fn is_deleting(nm: &NodeMaintenance) -> bool {
    nm.metadata.deletion_timestamp.is_some()
}

/// True when the maintenance selects the node with this name and these labels.
pub fn selects_node(nm: &NodeMaintenance, name: &str, labels: &BTreeMap<String, String>) -> bool {
    node_selector_matches(&nm.spec.node_selector, name, labels)
}

/// In stage Drain and not being deleted: takes part in the drain-target resolution.
pub fn is_draining(nm: &NodeMaintenance) -> bool {
    nm.spec.stage() == Stage::Drain && !is_deleting(nm)
}

/// In stage Cordon or Drain and not being deleted: keeps the nodes it was admitted to act on
/// cordoned (and what else a maintenance changed on them: the taint, held static pods).
pub fn holds_nodes(nm: &NodeMaintenance) -> bool {
    matches!(nm.spec.stage(), Stage::Cordon | Stage::Drain) && !is_deleting(nm)
}

/// True when the maintenance holds this node: it is in Cordon or Drain ([`holds_nodes`]), selects
/// the node, and was admitted to act on it (SPEC 6.1: a queued maintenance touches nothing).
pub fn holds_node(nm: &NodeMaintenance, name: &str, labels: &BTreeMap<String, String>) -> bool {
    holds_nodes(nm) && selects_node(nm, name, labels) && nm.admitted().admits(name)
}

/// The maintenances that hold the node (see [`holds_node`]), in the order given.
pub fn holders<'a>(
    maintenances: impl IntoIterator<Item = &'a NodeMaintenance>,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Vec<&'a NodeMaintenance> {
    maintenances
        .into_iter()
        .filter(|m| holds_node(m, name, labels))
        .collect()
}

/// The drain targets a draining maintenance recorded for `node` in its status, if it did.
pub fn recorded_targets(nm: &NodeMaintenance, node: &str) -> Option<TargetSet> {
    let status = nm.status.as_ref()?;
    let entry = status
        .node_statuses
        .iter()
        .find(|s| s.node_ref.name == node)?;
    Some(TargetSet::from_entries(&entry.drain_targets))
}

/// The first maintenance in Drain (oldest first, then by name) whose recorded drain targets for
/// `node` match a pod of this type, priority and labels: the maintenance an implicit interceptor
/// acts for. `None` when no maintenance targets the pod (yet).
pub fn targeting<'a>(
    maintenances: impl IntoIterator<Item = &'a NodeMaintenance>,
    node: &str,
    pod_type: PodType,
    priority: i32,
    labels: &BTreeMap<String, String>,
) -> Option<&'a NodeMaintenance> {
    let mut draining: Vec<&NodeMaintenance> = maintenances
        .into_iter()
        .filter(|m| is_draining(m))
        .collect();
    draining.sort_by(|a, b| {
        let created = |m: &NodeMaintenance| m.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (created(a), &a.metadata.name).cmp(&(created(b), &b.metadata.name))
    });
    draining
        .into_iter()
        .find(|m| recorded_targets(m, node).is_some_and(|t| t.matches(pod_type, priority, labels)))
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::{
        DrainPlanEntry, NodeMaintenanceNodeStatus, NodeMaintenanceSpec, NodeMaintenanceStatus,
        NodeReference,
    };

    fn nm(name: &str, stage: Stage, pool: &str, created: i64) -> NodeMaintenance {
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
        let mut m = NodeMaintenance::new(
            name,
            NodeMaintenanceSpec {
                node_selector: selector,
                stage: Some(stage),
                ..Default::default()
            },
        );
        m.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
        m
    }

    fn with_targets(
        mut m: NodeMaintenance,
        node: &str,
        targets: &[(PodType, i32)],
    ) -> NodeMaintenance {
        m.status = Some(NodeMaintenanceStatus {
            node_statuses: vec![NodeMaintenanceNodeStatus {
                node_ref: NodeReference { name: node.into() },
                drain_targets: targets
                    .iter()
                    .map(|(t, p)| DrainPlanEntry {
                        pod_priority: *p,
                        pod_type: *t,
                        pod_selector: None,
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        });
        m
    }

    fn labels(pool: &str) -> BTreeMap<String, String> {
        [("pool".to_string(), pool.to_string())].into()
    }

    /// The maintenance, admitted to act on these nodes (SPEC 6.1).
    fn admitted(mut m: NodeMaintenance, nodes: &[&str]) -> NodeMaintenance {
        m.status.get_or_insert_with(Default::default).admission =
            Some(crate::api::NodeMaintenanceAdmission {
                nodes: nodes
                    .iter()
                    .map(|n| crate::api::AdmittedNode {
                        name: n.to_string(),
                        admitted_time: None,
                    })
                    .collect(),
                released_time: None,
            });
        m
    }

    #[test]
    fn holders_are_the_admitted_cordon_and_drain_maintenances_selecting_the_node() {
        let mut deleting = admitted(nm("deleting", Stage::Drain, "a", 0), &["one"]);
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let all = [
            admitted(nm("idle", Stage::Idle, "a", 0), &["one"]),
            admitted(nm("cordon", Stage::Cordon, "a", 0), &["one"]),
            admitted(nm("drain", Stage::Drain, "a", 0), &["one"]),
            admitted(nm("complete", Stage::Complete, "a", 0), &["one"]),
            admitted(nm("other-pool", Stage::Drain, "b", 0), &["one"]),
            // Queued (SPEC 6.1): touches nothing.
            nm("queued", Stage::Drain, "a", 0),
            // Admitted on another node only: this one waits for its own admission.
            admitted(nm("elsewhere", Stage::Drain, "a", 0), &["two"]),
            deleting,
        ];
        let names: Vec<&str> = holders(&all, "one", &labels("a"))
            .iter()
            .map(|m| m.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["cordon", "drain"]);
        assert!(holders(&all, "one", &labels("c")).is_empty());
    }

    #[rstest::rstest]
    #[case::daemonset_within_the_target(PodType::DaemonSet, 100, Some("m"))]
    #[case::daemonset_above_the_target(PodType::DaemonSet, 101, None)]
    #[case::static_not_reached(PodType::Static, 0, None)]
    #[case::default_reached(PodType::Default, 5, Some("m"))]
    fn targeting_rows(#[case] t: PodType, #[case] priority: i32, #[case] want: Option<&str>) {
        let m = with_targets(
            nm("m", Stage::Drain, "a", 0),
            "one",
            &[(PodType::Default, 1000), (PodType::DaemonSet, 100)],
        );
        let got = targeting([&m], "one", t, priority, &BTreeMap::new());
        assert_eq!(got.and_then(|m| m.metadata.name.as_deref()), want);
    }

    #[test]
    fn targeting_reads_only_draining_maintenances_and_the_pods_node() {
        let cordon = with_targets(
            nm("c", Stage::Cordon, "a", 0),
            "one",
            &[(PodType::DaemonSet, 9)],
        );
        let complete = with_targets(
            nm("x", Stage::Complete, "a", 0),
            "one",
            &[(PodType::DaemonSet, 9)],
        );
        let elsewhere = with_targets(
            nm("e", Stage::Drain, "a", 0),
            "two",
            &[(PodType::DaemonSet, 9)],
        );
        assert!(
            targeting(
                [&cordon, &complete, &elsewhere],
                "one",
                PodType::DaemonSet,
                0,
                &BTreeMap::new()
            )
            .is_none()
        );
        // The oldest of several wins, whatever the input order.
        let newer = with_targets(
            nm("newer", Stage::Drain, "a", 20),
            "one",
            &[(PodType::DaemonSet, 9)],
        );
        let older = with_targets(
            nm("older", Stage::Drain, "a", 10),
            "one",
            &[(PodType::DaemonSet, 9)],
        );
        let got = targeting(
            [&newer, &older],
            "one",
            PodType::DaemonSet,
            0,
            &BTreeMap::new(),
        );
        assert_eq!(got.and_then(|m| m.metadata.name.as_deref()), Some("older"));
    }
}
