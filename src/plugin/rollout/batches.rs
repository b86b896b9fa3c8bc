//! How the MaintenanceBudgets would take a rollout or a drain, decided by the controller's own
//! admission ([`admit`]) over the cluster's nodes, budgets and maintenances as gathered by the
//! controller ([`admission_input`]), with the planned objects added:
//!
//! - [`rollout_preview`]: the batches a rollout drains in. Its budget and one maintenance per node
//!   (as `rollout` would create them) are added; admission runs, the rollout's maintenances it
//!   admits are one batch, they are released (the rollout completes them), admission runs again,
//!   and so on. Other maintenances it admits on the way keep their nodes (nobody knows when they
//!   end); a closed window moves the clock to its next opening; what is still queued at the end
//!   is reported with the controller's message.
//! - [`too_large`]: whether a budget finds a planned maintenance `TooLarge` (it selects more of
//!   the budget's nodes than the budget ever allows at once), so that `drain` refuses it.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::api::{MaintenanceBudget, NodeMaintenance};
use crate::controller::node_maintenance::gather::admission_input;
use crate::drain::admission::{AdmissionInput, QueueReason, Queued, Verdict, admit};

use super::naming::{budget_for, maintenance_of};
use super::record::{RolloutOptions, int_or_string};

/// The name the preview gives the rollout's objects (no object of the cluster has it).
const PREVIEW: &str = "(rollout preview)";
/// At most this many closed windows are waited through.
const MAX_WINDOW_WAITS: usize = 16;

/// Nodes drained together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Batch {
    /// The nodes, by name.
    pub nodes: Vec<String>,
    /// When a window opens first (it is closed now), if it has to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_opens: Option<Timestamp>,
}

/// Nodes that no batch takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// The nodes.
    pub nodes: Vec<String>,
    /// Why: the controller's message for the first of them.
    pub message: String,
}

/// The batches of a rollout, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPreview {
    /// `--max-unavailable`.
    pub max_unavailable: String,
    /// The batches, the first first.
    pub batches: Vec<Batch>,
    /// What stays queued behind maintenances that are not the rollout's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

/// The admission input of the cluster with `planned` maintenances (created `now`) and budgets
/// added.
fn with_planned(
    nodes: &[Arc<Node>],
    budgets: &[MaintenanceBudget],
    maintenances: &[NodeMaintenance],
    planned_budgets: Vec<MaintenanceBudget>,
    planned: Vec<NodeMaintenance>,
    now: Timestamp,
) -> AdmissionInput {
    let budgets: Vec<Arc<MaintenanceBudget>> = budgets
        .iter()
        .cloned()
        .chain(planned_budgets)
        .map(Arc::new)
        .collect();
    let maintenances: Vec<Arc<NodeMaintenance>> = maintenances
        .iter()
        .cloned()
        .chain(planned.into_iter().map(|mut m| {
            m.metadata.creation_timestamp = Some(Time(now));
            m
        }))
        .map(Arc::new)
        .collect();
    admission_input(nodes, &budgets, &maintenances)
}

/// The batches in which a rollout of `rollout_nodes` with `max_unavailable` would drain, given
/// the cluster's nodes, budgets and maintenances. See the module docs.
pub fn rollout_preview(
    nodes: &[Arc<Node>],
    budgets: &[MaintenanceBudget],
    maintenances: &[NodeMaintenance],
    rollout_nodes: &[String],
    max_unavailable: &IntOrString,
    now: Timestamp,
) -> RolloutPreview {
    let ours: Vec<NodeMaintenance> = rollout_nodes
        .iter()
        .map(|n| maintenance_of(PREVIEW, n, None))
        .collect();
    // Maintenance name → node.
    let node_of: BTreeMap<String, String> = ours
        .iter()
        .zip(rollout_nodes)
        .map(|(m, n)| (m.metadata.name.clone().unwrap_or_default(), n.clone()))
        .collect();
    let budget = budget_for(
        PREVIEW,
        rollout_nodes,
        max_unavailable,
        &RolloutOptions::default(),
    );
    let mut input = with_planned(nodes, budgets, maintenances, vec![budget], ours, now);
    let mut now = now;
    let mut batches = Vec::new();
    let mut waiting = None;
    let mut window_opens = None;
    let mut waits = 0;
    for _ in 0..=rollout_nodes.len() + MAX_WINDOW_WAITS {
        let out = admit(&input, now);
        let mut batch: Vec<String> = Vec::new();
        let mut queued: Vec<(&String, &Queued)> = Vec::new();
        for (name, verdict) in &out.verdicts {
            match verdict {
                Verdict::Admit { nodes, .. } => {
                    if let Some(m) = input.maintenances.iter_mut().find(|m| &m.name == name) {
                        m.admitted.extend(nodes.iter().cloned());
                        m.recorded = true;
                        m.holding = true;
                    }
                    if let Some(n) = node_of.get(name) {
                        batch.push(n.clone());
                    }
                }
                Verdict::Queue(q) if node_of.contains_key(name) => queued.push((name, q)),
                _ => {}
            }
        }
        if !batch.is_empty() {
            // The rollout completes them: they give their nodes back before the next batch.
            for m in input
                .maintenances
                .iter_mut()
                .filter(|m| node_of.get(&m.name).is_some_and(|n| batch.contains(n)))
            {
                m.wants = false;
                m.holding = false;
            }
            batch.sort_by_key(|n| rollout_nodes.iter().position(|x| x == n));
            batches.push(Batch {
                nodes: batch,
                window_opens: window_opens.take(),
            });
            continue;
        }
        if queued.is_empty() {
            break;
        }
        let opens: Option<Timestamp> = queued
            .iter()
            .map(|(_, q)| match q.reason {
                QueueReason::OutsideWindow { next_open } => next_open,
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .and_then(|t| t.into_iter().min());
        match opens {
            Some(t) if waits < MAX_WINDOW_WAITS && t > now => {
                waits += 1;
                now = t;
                window_opens = Some(t);
            }
            _ => {
                let mut nodes: Vec<String> = queued
                    .iter()
                    .filter_map(|(name, _)| node_of.get(*name).cloned())
                    .collect();
                nodes.sort_by_key(|n| rollout_nodes.iter().position(|x| x == n));
                waiting = Some(Waiting {
                    nodes,
                    message: queued[0].1.message(),
                });
                break;
            }
        }
    }
    RolloutPreview {
        max_unavailable: int_or_string(max_unavailable),
        batches,
        waiting,
    }
}

/// The preview in words, after `plan`'s tables.
pub fn rollout_text(p: &RolloutPreview, nodes: usize) -> String {
    let mut out = format!(
        "\nRollout preview with --max-unavailable {} ({nodes} node{}, in the order of their names; the MaintenanceBudgets already there count too):\n",
        p.max_unavailable,
        if nodes == 1 { "" } else { "s" }
    );
    for (i, b) in p.batches.iter().enumerate() {
        let when = b
            .window_opens
            .map(|t| format!(" (when a window opens, {t})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  batch {}{when}: {}\n",
            i + 1,
            b.nodes.join(", ")
        ));
    }
    if let Some(w) = &p.waiting {
        out.push_str(&format!(
            "  then waiting: {}: {}\n",
            w.nodes.join(", "),
            w.message
        ));
    }
    out
}

/// The budget that would find `planned` `TooLarge`, with the numbers: `planned` added to the
/// cluster as if created `now`; `None` when admission would take it some day.
pub fn too_large(
    nodes: &[Arc<Node>],
    budgets: &[MaintenanceBudget],
    maintenances: &[NodeMaintenance],
    planned: &NodeMaintenance,
    now: Timestamp,
) -> Option<Queued> {
    let mut planned = planned.clone();
    // A name no other maintenance has.
    planned.metadata.name = Some("(planned drain)".into());
    let input = with_planned(nodes, budgets, maintenances, vec![], vec![planned], now);
    match admit(&input, now).verdict("(planned drain)") {
        Some(Verdict::Queue(q)) if matches!(q.reason, QueueReason::TooLarge { .. }) => {
            Some(q.clone())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        AdmittedNode, MaintenanceBudgetSpec, MaintenanceWindow, NodeMaintenanceAdmission,
        NodeMaintenanceStatus, Stage,
    };
    use crate::plugin::maintenance::maintenance_for;
    use k8s_openapi::api::core::v1::{
        NodeCondition, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, NodeStatus,
    };

    /// Monday 2026-11-23, 12:00 UTC.
    fn noon() -> Timestamp {
        "2026-11-23T12:00:00Z".parse().unwrap()
    }

    /// A Ready node of pool `a`.
    fn node(name: &str) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some([("pool".to_string(), "a".to_string())].into());
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        Arc::new(n)
    }

    fn nodes(n: usize) -> Vec<Arc<Node>> {
        (1..=n).map(|i| node(&format!("n{i}"))).collect()
    }

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("n{i}")).collect()
    }

    /// A budget over pool `a`.
    fn pool_budget(
        name: &str,
        max: IntOrString,
        windows: Vec<MaintenanceWindow>,
    ) -> MaintenanceBudget {
        MaintenanceBudget::new(
            name,
            MaintenanceBudgetSpec {
                node_selector: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "pool".into(),
                            operator: "In".into(),
                            values: Some(vec!["a".into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
                max_unavailable: Some(max),
                windows,
            },
        )
    }

    /// A maintenance of `nodes` in Drain, admitted and holding them.
    fn holding(name: &str, nodes: &[&str]) -> NodeMaintenance {
        let list: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        let mut m = maintenance_for(name, &list, &[], None, Stage::Drain);
        m.metadata.creation_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        m.status = Some(NodeMaintenanceStatus {
            admission: Some(NodeMaintenanceAdmission {
                nodes: list
                    .iter()
                    .map(|n| AdmittedNode {
                        name: n.clone(),
                        admitted_time: None,
                    })
                    .collect(),
                released_time: None,
            }),
            ..Default::default()
        });
        m
    }

    fn batches(p: &RolloutPreview) -> Vec<Vec<&str>> {
        p.batches
            .iter()
            .map(|b| b.nodes.iter().map(String::as_str).collect())
            .collect()
    }

    #[test]
    fn four_nodes_two_at_a_time_are_two_batches_in_name_order() {
        let p = rollout_preview(&nodes(4), &[], &[], &names(4), &IntOrString::Int(2), noon());
        assert_eq!(batches(&p), [["n1", "n2"], ["n3", "n4"]]);
        assert_eq!(p.waiting, None);
        let text = rollout_text(&p, 4);
        assert!(
            text.contains("  batch 1: n1, n2\n  batch 2: n3, n4\n"),
            "{text}"
        );
    }

    #[test]
    fn a_percentage_is_of_the_rollout_nodes() {
        let p = rollout_preview(
            &nodes(6),
            &[],
            &[],
            &names(5),
            &IntOrString::String("50%".into()),
            noon(),
        );
        assert_eq!(batches(&p), [vec!["n1", "n2", "n3"], vec!["n4", "n5"]]);
    }

    /// A pool budget of 2 with one node held by someone else's maintenance leaves one node a
    /// batch, whatever the rollout allows.
    #[test]
    fn existing_budgets_and_holders_count() {
        let budgets = [pool_budget("pool-a", IntOrString::Int(2), vec![])];
        let other = [holding("other", &["n5"])];
        let p = rollout_preview(
            &nodes(5),
            &budgets,
            &other,
            &names(3),
            &IntOrString::Int(3),
            noon(),
        );
        assert_eq!(batches(&p), [["n1"], ["n2"], ["n3"]]);
    }

    #[test]
    fn a_budget_held_to_the_full_leaves_the_rollout_waiting_with_the_controllers_words() {
        let budgets = [pool_budget("pool-a", IntOrString::Int(1), vec![])];
        let other = [holding("other", &["n3"])];
        let p = rollout_preview(
            &nodes(3),
            &budgets,
            &other,
            &names(2),
            &IntOrString::Int(2),
            noon(),
        );
        assert!(p.batches.is_empty(), "{p:?}");
        let w = p.waiting.unwrap();
        assert_eq!(w.nodes, ["n1", "n2"]);
        assert!(
            w.message
                .starts_with("Queued: MaintenanceBudget pool-a allows 1 unavailable node, 1 is unavailable (n3: maintenance other)"),
            "{}",
            w.message
        );
    }

    #[test]
    fn a_closed_window_moves_the_first_batch_to_its_opening() {
        let window = MaintenanceWindow {
            schedule: "0 22 * * *".into(),
            duration: "6h".into(),
            time_zone: None,
        };
        let budgets = [pool_budget("night", IntOrString::Int(10), vec![window])];
        let p = rollout_preview(
            &nodes(2),
            &budgets,
            &[],
            &names(2),
            &IntOrString::Int(1),
            noon(),
        );
        assert_eq!(batches(&p), [["n1"], ["n2"]]);
        let opens: Timestamp = "2026-11-23T22:00:00Z".parse().unwrap();
        assert_eq!(p.batches[0].window_opens, Some(opens));
        assert_eq!(
            p.batches[1].window_opens, None,
            "still open for the next one"
        );
        assert!(
            rollout_text(&p, 2).contains("batch 1 (when a window opens, 2026-11-23T22:00:00Z): n1")
        );
    }

    #[test]
    fn json_names_the_batches() {
        let p = rollout_preview(&nodes(2), &[], &[], &names(2), &IntOrString::Int(1), noon());
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"maxUnavailable": "1", "batches": [{"nodes": ["n1"]}, {"nodes": ["n2"]}]})
        );
    }

    #[test]
    fn a_drain_larger_than_a_budget_is_too_large_and_a_smaller_one_is_not() {
        let budgets = [pool_budget("pool-a", IntOrString::Int(2), vec![])];
        let three = maintenance_for("d", &names(3), &[], None, Stage::Cordon);
        let q = too_large(&nodes(4), &budgets, &[], &three, noon()).unwrap();
        assert_eq!(q.budget, "pool-a");
        assert_eq!(
            q.reason,
            QueueReason::TooLarge {
                selects: 3,
                allowed: 2
            }
        );
        let two = maintenance_for("d", &names(2), &[], None, Stage::Cordon);
        assert_eq!(too_large(&nodes(4), &budgets, &[], &two, noon()), None);
        // Full now, but not too large: it queues, and drain does not refuse it.
        let others = [holding("other", &["n3", "n4"])];
        assert_eq!(too_large(&nodes(4), &budgets, &others, &two, noon()), None);
        // Nodes already unavailable add nothing: admitted whatever the budget says.
        let mut down = nodes(4);
        for n in down.iter_mut().take(3) {
            let mut x = (**n).clone();
            x.status = None;
            *n = Arc::new(x);
        }
        assert_eq!(too_large(&down, &budgets, &[], &three, noon()), None);
        assert_eq!(
            too_large(&nodes(4), &[], &[], &three, noon()),
            None,
            "no budget"
        );
    }
}
