//! The mutating review of NodeMaintenance (SPEC 3.2 M1–M2) and [`apply_patch`], which applies
//! its patch the way kube-apiserver does, for the offline `review` command.

use std::cmp::Ordering;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use kube::core::admission::Operation;
use serde_json::Value;

use super::drain_plan::{canonical_drain_plan, drain_plan_order, missing_default_entries};
use crate::admission::{ReviewRequest, Verdict};
use crate::api::{DrainPlanEntry, NodeMaintenance, PodType, Stage};

/// Defaults a NodeMaintenance on CREATE, and on UPDATE restores a plan that M2 completes to the
/// stored one; every other operation is allowed untouched.
///
/// - M1: `spec.stage` defaults to `Idle`.
/// - M2: the twelve default drain plan entries that are missing are inserted and the plan is
///   sorted canonically (see [`super::drain_plan_order`]); a warning names what was added and
///   whether the user's entries were reordered.
/// - M2 on UPDATE: a `spec.drainPlan` that differs from the stored plan but completes to it is
///   replaced by it, silently. `drainPlan` is an atomic list, so a manifest with a partial plan
///   re-applied server-side (every GitOps sync) arrives as the partial plan; unchanged in
///   substance, it must not meet rule N4. A plan that completes to anything else is left for
///   N4 to deny.
///
/// # Guarantees
/// Never denies. The patch uses `add`, which replaces a member that already exists (RFC 6902
/// 4.1), so it applies whether or not the request carried the field. Mutating an already
/// mutated object yields no patch (reinvocation is harmless).
pub fn mutate_node_maintenance(req: &ReviewRequest<'_, NodeMaintenance>) -> Verdict {
    let mut verdict = Verdict::allow();
    match (&req.operation, req.object, req.old_object) {
        (Operation::Create, Some(nm), _) => {
            default_stage(nm, &mut verdict);
            default_drain_plan_entries(nm, &mut verdict);
        }
        (Operation::Update, Some(nm), Some(old)) => {
            restore_completed_plan(nm, old, &mut verdict);
        }
        _ => {}
    }
    verdict
}

/// Rule M2 on UPDATE: a plan that completes to the stored one is the stored one.
fn restore_completed_plan(nm: &NodeMaintenance, old: &NodeMaintenance, verdict: &mut Verdict) {
    let (given, stored) = (&nm.spec.drain_plan, &old.spec.drain_plan);
    if given == stored || &canonical_drain_plan(given) != stored {
        return;
    }
    if let Ok(value) = serde_json::to_value(stored) {
        verdict.patch.push(add(&["spec", "drainPlan"], value));
    }
}

/// Rule M1: `spec.stage` defaults to `Idle`.
fn default_stage(nm: &NodeMaintenance, verdict: &mut Verdict) {
    if nm.spec.stage.is_none() {
        verdict.patch.push(add(
            &["spec", "stage"],
            Value::String(Stage::Idle.as_str().into()),
        ));
    }
}

/// Rule M2: insert the missing default drain plan entries and sort the plan canonically.
fn default_drain_plan_entries(nm: &NodeMaintenance, verdict: &mut Verdict) {
    let given = &nm.spec.drain_plan;
    let canonical = canonical_drain_plan(given);
    if &canonical == given {
        return;
    }
    let value = match serde_json::to_value(&canonical) {
        Ok(value) => value,
        // Unreachable for these plain types; never block a create on it, validation still runs.
        Err(e) => {
            verdict.warn(format!(
                "spec.drainPlan: default entries were not added (rule M2): {e}"
            ));
            return;
        }
    };
    verdict.patch.push(add(&["spec", "drainPlan"], value));
    let added = missing_default_entries(given);
    if !added.is_empty() {
        verdict.warn(format!(
            "spec.drainPlan: added default entries {} (rule M2)",
            summarize(&added)
        ));
    }
    if given
        .windows(2)
        .any(|w| drain_plan_order(&w[0], &w[1]) == Ordering::Greater)
    {
        verdict.warn(
            "spec.drainPlan: entries reordered canonically (rule M2): podType Default, DaemonSet, Static, \
             then podPriority ascending, then entries with a podSelector first",
        );
    }
}

/// `Default/1000000000,2000000000; DaemonSet/...`: grouped by type so that the twelve defaults
/// fit the 256 characters kube-apiserver keeps of a warning.
fn summarize(entries: &[DrainPlanEntry]) -> String {
    PodType::ALL
        .iter()
        .filter_map(|&t| {
            let priorities: Vec<String> = entries
                .iter()
                .filter(|e| e.pod_type == t)
                .map(|e| e.pod_priority.to_string())
                .collect();
            (!priorities.is_empty()).then(|| format!("{t}/{}", priorities.join(",")))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn add(path: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path.iter().copied()),
        value,
    })
}

/// Applies a JSON patch to a NodeMaintenance, as kube-apiserver applies a mutating webhook's
/// patch, and decodes the result.
///
/// # Errors
/// A message when the object cannot be encoded, the patch does not apply, or the result is not
/// a NodeMaintenance.
pub fn apply_patch(
    obj: &NodeMaintenance,
    patch: &[PatchOperation],
) -> Result<NodeMaintenance, String> {
    let mut doc =
        serde_json::to_value(obj).map_err(|e| format!("cannot encode the NodeMaintenance: {e}"))?;
    json_patch::patch(&mut doc, patch).map_err(|e| format!("cannot apply the patch: {e}"))?;
    serde_json::from_value(doc)
        .map_err(|e| format!("the patched object is not a valid NodeMaintenance: {e}"))
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::admission::node_maintenance::default_drain_plan;
    use crate::admission::node_maintenance::fixtures::*;

    fn mutated(call: &Call) -> (Verdict, NodeMaintenance) {
        let verdict = call.mutate();
        let base = call.request().object.cloned().unwrap();
        let patched = apply_patch(&base, &verdict.patch).unwrap();
        (verdict, patched)
    }

    #[rstest]
    #[case::m1_stage_absent_defaults_to_idle(nm().no_stage(), Some(Stage::Idle), true)]
    #[case::m1_stage_given_is_kept(nm().stage(Stage::Drain), Some(Stage::Drain), false)]
    fn m1_default_stage(
        #[case] obj: NodeMaintenance,
        #[case] want: Option<Stage>,
        #[case] patched: bool,
    ) {
        let (verdict, out) = mutated(&create(obj));
        assert!(verdict.allowed());
        assert_eq!(out.spec.stage, want);
        assert_eq!(!verdict.patch.is_empty(), patched);
    }

    #[test]
    fn m2_empty_plan_gets_all_twelve_defaults() {
        let (verdict, out) = mutated(&create(nm().plan(&[])));
        assert_eq!(out.spec.drain_plan, default_drain_plan());
        assert_eq!(verdict.warnings.len(), 1, "{:?}", verdict.warnings);
        let w = &verdict.warnings[0];
        assert!(w.starts_with("spec.drainPlan: added default entries Default/1000000000,2000000000,2000001000,2147483647; DaemonSet/"), "{w}");
        assert!(
            w.contains("Static/1000000000") && w.contains("rule M2"),
            "{w}"
        );
        assert!(w.len() <= 256, "{} characters", w.len());
    }

    #[test]
    fn m2_complete_canonical_plan_is_left_alone() {
        let verdict = create(nm()).mutate();
        assert_eq!(verdict, Verdict::allow());
    }

    #[test]
    fn m2_user_entries_are_kept_and_sorted_and_only_missing_defaults_added() {
        let user = [
            entry(PodType::Static, 2_000_000_000),
            entry(PodType::Default, 5000).selector(&[("app", "db")]),
            entry(PodType::Default, 1_000_000_000),
            entry(PodType::Default, 5000),
        ];
        let (verdict, out) = mutated(&create(nm().plan(&user)));
        let plan = &out.spec.drain_plan;
        assert_eq!(plan.len(), 14);
        assert_eq!(
            plan[..3],
            [user[1].clone(), user[3].clone(), user[2].clone()]
        );
        assert_eq!(plan[3], entry(PodType::Default, 2_000_000_000));
        assert!(
            verdict.warnings[0].contains("Default/2000000000,2000001000,2147483647;"),
            "{:?}",
            verdict.warnings
        );
        assert!(
            verdict.warnings[0].contains("Static/1000000000,2000001000,2147483647"),
            "{:?}",
            verdict.warnings
        );
        assert!(
            verdict.warnings[1].contains("reordered"),
            "{:?}",
            verdict.warnings
        );
    }

    #[test]
    fn m2_sorted_user_entries_are_not_reported_as_reordered() {
        let (verdict, _) = mutated(&create(
            nm().plan(&[entry(PodType::Default, 5), entry(PodType::Static, 5)]),
        ));
        assert_eq!(verdict.warnings.len(), 1, "{:?}", verdict.warnings);
    }

    #[test]
    fn m2_mutation_is_idempotent() {
        let (_, once) = mutated(&create(
            nm().no_stage().plan(&[entry(PodType::DaemonSet, 7)]),
        ));
        assert_eq!(create(once).mutate(), Verdict::allow());
    }

    #[rstest]
    #[case::update(update(nm().no_stage().plan(&[]), nm().no_stage().plan(&[])))]
    #[case::delete(delete(nm().no_stage().plan(&[])))]
    fn mutation_only_on_create(#[case] call: Call) {
        assert_eq!(call.mutate(), Verdict::allow());
    }

    #[test]
    fn apply_patch_reports_a_patch_that_does_not_apply() {
        let bad = PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["spec", "missing", "deeper"]),
            value: Value::Null,
        });
        assert!(
            apply_patch(&nm(), &[bad])
                .unwrap_err()
                .contains("cannot apply the patch")
        );
        let wrong_type = add(&["spec", "stage"], Value::String("Sideways".into()));
        assert!(
            apply_patch(&nm(), &[wrong_type])
                .unwrap_err()
                .contains("not a valid NodeMaintenance")
        );
    }
}
