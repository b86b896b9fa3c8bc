//! Nodes out of external load balancers during a maintenance (SPEC 6.4): while an admitted
//! maintenance holds a node in Cordon or Drain, the node carries
//! `node.kubernetes.io/exclude-from-external-load-balancers: "true"`, so that the service
//! controller takes it out of the load balancers that target nodes before its pods go. Its exact
//! previous value, or its absence, is recorded in an annotation (JSON: a string or `null`) and
//! given back at Complete when no other maintenance holds the node — only while the label still
//! reads `"true"`: a change someone made in between (kubeadm sets the label on control-plane
//! nodes; the service controller reads only the key) is kept. A label someone changes during the
//! maintenance is not set again: their change wins.

use k8s_openapi::api::core::v1::Node;

use super::cordon::{NodeEvent, NodePatch};
use crate::api::{EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION, EXCLUDE_FROM_EXTERNAL_LB_LABEL};

/// The value the label has while a maintenance holds the node.
const EXCLUDED: &str = "true";

fn label(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()?
        .get(EXCLUDE_FROM_EXTERNAL_LB_LABEL)
        .map(String::as_str)
}

/// The recorded previous value: `Some(None)` when the label was absent, `None` when nothing is
/// recorded (no maintenance set it). A record that does not read as JSON counts as absent.
fn recorded(node: &Node) -> Option<Option<String>> {
    let raw = node
        .metadata
        .annotations
        .as_ref()?
        .get(EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION)?;
    Some(serde_json::from_str::<Option<String>>(raw).unwrap_or(None))
}

/// Cordon and Drain: set the label, recording what it was; `None` once recorded.
pub fn exclude(node: &Node) -> Option<NodePatch> {
    if recorded(node).is_some() {
        return None;
    }
    let previous = label(node).map(str::to_string);
    let record = serde_json::to_string(&previous).unwrap_or_else(|_| "null".into());
    Some(NodePatch {
        exclusion: (previous.as_deref() != Some(EXCLUDED)).then(|| Some(EXCLUDED.to_string())),
        exclusion_before: Some(Some(record)),
        events: if previous.as_deref() == Some(EXCLUDED) {
            Vec::new()
        } else {
            vec![NodeEvent::Excluded]
        },
        ..NodePatch::default()
    })
}

/// Complete, when no other maintenance holds the node: give the label its recorded value back
/// (remove it when it was absent) while it still reads `"true"`, and drop the record.
pub fn include(node: &Node) -> Option<NodePatch> {
    let previous = recorded(node)?;
    let ours = label(node) == Some(EXCLUDED);
    let restore = ours && previous.as_deref() != Some(EXCLUDED);
    Some(NodePatch {
        exclusion: restore.then(|| previous.clone()),
        exclusion_before: Some(None),
        events: if restore {
            vec![NodeEvent::Included]
        } else {
            Vec::new()
        },
        ..NodePatch::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(label: Option<&str>, record: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n".into());
        if let Some(l) = label {
            n.metadata.labels =
                Some([(EXCLUDE_FROM_EXTERNAL_LB_LABEL.to_string(), l.to_string())].into());
        }
        if let Some(r) = record {
            n.metadata.annotations = Some(
                [(
                    EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION.to_string(),
                    r.to_string(),
                )]
                .into(),
            );
        }
        n
    }

    /// A field of a [`NodePatch`] that sets or removes a value: `None` leaves it.
    type Change = Option<Option<String>>;

    fn set(value: Option<&str>) -> Change {
        Some(value.map(str::to_string))
    }

    #[rstest::rstest]
    #[case::absent(node(None, None), Some((set(Some("true")), set(Some("null")), true)))]
    #[case::kubeadm_empty_value(node(Some(""), None), Some((set(Some("true")), set(Some("\"\"")), true)))]
    #[case::already_true(node(Some("true"), None), Some((None, set(Some("\"true\"")), false)))]
    #[case::recorded_keeps_a_users_change(node(Some("false"), Some("null")), None)]
    #[case::recorded(node(Some("true"), Some("null")), None)]
    fn exclude_rows(#[case] n: Node, #[case] want: Option<(Change, Change, bool)>) {
        let got = exclude(&n).map(|p| (p.exclusion, p.exclusion_before, !p.events.is_empty()));
        assert_eq!(got, want);
    }

    #[rstest::rstest]
    #[case::back_to_absent(node(Some("true"), Some("null")), Some((set(None), true)))]
    #[case::back_to_empty(node(Some("true"), Some("\"\"")), Some((set(Some("")), true)))]
    #[case::was_true(node(Some("true"), Some("\"true\"")), Some((None, false)))]
    #[case::changed_by_someone(node(Some("no"), Some("null")), Some((None, false)))]
    #[case::removed_by_someone(node(None, Some("\"x\"")), Some((None, false)))]
    #[case::nothing_recorded(node(Some("true"), None), None)]
    fn include_rows(#[case] n: Node, #[case] want: Option<(Change, bool)>) {
        let got = include(&n).map(|p| {
            assert_eq!(p.exclusion_before, Some(None), "the record goes");
            (p.exclusion, !p.events.is_empty())
        });
        assert_eq!(got, want);
    }

    #[test]
    fn the_patch_sets_and_removes_the_label_and_its_record() {
        let p = exclude(&node(None, None)).unwrap();
        let v = p.merge_patch(Some("7"));
        assert_eq!(
            v["metadata"]["labels"][EXCLUDE_FROM_EXTERNAL_LB_LABEL],
            "true"
        );
        assert_eq!(
            v["metadata"]["annotations"][EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION],
            "null"
        );
        let p = include(&node(Some("true"), Some("null"))).unwrap();
        let v = p.merge_patch(Some("8"));
        assert!(v["metadata"]["labels"][EXCLUDE_FROM_EXTERNAL_LB_LABEL].is_null());
        assert!(v["metadata"]["annotations"][EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION].is_null());
        assert!(
            v["metadata"]["labels"]
                .as_object()
                .unwrap()
                .contains_key(EXCLUDE_FROM_EXTERNAL_LB_LABEL)
        );
    }
}
