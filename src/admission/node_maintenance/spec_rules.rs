//! The rules on a NodeMaintenance's spec alone: N1 (selectors well formed), N2 (reason length),
//! N4 (what an update may change), N8 (the drain deadline) and N9 (the pod drain rules). N3 lives
//! with the drain plan order in `drain_plan`.

use crate::api::{DrainPlanEntry, MAX_REASON_CHARS, NodeMaintenanceSpec, Stage};
use crate::selector::{validate_label_selector, validate_node_selector};

/// Rule N1, nodes: `spec.nodeSelector` has at least one term and every term and expression is
/// well formed.
///
/// # Errors
/// Every problem found, each naming its field path.
pub(super) fn check_node_selector(spec: &NodeMaintenanceSpec) -> Result<(), String> {
    let errors = validate_node_selector(&spec.node_selector, "spec.nodeSelector");
    if errors.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} (rule N1); select the nodes with at least one term of well-formed matchExpressions or matchFields",
        errors.join("; ")
    ))
}

/// Rule N1, pods: every `spec.drainPlan[].podSelector` is a well-formed label selector.
///
/// # Errors
/// Every problem found, each naming its field path.
pub(super) fn check_pod_selectors(plan: &[DrainPlanEntry]) -> Result<(), String> {
    let errors: Vec<String> = plan
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e.pod_selector.as_ref()?)))
        .flat_map(|(i, s)| validate_label_selector(s, &format!("spec.drainPlan[{i}].podSelector")))
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} (rule N1); fix the podSelector",
        errors.join("; ")
    ))
}

/// Rule N2: `spec.reason` is at most 1024 characters (Unicode scalar values, not bytes).
///
/// The other half of N2, a valid `spec.stage`, holds by construction: [`Stage`] is an enum, so a
/// request with an unknown stage cannot be decoded (and the CRD schema rejects it before any
/// validating webhook is called). A missing stage means `Idle`.
///
/// # Errors
/// The length found and the limit.
pub(super) fn check_reason(spec: &NodeMaintenanceSpec) -> Result<(), String> {
    let chars = spec.reason.as_deref().map_or(0, |r| r.chars().count());
    if chars <= MAX_REASON_CHARS {
        return Ok(());
    }
    Err(format!(
        "spec.reason is {chars} characters long, more than the {MAX_REASON_CHARS} allowed (rule N2); shorten it"
    ))
}

/// Rule N4, plan: `spec.drainPlan` never changes after creation.
///
/// # Errors
/// A message saying so and what to do instead.
pub(super) fn check_drain_plan_unchanged(
    old: &NodeMaintenanceSpec,
    new: &NodeMaintenanceSpec,
) -> Result<(), String> {
    if old.drain_plan == new.drain_plan {
        return Ok(());
    }
    Err("spec.drainPlan is immutable (rule N4); create a new NodeMaintenance to use a different plan".into())
}

/// Rule N4, nodes: `spec.nodeSelector` never changes once the (old) stage has left `Idle`.
///
/// # Errors
/// A message naming the stage and what to do instead.
pub(super) fn check_node_selector_unchanged(
    old: &NodeMaintenanceSpec,
    new: &NodeMaintenanceSpec,
) -> Result<(), String> {
    let stage = old.stage();
    if stage == Stage::Idle || old.node_selector == new.node_selector {
        return Ok(());
    }
    Err(format!(
        "spec.nodeSelector is immutable once spec.stage has left Idle, and it is {stage} (rule N4); \
         create another NodeMaintenance for other nodes"
    ))
}

/// Rule N4, stage: the stage moves only forward along Idle → Cordon → Drain → Complete;
/// skipping forward is allowed, staying is allowed.
///
/// # Errors
/// A message naming both stages and the way to end a maintenance.
pub(super) fn check_stage_forward(
    old: &NodeMaintenanceSpec,
    new: &NodeMaintenanceSpec,
) -> Result<(), String> {
    let (from, to) = (old.stage(), new.stage());
    if to >= from {
        return Ok(());
    }
    Err(format!(
        "spec.stage may only move forward along Idle, Cordon, Drain, Complete (rule N4), not from {from} back to {to}; \
         to end the maintenance set Complete or delete it"
    ))
}

/// Rule N8: `spec.drainDeadlineSeconds`, when set, is at least 60 (SPEC 6.2).
///
/// # Errors
/// A deadline below a minute.
pub(super) fn check_drain_deadline(spec: &NodeMaintenanceSpec) -> Result<(), String> {
    match spec.drain_deadline_seconds {
        Some(s) if s < MIN_DRAIN_DEADLINE_SECONDS => Err(format!(
            "spec.drainDeadlineSeconds: {s} is below {MIN_DRAIN_DEADLINE_SECONDS} (rule N8); give a node at least a minute to drain, or leave the field out for no deadline"
        )),
        _ => Ok(()),
    }
}

/// The shortest drain deadline (SPEC 6.2).
pub const MIN_DRAIN_DEADLINE_SECONDS: i64 = 60;
/// At most this many pod drain rules.
pub const MAX_POD_RULES: usize = 32;

/// Rule N9: at most 32 `spec.podRules`, each selector well formed (SPEC 6.2).
///
/// # Errors
/// Every problem found, each naming its field path.
pub(super) fn check_pod_rules(spec: &NodeMaintenanceSpec) -> Result<(), String> {
    if spec.pod_rules.len() > MAX_POD_RULES {
        return Err(format!(
            "spec.podRules: {} rules, at most {MAX_POD_RULES} (rule N9)",
            spec.pod_rules.len()
        ));
    }
    let errors: Vec<String> = spec
        .pod_rules
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            let ns = r.namespace_selector.iter().flat_map(move |s| {
                validate_label_selector(s, &format!("spec.podRules[{i}].namespaceSelector"))
            });
            let pods = r.pod_selector.iter().flat_map(move |s| {
                validate_label_selector(s, &format!("spec.podRules[{i}].podSelector"))
            });
            ns.chain(pods).collect::<Vec<_>>()
        })
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    Err(format!("{} (rule N9); fix the selector", errors.join("; ")))
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::admission::node_maintenance::fixtures::*;
    use crate::api::{NodeMaintenance, PodType};

    #[rstest]
    #[case::idle_to_drain(Stage::Idle, Some(Stage::Drain), true)]
    #[case::cordon_to_complete(Stage::Cordon, Some(Stage::Complete), true)]
    #[case::drain_stays(Stage::Drain, Some(Stage::Drain), true)]
    #[case::drain_to_cordon(Stage::Drain, Some(Stage::Cordon), false)]
    #[case::complete_to_idle(Stage::Complete, Some(Stage::Idle), false)]
    #[case::cordon_to_unset_is_idle(Stage::Cordon, None, false)]
    fn stage_moves(#[case] from: Stage, #[case] to: Option<Stage>, #[case] ok: bool) {
        let old = nm().stage(from).spec;
        let mut new = old.clone();
        new.stage = to;
        assert_eq!(check_stage_forward(&old, &new).is_ok(), ok);
    }

    #[test]
    fn reason_counts_characters_not_bytes() {
        let at_limit: NodeMaintenance = nm().reason(&"é".repeat(MAX_REASON_CHARS));
        assert!(check_reason(&at_limit.spec).is_ok());
        let over = nm().reason(&"e".repeat(MAX_REASON_CHARS + 1));
        assert!(
            check_reason(&over.spec)
                .unwrap_err()
                .contains("1025 characters")
        );
    }

    #[test]
    fn pod_selector_problems_name_the_entry() {
        let plan = [
            entry(PodType::Default, 1),
            entry(PodType::Default, 2).bad_selector(),
        ];
        let err = check_pod_selectors(&plan).unwrap_err();
        assert!(
            err.starts_with("spec.drainPlan[1].podSelector.matchExpressions[0].operator"),
            "{err}"
        );
    }
}
