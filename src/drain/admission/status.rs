//! Each MaintenanceBudget's status, from one admission pass: the nodes it selects, the
//! unavailable ones and why, those cordoned by someone else, the maintenances admitted and
//! queued, its windows, and whether its spec is valid.

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{AdmissionInput, AdmissionOutput, MaintenanceState, NodeState, Verdict};
use crate::api::{
    CONDITION_VALID, MAX_LISTED_BUDGET_NODES, MaintenanceBudgetStatus, QueuedMaintenance,
    UNAVAILABLE_MAINTENANCE, UNAVAILABLE_NOT_READY, UnavailableNode, with_condition,
};

/// True when one of `nodes` is among `names`.
fn any_in<'a>(names: &BTreeSet<&str>, nodes: impl IntoIterator<Item = &'a String>) -> bool {
    nodes.into_iter().any(|n| names.contains(n.as_str()))
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// What a budget's status is written over: its generation and its current status.
#[derive(Clone, Debug, Default)]
pub struct BudgetObject<'a> {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status` as it is now (its conditions keep their transition times).
    pub status: Option<&'a MaintenanceBudgetStatus>,
}

/// The status of the budget at index `b` of `input` after the pass `output`.
pub fn budget_status(
    input: &AdmissionInput,
    output: &AdmissionOutput,
    b: usize,
    object: &BudgetObject<'_>,
    now: Timestamp,
) -> MaintenanceBudgetStatus {
    let budget = &input.budgets[b];
    let mut members: Vec<&NodeState> = input
        .nodes
        .iter()
        .filter(|n| budget.selects(&n.name, &n.labels))
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    let names: BTreeSet<&str> = members.iter().map(|n| n.name.as_str()).collect();
    let unavailable: Vec<UnavailableNode> = members
        .iter()
        .filter_map(|n| {
            let why = output.unavailable.get(&n.name)?;
            Some(UnavailableNode {
                name: n.name.clone(),
                reason: match why {
                    Some(_) => UNAVAILABLE_MAINTENANCE,
                    None => UNAVAILABLE_NOT_READY,
                }
                .to_string(),
                maintenance: why.clone(),
            })
        })
        .collect();
    // Cordoned, but not by an admitted maintenance, and Ready: still running its pods, not
    // counted.
    let cordoned: Vec<String> = members
        .iter()
        .filter(|n| n.unschedulable && !output.unavailable.contains_key(&n.name))
        .map(|n| n.name.clone())
        .collect();
    let mut by_age: Vec<&MaintenanceState> = input.maintenances.iter().collect();
    by_age.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    let admitted: Vec<String> = by_age
        .iter()
        .filter(|m| {
            let holds = m.holding && any_in(&names, &m.admitted);
            let admitted_now = matches!(
                output.verdict(&m.name),
                Some(Verdict::Admit { nodes, .. }) if any_in(&names, nodes)
            );
            holds || admitted_now
        })
        .map(|m| m.name.clone())
        .collect();
    let queued: Vec<QueuedMaintenance> = output
        .verdicts
        .iter()
        .filter_map(|(name, v)| match v {
            Verdict::Queue(q) if any_in(&names, &q.waiting) => Some(QueuedMaintenance {
                name: name.clone(),
                reason: q.reason().to_string(),
            }),
            _ => None,
        })
        .collect();
    let allowed = budget
        .spec
        .as_ref()
        .map_or(0, |r| r.max_unavailable.allowed(members.len()));
    let windows = &output.windows[b];
    let valid = match &budget.spec {
        Ok(_) => ("True", "Valid", "The spec is valid.".to_string()),
        Err(problem) => (
            "False",
            "Invalid",
            format!("The budget admits no new maintenance until its spec is fixed: {problem}"),
        ),
    };
    let previous = object
        .status
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let conditions = with_condition(
        previous,
        Condition {
            type_: CONDITION_VALID.into(),
            status: valid.0.into(),
            reason: valid.1.into(),
            message: valid.2,
            observed_generation: object.generation,
            last_transition_time: Time(now),
        },
    );
    MaintenanceBudgetStatus {
        observed_generation: object.generation,
        selected_nodes: count(members.len()),
        allowed_unavailable: count(allowed),
        current_unavailable: count(unavailable.len()),
        unavailable_nodes: unavailable
            .into_iter()
            .take(MAX_LISTED_BUDGET_NODES)
            .collect(),
        cordoned_nodes: cordoned.into_iter().take(MAX_LISTED_BUDGET_NODES).collect(),
        admitted,
        queued_count: count(queued.len()),
        queued,
        open: windows.open,
        window_end: windows.closes.map(Time),
        next_open: windows.next_open.map(Time),
        conditions,
    }
}
