//! Admission of `MaintenanceBudget` writes (SPEC 6.1), and the warning a NodeMaintenance gets
//! when a budget will never admit it.
//!
//! Rules:
//! - MB1 `spec.nodeSelector`, if present, has a term and is well formed (as a NodeMaintenance's).
//! - MB2 `spec.maxUnavailable` is an integer of at least 1 or a percentage from 1% to 100%.
//! - MB3 each of `spec.windows` (at most 16) has a five-field cron `schedule` that fires, a
//!   positive `duration` of at most 31 days, and a known IANA `timeZone`.
//! - MB4 (warning) the budget selects no node.
//! - N7 (warning, on a NodeMaintenance entering Cordon or Drain) a budget selecting more of its
//!   nodes than the budget ever allows at once: the maintenance is `TooLarge` and will never be
//!   admitted.
//!
//! On UPDATE only the fields that changed are validated again, and status writes (the
//! controller's) are not validated, as for NodeMaintenance.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::core::admission::Operation;

use super::{ReviewRequest, Verdict};
use crate::api::{MAX_WINDOWS, MaintenanceBudget, MaintenanceBudgetSpec, NodeMaintenance};
use crate::cluster::{ClusterView, Lookup};
use crate::drain::admission::{BudgetInput, MaxUnavailable, QueueReason, parse_windows, too_large};
use crate::selector::{node_selector_matches, validate_node_selector};

/// Reviews one write of a MaintenanceBudget (rules MB1–MB4; the first violation is reported).
pub fn review_maintenance_budget(
    req: &ReviewRequest<'_, MaintenanceBudget>,
    view: &dyn ClusterView,
) -> Verdict {
    let Some(new) = req.object else {
        return Verdict::allow();
    };
    if req.is_status() {
        return Verdict::allow();
    }
    let old = match req.operation {
        Operation::Update => req.old_object.map(|o| &o.spec),
        _ => None,
    };
    let mut verdict = Verdict::allow();
    let spec = &new.spec;
    let results = [
        (old.is_none_or(|o| o.node_selector != spec.node_selector))
            .then(|| mb1_node_selector(spec)),
        (old.is_none_or(|o| o.max_unavailable != spec.max_unavailable))
            .then(|| mb2_max_unavailable(spec)),
        (old.is_none_or(|o| o.windows != spec.windows)).then(|| mb3_windows(spec)),
    ];
    for message in results.into_iter().flatten().filter_map(Result::err) {
        verdict.deny_if_allowed(message);
    }
    if verdict.allowed() && old.is_none_or(|o| o.node_selector != spec.node_selector) {
        mb4_selects_nodes(spec, view, &mut verdict);
    }
    verdict
}

/// MB1: a present node selector has a term and is well formed.
fn mb1_node_selector(spec: &MaintenanceBudgetSpec) -> Result<(), String> {
    let Some(selector) = &spec.node_selector else {
        return Ok(());
    };
    match validate_node_selector(selector, "spec.nodeSelector")
        .into_iter()
        .next()
    {
        Some(problem) => Err(format!(
            "{problem} (rule MB1); leave spec.nodeSelector out to select every node"
        )),
        None => Ok(()),
    }
}

/// MB2: `maxUnavailable` is at least one node.
fn mb2_max_unavailable(spec: &MaintenanceBudgetSpec) -> Result<(), String> {
    MaxUnavailable::parse(spec.max_unavailable.as_ref())
        .map(drop)
        .map_err(|e| format!("{e} (rule MB2)"))
}

/// MB3: every window parses and opens.
fn mb3_windows(spec: &MaintenanceBudgetSpec) -> Result<(), String> {
    if spec.windows.len() > MAX_WINDOWS {
        return Err(format!(
            "spec.windows: {} windows, at most {MAX_WINDOWS} (rule MB3)",
            spec.windows.len()
        ));
    }
    parse_windows(&spec.windows)
        .map(drop)
        .map_err(|e| format!("{e} (rule MB3)"))
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

fn labels(node: &Node) -> &BTreeMap<String, String> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&NONE)
}

/// B4 (warning): the budget selects no node.
fn mb4_selects_nodes(spec: &MaintenanceBudgetSpec, view: &dyn ClusterView, verdict: &mut Verdict) {
    let (Some(selector), Lookup::Found(nodes)) = (&spec.node_selector, view.nodes()) else {
        return;
    };
    if !nodes
        .iter()
        .any(|n| node_selector_matches(selector, node_name(n), labels(n)))
    {
        verdict.warn("spec.nodeSelector selects no node (rule MB4): the budget limits nothing until nodes match it");
    }
}

/// N7 (warnings): each budget that selects more of the maintenance's nodes than it ever allows
/// at once, so that the maintenance will never be admitted (`TooLarge`, SPEC 6.1).
pub fn warn_too_large(nm: &NodeMaintenance, view: &dyn ClusterView, verdict: &mut Verdict) {
    let (Lookup::Found(budgets), Lookup::Found(nodes)) = (view.maintenance_budgets(), view.nodes())
    else {
        return;
    };
    for (budget, selects, allowed) in too_large_under(nm, &budgets, &nodes) {
        verdict.warn(format!(
            "MaintenanceBudget {budget} allows {allowed} unavailable node{} at once and this maintenance selects {selects} of its nodes: it will never be admitted (rule N7); split it, for example with kubectl evictord rollout, or raise the budget",
            if allowed == 1 { "" } else { "s" }
        ));
    }
}

/// The budgets under which the maintenance is `TooLarge`: (budget, nodes it selects there,
/// nodes the budget allows).
pub fn too_large_under(
    nm: &NodeMaintenance,
    budgets: &[Arc<MaintenanceBudget>],
    nodes: &[Arc<Node>],
) -> Vec<(String, usize, usize)> {
    let selected: Vec<&Arc<Node>> = nodes
        .iter()
        .filter(|n| node_selector_matches(&nm.spec.node_selector, node_name(n), labels(n)))
        .collect();
    budgets
        .iter()
        .map(|b| BudgetInput::of(b))
        .filter_map(|b| {
            let rules = b.spec.as_ref().ok()?;
            let members = nodes
                .iter()
                .filter(|n| b.selects(node_name(n), labels(n)))
                .count();
            let selects = selected
                .iter()
                .filter(|n| b.selects(node_name(n), labels(n)))
                .count();
            match too_large(rules, members, selects)? {
                QueueReason::TooLarge { selects, allowed } => Some((b.name, selects, allowed)),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::api::{MaintenanceWindow, NodeMaintenanceSpec, Stage};
    use crate::cluster::StaticView;

    fn selector(key: &str, op: &str, values: &[&str]) -> NodeSelector {
        NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: key.into(),
                    operator: op.into(),
                    values: Some(values.iter().map(|v| v.to_string()).collect()),
                }]),
                match_fields: None,
            }],
        }
    }

    fn budget(spec: MaintenanceBudgetSpec) -> MaintenanceBudget {
        MaintenanceBudget::new("b", spec)
    }

    fn node(name: &str, pool: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some([("pool".to_string(), pool.to_string())].into());
        n
    }

    fn view() -> StaticView {
        let mut v = StaticView::with_objects(
            [],
            [node("a1", "a"), node("a2", "a"), node("a3", "a")],
            [],
            [],
        );
        v.maintenance_budgets = Some(vec![Arc::new(MaintenanceBudget::new(
            "pool-a",
            MaintenanceBudgetSpec {
                node_selector: Some(selector("pool", "In", &["a"])),
                max_unavailable: Some(IntOrString::Int(2)),
                windows: Vec::new(),
            },
        ))]);
        v
    }

    fn request<'a>(
        operation: Operation,
        new: Option<&'a MaintenanceBudget>,
        old: Option<&'a MaintenanceBudget>,
        sub_resource: Option<&'a str>,
        user: &'a k8s_openapi::api::authentication::v1::UserInfo,
    ) -> ReviewRequest<'a, MaintenanceBudget> {
        ReviewRequest {
            operation,
            sub_resource,
            namespace: None,
            name: "b",
            object: new,
            old_object: old,
            user,
            dry_run: false,
            now: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    fn review(obj: &MaintenanceBudget) -> Verdict {
        let user = Default::default();
        review_maintenance_budget(
            &request(Operation::Create, Some(obj), None, None, &user),
            &view(),
        )
    }

    fn window(schedule: &str, duration: &str, tz: Option<&str>) -> MaintenanceWindow {
        MaintenanceWindow {
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: tz.map(Into::into),
        }
    }

    #[rstest::rstest]
    #[case::mb1_allow(MaintenanceBudgetSpec { node_selector: Some(selector("pool", "In", &["a"])), ..Default::default() }, None)]
    #[case::mb1_allow_absent(MaintenanceBudgetSpec::default(), None)]
    #[case::mb1_deny(MaintenanceBudgetSpec { node_selector: Some(NodeSelector { node_selector_terms: vec![] }), ..Default::default() }, Some("rule MB1"))]
    #[case::mb1_deny_operator(MaintenanceBudgetSpec { node_selector: Some(selector("pool", "Near", &["a"])), ..Default::default() }, Some("rule MB1"))]
    #[case::mb2_allow_percent(MaintenanceBudgetSpec { max_unavailable: Some(IntOrString::String("25%".into())), ..Default::default() }, None)]
    #[case::mb2_deny_zero(MaintenanceBudgetSpec { max_unavailable: Some(IntOrString::Int(0)), ..Default::default() }, Some("spec.maxUnavailable: 0 is below 1; at least one node must be allowed (rule MB2)"))]
    #[case::mb2_deny_text(MaintenanceBudgetSpec { max_unavailable: Some(IntOrString::String("two".into())), ..Default::default() }, Some("rule MB2"))]
    #[case::mb3_allow(MaintenanceBudgetSpec { windows: vec![window("0 22 * * 1-5", "6h", Some("Europe/Berlin"))], ..Default::default() }, None)]
    #[case::mb3_deny_schedule(MaintenanceBudgetSpec { windows: vec![window("0 0 22 * * 1-5", "6h", None)], ..Default::default() }, Some("spec.windows[0].schedule: \"0 0 22 * * 1-5\" has 6 fields"))]
    #[case::mb3_deny_zone(MaintenanceBudgetSpec { windows: vec![window("0 22 * * *", "6h", Some("Berlin"))], ..Default::default() }, Some("spec.windows[0].timeZone"))]
    #[case::mb3_deny_duration(MaintenanceBudgetSpec { windows: vec![window("0 22 * * *", "forever", None)], ..Default::default() }, Some("spec.windows[0].duration"))]
    #[case::mb3_deny_many(MaintenanceBudgetSpec { windows: vec![window("0 22 * * *", "1h", None); 17], ..Default::default() }, Some("at most 16 (rule MB3)"))]
    fn budget_rules(#[case] spec: MaintenanceBudgetSpec, #[case] denial: Option<&str>) {
        let v = review(&budget(spec));
        match denial {
            None => assert!(v.allowed(), "{v:?}"),
            Some(part) => {
                let message = v.denied.unwrap_or_default();
                assert!(message.contains(part), "{message}");
            }
        }
    }

    #[test]
    fn mb4_warns_when_the_budget_selects_no_node() {
        let v = review(&budget(MaintenanceBudgetSpec {
            node_selector: Some(selector("pool", "In", &["gone"])),
            ..Default::default()
        }));
        assert!(v.allowed());
        assert!(v.warnings.iter().any(|w| w.contains("rule MB4")), "{v:?}");
        let v = review(&budget(MaintenanceBudgetSpec {
            node_selector: Some(selector("pool", "In", &["a"])),
            ..Default::default()
        }));
        assert!(v.warnings.is_empty(), "{v:?}");
    }

    #[test]
    fn updates_revalidate_what_changed_and_status_writes_pass() {
        // Stored before the rules (written while the webhook was down): a label change passes.
        let mut old = budget(MaintenanceBudgetSpec {
            max_unavailable: Some(IntOrString::Int(0)),
            ..Default::default()
        });
        let mut new = old.clone();
        new.metadata.labels = Some([("team".to_string(), "x".to_string())].into());
        let user = Default::default();
        let req = request(Operation::Update, Some(&new), Some(&old), None, &user);
        assert!(review_maintenance_budget(&req, &view()).allowed());
        old.spec.max_unavailable = Some(IntOrString::Int(1));
        let req = request(Operation::Update, Some(&new), Some(&old), None, &user);
        assert!(!review_maintenance_budget(&req, &view()).allowed());
        let req = request(
            Operation::Update,
            Some(&new),
            Some(&old),
            Some("status"),
            &user,
        );
        assert!(review_maintenance_budget(&req, &view()).allowed());
    }

    fn maintenance(nodes: &[&str]) -> NodeMaintenance {
        let terms = nodes
            .iter()
            .map(|n| NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: "In".into(),
                    values: Some(vec![n.to_string()]),
                }]),
            })
            .collect();
        NodeMaintenance::new(
            "m",
            NodeMaintenanceSpec {
                node_selector: NodeSelector {
                    node_selector_terms: terms,
                },
                stage: Some(Stage::Drain),
                ..Default::default()
            },
        )
    }

    #[rstest::rstest]
    #[case::n7_allow(&["a1", "a2"], false)]
    #[case::n7_warn(&["a1", "a2", "a3"], true)]
    fn n7_rows(#[case] nodes: &[&str], #[case] warns: bool) {
        let mut v = Verdict::allow();
        warn_too_large(&maintenance(nodes), &view(), &mut v);
        assert_eq!(!v.warnings.is_empty(), warns, "{v:?}");
        if warns {
            assert!(
                v.warnings[0].starts_with("MaintenanceBudget pool-a allows 2 unavailable nodes at once and this maintenance selects 3 of its nodes"),
                "{:?}",
                v.warnings
            );
        }
    }
}
