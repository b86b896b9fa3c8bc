//! Admission of NodeMaintenance (SPEC 3.2): the mutating review (M1–M2: default stage, default
//! drain plan entries in canonical order) and the validating review (N1–N6).
//!
//! Rules, and where they live:
//! - M1 `spec.stage` defaults to `Idle` — `mutate`.
//! - M2 the twelve default drain plan entries are inserted, the plan sorted — `mutate`.
//! - N1 `spec.nodeSelector` has a term and is well formed; so are the podSelectors — `spec_rules`.
//! - N2 `spec.stage` is valid (by decoding), `spec.reason` ≤ 1024 characters — `spec_rules`.
//! - N3 `spec.drainPlan` is canonically ordered, without duplicates — `drain_plan`. Priorities
//!   may be negative: PriorityClass values are any int32 up to one billion, so a plan may well
//!   start below zero.
//! - N4 UPDATE: plan immutable; selector immutable once not Idle; stage forward only —
//!   `spec_rules`.
//! - N5 warnings: the selector matches every node, no node, control-plane nodes — `nodes`.
//! - N6 the user may delete every selected node (on UPDATE: of the new and, if it changed, the
//!   old selector) — `nodes`. Only writes that can change what happens to nodes are checked:
//!   see [`needs_node_authorization`].
//! - N8 `spec.drainDeadlineSeconds`, when set, is at least 60 — `spec_rules` (SPEC 6.2).
//! - N9 at most 32 `spec.podRules`, their selectors well formed — `spec_rules` (SPEC 6.2).
//! - N7 warning: a MaintenanceBudget selects more of its nodes than it ever allows at once, so
//!   the maintenance will never be admitted (`TooLarge`, SPEC 6.1) — repeated with N5, see
//!   [`maintenance_budget`](super::maintenance_budget).
//!
//! On UPDATE only the fields that changed are validated again (ratcheting, as kube-apiserver
//! does for CRD schemas): an object admitted under older rules can still be moved to Complete
//! and have its finalizer removed. Writes of the `status` sub-resource carry the old spec, so
//! they pass the spec rules unchanged, and they are not subject to N5 or N6. N5 warnings are
//! repeated on UPDATE only when the selector or the stage changes (except to Complete).

mod drain_plan;
#[cfg(test)]
mod fixtures;
mod mutate;
mod nodes;
mod spec_rules;
#[cfg(test)]
mod tests;

pub use drain_plan::{
    DEFAULT_DRAIN_PRIORITIES, canonical_drain_plan, default_drain_plan, drain_plan_order,
    missing_default_entries,
};
pub use mutate::{apply_patch, mutate_node_maintenance};
pub use nodes::{matched_nodes, needs_node_authorization, node_access_checks};

use kube::core::admission::Operation;

use crate::admission::maintenance_budget::warn_too_large;
use crate::admission::{ReviewRequest, Settings, Verdict};
use crate::api::{NodeMaintenance, NodeMaintenanceSpec, Stage};
use crate::cluster::ClusterView;

/// Validates a create, update or delete of a NodeMaintenance (rules N1–N6, see the module
/// docs). `settings` is not used by these rules yet; it is taken so that every review has the
/// same shape.
///
/// # Guarantees
/// The first violated rule denies (N4 before N1–N3 on UPDATE, so that a changed plan is
/// reported as immutable rather than as misordered); a denied request gets no N5 warnings and no
/// authorization checks. Warnings never deny. Lookups the view
/// cannot answer and authorization it skipped only warn. A request without the object its
/// operation needs is denied.
pub fn review_node_maintenance(
    req: &ReviewRequest<'_, NodeMaintenance>,
    view: &dyn ClusterView,
    _settings: &Settings,
) -> Verdict {
    let mut verdict = Verdict::allow();
    match (&req.operation, req.old_object, req.object) {
        (Operation::Create, _, Some(new)) => {
            check_new_spec(&new.spec, &mut verdict);
            if verdict.allowed() {
                nodes::warn_about_selected_nodes(&new.spec.node_selector, view, &mut verdict);
                warn_too_large(new, view, &mut verdict);
            }
        }
        (Operation::Update, Some(old), Some(new)) => {
            check_update(&old.spec, &new.spec, &mut verdict);
            if verdict.allowed()
                && !req.is_status()
                && selection_worth_warning(&old.spec, &new.spec)
            {
                nodes::warn_about_selected_nodes(&new.spec.node_selector, view, &mut verdict);
                warn_too_large(new, view, &mut verdict);
            }
        }
        (Operation::Delete, Some(_), _) => {}
        (Operation::Connect, _, _) => return verdict,
        (op, _, _) => {
            return Verdict::deny(format!(
                "the admission request for {op:?} carries no object to review; this is a bug in the caller"
            ));
        }
    }
    if verdict.allowed() && needs_node_authorization(req) {
        nodes::authorize_node_deletion(req, view, &mut verdict);
    }
    verdict
}

/// Rules N1–N3 on a new object.
fn check_new_spec(spec: &NodeMaintenanceSpec, verdict: &mut Verdict) {
    let results = [
        spec_rules::check_node_selector(spec),
        spec_rules::check_pod_selectors(&spec.drain_plan),
        spec_rules::check_reason(spec),
        drain_plan::check_canonical_order(&spec.drain_plan),
        drain_plan::check_no_duplicates(&spec.drain_plan),
        spec_rules::check_drain_deadline(spec),
        spec_rules::check_pod_rules(spec),
    ];
    deny_first(results, verdict);
}

/// Rule N4, then N1–N3 on the fields that changed.
fn check_update(old: &NodeMaintenanceSpec, new: &NodeMaintenanceSpec, verdict: &mut Verdict) {
    if old == new {
        return;
    }
    deny_first(
        [
            spec_rules::check_drain_plan_unchanged(old, new),
            spec_rules::check_node_selector_unchanged(old, new),
            spec_rules::check_stage_forward(old, new),
        ],
        verdict,
    );
    if old.node_selector != new.node_selector {
        deny_first([spec_rules::check_node_selector(new)], verdict);
    }
    if old.reason != new.reason {
        deny_first([spec_rules::check_reason(new)], verdict);
    }
    if old.drain_deadline_seconds != new.drain_deadline_seconds {
        deny_first([spec_rules::check_drain_deadline(new)], verdict);
    }
    if old.pod_rules != new.pod_rules {
        deny_first([spec_rules::check_pod_rules(new)], verdict);
    }
}

/// N5 is repeated on UPDATE when what the maintenance does to the selected nodes changes: a new
/// selector, or a new stage other than Complete (which releases the nodes).
fn selection_worth_warning(old: &NodeMaintenanceSpec, new: &NodeMaintenanceSpec) -> bool {
    let changed = old.node_selector != new.node_selector || old.stage() != new.stage();
    changed && new.stage() != Stage::Complete
}

fn deny_first<const N: usize>(results: [Result<(), String>; N], verdict: &mut Verdict) {
    for message in results.into_iter().filter_map(Result::err) {
        verdict.deny_if_allowed(message);
    }
}
