//! Pure cordon and restore decisions for one node (SPEC 3.3): Cordon and Drain keep
//! `spec.unschedulable: true`, remembering the previous value in the annotation
//! `evictord.dev/unschedulable-before`; Complete restores it, on nodes no other Cordon/Drain
//! maintenance holds.
//!
//! The annotation doubles as "evictord holds this node": present means a maintenance cordoned it
//! and has not restored it yet. So an unschedulable flag found `false` while the annotation is
//! present means someone uncordoned the node during the maintenance: it is cordoned again, with
//! an event.

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use crate::api::UNSCHEDULABLE_BEFORE_ANNOTATION;

/// What happened to the node, worth an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// The node was schedulable and is now cordoned.
    Cordoned,
    /// Someone uncordoned the node during the maintenance; it is cordoned again.
    Recordoned,
    /// The node is schedulable again.
    Uncordoned,
}

impl NodeEvent {
    /// Event reason (PascalCase).
    pub fn reason(self) -> &'static str {
        match self {
            NodeEvent::Cordoned => "NodeCordoned",
            NodeEvent::Recordoned => "NodeRecordoned",
            NodeEvent::Uncordoned => "NodeUncordoned",
        }
    }

    /// Event message.
    pub fn message(self, node: &str) -> String {
        match self {
            NodeEvent::Cordoned => format!("Node {node} cordoned"),
            NodeEvent::Recordoned => {
                format!("Node {node} was uncordoned during the maintenance; cordoned it again")
            }
            NodeEvent::Uncordoned => format!("Node {node} is schedulable again"),
        }
    }
}

/// A change to one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePatch {
    /// New `spec.unschedulable`, if it changes.
    pub unschedulable: Option<bool>,
    /// New value of the annotation (`Some(None)` removes it), if it changes.
    pub before: Option<Option<bool>>,
    /// The event to record once the patch is applied.
    pub event: Option<NodeEvent>,
}

impl NodePatch {
    /// The merge patch (with the node's `resourceVersion`, so that a concurrent change of the
    /// node makes it fail rather than be overwritten).
    pub fn merge_patch(&self, resource_version: Option<&str>) -> Value {
        let mut patch = json!({"metadata": {"resourceVersion": resource_version}});
        if let Some(u) = self.unschedulable {
            // `false` is written as absent, as `kubectl uncordon` leaves it.
            patch["spec"] = json!({"unschedulable": if u { json!(true) } else { Value::Null }});
        }
        if let Some(before) = self.before {
            patch["metadata"]["annotations"] =
                json!({UNSCHEDULABLE_BEFORE_ANNOTATION: before.map(|b| b.to_string())});
        }
        patch
    }
}

/// `spec.unschedulable` of the node (absent = false).
pub fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The remembered previous value, when a maintenance holds the node. Anything but `"true"`
/// counts as `false` (only evictord writes the annotation).
pub fn unschedulable_before(node: &Node) -> Option<bool> {
    node.metadata
        .annotations
        .as_ref()?
        .get(UNSCHEDULABLE_BEFORE_ANNOTATION)
        .map(|v| v == "true")
}

/// Cordon and Drain: the change that keeps the node cordoned, if any.
pub fn cordon(node: &Node) -> Option<NodePatch> {
    match (is_unschedulable(node), unschedulable_before(node)) {
        (true, Some(_)) => None,
        // Cordoned by someone else before: remember it so that Complete keeps it cordoned.
        (true, None) => Some(NodePatch {
            unschedulable: None,
            before: Some(Some(true)),
            event: None,
        }),
        (false, None) => Some(NodePatch {
            unschedulable: Some(true),
            before: Some(Some(false)),
            event: Some(NodeEvent::Cordoned),
        }),
        (false, Some(_)) => Some(NodePatch {
            unschedulable: Some(true),
            before: None,
            event: Some(NodeEvent::Recordoned),
        }),
    }
}

/// Complete: the change that gives the node back its previous `unschedulable`, unless another
/// Cordon/Drain maintenance still `held` it. Nodes without the annotation were not cordoned by a
/// maintenance (or were restored already) and are left alone.
pub fn restore(node: &Node, held: bool) -> Option<NodePatch> {
    if held {
        return None;
    }
    let before = unschedulable_before(node)?;
    let now = is_unschedulable(node);
    Some(NodePatch {
        unschedulable: (now != before).then_some(before),
        before: Some(None),
        event: (now && !before).then_some(NodeEvent::Uncordoned),
    })
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

    fn patch(
        u: Option<bool>,
        before: Option<Option<bool>>,
        event: Option<NodeEvent>,
    ) -> Option<NodePatch> {
        Some(NodePatch {
            unschedulable: u,
            before,
            event,
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
            assert_eq!(cordon(&n), want, "{name}");
        }
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
    fn merge_patches() {
        let p = cordon(&node(None, None)).unwrap().merge_patch(Some("7"));
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
    }
}
