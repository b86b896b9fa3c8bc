//! The objects of a rollout and their names: its MaintenanceBudget (named after the rollout,
//! selecting the rollout's nodes by name) and one NodeMaintenance per node (`<rollout>-<node>`,
//! shortened with a hash when too long), all labelled `evictord.dev/rollout: <rollout>`; and the
//! way back from an object to the node it is for.

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::{
    MAX_REASON_CHARS, MaintenanceBudget, MaintenanceBudgetSpec, NodeMaintenance, ROLLOUT_LABEL,
    Stage,
};
use crate::plugin::maintenance::maintenance_for;

use super::record::{ROLLOUT_OPTIONS_ANNOTATION, RolloutOptions};

/// The longest rollout name: it is also a label value (at most 63 characters).
pub const MAX_ROLLOUT_NAME: usize = 63;
/// The longest object name (a DNS subdomain).
const MAX_OBJECT_NAME: usize = 253;
/// Hex digits of the node name's SHA-256 in a shortened maintenance name.
const HASH_DIGITS: usize = 10;

/// Checks a rollout name: it names the budget and prefixes the maintenances (DNS subdomain
/// rules) and is the value of the `evictord.dev/rollout` label (at most 63 characters).
///
/// # Errors
/// What is wrong with it, in words.
pub fn validate_rollout_name(name: &str) -> Result<(), String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if name.is_empty() || name.len() > MAX_ROLLOUT_NAME {
        return Err(format!(
            "rollout name {name:?}: 1 to {MAX_ROLLOUT_NAME} characters (it is a label value)"
        ));
    }
    if !name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        || !name.starts_with(alnum)
        || !name.ends_with(alnum)
    {
        return Err(format!(
            "rollout name {name:?}: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit (e.g. os-upgrade-1)"
        ));
    }
    Ok(())
}

/// The name of the rollout's maintenance of `node`: `<rollout>-<node>`; when that is longer than
/// an object name may be, the node's name is cut and followed by a hash of the whole of it, so
/// that names stay unique.
pub fn maintenance_name(rollout: &str, node: &str) -> String {
    let plain = format!("{rollout}-{node}");
    if plain.len() <= MAX_OBJECT_NAME {
        return plain;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, node.as_bytes());
    let hash: String = digest
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .chars()
        .take(HASH_DIGITS)
        .collect();
    let room = MAX_OBJECT_NAME - rollout.len() - HASH_DIGITS - 2;
    let head: String = node.chars().take(room).collect();
    format!("{rollout}-{}-{hash}", head.trim_end_matches(['-', '.']))
}

/// These nodes by name: one term per node with `matchFields metadata.name In [node]` (the form
/// `kubectl evictord drain` gives its maintenances).
pub fn nodes_by_name(nodes: &[String]) -> NodeSelector {
    NodeSelector {
        node_selector_terms: nodes
            .iter()
            .map(|n| NodeSelectorTerm {
                match_fields: Some(vec![NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: "In".into(),
                    values: Some(vec![n.clone()]),
                }]),
                match_expressions: None,
            })
            .collect(),
    }
}

/// The node names a selector built by [`nodes_by_name`] selects; `None` for any other selector.
pub fn named_nodes(selector: &NodeSelector) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for term in &selector.node_selector_terms {
        if term
            .match_expressions
            .as_ref()
            .is_some_and(|e| !e.is_empty())
        {
            return None;
        }
        for f in term.match_fields.iter().flatten() {
            if f.key != "metadata.name" || f.operator != "In" {
                return None;
            }
            out.extend(f.values.iter().flatten().cloned());
        }
    }
    Some(out)
}

/// The label map of a rollout's objects.
fn labels(rollout: &str) -> std::collections::BTreeMap<String, String> {
    [(ROLLOUT_LABEL.to_string(), rollout.to_string())].into()
}

/// The `evictord.dev/rollout=<rollout>` label selector.
pub fn label_selector(rollout: &str) -> String {
    format!("{ROLLOUT_LABEL}={rollout}")
}

/// The rollout's budget: named after it, over its nodes by name, `maxUnavailable` as given, with
/// the command's options recorded (so that a resumed rollout can be compared with them).
pub fn budget_for(
    rollout: &str,
    nodes: &[String],
    max_unavailable: &IntOrString,
    options: &RolloutOptions,
) -> MaintenanceBudget {
    let mut b = MaintenanceBudget::new(
        rollout,
        MaintenanceBudgetSpec {
            node_selector: Some(nodes_by_name(nodes)),
            max_unavailable: Some(max_unavailable.clone()),
            windows: Vec::new(),
        },
    );
    b.metadata.labels = Some(labels(rollout));
    b.metadata.annotations = Some(
        [(
            ROLLOUT_OPTIONS_ANNOTATION.to_string(),
            serde_json::to_string(options).unwrap_or_default(),
        )]
        .into(),
    );
    b
}

/// The rollout's maintenance of one node, in Drain, with the rollout named in `spec.reason`.
pub fn maintenance_of(rollout: &str, node: &str, reason: Option<&str>) -> NodeMaintenance {
    let why = match reason {
        Some(r) => format!("{r} (kubectl evictord rollout {rollout})"),
        None => format!("kubectl evictord rollout {rollout}"),
    };
    let why: String = why.chars().take(MAX_REASON_CHARS).collect();
    let mut nm = maintenance_for(
        &maintenance_name(rollout, node),
        &[node.to_string()],
        &[],
        Some(&why),
        Stage::Drain,
    );
    nm.metadata.labels = Some(labels(rollout));
    nm
}

/// The node a rollout's maintenance is for: its selector names exactly one node.
pub fn node_of(nm: &NodeMaintenance) -> Option<String> {
    match named_nodes(&nm.spec.node_selector)?.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// True when the object carries the label of this rollout.
pub fn is_of(labels: Option<&std::collections::BTreeMap<String, String>>, rollout: &str) -> bool {
    labels
        .and_then(|l| l.get(ROLLOUT_LABEL))
        .map(String::as_str)
        == Some(rollout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::simple("os-upgrade", true)]
    #[case::dotted("pool-a.2026", true)]
    #[case::digits("1", true)]
    #[case::empty("", false)]
    #[case::upper("OS", false)]
    #[case::leading_dash("-a", false)]
    #[case::trailing_dot("a.", false)]
    #[case::underscore("a_b", false)]
    #[case::too_long(&"a".repeat(64), false)]
    #[case::longest(&"a".repeat(63), true)]
    fn rollout_names(#[case] name: &str, #[case] ok: bool) {
        assert_eq!(validate_rollout_name(name).is_ok(), ok, "{name}");
    }

    #[rstest]
    #[case::plain("up", "node-1", "up-node-1")]
    #[case::dotted_node("up", "ip-10-0-0-1.ec2.internal", "up-ip-10-0-0-1.ec2.internal")]
    fn maintenance_names(#[case] rollout: &str, #[case] node: &str, #[case] want: &str) {
        assert_eq!(maintenance_name(rollout, node), want);
    }

    #[test]
    fn long_names_are_cut_and_kept_unique_by_a_hash() {
        let rollout = "r".repeat(63);
        let a = format!("{}a", "n".repeat(240));
        let b = format!("{}b", "n".repeat(240));
        let (na, nb) = (
            maintenance_name(&rollout, &a),
            maintenance_name(&rollout, &b),
        );
        assert_ne!(na, nb);
        for n in [&na, &nb] {
            assert_eq!(n.len(), 253, "{n}");
            assert!(n.starts_with(&format!("{rollout}-nnn")), "{n}");
        }
        // A cut ending in '-' or '.' is trimmed: the name stays a DNS subdomain.
        let dashy = format!("{}{}", "n".repeat(176), "-".repeat(80));
        let n = maintenance_name(&rollout, &dashy);
        assert!(!n.contains("--"), "{n}");
        assert_eq!(maintenance_name(&rollout, &a), na, "stable");
    }

    #[test]
    fn objects_carry_the_label_and_select_their_nodes_by_name() {
        let nodes = vec!["n1".to_string(), "n2".to_string()];
        let options = RolloutOptions {
            exec: Some("reboot".into()),
            ..Default::default()
        };
        let b = budget_for("up", &nodes, &IntOrString::Int(1), &options);
        assert_eq!(b.metadata.name.as_deref(), Some("up"));
        assert!(is_of(b.metadata.labels.as_ref(), "up"));
        assert!(!is_of(b.metadata.labels.as_ref(), "other"));
        assert_eq!(
            named_nodes(b.spec.node_selector.as_ref().unwrap()),
            Some(nodes.clone())
        );
        let recorded = &b.metadata.annotations.as_ref().unwrap()[ROLLOUT_OPTIONS_ANNOTATION];
        assert_eq!(
            recorded,
            r#"{"exec":"reboot","reboot":false,"cordonFirst":false}"#
        );

        let nm = maintenance_of("up", "n2", Some("kernel 6.1"));
        assert_eq!(nm.metadata.name.as_deref(), Some("up-n2"));
        assert_eq!(nm.spec.stage, Some(Stage::Drain));
        assert_eq!(
            nm.spec.reason.as_deref(),
            Some("kernel 6.1 (kubectl evictord rollout up)")
        );
        assert_eq!(node_of(&nm).as_deref(), Some("n2"));
        assert!(is_of(nm.metadata.labels.as_ref(), "up"));
    }

    #[test]
    fn a_selector_by_label_names_no_node() {
        let mut s = nodes_by_name(&["n1".to_string()]);
        s.node_selector_terms[0].match_expressions = Some(vec![NodeSelectorRequirement {
            key: "pool".into(),
            operator: "In".into(),
            values: Some(vec!["a".into()]),
        }]);
        assert_eq!(named_nodes(&s), None);
        let two = maintenance_for("x", &["a".into(), "b".into()], &[], None, Stage::Drain);
        assert_eq!(
            node_of(&two),
            None,
            "two nodes: not a rollout's maintenance"
        );
    }
}
