//! Drain deadlines in words (SPEC 6.2): the deadline a planned maintenance would have (`plan`),
//! and each node's deadline as evictord recorded it in the node status — the time left, then
//! "exceeded" — for the live views of `drain`, `watch` and `rollout`. The times are the
//! controller's (`deadlineTime`, `deadlineExceeded`); nothing here decides when a deadline passes.

use jiff::Timestamp;
use serde::Serialize;

use crate::api::{DeadlinePolicy, NodeMaintenanceNodeStatus, NodeMaintenanceSpec};

use super::blockers::{human, since};
use super::maintenance::DrainDeadline;

/// What a passed deadline does, in words.
fn consequence(policy: DeadlinePolicy) -> &'static str {
    match policy {
        DeadlinePolicy::Report => {
            "evictord reports it (condition DeadlineExceeded, an event) and forces nothing"
        }
        DeadlinePolicy::Force => {
            "evictord deletes the node's remaining Default pods, those waited for included, whatever their PodDisruptionBudgets say"
        }
    }
}

/// The deadline line of `plan`.
pub fn planned_text(deadline: Option<DrainDeadline>) -> String {
    match deadline {
        None => "Drain deadline: none (--drain-deadline sets one).".into(),
        Some(d) => format!(
            "Drain deadline: {} per node, counted from the start of its drain (the later of its admission and the Drain stage); then {} (deadlinePolicy {:?}).",
            d.duration(),
            consequence(d.policy),
            d.policy
        ),
    }
}

/// A node's drain deadline as evictord recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDeadline {
    /// When it passes (`deadlineTime`).
    pub at: Timestamp,
    /// It passed with targeted pods left (`deadlineExceeded`).
    pub exceeded: bool,
    /// What its passing does.
    pub policy: DeadlinePolicy,
}

impl NodeDeadline {
    /// The deadline recorded in a node's status under a maintenance with `spec`; `None` before
    /// evictord recorded one (no deadline, or the node's drain has not started).
    pub fn of(status: &NodeMaintenanceNodeStatus, spec: &NodeMaintenanceSpec) -> Option<Self> {
        Some(NodeDeadline {
            at: status.deadline_time.as_ref()?.0,
            exceeded: status.deadline_exceeded,
            policy: spec.deadline_policy(),
        })
    }

    /// In words. With `now`, the time left (or since it passed); without, words that change only
    /// when it passes (plain lines print a line per change).
    pub fn text(&self, now: Option<Timestamp>) -> String {
        let (then, done) = match self.policy {
            DeadlinePolicy::Report => ("then reported", "reported, nothing forced"),
            DeadlinePolicy::Force => ("then its pods are forced out", "remaining pods deleted"),
        };
        match (self.exceeded, now) {
            (false, Some(now)) if now < self.at => {
                format!("drain deadline in {}, {then}", human(since(now, self.at)))
            }
            (false, Some(now)) => format!(
                "drain deadline passed {} ago, {then}",
                human(since(self.at, now))
            ),
            (false, None) => format!("drain deadline {}, {then}", self.at),
            (true, Some(now)) => format!(
                "drain deadline exceeded {} ago: {done}",
                human(since(self.at, now))
            ),
            (true, None) => format!("drain deadline exceeded at {}: {done}", self.at),
        }
    }

    /// What identifies the situation (for plain lines): the time and whether it passed.
    pub fn key(&self) -> String {
        format!("deadline {} exceeded={}", self.at, self.exceeded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::fixtures::t;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use rstest::rstest;

    fn status(at: Option<i64>, exceeded: bool) -> NodeMaintenanceNodeStatus {
        NodeMaintenanceNodeStatus {
            deadline_time: at.map(|s| Time(t(s))),
            deadline_exceeded: exceeded,
            ..Default::default()
        }
    }

    fn spec(policy: Option<DeadlinePolicy>) -> NodeMaintenanceSpec {
        NodeMaintenanceSpec {
            drain_deadline_seconds: Some(600),
            deadline_policy: policy,
            ..Default::default()
        }
    }

    #[rstest]
    #[case::time_left(
        Some(300),
        false,
        None,
        Some(0),
        "drain deadline in 5 m, then reported"
    )]
    #[case::time_left_force(
        Some(40),
        false,
        Some(DeadlinePolicy::Force),
        Some(0),
        "drain deadline in 40 s, then its pods are forced out"
    )]
    #[case::passed_not_yet_reported(Some(-5), false, None, Some(0), "drain deadline passed 5 s ago, then reported")]
    #[case::exceeded(Some(-120), true, None, Some(0), "drain deadline exceeded 2 m ago: reported, nothing forced")]
    #[case::exceeded_force(Some(-1), true, Some(DeadlinePolicy::Force), Some(0), "drain deadline exceeded 1 s ago: remaining pods deleted")]
    #[case::plain(
        Some(300),
        false,
        None,
        None,
        "drain deadline 2027-01-15T08:05:00Z, then reported"
    )]
    #[case::plain_exceeded(
        Some(300),
        true,
        Some(DeadlinePolicy::Force),
        None,
        "drain deadline exceeded at 2027-01-15T08:05:00Z: remaining pods deleted"
    )]
    fn node_deadlines(
        #[case] at: Option<i64>,
        #[case] exceeded: bool,
        #[case] policy: Option<DeadlinePolicy>,
        #[case] now: Option<i64>,
        #[case] text: &str,
    ) {
        let d = NodeDeadline::of(&status(at, exceeded), &spec(policy)).unwrap();
        assert_eq!(d.text(now.map(t)), text);
    }

    /// No deadline recorded: nothing to say; the key changes only when the deadline passes.
    #[test]
    fn recorded_deadlines_only() {
        assert_eq!(NodeDeadline::of(&status(None, false), &spec(None)), None);
        let before = NodeDeadline::of(&status(Some(60), false), &spec(None)).unwrap();
        let after = NodeDeadline::of(&status(Some(60), true), &spec(None)).unwrap();
        assert_ne!(before.key(), after.key());
        assert_eq!(before.key(), before.key());
    }

    #[test]
    fn the_planned_deadline_says_what_happens() {
        assert_eq!(
            planned_text(None),
            "Drain deadline: none (--drain-deadline sets one)."
        );
        let force = DrainDeadline {
            seconds: 1800,
            policy: DeadlinePolicy::Force,
        };
        assert_eq!(
            planned_text(Some(force)),
            "Drain deadline: 30m per node, counted from the start of its drain (the later of its admission and the Drain stage); then evictord deletes the node's remaining Default pods, those waited for included, whatever their PodDisruptionBudgets say (deadlinePolicy Force)."
        );
    }
}
