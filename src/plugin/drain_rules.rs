//! Where a pod's drain behaviour comes from (SPEC 6.2), so that `plan` can say why a pod is
//! skipped or waited for: its label `evictord.dev/drain`, else the first matching rule of the
//! oldest maintenance holding its node. The behaviour itself is the controller's
//! (`apply_pod_rules`, which the preview and the progress view call); this only names its source,
//! and a table test holds the two together. Also the namespaces' labels that rules'
//! `namespaceSelector`s read: the plugin reads namespaces only when some maintenance has such a
//! rule.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::api::{DRAIN_LABEL, NodeMaintenance, PodRule};
use crate::cluster::CachedPod;
use crate::drain::holds::holders;
use crate::drain::rules::{DecidedBy, decide, node_rules};
use crate::selector::LabelSource;

/// The labels of each namespace, by name.
pub type NamespaceLabels = BTreeMap<String, BTreeMap<String, String>>;

/// True when a rule of these maintenances selects namespaces by their labels: only then are the
/// namespaces read.
pub fn reads_namespaces<'a>(maintenances: impl IntoIterator<Item = &'a NodeMaintenance>) -> bool {
    maintenances
        .into_iter()
        .flat_map(|m| &m.spec.pod_rules)
        .any(|r| r.namespace_selector.is_some())
}

/// A namespace's labels (none for a namespace not read), as `apply_pod_rules` asks for them.
pub fn labels_of(namespaces: &NamespaceLabels) -> impl Fn(&str) -> BTreeMap<String, String> + '_ {
    |ns| namespaces.get(ns).cloned().unwrap_or_default()
}

/// What decides the behaviour of a pod with `labels` in a namespace with `namespace_labels`
/// under `rules` (those of maintenance `holder`): `label evictord.dev/drain=skip`,
/// `podRules[1] of maintenance nm-a`, or `None` (no label or rule: `Drain`).
pub fn decided_by(
    labels: &impl LabelSource,
    namespace_labels: &BTreeMap<String, String>,
    rules: &[PodRule],
    holder: &str,
) -> Option<String> {
    match decide(labels, namespace_labels, rules).1 {
        DecidedBy::Label => labels
            .label(DRAIN_LABEL)
            .map(|v| format!("label {DRAIN_LABEL}={v}")),
        DecidedBy::Rule(i) => Some(format!("podRules[{i}] of maintenance {holder}")),
        DecidedBy::Default => None,
    }
}

/// What decides the behaviour of each pod (by UID) on the nodes `maintenances` hold, where a
/// label or a rule does.
pub fn sources(
    maintenances: &[Arc<NodeMaintenance>],
    nodes: &[Arc<Node>],
    pods: &[Arc<CachedPod>],
    namespaces: &NamespaceLabels,
) -> BTreeMap<String, String> {
    let no_labels = BTreeMap::new();
    let mut out = BTreeMap::new();
    for pod in pods {
        let Some(node) = nodes
            .iter()
            .find(|n| n.metadata.name.is_some() && n.metadata.name == pod.spec.node_name)
        else {
            continue;
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let held = holders(
            maintenances.iter().map(|m| m.as_ref()),
            name,
            node.metadata.labels.as_ref().unwrap_or(&no_labels),
        );
        let rules = node_rules(held.iter().copied());
        // The maintenance whose rules `node_rules` chose: the one that owns that very slice.
        let holder = held
            .iter()
            .find(|m| !rules.is_empty() && std::ptr::eq(m.spec.pod_rules.as_slice(), rules))
            .and_then(|m| m.metadata.name.as_deref())
            .unwrap_or_default();
        let ns = namespaces.get(pod.namespace()).unwrap_or(&no_labels);
        if let Some(why) = decided_by(&pod.labels(), ns, rules, holder) {
            out.insert(pod.uid().to_string(), why);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DrainBehavior, NodeMaintenanceSpec, Stage};
    use crate::controller::node_maintenance::gather::as_admitted;
    use crate::drain::rules::behavior;
    use crate::plugin::fixtures::{node, pod};
    use crate::plugin::maintenance::maintenance_for;
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn rule(ns: &[(&str, &str)], pod: &[(&str, &str)], behavior: DrainBehavior) -> PodRule {
        let selector = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| LabelSelector {
                match_labels: Some(map(pairs)),
                match_expressions: None,
            })
        };
        PodRule {
            namespace_selector: selector(ns),
            pod_selector: selector(pod),
            behavior,
        }
    }

    fn rules() -> Vec<PodRule> {
        vec![
            rule(
                &[("team", "batch")],
                &[("kind", "job")],
                DrainBehavior::WaitCompleted,
            ),
            rule(&[], &[("keep", "true")], DrainBehavior::Skip),
            rule(&[("team", "batch")], &[], DrainBehavior::Drain),
        ]
    }

    /// The source named is the one whose behaviour the controller's `behavior` returns.
    #[rstest::rstest]
    #[case::label(&[(DRAIN_LABEL, "skip"), ("keep", "true")], &[], Some("label evictord.dev/drain=skip"))]
    #[case::label_wait(&[(DRAIN_LABEL, "wait-completed")], &[], Some("label evictord.dev/drain=wait-completed"))]
    #[case::unknown_label_value(&[(DRAIN_LABEL, "never"), ("keep", "true")], &[], Some("podRules[1] of maintenance nm-a"))]
    #[case::first_rule(&[("kind", "job")], &[("team", "batch")], Some("podRules[0] of maintenance nm-a"))]
    #[case::namespace_rule(&[("app", "x")], &[("team", "batch")], Some("podRules[2] of maintenance nm-a"))]
    #[case::none(&[("app", "x")], &[("team", "web")], None)]
    fn sources_agree_with_the_controller(
        #[case] pod: &[(&str, &str)],
        #[case] ns: &[(&str, &str)],
        #[case] want: Option<&str>,
    ) {
        let (labels, ns) = (map(pod), map(ns));
        let why = decided_by(&labels, &ns, &rules(), "nm-a");
        assert_eq!(why.as_deref(), want);
        let decided = match why.as_deref() {
            Some(w) if w.starts_with("label") => {
                DrainBehavior::from_label(&labels[DRAIN_LABEL]).unwrap()
            }
            Some(w) => {
                let i: usize = w["podRules[".len()..w.find(']').unwrap()].parse().unwrap();
                rules()[i].behavior
            }
            None => DrainBehavior::Drain,
        };
        assert_eq!(decided, behavior(&labels, &ns, &rules()));
    }

    fn holding(name: &str, created: i64, rules: Vec<PodRule>) -> Arc<NodeMaintenance> {
        let mut m = maintenance_for(name, &["n1".into()], &[], None, Stage::Drain);
        m.spec = NodeMaintenanceSpec {
            pod_rules: rules,
            ..m.spec
        };
        m.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
        Arc::new(as_admitted(m))
    }

    /// The oldest holder's rules decide, and it is the one named.
    #[test]
    fn the_oldest_holder_is_named() {
        let older = holding(
            "older",
            1,
            vec![rule(&[], &[("keep", "true")], DrainBehavior::Skip)],
        );
        let newer = holding(
            "newer",
            2,
            vec![rule(&[], &[], DrainBehavior::WaitCompleted)],
        );
        let pods = [
            Arc::new(pod("kept").label("keep", "true").build()),
            Arc::new(pod("other").build()),
            Arc::new(pod("labelled").label(DRAIN_LABEL, "skip").build()),
        ];
        let got = sources(
            &[newer, older],
            &[node("n1")],
            &pods,
            &NamespaceLabels::new(),
        );
        assert_eq!(
            got,
            BTreeMap::from([
                (
                    "uid-kept".to_string(),
                    "podRules[0] of maintenance older".to_string()
                ),
                (
                    "uid-labelled".to_string(),
                    "label evictord.dev/drain=skip".to_string()
                ),
            ])
        );
    }

    #[test]
    fn namespaces_are_read_only_for_namespace_selectors() {
        let by_pods = holding("a", 1, vec![rule(&[], &[("k", "v")], DrainBehavior::Skip)]);
        let by_ns = holding("b", 1, vec![rule(&[("t", "x")], &[], DrainBehavior::Skip)]);
        assert!(!reads_namespaces([by_pods.as_ref()]));
        assert!(reads_namespaces([by_pods.as_ref(), by_ns.as_ref()]));
    }
}
