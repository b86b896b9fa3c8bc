//! Pure cordon and restore decisions for one node (SPEC 3.3, 5.3): Cordon and Drain keep
//! `spec.unschedulable: true`, remembering the previous value in the annotation
//! `evictord.dev/unschedulable-before`; once a drain targets the node's DaemonSet pods, the node
//! also carries the `NoSchedule` taint `evictord.dev/maintenance` (remembered the same way in
//! `evictord.dev/maintenance-taint-before`), so that the DaemonSet controller does not start the
//! pods `daemonset.apps.k8s.io` removes again there; Complete restores both, on nodes no other
//! Cordon/Drain maintenance holds. Both go in one patch, so a node is written once.
//!
//! Each annotation doubles as "evictord holds this": present means a maintenance cordoned (or
//! tainted) the node and has not restored it yet. So an unschedulable flag found `false`, or the
//! taint found missing, while the annotation is present means someone undid it during the
//! maintenance: it is done again, with an event.

use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::{Value, json};

use crate::api::taint::{has_maintenance_taint, maintenance_taint};
use crate::api::{
    EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION, EXCLUDE_FROM_EXTERNAL_LB_LABEL, MAINTENANCE_TAINT,
    MAINTENANCE_TAINT_BEFORE_ANNOTATION, UNSCHEDULABLE_BEFORE_ANNOTATION,
};

/// What happened to the node, worth an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// The node was schedulable and is now cordoned.
    Cordoned,
    /// Someone uncordoned the node during the maintenance; it is cordoned again.
    Recordoned,
    /// The node is schedulable again.
    Uncordoned,
    /// The maintenance taint was placed.
    Tainted,
    /// Someone removed the maintenance taint during the maintenance; it is placed again.
    Retainted,
    /// The maintenance taint was removed.
    Untainted,
    /// The node is left out of external load balancers (SPEC 6.4).
    Excluded,
    /// The node's exclusion label is back to what it was.
    Included,
}

impl NodeEvent {
    /// Event reason (PascalCase).
    pub fn reason(self) -> &'static str {
        match self {
            NodeEvent::Cordoned => "NodeCordoned",
            NodeEvent::Recordoned => "NodeRecordoned",
            NodeEvent::Uncordoned => "NodeUncordoned",
            NodeEvent::Tainted => "NodeTainted",
            NodeEvent::Retainted => "NodeRetainted",
            NodeEvent::Untainted => "NodeUntainted",
            NodeEvent::Excluded => "NodeExcludedFromLoadBalancers",
            NodeEvent::Included => "NodeIncludedInLoadBalancers",
        }
    }

    /// True for the events that report someone undoing the maintenance's work.
    pub fn is_warning(self) -> bool {
        matches!(self, NodeEvent::Recordoned | NodeEvent::Retainted)
    }

    /// Event message.
    pub fn message(self, node: &str) -> String {
        match self {
            NodeEvent::Cordoned => format!("Node {node} cordoned"),
            NodeEvent::Recordoned => {
                format!("Node {node} was uncordoned during the maintenance; cordoned it again")
            }
            NodeEvent::Uncordoned => format!("Node {node} is schedulable again"),
            NodeEvent::Tainted => format!(
                "Node {node} tainted {MAINTENANCE_TAINT}:NoSchedule: DaemonSet pods removed by the drain are not started there again until the maintenance completes"
            ),
            NodeEvent::Retainted => format!(
                "The {MAINTENANCE_TAINT} taint was removed from node {node} during the maintenance; placed it again"
            ),
            NodeEvent::Untainted => format!(
                "Taint {MAINTENANCE_TAINT} removed from node {node}: its DaemonSet pods start again"
            ),
            NodeEvent::Excluded => format!(
                "Node {node} labelled {EXCLUDE_FROM_EXTERNAL_LB_LABEL}=true: the service controller takes it out of external load balancers during the maintenance"
            ),
            NodeEvent::Included => format!(
                "Node {node}'s {EXCLUDE_FROM_EXTERNAL_LB_LABEL} label is back to its value from before the maintenance"
            ),
        }
    }
}

/// A change to one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodePatch {
    /// New `spec.unschedulable`, if it changes.
    pub unschedulable: Option<bool>,
    /// New value of the unschedulable annotation (`Some(None)` removes it), if it changes.
    pub before: Option<Option<bool>>,
    /// The node's whole new taint list, if it changes.
    pub taints: Option<Vec<Taint>>,
    /// New value of the taint annotation (`Some(None)` removes it), if it changes.
    pub taint_before: Option<Option<bool>>,
    /// New value of the external load balancer exclusion label (`Some(None)` removes it), if it
    /// changes (SPEC 6.4, [`exclusion`](super::exclusion)).
    pub exclusion: Option<Option<String>>,
    /// New value of the annotation remembering the exclusion label's previous value (`Some(None)`
    /// removes it), if it changes.
    pub exclusion_before: Option<Option<String>>,
    /// The events to record once the patch is applied.
    pub events: Vec<NodeEvent>,
}

impl NodePatch {
    fn is_empty(&self) -> bool {
        *self == NodePatch::default()
    }

    /// The merge patch (with the node's `resourceVersion`, so that a concurrent change of the
    /// node makes it fail rather than be overwritten; the taint list is replaced whole, which
    /// that guard makes safe).
    pub fn merge_patch(&self, resource_version: Option<&str>) -> Value {
        let mut patch = json!({"metadata": {"resourceVersion": resource_version}});
        if let Some(u) = self.unschedulable {
            // `false` is written as absent, as `kubectl uncordon` leaves it.
            patch["spec"]["unschedulable"] = if u { json!(true) } else { Value::Null };
        }
        if let Some(taints) = &self.taints {
            patch["spec"]["taints"] = if taints.is_empty() {
                Value::Null
            } else {
                json!(taints)
            };
        }
        if let Some(before) = self.before {
            patch["metadata"]["annotations"][UNSCHEDULABLE_BEFORE_ANNOTATION] =
                json!(before.map(|b| b.to_string()));
        }
        if let Some(before) = self.taint_before {
            patch["metadata"]["annotations"][MAINTENANCE_TAINT_BEFORE_ANNOTATION] =
                json!(before.map(|b| b.to_string()));
        }
        if let Some(value) = &self.exclusion {
            patch["metadata"]["labels"][EXCLUDE_FROM_EXTERNAL_LB_LABEL] = json!(value);
        }
        if let Some(before) = &self.exclusion_before {
            patch["metadata"]["annotations"][EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION] =
                json!(before);
        }
        patch
    }

    /// This change and `other` in one patch (`other`'s fields win where both set one).
    pub fn and(self, other: Option<NodePatch>) -> Option<NodePatch> {
        let Some(o) = other else {
            return (!self.is_empty()).then_some(self);
        };
        let mut events = self.events;
        events.extend(o.events);
        let merged = NodePatch {
            unschedulable: o.unschedulable.or(self.unschedulable),
            before: o.before.or(self.before),
            taints: o.taints.or(self.taints),
            taint_before: o.taint_before.or(self.taint_before),
            exclusion: o.exclusion.or(self.exclusion),
            exclusion_before: o.exclusion_before.or(self.exclusion_before),
            events,
        };
        (!merged.is_empty()).then_some(merged)
    }
}

/// `spec.unschedulable` of the node (absent = false).
pub fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

fn annotation(node: &Node, key: &str) -> Option<bool> {
    node.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(|v| v == "true")
}

/// The remembered previous value, when a maintenance holds the node. Anything but `"true"`
/// counts as `false` (only evictord writes the annotation).
pub fn unschedulable_before(node: &Node) -> Option<bool> {
    annotation(node, UNSCHEDULABLE_BEFORE_ANNOTATION)
}

/// Whether the node carried the maintenance taint before a maintenance placed it, when one did.
pub fn taint_before(node: &Node) -> Option<bool> {
    annotation(node, MAINTENANCE_TAINT_BEFORE_ANNOTATION)
}

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// Cordon and Drain: the change that keeps the node cordoned and, with `tainted` (a drain
/// targets the node's DaemonSet pods), tainted; `None` when it already is.
pub fn cordon(node: &Node, tainted: bool) -> Option<NodePatch> {
    let mut p = NodePatch::default();
    match (is_unschedulable(node), unschedulable_before(node)) {
        (true, Some(_)) => {}
        // Cordoned by someone else before: remember it so that Complete keeps it cordoned.
        (true, None) => p.before = Some(Some(true)),
        (false, None) => {
            p.unschedulable = Some(true);
            p.before = Some(Some(false));
            p.events.push(NodeEvent::Cordoned);
        }
        (false, Some(_)) => {
            p.unschedulable = Some(true);
            p.events.push(NodeEvent::Recordoned);
        }
    }
    if tainted {
        let current = taints(node);
        let with_taint = || {
            let mut t = current.to_vec();
            t.push(maintenance_taint());
            t
        };
        match (has_maintenance_taint(current), taint_before(node)) {
            (true, Some(_)) => {}
            // Placed by someone else before: Complete leaves it.
            (true, None) => p.taint_before = Some(Some(true)),
            (false, None) => {
                p.taints = Some(with_taint());
                p.taint_before = Some(Some(false));
                p.events.push(NodeEvent::Tainted);
            }
            (false, Some(_)) => {
                p.taints = Some(with_taint());
                p.events.push(NodeEvent::Retainted);
            }
        }
    }
    (!p.is_empty()).then_some(p)
}

/// Complete: the change that gives the node back its previous `unschedulable` and taint,
/// unless another Cordon/Drain maintenance still `held` it. What no maintenance changed (no
/// annotation) is left alone.
pub fn restore(node: &Node, held: bool) -> Option<NodePatch> {
    if held {
        return None;
    }
    let mut p = NodePatch::default();
    if let Some(before) = unschedulable_before(node) {
        let now = is_unschedulable(node);
        p.unschedulable = (now != before).then_some(before);
        p.before = Some(None);
        if now && !before {
            p.events.push(NodeEvent::Uncordoned);
        }
    }
    if let Some(before) = taint_before(node) {
        let current = taints(node);
        if !before && has_maintenance_taint(current) {
            let rest: Vec<Taint> = current
                .iter()
                .filter(|t| !has_maintenance_taint(std::slice::from_ref(t)))
                .cloned()
                .collect();
            p.taints = Some(rest);
            p.events.push(NodeEvent::Untainted);
        }
        p.taint_before = Some(None);
    }
    (!p.is_empty()).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(unschedulable: Option<bool>, before: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("one".into());
        n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            unschedulable,
            ..Default::default()
        });
        if let Some(b) = before {
            n.metadata.annotations = Some(
                [(UNSCHEDULABLE_BEFORE_ANNOTATION.to_string(), b.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        n
    }

    /// A node held cordoned by a maintenance, with or without the taint and its annotation.
    fn tainted(taint: bool, before: Option<&str>) -> Node {
        let mut n = node(Some(true), Some("false"));
        let other = Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let mut list = vec![other];
        if taint {
            list.push(maintenance_taint());
        }
        n.spec.as_mut().unwrap().taints = Some(list);
        if let Some(b) = before {
            n.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(MAINTENANCE_TAINT_BEFORE_ANNOTATION.into(), b.into());
        }
        n
    }

    fn patch(
        u: Option<bool>,
        before: Option<Option<bool>>,
        event: Option<NodeEvent>,
    ) -> Option<NodePatch> {
        Some(NodePatch {
            unschedulable: u,
            before,
            events: event.into_iter().collect(),
            ..Default::default()
        })
    }

    #[test]
    fn cordon_rows() {
        let rows = [
            (
                "schedulable node is cordoned, false remembered",
                node(None, None),
                patch(Some(true), Some(Some(false)), Some(NodeEvent::Cordoned)),
            ),
            (
                "explicit false is cordoned too",
                node(Some(false), None),
                patch(Some(true), Some(Some(false)), Some(NodeEvent::Cordoned)),
            ),
            (
                "already unschedulable: only remembered",
                node(Some(true), None),
                patch(None, Some(Some(true)), None),
            ),
            (
                "held and cordoned: nothing",
                node(Some(true), Some("false")),
                None,
            ),
            (
                "held, previously unschedulable: nothing",
                node(Some(true), Some("true")),
                None,
            ),
            (
                "uncordoned mid-way: cordoned again with an event",
                node(Some(false), Some("false")),
                patch(Some(true), None, Some(NodeEvent::Recordoned)),
            ),
            (
                "uncordoned mid-way, unset flag",
                node(None, Some("true")),
                patch(Some(true), None, Some(NodeEvent::Recordoned)),
            ),
        ];
        for (name, n, want) in rows {
            assert_eq!(cordon(&n, false), want, "{name}");
        }
    }

    #[test]
    fn taint_rows() {
        let with = |t: bool| -> Vec<Taint> {
            let mut l = tainted(t, None).spec.unwrap().taints.unwrap();
            if !t {
                l.push(maintenance_taint());
            }
            l
        };
        let rows = [
            (
                "placed, other taints kept, false remembered",
                tainted(false, None),
                Some(NodePatch {
                    taints: Some(with(false)),
                    taint_before: Some(Some(false)),
                    events: vec![NodeEvent::Tainted],
                    ..Default::default()
                }),
            ),
            (
                "held and tainted: nothing",
                tainted(true, Some("false")),
                None,
            ),
            (
                "tainted by someone else before: only remembered",
                tainted(true, None),
                Some(NodePatch {
                    taint_before: Some(Some(true)),
                    ..Default::default()
                }),
            ),
            (
                "removed mid-way: placed again with an event",
                tainted(false, Some("false")),
                Some(NodePatch {
                    taints: Some(with(false)),
                    events: vec![NodeEvent::Retainted],
                    ..Default::default()
                }),
            ),
        ];
        for (name, n, want) in rows {
            assert_eq!(cordon(&n, true), want, "{name}");
        }
        // Cordon and taint of a fresh node: one patch, two events.
        let mut fresh = tainted(false, None);
        fresh.spec.as_mut().unwrap().unschedulable = None;
        fresh.metadata.annotations = None;
        let p = cordon(&fresh, true).unwrap();
        assert_eq!(p.events, [NodeEvent::Cordoned, NodeEvent::Tainted]);
        // Without DaemonSet targets the taint is never placed, nor removed.
        assert_eq!(cordon(&tainted(true, Some("false")), false), None);
    }

    #[test]
    fn restore_rows() {
        let rows = [
            (
                "cordoned by us: uncordoned, annotation removed",
                node(Some(true), Some("false")),
                false,
                patch(Some(false), Some(None), Some(NodeEvent::Uncordoned)),
            ),
            (
                "unschedulable before: stays cordoned, annotation removed",
                node(Some(true), Some("true")),
                false,
                patch(None, Some(None), None),
            ),
            (
                "another maintenance holds it: nothing",
                node(Some(true), Some("false")),
                true,
                None,
            ),
            (
                "never cordoned by a maintenance: nothing",
                node(Some(true), None),
                false,
                None,
            ),
            (
                "already uncordoned by someone: annotation removed",
                node(None, Some("false")),
                false,
                patch(None, Some(None), None),
            ),
        ];
        for (name, n, held, want) in rows {
            assert_eq!(restore(&n, held), want, "{name}");
        }
    }

    #[test]
    fn restore_taint_rows() {
        let others = tainted(false, None).spec.unwrap().taints.unwrap();
        let uncordon = |taints: Option<Vec<Taint>>, events: Vec<NodeEvent>| NodePatch {
            unschedulable: Some(false),
            before: Some(None),
            taints,
            taint_before: Some(None),
            events,
            ..NodePatch::default()
        };
        let rows = [
            (
                "placed by us: removed with the cordon, other taints kept",
                tainted(true, Some("false")),
                false,
                Some(uncordon(
                    Some(others.clone()),
                    vec![NodeEvent::Uncordoned, NodeEvent::Untainted],
                )),
            ),
            (
                "placed by someone else before: kept",
                tainted(true, Some("true")),
                false,
                Some(uncordon(None, vec![NodeEvent::Uncordoned])),
            ),
            (
                "removed by someone already: annotation dropped",
                tainted(false, Some("false")),
                false,
                Some(uncordon(None, vec![NodeEvent::Uncordoned])),
            ),
            (
                "another maintenance holds the node: kept",
                tainted(true, Some("false")),
                true,
                None,
            ),
        ];
        for (name, n, held, want) in rows {
            assert_eq!(restore(&n, held), want, "{name}");
        }
    }

    #[test]
    fn merge_patches() {
        let p = cordon(&node(None, None), false)
            .unwrap()
            .merge_patch(Some("7"));
        assert_eq!(
            p,
            json!({"metadata": {"resourceVersion": "7", "annotations": {UNSCHEDULABLE_BEFORE_ANNOTATION: "false"}}, "spec": {"unschedulable": true}})
        );
        let r = restore(&node(Some(true), Some("false")), false)
            .unwrap()
            .merge_patch(Some("8"));
        assert_eq!(
            r,
            json!({"metadata": {"resourceVersion": "8", "annotations": {UNSCHEDULABLE_BEFORE_ANNOTATION: null}}, "spec": {"unschedulable": null}})
        );
        let mut only_ours = node(Some(true), Some("false"));
        only_ours.spec.as_mut().unwrap().taints = None;
        let t = cordon(&only_ours, true).unwrap().merge_patch(Some("9"));
        assert_eq!(
            t,
            json!({"metadata": {"resourceVersion": "9", "annotations": {MAINTENANCE_TAINT_BEFORE_ANNOTATION: "false"}},
                   "spec": {"taints": [{"key": MAINTENANCE_TAINT, "effect": "NoSchedule"}]}})
        );
        let mut back = only_ours;
        back.spec.as_mut().unwrap().taints = Some(vec![maintenance_taint()]);
        back.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(MAINTENANCE_TAINT_BEFORE_ANNOTATION.into(), "false".into());
        let u = restore(&back, false).unwrap().merge_patch(Some("10"));
        assert_eq!(u["spec"]["taints"], Value::Null);
        assert_eq!(
            u["metadata"]["annotations"][MAINTENANCE_TAINT_BEFORE_ANNOTATION],
            Value::Null
        );
    }
}
