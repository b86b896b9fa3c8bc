//! Matching and validation of Kubernetes selectors: `core/v1 NodeSelector` (terms ORed,
//! `matchExpressions` on labels, `matchFields` on `metadata.name`) and `meta/v1 LabelSelector`.
//! Semantics follow kube-apiserver's `nodeaffinity` and `labels.Selector` packages.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

type Labels = BTreeMap<String, String>;

/// Where label values are looked up: a label map, or a cached pod's labels.
pub trait LabelSource {
    /// The value of `key`, if the label is set.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSource for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// True when the node (by name and labels) matches any term of the selector. A selector without
/// terms matches nothing, as in kube-apiserver.
pub fn node_selector_matches(selector: &NodeSelector, node_name: &str, labels: &Labels) -> bool {
    selector.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        // A term with neither expressions nor fields matches nothing.
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs
            .iter()
            .all(|r| node_requirement_matches(r, labels.get(&r.key).map(String::as_str)))
            && fields.iter().all(|r| {
                let value = (r.key == "metadata.name").then_some(node_name);
                node_requirement_matches(r, value)
            })
    })
}

fn node_requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Problems with a NodeSelector, each naming the field path (`path` is the selector's own path).
/// Empty when the selector is well formed and has at least one term.
pub fn validate_node_selector(selector: &NodeSelector, path: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if selector.node_selector_terms.is_empty() {
        errors.push(format!(
            "{path}.nodeSelectorTerms must have at least one term"
        ));
    }
    for (i, term) in selector.node_selector_terms.iter().enumerate() {
        let term_path = format!("{path}.nodeSelectorTerms[{i}]");
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            errors.push(format!("{term_path} must have matchExpressions or matchFields (an empty term matches no node)"));
        }
        for (j, r) in exprs.iter().enumerate() {
            errors.extend(validate_node_requirement(
                r,
                &format!("{term_path}.matchExpressions[{j}]"),
                false,
            ));
        }
        for (j, r) in fields.iter().enumerate() {
            errors.extend(validate_node_requirement(
                r,
                &format!("{term_path}.matchFields[{j}]"),
                true,
            ));
        }
    }
    errors
}

fn validate_node_requirement(r: &NodeSelectorRequirement, path: &str, field: bool) -> Vec<String> {
    let mut errors = Vec::new();
    let values = r.values.as_deref().unwrap_or_default();
    if field {
        if r.key != "metadata.name" {
            errors.push(format!(
                "{path}.key: only \"metadata.name\" is supported in matchFields, got {:?}",
                r.key
            ));
        }
        if !matches!(r.operator.as_str(), "In" | "NotIn") || values.len() != 1 {
            errors.push(format!("{path}: matchFields on metadata.name need operator In or NotIn with exactly one value"));
        }
        return errors;
    }
    if let Err(e) = validate_label_key(&r.key) {
        errors.push(format!("{path}.key: {e}"));
    }
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => errors.push(format!(
            "{path}.values: must be non-empty for operator {}",
            r.operator
        )),
        "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(format!(
            "{path}.values: must be empty for operator {}",
            r.operator
        )),
        "Gt" | "Lt" if values.len() != 1 || values[0].parse::<i64>().is_err() => {
            errors.push(format!(
                "{path}.values: operator {} needs exactly one integer value",
                r.operator
            ))
        }
        "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
        other => errors.push(format!(
            "{path}.operator: {other:?} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"
        )),
    }
    if matches!(r.operator.as_str(), "In" | "NotIn") {
        for (k, v) in values.iter().enumerate() {
            if let Err(e) = validate_label_value(v) {
                errors.push(format!("{path}.values[{k}]: {e}"));
            }
        }
    }
    errors
}

/// True when the labels match the selector. An empty selector matches everything; a selector
/// with an invalid operator matches nothing (validation reports it).
pub fn label_selector_matches(selector: &LabelSelector, labels: &impl LabelSource) -> bool {
    selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.label(k) == Some(v.as_str()))
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|r| label_requirement_matches(r, labels))
}

fn label_requirement_matches(r: &LabelSelectorRequirement, labels: &impl LabelSource) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let value = labels.label(&r.key);
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

/// Problems with a LabelSelector, each naming the field path.
pub fn validate_label_selector(selector: &LabelSelector, path: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        if let Err(e) = validate_label_key(k) {
            errors.push(format!("{path}.matchLabels: key {k:?}: {e}"));
        }
        if let Err(e) = validate_label_value(v) {
            errors.push(format!("{path}.matchLabels[{k:?}]: {e}"));
        }
    }
    for (i, r) in selector.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        if let Err(e) = validate_label_key(&r.key) {
            errors.push(format!("{p}.key: {e}"));
        }
        let values = r.values.as_deref().unwrap_or_default();
        match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errors.push(format!(
                "{p}.values: must be non-empty for operator {}",
                r.operator
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(format!(
                "{p}.values: must be empty for operator {}",
                r.operator
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.push(format!(
                "{p}.operator: {other:?} is not one of In, NotIn, Exists, DoesNotExist"
            )),
        }
    }
    errors
}

/// Validates a label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
pub fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && (p.is_empty() || p.len() > 253 || !p.split('.').all(is_dns_label))
    {
        return Err(format!("prefix {p:?} must be a DNS subdomain"));
    }
    if name.is_empty() || name.len() > 63 || !is_label_name(name) {
        return Err(format!(
            "name part {name:?} must be 1-63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"
        ));
    }
    Ok(())
}

/// Validates a label value: empty, or at most 63 characters like a label name.
pub fn validate_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && is_label_name(value)) {
        Ok(())
    } else {
        Err(format!(
            "label value {value:?} must be at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"
        ))
    }
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 label: 1-63 characters of `[a-z0-9-]`, not starting or ending with `-`.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorTerm;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn terms(
        terms: Vec<(Vec<NodeSelectorRequirement>, Vec<NodeSelectorRequirement>)>,
    ) -> NodeSelector {
        NodeSelector {
            node_selector_terms: terms
                .into_iter()
                .map(|(e, f)| NodeSelectorTerm {
                    match_expressions: Some(e),
                    match_fields: Some(f),
                })
                .collect(),
        }
    }

    #[test]
    fn node_selector_operators() {
        let l = labels(&[("zone", "a"), ("gen", "5")]);
        let cases = [
            (req("zone", "In", &["a", "b"]), true),
            (req("zone", "In", &["b"]), false),
            (req("zone", "NotIn", &["b"]), true),
            (req("missing", "NotIn", &["b"]), true),
            (req("zone", "Exists", &[]), true),
            (req("zone", "DoesNotExist", &[]), false),
            (req("gen", "Gt", &["4"]), true),
            (req("gen", "Lt", &["4"]), false),
            (req("zone", "Gt", &["4"]), false),
            (req("zone", "Bogus", &[]), false),
        ];
        for (r, want) in cases {
            let s = terms(vec![(vec![r.clone()], vec![])]);
            assert_eq!(node_selector_matches(&s, "n", &l), want, "{r:?}");
        }
    }

    #[test]
    fn node_selector_terms_are_ored_and_fields_match_names() {
        let s = terms(vec![
            (vec![], vec![req("metadata.name", "In", &["one"])]),
            (vec![req("zone", "In", &["b"])], vec![]),
        ]);
        assert!(node_selector_matches(&s, "one", &labels(&[])));
        assert!(node_selector_matches(&s, "two", &labels(&[("zone", "b")])));
        assert!(!node_selector_matches(&s, "two", &labels(&[("zone", "a")])));
        assert!(!node_selector_matches(
            &terms(vec![(vec![], vec![])]),
            "one",
            &labels(&[])
        ));
        assert!(!node_selector_matches(
            &NodeSelector::default(),
            "one",
            &labels(&[])
        ));
    }

    #[test]
    fn node_selector_validation() {
        assert!(
            validate_node_selector(&terms(vec![(vec![req("zone", "In", &["a"])], vec![])]), "s")
                .is_empty()
        );
        assert!(!validate_node_selector(&NodeSelector::default(), "s").is_empty());
        for bad in [
            req("zone", "In", &[]),
            req("zone", "Exists", &["x"]),
            req("gen", "Gt", &["x"]),
            req("bad key!", "Exists", &[]),
            req("z", "Near", &[]),
        ] {
            assert!(
                !validate_node_selector(&terms(vec![(vec![bad.clone()], vec![])]), "s").is_empty(),
                "{bad:?}"
            );
        }
        assert!(
            !validate_node_selector(
                &terms(vec![(vec![], vec![req("metadata.uid", "In", &["a"])])]),
                "s"
            )
            .is_empty()
        );
    }

    #[test]
    fn label_selector_matching_and_validation() {
        let l = labels(&[("app", "db"), ("tier", "1")]);
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "db")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["1".into()]),
            }]),
        };
        assert!(label_selector_matches(&sel, &l));
        assert!(!label_selector_matches(&sel, &labels(&[("app", "db")])));
        assert!(label_selector_matches(&LabelSelector::default(), &l));
        assert!(validate_label_selector(&sel, "p").is_empty());
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "x".into(),
                operator: "Gt".into(),
                values: None,
            }]),
        };
        assert!(!validate_label_selector(&bad, "p").is_empty());
    }
}
