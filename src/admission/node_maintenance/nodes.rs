//! The rules of a NodeMaintenance that concern the nodes it selects: N5 (warnings about what
//! the selector matches) and N6 (the user must be allowed to delete every selected node).

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSelector};
use kube::core::admission::Operation;

use crate::admission::{ReviewRequest, Verdict};
use crate::api::{CONTROL_PLANE_LABEL, NodeMaintenance};
use crate::cluster::{AccessCheck, Authorization, ClusterView, Lookup};
use crate::selector::node_selector_matches;

/// Node names listed in one message at most; the rest are counted.
const MAX_LISTED_NODES: usize = 10;

/// The nodes the selector matches, in the order given.
pub fn matched_nodes(selector: &NodeSelector, nodes: &[Arc<Node>]) -> Vec<Arc<Node>> {
    static NO_LABELS: std::collections::BTreeMap<String, String> =
        std::collections::BTreeMap::new();
    nodes
        .iter()
        .filter(|n| {
            let labels = n.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
            node_selector_matches(selector, node_name(n), labels)
        })
        .cloned()
        .collect()
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

fn is_control_plane(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))
}

/// `a, b, c and 4 more`.
fn list_names<S: AsRef<str>>(names: &[S]) -> String {
    let shown: Vec<&str> = names
        .iter()
        .take(MAX_LISTED_NODES)
        .map(AsRef::as_ref)
        .collect();
    match names.len().saturating_sub(MAX_LISTED_NODES) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// Rule N5 (warnings only): the selector matches every node ("the cluster may get into a
/// degraded and unrecoverable state", KEP-4212), no node, or control-plane nodes. When the view
/// does not know the nodes, one warning says the checks were skipped.
pub(super) fn warn_about_selected_nodes(
    selector: &NodeSelector,
    view: &dyn ClusterView,
    verdict: &mut Verdict,
) {
    let Lookup::Found(nodes) = view.nodes() else {
        verdict.warn("spec.nodeSelector: the nodes are unknown, so the checks for selecting every node, no node or control-plane nodes were skipped (rule N5)");
        return;
    };
    let matched = matched_nodes(selector, &nodes);
    if matched.is_empty() {
        verdict.warn("spec.nodeSelector selects no node (rule N5); check the selector if this is not intended");
        return;
    }
    if matched.len() == nodes.len() {
        verdict.warn(format!(
            "spec.nodeSelector selects every node of the cluster ({}) (rule N5): the cluster may get into a degraded and unrecoverable state",
            nodes.len()
        ));
    }
    let control_plane: Vec<&str> = matched
        .iter()
        .filter(|n| is_control_plane(n))
        .map(|n| node_name(n))
        .collect();
    if !control_plane.is_empty() {
        verdict.warn(format!(
            "spec.nodeSelector selects control-plane nodes {} (rule N5): cordoning or draining them may leave the cluster unmanageable",
            list_names(&control_plane)
        ));
    }
}

/// True when the request is subject to rule N6: every CREATE and DELETE, and every UPDATE that
/// changes the spec of a maintenance not being deleted — that is, every write that decides
/// which nodes are cordoned and drained, or when.
///
/// Not subject, because they cannot change what happens to any node: writes of the `status`
/// sub-resource; UPDATEs that change only metadata (labels, the finalizer the controller adds
/// when the stage leaves Idle); and UPDATEs of a maintenance whose deletion has started, which
/// the deleting user was already authorized for — there N4 leaves only the move to Complete and
/// the removal of the finalizer, both done by the controller, whose service account is not
/// allowed to delete nodes.
pub fn needs_node_authorization(req: &ReviewRequest<'_, NodeMaintenance>) -> bool {
    if req.is_status() {
        return false;
    }
    match (&req.operation, req.old_object, req.object) {
        (Operation::Create | Operation::Delete, _, _) => true,
        (Operation::Update, Some(old), Some(new)) => {
            old.metadata.deletion_timestamp.is_none() && old.spec != new.spec
        }
        (Operation::Update, _, _) => true,
        (Operation::Connect, _, _) => false,
    }
}

/// The selectors whose nodes the user must be allowed to delete: the new object's on CREATE,
/// the old object's on DELETE, and on UPDATE the new one's plus the old one's when the selector
/// changed (releasing nodes from a maintenance uncordons them, which needs the same right).
fn authorized_selectors<'a>(req: &ReviewRequest<'a, NodeMaintenance>) -> Vec<&'a NodeSelector> {
    let new = req.object.map(|o| &o.spec.node_selector);
    let old = req.old_object.map(|o| &o.spec.node_selector);
    match req.operation {
        Operation::Create => new.into_iter().collect(),
        Operation::Delete => old.into_iter().collect(),
        Operation::Update => match (new, old) {
            (Some(n), Some(o)) if n != o => vec![n, o],
            (n, o) => n.or(o).into_iter().collect(),
        },
        Operation::Connect => Vec::new(),
    }
}

/// Rule N6's access checks: the cluster-wide `delete nodes` check, and one `delete` check per
/// node the maintenance selects (empty when the view does not know the nodes). The server asks
/// the first and, only if it is denied, the others, before calling the review.
pub fn node_access_checks<'a>(
    req: &ReviewRequest<'a, NodeMaintenance>,
    view: &dyn ClusterView,
) -> (AccessCheck<'a>, Vec<AccessCheck<'a>>) {
    let check = |name: Option<String>| AccessCheck {
        user: Cow::Borrowed(req.user),
        verb: "delete",
        group: "",
        resource: "nodes",
        namespace: None,
        name: name.map(Cow::Owned),
    };
    let per_node = match view.nodes() {
        Lookup::Found(nodes) => selected_node_names(&authorized_selectors(req), &nodes)
            .into_iter()
            .map(|n| check(Some(n)))
            .collect(),
        Lookup::Missing | Lookup::Unknown => Vec::new(),
    };
    (check(None), per_node)
}

/// Names of the nodes any of the selectors match, each once, in the view's order.
fn selected_node_names(selectors: &[&NodeSelector], nodes: &[Arc<Node>]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for selector in selectors {
        for node in matched_nodes(selector, nodes) {
            let name = node_name(&node);
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// Rule N6: whoever creates, updates or deletes a NodeMaintenance must be allowed to delete
/// every node it selects. One cluster-wide check first; per-node checks only if it is denied.
/// Checks the authorizer skipped, or that cannot be made because the nodes are unknown, warn.
pub(super) fn authorize_node_deletion(
    req: &ReviewRequest<'_, NodeMaintenance>,
    view: &dyn ClusterView,
    verdict: &mut Verdict,
) {
    let (cluster_wide, per_node) = node_access_checks(req, view);
    match view.authorize(&cluster_wide) {
        Authorization::Allowed => return,
        Authorization::Skipped(why) => {
            verdict.warn(format!("spec.nodeSelector: permission to delete the selected nodes was not checked (rule N6): {why}"));
            return;
        }
        Authorization::Denied(_) => {}
    }
    if !matches!(view.nodes(), Lookup::Found(_)) {
        verdict.warn("spec.nodeSelector: the user may not delete every node and the nodes are unknown, so permission to delete the selected nodes was not checked (rule N6)");
        return;
    }
    let mut denied = Vec::new();
    let mut skipped = Vec::new();
    for check in &per_node {
        let name = check.name.as_deref().unwrap_or_default().to_string();
        match view.authorize(check) {
            Authorization::Allowed => {}
            Authorization::Denied(_) => denied.push(name),
            Authorization::Skipped(why) => skipped.push((name, why)),
        }
    }
    if !denied.is_empty() {
        verdict.deny_if_allowed(denial(req, &denied));
    }
    if let Some((_, why)) = skipped.first() {
        let names: Vec<&str> = skipped.iter().map(|(n, _)| n.as_str()).collect();
        verdict.warn(format!(
            "spec.nodeSelector: permission to delete nodes {} was not checked (rule N6): {why}",
            list_names(&names)
        ));
    }
}

fn denial(req: &ReviewRequest<'_, NodeMaintenance>, nodes: &[String]) -> String {
    let user = req.user.username.as_deref().unwrap_or("<unknown>");
    let (verb, advice) = match req.operation {
        Operation::Delete => (
            "delete",
            "ask someone who may delete these nodes to delete this NodeMaintenance",
        ),
        Operation::Update => (
            "update",
            "ask for permission to delete these nodes, or leave them out of spec.nodeSelector",
        ),
        _ => (
            "create",
            "ask for permission to delete these nodes, or leave them out of spec.nodeSelector",
        ),
    };
    format!(
        "spec.nodeSelector: user {user:?} may not delete nodes {} selected by this NodeMaintenance, so may not {verb} it \
         (rule N6: whoever creates, updates or deletes a NodeMaintenance must be allowed to delete every node it selects); {advice}",
        list_names(nodes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::node_maintenance::fixtures::*;
    use crate::api::Stage;

    fn arcs(nodes: Vec<Node>) -> Vec<Arc<Node>> {
        nodes.into_iter().map(Arc::new).collect()
    }

    #[test]
    fn matched_nodes_by_name_and_label() {
        let nodes = arcs(vec![
            node("a").labels(&[("zone", "x")]),
            node("b"),
            node("c").labels(&[("zone", "x")]),
        ]);
        let by_label = matched_nodes(
            &nm().select_expr("zone", "In", &["x"]).spec.node_selector,
            &nodes,
        );
        assert_eq!(
            by_label.iter().map(|n| node_name(n)).collect::<Vec<_>>(),
            ["a", "c"]
        );
        let by_name = matched_nodes(&nm().select_nodes(&["b", "zz"]).spec.node_selector, &nodes);
        assert_eq!(
            by_name.iter().map(|n| node_name(n)).collect::<Vec<_>>(),
            ["b"]
        );
    }

    #[test]
    fn access_checks_cover_old_and_new_selectors_on_update() {
        let view = cluster(vec![node("a"), node("b"), node("c")]);
        let call = update(
            nm().select_nodes(&["a", "b"]),
            nm().select_nodes(&["b", "c"]),
        );
        let (cluster_wide, per_node) = node_access_checks(&call.request(), &view);
        assert_eq!(
            (cluster_wide.verb, cluster_wide.resource, cluster_wide.name),
            ("delete", "nodes", None)
        );
        assert_eq!(cluster_wide.user.username.as_deref(), Some("alice"));
        let names: Vec<_> = per_node.iter().filter_map(|c| c.name.as_deref()).collect();
        assert_eq!(names, ["b", "c", "a"]);
    }

    #[test]
    fn access_checks_use_the_old_object_on_delete_and_nothing_when_nodes_unknown() {
        let call = delete(nm().select_nodes(&["b"]));
        let (_, per_node) =
            node_access_checks(&call.request(), &cluster(vec![node("a"), node("b")]));
        assert_eq!(per_node.len(), 1);
        assert_eq!(per_node[0].name.as_deref(), Some("b"));
        assert!(node_access_checks(&call.request(), &offline()).1.is_empty());
    }

    #[test]
    fn node_authorization_only_for_writes_that_change_what_happens_to_nodes() {
        let deleting = || nm().stage(Stage::Drain).deleting();
        let mut finalized = nm().stage(Stage::Cordon);
        finalized.metadata.finalizers = Some(vec![crate::api::MAINTENANCE_FINALIZER.into()]);
        let rows = [
            (create(nm()), true),
            (delete(nm()), true),
            (update(nm(), nm().stage(Stage::Cordon)), true),
            (update(nm(), nm().select_nodes(&["b"])), true),
            (update(nm(), nm().stage(Stage::Cordon)).status(), false),
            (update(nm().stage(Stage::Cordon), finalized), false),
            (update(deleting(), deleting().stage(Stage::Complete)), false),
        ];
        for (i, (call, want)) in rows.into_iter().enumerate() {
            assert_eq!(needs_node_authorization(&call.request()), want, "row {i}");
        }
    }

    #[test]
    fn long_node_lists_are_cut() {
        let names: Vec<String> = (0..13).map(|i| format!("n{i}")).collect();
        assert_eq!(
            list_names(&names),
            "n0, n1, n2, n3, n4, n5, n6, n7, n8, n9 and 3 more"
        );
        assert_eq!(list_names(&["a", "b"]), "a, b");
    }
}
