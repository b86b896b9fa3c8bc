//! Table tests of the validating review: every rule N1–N6 with allowing and denying (or, for
//! N5, warning and silent) rows, run through [`super::review_node_maintenance`].

use rstest::rstest;

use super::fixtures::*;
use crate::api::{PodType, Stage};
use crate::cluster::Authorization;

/// Nodes a and b, and the control-plane node cp; the user may delete every node.
fn three_nodes() -> TestView {
    cluster(vec![
        node("a").labels(&[("zone", "x")]),
        node("b"),
        node("cp").control_plane(),
    ])
}

fn plan_with(extra: &[crate::api::DrainPlanEntry]) -> Vec<crate::api::DrainPlanEntry> {
    super::canonical_drain_plan(extra)
}

#[rstest]
// N1
#[case::n1_node_selector_allowed(create(nm().select_nodes(&["a"])), three_nodes(), None, &[])]
#[case::n1_no_term_denied(create(nm().select_nodes(&[])), three_nodes(), Some("spec.nodeSelector.nodeSelectorTerms must have at least one term (rule N1)"), &[])]
#[case::n1_bad_expression_denied(create(nm().select_expr("zone", "In", &[])), three_nodes(), Some("spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values: must be non-empty"), &[])]
#[case::n1_pod_selector_allowed(create(nm().plan(&plan_with(&[entry(PodType::Default, 5).selector(&[("app", "db")])]))), three_nodes(), None, &[])]
#[case::n1_bad_pod_selector_denied(create(nm().plan(&plan_with(&[entry(PodType::Default, 5).bad_selector()]))), three_nodes(), Some("spec.drainPlan[0].podSelector.matchExpressions[0].operator"), &[])]
// N2
#[case::n2_reason_at_limit_allowed(create(nm().reason(&"r".repeat(1024))), three_nodes(), None, &[])]
#[case::n2_no_stage_is_idle_allowed(create(nm().no_stage()), three_nodes(), None, &[])]
#[case::n2_reason_too_long_denied(create(nm().reason(&"r".repeat(1025))), three_nodes(), Some("spec.reason is 1025 characters long, more than the 1024 allowed (rule N2)"), &[])]
// N3
#[case::n3_canonical_plan_allowed(create(nm().plan(&[entry(PodType::Default, -5), entry(PodType::Default, 5).selector(&[("app", "db")]), entry(PodType::Default, 5), entry(PodType::Static, 0)])), three_nodes(), None, &[])]
#[case::n3_type_out_of_order_denied(create(nm().plan(&[entry(PodType::DaemonSet, 5), entry(PodType::Default, 9)])), three_nodes(), Some("spec.drainPlan[0] (DaemonSet/5) must come after spec.drainPlan[1] (Default/9)"), &[])]
#[case::n3_selector_after_plain_denied(create(nm().plan(&[entry(PodType::Default, 5), entry(PodType::Default, 5).selector(&[("app", "db")])])), three_nodes(), Some("is not in canonical order (rule N3)"), &[])]
#[case::n3_duplicate_denied(create(nm().plan(&[entry(PodType::Default, 5), entry(PodType::Default, 5)])), three_nodes(), Some("spec.drainPlan[1] duplicates spec.drainPlan[0] (Default/5) (rule N3"), &[])]
#[case::n3_duplicate_selector_denied(create(nm().plan(&[entry(PodType::Default, 5).selector(&[("a", "b")]), entry(PodType::Default, 5).selector(&[("a", "b")])])), three_nodes(), Some("duplicates spec.drainPlan[0] (Default/5 (with podSelector))"), &[])]
// N4
#[case::n4_stage_forward_allowed(update(nm(), nm().stage(Stage::Drain)), three_nodes(), None, &[])]
#[case::n4_stage_skip_to_complete_allowed(update(nm().stage(Stage::Cordon), nm().stage(Stage::Complete)), three_nodes(), None, &[])]
#[case::n4_stage_backwards_denied(update(nm().stage(Stage::Drain), nm().stage(Stage::Cordon)), three_nodes(), Some("spec.stage may only move forward along Idle, Cordon, Drain, Complete (rule N4), not from Drain back to Cordon"), &[])]
#[case::n4_stage_removed_after_idle_denied(update(nm().stage(Stage::Cordon), nm().no_stage()), three_nodes(), Some("not from Cordon back to Idle"), &[])]
#[case::n4_plan_changed_denied(update(nm(), nm().plan(&plan_with(&[entry(PodType::Default, 5)]))), three_nodes(), Some("spec.drainPlan is immutable (rule N4)"), &[])]
#[case::n4_selector_change_while_idle_allowed(update(nm().select_nodes(&["a"]), nm().select_nodes(&["b"])), three_nodes(), None, &[])]
#[case::n4_selector_change_after_idle_denied(update(nm().stage(Stage::Cordon), nm().stage(Stage::Cordon).select_nodes(&["b"])), three_nodes(), Some("spec.nodeSelector is immutable once spec.stage has left Idle, and it is Cordon (rule N4)"), &[])]
#[case::n4_legacy_plan_ratchets_to_complete_allowed(update(nm().stage(Stage::Drain).plan(&[entry(PodType::Static, 1), entry(PodType::Static, 1)]), nm().stage(Stage::Complete).plan(&[entry(PodType::Static, 1), entry(PodType::Static, 1)])), three_nodes(), None, &[])]
#[case::n4_changed_selector_revalidated_denied(update(nm(), nm().select_expr("zone", "Near", &[])), three_nodes(), Some("(rule N1)"), &[])]
// N5
#[case::n5_some_nodes_silent(create(nm().select_nodes(&["a", "b"])), three_nodes(), None, &[])]
#[case::n5_every_node_warned(create(nm().select_nodes(&["a", "b", "cp"])), three_nodes(), None, &["spec.nodeSelector selects every node of the cluster (3) (rule N5): the cluster may get into a degraded and unrecoverable state", "selects control-plane nodes cp (rule N5)"])]
#[case::n5_no_node_warned(create(nm().select_nodes(&["gone"])), three_nodes(), None, &["spec.nodeSelector selects no node (rule N5)"])]
#[case::n5_control_plane_warned(create(nm().select_expr(crate::api::CONTROL_PLANE_LABEL, "Exists", &[])), three_nodes(), None, &["spec.nodeSelector selects control-plane nodes cp (rule N5)"])]
#[case::n5_unknown_nodes_warned(create(nm()), offline().cluster_wide(Authorization::Allowed), None, &["the nodes are unknown, so the checks for selecting every node, no node or control-plane nodes were skipped (rule N5)"])]
#[case::n5_stage_leaves_idle_warned(update(nm().select_nodes(&["gone"]), nm().select_nodes(&["gone"]).stage(Stage::Drain)), three_nodes(), None, &["selects no node (rule N5)"])]
#[case::n5_metadata_update_silent(update(nm().select_nodes(&["gone"]), nm().select_nodes(&["gone"])), three_nodes(), None, &[])]
#[case::n5_complete_silent(update(nm().select_nodes(&["gone"]).stage(Stage::Drain), nm().select_nodes(&["gone"]).stage(Stage::Complete)), three_nodes(), None, &[])]
// N6
#[case::n6_cluster_wide_allowed(create(nm().select_nodes(&["a", "b"])), three_nodes(), None, &[])]
#[case::n6_every_selected_node_allowed(create(nm().select_nodes(&["a", "b"])), three_nodes().may_delete_only(&["a", "b"]), None, &[])]
#[case::n6_create_denied(create(nm().select_nodes(&["a", "b", "zz"])), three_nodes().may_delete_only(&["a"]), Some("spec.nodeSelector: user \"alice\" may not delete nodes b selected by this NodeMaintenance, so may not create it (rule N6"), &[])]
#[case::n6_no_selected_node_allowed(create(nm().select_nodes(&["gone"])), three_nodes().may_delete_only(&[]), None, &["selects no node"])]
#[case::n6_update_denied(update(nm().select_nodes(&["a"]), nm().select_nodes(&["a"]).stage(Stage::Cordon)), three_nodes().may_delete_only(&[]), Some("may not delete nodes a selected by this NodeMaintenance, so may not update it"), &[])]
#[case::n6_update_releasing_nodes_denied(update(nm().select_nodes(&["b"]), nm().select_nodes(&["a"])), three_nodes().may_delete_only(&["a"]), Some("may not delete nodes b"), &[])]
#[case::n6_delete_denied(delete(nm().select_nodes(&["a", "b"])), three_nodes().may_delete_only(&["b"]), Some("may not delete nodes a selected by this NodeMaintenance, so may not delete it (rule N6"), &[])]
#[case::n6_delete_allowed(delete(nm().select_nodes(&["a", "b"])), three_nodes().may_delete_only(&["a", "b"]), None, &[])]
#[case::n6_metadata_update_allowed(update(nm().stage(Stage::Cordon), nm().stage(Stage::Cordon).labelled()), three_nodes().may_delete_only(&[]), None, &[])]
#[case::n6_controller_completes_deleting_allowed(update(nm().stage(Stage::Drain).deleting(), nm().stage(Stage::Complete).deleting()), three_nodes().may_delete_only(&[]), None, &[])]
#[case::n6_status_write_allowed(update(nm(), nm()).status(), three_nodes().may_delete_only(&[]), None, &[])]
#[case::n6_skipped_warned(create(nm()), three_nodes().cluster_wide(Authorization::Skipped("offline".into())), None, &["permission to delete the selected nodes was not checked (rule N6): offline"])]
#[case::n6_unknown_nodes_warned(create(nm()), offline().cluster_wide(Authorization::Denied("no".into())), None, &["skipped (rule N5)", "the nodes are unknown, so permission to delete the selected nodes was not checked (rule N6)"])]
// N8, N9 (SPEC 6.2)
#[case::n8_deadline_allowed(create(nm().deadline(60)), three_nodes(), None, &[])]
#[case::n8_deadline_too_short_denied(create(nm().deadline(59)), three_nodes(), Some("spec.drainDeadlineSeconds: 59 is below 60 (rule N8)"), &[])]
#[case::n8_deadline_extended_while_draining_allowed(update(nm().stage(Stage::Drain).deadline(600), nm().stage(Stage::Drain).deadline(3600)), three_nodes(), None, &[])]
#[case::n8_deadline_shortened_below_a_minute_denied(update(nm().stage(Stage::Drain).deadline(600), nm().stage(Stage::Drain).deadline(10)), three_nodes(), Some("(rule N8)"), &[])]
#[case::n9_rules_allowed(create(nm().pod_rule(Some(("team", "batch")), crate::api::DrainBehavior::WaitCompleted)), three_nodes(), None, &[])]
#[case::n9_bad_selector_denied(create(nm().pod_rule(Some(("bad key!", "x")), crate::api::DrainBehavior::Skip)), three_nodes(), Some("spec.podRules[0].podSelector.matchLabels: key \"bad key!\""), &[])]
fn review_rows(
    #[case] call: Call,
    #[case] view: TestView,
    #[case] denied: Option<&str>,
    #[case] warnings: &[&str],
) {
    let verdict = call.review(&view);
    match (denied, &verdict.denied) {
        (None, None) => {}
        (Some(want), Some(got)) => assert!(got.contains(want), "denial {got:?} lacks {want:?}"),
        (want, got) => panic!("want denial {want:?}, got {got:?}"),
    }
    assert_eq!(
        verdict.warnings.len(),
        warnings.len(),
        "warnings {:?}",
        verdict.warnings
    );
    for want in warnings {
        assert!(
            verdict.warnings.iter().any(|w| w.contains(want)),
            "no warning contains {want:?}: {:?}",
            verdict.warnings
        );
    }
    assert!(verdict.patch.is_empty());
}

#[test]
fn n6_per_node_checks_only_after_the_cluster_wide_check_is_denied() {
    let view = three_nodes();
    assert!(
        create(nm().select_nodes(&["a", "b"]))
            .review(&view)
            .allowed()
    );
    assert!(view.asked_nodes().is_empty());
    let view = three_nodes().may_delete_only(&["a", "b"]);
    assert!(
        create(nm().select_nodes(&["a", "b"]))
            .review(&view)
            .allowed()
    );
    assert_eq!(view.asked_nodes(), ["a", "b"]);
}

#[test]
fn n6_not_asked_when_a_rule_already_denied() {
    let view = three_nodes();
    assert!(!create(nm().select_nodes(&[])).review(&view).allowed());
    assert!(view.asked.lock().unwrap().is_empty());
}

#[test]
fn mutate_then_validate_accepts_a_user_plan() {
    let user = [
        entry(PodType::Static, 5),
        entry(PodType::Default, 5),
        entry(PodType::Default, 5).selector(&[("a", "b")]),
    ];
    let call = create(nm().no_stage().plan(&user));
    let mutation = call.mutate();
    let patched = super::apply_patch(call.request().object.unwrap(), &mutation.patch).unwrap();
    assert_eq!(patched.spec.stage, Some(Stage::Idle));
    assert_eq!(
        create(patched).review(&three_nodes()),
        crate::admission::Verdict::allow()
    );
}

#[test]
fn missing_object_is_denied() {
    let mut call = create(nm());
    let req = crate::admission::ReviewRequest {
        object: None,
        ..call.request()
    };
    let verdict = super::review_node_maintenance(
        &req,
        &three_nodes(),
        &crate::admission::Settings::default(),
    );
    assert!(verdict.denied.unwrap().contains("carries no object"));
    call = delete(nm());
    assert!(call.review(&three_nodes()).allowed());
}

/// M2 on UPDATE, then N4, as kube-apiserver runs them: the stored object was created with
/// `plan_with(user)`; `applied` is the plan the update carries (a server-side apply of the
/// manifest's partial plan arrives as that partial plan: `drainPlan` is an atomic list).
#[rstest]
#[case::same_partial_plan_reapplied_allowed(&[entry(PodType::Default, 5)], &[entry(PodType::Default, 5)], true, None)]
#[case::partial_plan_reordered_allowed(&[entry(PodType::Static, 5), entry(PodType::Default, 5)], &[entry(PodType::Default, 5), entry(PodType::Static, 5)], true, None)]
#[case::empty_plan_reapplied_allowed(&[], &[], true, None)]
#[case::completed_plan_sent_back_unchanged_allowed(&[entry(PodType::Default, 5)], &plan_with(&[entry(PodType::Default, 5)]), false, None)]
#[case::other_partial_plan_denied(&[entry(PodType::Default, 5)], &[entry(PodType::Default, 6)], false, Some("spec.drainPlan is immutable (rule N4)"))]
#[case::entry_dropped_denied(&[entry(PodType::Default, 5), entry(PodType::Default, 6)], &[entry(PodType::Default, 5)], false, Some("spec.drainPlan is immutable (rule N4)"))]
fn m2_on_update_restores_a_reapplied_partial_plan(
    #[case] user: &[crate::api::DrainPlanEntry],
    #[case] applied: &[crate::api::DrainPlanEntry],
    #[case] patched: bool,
    #[case] denied: Option<&str>,
) {
    let stored = nm().stage(Stage::Drain).plan(&plan_with(user));
    let call = update(stored.clone(), nm().stage(Stage::Drain).plan(applied));
    let mutation = call.mutate();
    assert!(
        mutation.allowed() && mutation.warnings.is_empty(),
        "{mutation:?}"
    );
    assert_eq!(!mutation.patch.is_empty(), patched, "patched");
    let object = super::apply_patch(call.request().object.unwrap(), &mutation.patch).unwrap();
    let verdict = update(stored, object).review(&three_nodes());
    match denied {
        None => assert!(verdict.allowed(), "{verdict:?}"),
        Some(m) => assert!(
            verdict.denied.as_deref().unwrap_or_default().contains(m),
            "{verdict:?}"
        ),
    }
}
