//! Pod drain rules (SPEC 6.2): how a maintenance drains a pod — `Drain` (requested, as every
//! pod), `Skip` (never requested, stays, holds nothing) or `WaitCompleted` (not requested; the
//! node is drained only once the pod has finished or is gone). The pod's own label
//! `evictord.dev/drain` decides first; else the first of the node's rules matching the pod (its
//! namespace's labels and its own); else `Drain`. The rules of a node are those of the oldest
//! maintenance holding it ([`node_rules`]). Rules apply to maintenances only: the Eviction API
//! bridge answers what others ask, as before.

use std::collections::BTreeMap;

use crate::api::{DRAIN_LABEL, DrainBehavior, NodeMaintenance, PodRule};
use crate::selector::{LabelSource, label_selector_matches};

/// What decided a pod's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecidedBy {
    /// Its `evictord.dev/drain` label.
    Label,
    /// The rule at this index of the node's rules.
    Rule(usize),
    /// Neither: the default, `Drain`.
    Default,
}

/// The behaviour for a pod with `labels` in a namespace with `namespace_labels`, under `rules`,
/// and what decided it. A label value other than `drain`, `skip` or `wait-completed` is ignored
/// (the rules decide).
pub fn decide(
    labels: &impl LabelSource,
    namespace_labels: &BTreeMap<String, String>,
    rules: &[PodRule],
) -> (DrainBehavior, DecidedBy) {
    if let Some(b) = labels
        .label(DRAIN_LABEL)
        .and_then(DrainBehavior::from_label)
    {
        return (b, DecidedBy::Label);
    }
    rules
        .iter()
        .position(|r| {
            r.namespace_selector
                .as_ref()
                .is_none_or(|s| label_selector_matches(s, namespace_labels))
                && r.pod_selector
                    .as_ref()
                    .is_none_or(|s| label_selector_matches(s, labels))
        })
        .map_or((DrainBehavior::Drain, DecidedBy::Default), |i| {
            (rules[i].behavior, DecidedBy::Rule(i))
        })
}

/// The behaviour for a pod with `labels` in a namespace with `namespace_labels`, under `rules`
/// (see [`decide`]).
pub fn behavior(
    labels: &impl LabelSource,
    namespace_labels: &BTreeMap<String, String>,
    rules: &[PodRule],
) -> DrainBehavior {
    decide(labels, namespace_labels, rules).0
}

/// The rules that apply on a node: those of the oldest (creation time, then name) of the
/// maintenances holding it.
pub fn node_rules<'a>(holding: impl IntoIterator<Item = &'a NodeMaintenance>) -> &'a [PodRule] {
    holding
        .into_iter()
        .min_by(|a, b| {
            let key = |m: &'a NodeMaintenance| {
                (
                    m.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    m.metadata.name.clone(),
                )
            };
            key(a).cmp(&key(b))
        })
        .map_or(&[], |m| m.spec.pod_rules.as_slice())
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    use super::*;
    use crate::api::NodeMaintenanceSpec;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selector(pairs: &[(&str, &str)]) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some(labels(pairs)),
            match_expressions: None,
        })
    }

    fn rule(ns: &[(&str, &str)], pod: &[(&str, &str)], behavior: DrainBehavior) -> PodRule {
        PodRule {
            namespace_selector: (!ns.is_empty()).then(|| selector(ns)).flatten(),
            pod_selector: (!pod.is_empty()).then(|| selector(pod)).flatten(),
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
            rule(&[], &[("kind", "job")], DrainBehavior::Skip),
        ]
    }

    #[rstest::rstest]
    #[case::label_skip(&[(DRAIN_LABEL, "skip")], &[], DrainBehavior::Skip)]
    #[case::label_wait(&[(DRAIN_LABEL, "wait-completed")], &[], DrainBehavior::WaitCompleted)]
    #[case::label_beats_rule(&[(DRAIN_LABEL, "drain"), ("keep", "true")], &[], DrainBehavior::Drain)]
    #[case::unknown_label_value_falls_to_rules(&[(DRAIN_LABEL, "never"), ("keep", "true")], &[], DrainBehavior::Skip)]
    #[case::first_rule_wins(&[("kind", "job")], &[("team", "batch")], DrainBehavior::WaitCompleted)]
    #[case::namespace_selector_misses(&[("kind", "job")], &[("team", "web")], DrainBehavior::Skip)]
    #[case::namespace_only(&[("app", "x")], &[("team", "batch")], DrainBehavior::Drain)]
    #[case::no_rule_matches(&[("app", "x")], &[], DrainBehavior::Drain)]
    fn behavior_rows(
        #[case] pod: &[(&str, &str)],
        #[case] ns: &[(&str, &str)],
        #[case] want: DrainBehavior,
    ) {
        assert_eq!(behavior(&labels(pod), &labels(ns), &rules()), want);
    }

    #[rstest::rstest]
    #[case::label(&[(DRAIN_LABEL, "skip")], &[], DecidedBy::Label)]
    #[case::unknown_label_value(&[(DRAIN_LABEL, "never")], &[], DecidedBy::Default)]
    #[case::second_rule(&[("keep", "true")], &[], DecidedBy::Rule(1))]
    #[case::nothing(&[], &[], DecidedBy::Default)]
    fn decided_by_rows(
        #[case] pod: &[(&str, &str)],
        #[case] ns: &[(&str, &str)],
        #[case] want: DecidedBy,
    ) {
        assert_eq!(decide(&labels(pod), &labels(ns), &rules()).1, want);
    }

    fn nm(name: &str, created: i64, rules: Vec<PodRule>) -> NodeMaintenance {
        let mut m = NodeMaintenance::new(
            name,
            NodeMaintenanceSpec {
                pod_rules: rules,
                ..Default::default()
            },
        );
        m.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
        m
    }

    #[test]
    fn the_oldest_holder_s_rules_apply() {
        let older = nm("b", 1, vec![rule(&[], &[], DrainBehavior::Skip)]);
        let newer = nm("a", 2, vec![]);
        assert_eq!(
            node_rules([&newer, &older])[0].behavior,
            DrainBehavior::Skip
        );
        assert!(node_rules([&newer]).is_empty());
        assert!(node_rules(std::iter::empty::<&NodeMaintenance>()).is_empty());
    }
}
