//! The NodeMaintenance objects the plugin writes: `drain`'s (these nodes by name, priority steps
//! ahead of the default plan, a reason) and its name, and the drain deadline that `drain` and
//! `rollout` write into their maintenances (`--drain-deadline`, `--deadline-policy`, SPEC 6.2).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use serde::{Deserialize, Serialize};

use crate::api::{
    DeadlinePolicy, DrainPlanEntry, NodeMaintenance, NodeMaintenanceSpec, PodType, Stage,
};

/// The shortest drain deadline the API accepts (rule N8).
pub const MIN_DRAIN_DEADLINE_SECONDS: i64 = 60;

/// The maintenance `kubectl evictord drain` creates: these nodes by name (one `matchFields` term
/// each, the form admission rule N1 accepts), Default entries at `priority_steps` ahead of the
/// default plan, in `stage`.
pub fn maintenance_for(
    name: &str,
    nodes: &[String],
    priority_steps: &[i32],
    reason: Option<&str>,
    stage: Stage,
) -> NodeMaintenance {
    let terms = nodes
        .iter()
        .map(|n| NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![n.clone()]),
            }]),
            match_expressions: None,
        })
        .collect();
    let mut steps: Vec<i32> = priority_steps.to_vec();
    steps.sort_unstable();
    steps.dedup();
    let drain_plan = steps
        .into_iter()
        .map(|pod_priority| DrainPlanEntry {
            pod_priority,
            pod_type: PodType::Default,
            pod_selector: None,
        })
        .collect();
    NodeMaintenance::new(
        name,
        NodeMaintenanceSpec {
            node_selector: NodeSelector {
                node_selector_terms: terms,
            },
            stage: Some(stage),
            drain_plan,
            reason: reason.map(str::to_string),
            ..Default::default()
        },
    )
}

/// The name `drain` gives a maintenance: `drain-<first node>[-and-<n>]-<unix seconds>`, cut to
/// fit a name (253 characters).
pub fn maintenance_name(nodes: &[String], now: Timestamp) -> String {
    let first = nodes.first().map_or("nodes", String::as_str);
    let more = match nodes.len() {
        0 | 1 => String::new(),
        n => format!("-and-{}", n - 1),
    };
    let tail = format!("{more}-{}", now.as_second());
    let room = 253 - "drain-".len() - tail.len();
    let head: String = first.chars().take(room).collect();
    format!("drain-{}{tail}", head.trim_end_matches(['-', '.']))
}

/// A drain deadline and what its passing does (SPEC 6.2): `spec.drainDeadlineSeconds` and
/// `spec.deadlinePolicy` of the maintenances `drain` and `rollout` create.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DrainDeadline {
    /// Seconds each node may take to drain, from the start of its drain.
    pub seconds: i64,
    /// `Report` or `Force`.
    pub policy: DeadlinePolicy,
}

impl DrainDeadline {
    /// The deadline `--drain-deadline` and `--deadline-policy` ask for; none without
    /// `--drain-deadline`.
    ///
    /// # Errors
    /// A policy without a deadline, or a deadline the API would refuse (under a minute, rule N8),
    /// in words naming the flags.
    pub fn from_flags(
        deadline: Option<Duration>,
        policy: Option<DeadlinePolicy>,
    ) -> Result<Option<Self>, String> {
        let Some(d) = deadline else {
            return match policy {
                Some(_) => Err(
                    "--deadline-policy needs --drain-deadline (e.g. --drain-deadline 30m)".into(),
                ),
                None => Ok(None),
            };
        };
        let seconds = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        if seconds < MIN_DRAIN_DEADLINE_SECONDS {
            return Err(format!(
                "--drain-deadline {}: at least 1m (rule N8)",
                humantime::format_duration(d)
            ));
        }
        Ok(Some(DrainDeadline {
            seconds,
            policy: policy.unwrap_or_default(),
        }))
    }

    /// The deadline a maintenance's spec sets, if any.
    pub fn of(spec: &NodeMaintenanceSpec) -> Option<Self> {
        spec.drain_deadline_seconds.map(|seconds| DrainDeadline {
            seconds,
            policy: spec.deadline_policy(),
        })
    }

    /// `30m`, `1h 30m`.
    pub fn duration(&self) -> String {
        humantime::format_duration(Duration::from_secs(
            u64::try_from(self.seconds).unwrap_or(0),
        ))
        .to_string()
    }

    /// The flags that set it: `--drain-deadline 30m --deadline-policy force`.
    pub fn flags(&self) -> String {
        let policy = match self.policy {
            DeadlinePolicy::Report => "report",
            DeadlinePolicy::Force => "force",
        };
        format!(
            "--drain-deadline {} --deadline-policy {policy}",
            self.duration()
        )
    }
}

/// The maintenance with `deadline` in its spec (none: unchanged).
pub fn with_deadline(mut nm: NodeMaintenance, deadline: Option<DrainDeadline>) -> NodeMaintenance {
    if let Some(d) = deadline {
        nm.spec.drain_deadline_seconds = Some(d.seconds);
        nm.spec.deadline_policy = Some(d.policy);
    }
    nm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::fixtures::t;

    #[rstest::rstest]
    #[case(&["n1"], "drain-n1-1800000000")]
    #[case(&["n1", "n2", "n3"], "drain-n1-and-2-1800000000")]
    fn maintenance_names(#[case] nodes: &[&str], #[case] name: &str) {
        let nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        assert_eq!(maintenance_name(&nodes, t(0)), name);
        let long = vec!["x".repeat(300)];
        assert_eq!(maintenance_name(&long, t(0)).len(), 253);
    }

    #[rstest::rstest]
    #[case::none(None, None, Ok(None))]
    #[case::report_by_default(Some(600), None, Ok(Some((600, DeadlinePolicy::Report))))]
    #[case::force(Some(3600), Some(DeadlinePolicy::Force), Ok(Some((3600, DeadlinePolicy::Force))))]
    #[case::the_shortest_n8(Some(60), None, Ok(Some((60, DeadlinePolicy::Report))))]
    #[case::too_short_n8(Some(59), None, Err("--drain-deadline 59s: at least 1m (rule N8)"))]
    #[case::policy_alone(
        None,
        Some(DeadlinePolicy::Force),
        Err("--deadline-policy needs --drain-deadline (e.g. --drain-deadline 30m)")
    )]
    fn deadline_flags(
        #[case] secs: Option<u64>,
        #[case] policy: Option<DeadlinePolicy>,
        #[case] want: Result<Option<(i64, DeadlinePolicy)>, &str>,
    ) {
        let got = DrainDeadline::from_flags(secs.map(Duration::from_secs), policy);
        let want = want
            .map(|o| o.map(|(seconds, policy)| DrainDeadline { seconds, policy }))
            .map_err(str::to_string);
        assert_eq!(got, want);
    }

    #[test]
    fn the_deadline_goes_into_the_spec_and_back() {
        let d = DrainDeadline {
            seconds: 5400,
            policy: DeadlinePolicy::Force,
        };
        let nm = with_deadline(
            maintenance_for("m", &["n1".into()], &[], None, Stage::Drain),
            Some(d),
        );
        assert_eq!(nm.spec.drain_deadline_seconds, Some(5400));
        assert_eq!(nm.spec.deadline_policy, Some(DeadlinePolicy::Force));
        assert_eq!(DrainDeadline::of(&nm.spec), Some(d));
        assert_eq!(d.flags(), "--drain-deadline 1h 30m --deadline-policy force");
        let plain = with_deadline(
            maintenance_for("m", &["n1".into()], &[], None, Stage::Drain),
            None,
        );
        assert_eq!(DrainDeadline::of(&plain.spec), None);
    }
}
