//! Drain deadlines (SPEC 6.2): when each node's drain started (the later of its admission and
//! the maintenance entering Drain, so that time queued behind a budget does not count), when its
//! deadline passes, which nodes passed it with targeted pods left (`DeadlineExceeded`), and, under
//! `deadlinePolicy: Force`, which pods to delete — without waiting and without consulting
//! PodDisruptionBudgets. Pure functions of the recorded times, the pods and `now`.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::targets::TargetSet;
use super::{DrainPod, PodRef};
use crate::api::{
    CONDITION_DEADLINE_EXCEEDED, DrainBehavior, NodeMaintenanceNodeStatus, PodType, with_condition,
};

/// At most this many nodes are named in the condition's message.
const MAX_NAMED_NODES: usize = 10;

/// When a node's drain started: the later of its admission and the maintenance entering Drain
/// (whichever is recorded when only one is).
pub fn drain_start(
    admitted: Option<Timestamp>,
    drain_stage: Option<Timestamp>,
) -> Option<Timestamp> {
    match (admitted, drain_stage) {
        (Some(a), Some(d)) => Some(a.max(d)),
        (a, d) => a.or(d),
    }
}

/// When the deadline of a drain started at `start` passes.
pub fn deadline_at(start: Timestamp, seconds: i64) -> Option<Timestamp> {
    start.checked_add(SignedDuration::from_secs(seconds)).ok()
}

/// Targeted pods left on a node according to its status: pending, evacuating, and waited for.
pub fn pods_left(status: &NodeMaintenanceNodeStatus) -> usize {
    let requested = status.pods_pending_evacuation.max(0) + status.pods_evacuating.max(0);
    usize::try_from(requested).unwrap_or(0) + status.waiting_pods.len()
}

/// Fills each node's `drainStartTime`, `deadlineTime` and `deadlineExceeded` (sticky: carried
/// over from `previous`, the statuses as recorded). `start` gives a node's drain start.
pub fn with_deadlines(
    statuses: &mut [NodeMaintenanceNodeStatus],
    previous: &[NodeMaintenanceNodeStatus],
    start: impl Fn(&str) -> Option<Timestamp>,
    seconds: Option<i64>,
    now: Timestamp,
) {
    for s in statuses.iter_mut() {
        let started = start(&s.node_ref.name);
        let deadline = seconds.zip(started).and_then(|(d, t)| deadline_at(t, d));
        let was = previous
            .iter()
            .find(|p| p.node_ref.name == s.node_ref.name)
            .is_some_and(|p| p.deadline_exceeded);
        s.drain_start_time = started.map(Time);
        s.deadline_time = deadline.map(Time);
        s.deadline_exceeded = was || deadline.is_some_and(|d| now >= d && pods_left(s) > 0);
    }
}

/// The nodes whose deadline passed (with pods left then), and how many targeted pods each has
/// left now.
pub fn exceeded(statuses: &[NodeMaintenanceNodeStatus]) -> Vec<(String, usize)> {
    statuses
        .iter()
        .filter(|s| s.deadline_exceeded)
        .map(|s| (s.node_ref.name.clone(), pods_left(s)))
        .collect()
}

/// The nodes that newly passed their deadline since `previous`.
pub fn newly_exceeded(
    statuses: &[NodeMaintenanceNodeStatus],
    previous: &[NodeMaintenanceNodeStatus],
) -> Vec<String> {
    statuses
        .iter()
        .filter(|s| s.deadline_exceeded)
        .filter(|s| {
            !previous
                .iter()
                .any(|p| p.node_ref.name == s.node_ref.name && p.deadline_exceeded)
        })
        .map(|s| s.node_ref.name.clone())
        .collect()
}

/// The conditions with `DeadlineExceeded=True` naming the nodes and what is left, once a node
/// passed its deadline (it stays `True`); unchanged while none has.
pub fn with_deadline_condition(
    conditions: &[Condition],
    exceeded: &[(String, usize)],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    if exceeded.is_empty() {
        return conditions.to_vec();
    }
    let mut named: Vec<String> = exceeded
        .iter()
        .take(MAX_NAMED_NODES)
        .map(|(n, left)| match left {
            0 => format!("{n} (none left)"),
            1 => format!("{n} (1 pod left)"),
            k => format!("{n} ({k} pods left)"),
        })
        .collect();
    if exceeded.len() > MAX_NAMED_NODES {
        named.push(format!("and {} more", exceeded.len() - MAX_NAMED_NODES));
    }
    with_condition(
        conditions,
        Condition {
            type_: CONDITION_DEADLINE_EXCEEDED.into(),
            status: "True".into(),
            reason: "DeadlineExceeded".into(),
            message: format!("Drain deadline passed on {}", named.join(", ")),
            observed_generation: generation,
            last_transition_time: Time(now),
        },
    )
}

/// The pods to delete under `Force` (SPEC 6.2): on each node that passed its deadline, the
/// non-terminal Default pods its recorded targets match that are not skipped and not deleted
/// yet (those waited for included), lowest priority first (the plan's order), then by name.
/// DaemonSet and static pods keep leaving through their interceptors.
pub fn forced(
    statuses: &[NodeMaintenanceNodeStatus],
    pods: &BTreeMap<String, Vec<DrainPod>>,
) -> Vec<PodRef> {
    let mut out: Vec<(i32, &DrainPod)> = Vec::new();
    for s in statuses.iter().filter(|s| s.deadline_exceeded) {
        let targets = TargetSet::from_entries(&s.drain_targets);
        for p in pods.get(&s.node_ref.name).into_iter().flatten() {
            let force = p.pod_type == PodType::Default
                && !p.terminal
                && !p.terminating
                && p.behavior != DrainBehavior::Skip
                && targets.matches(p.pod_type, p.priority, &p.labels);
            if force {
                out.push((p.priority, p));
            }
        }
    }
    out.sort_by(|(a, p), (b, q)| (a, &p.namespace, &p.name).cmp(&(b, &q.namespace, &q.name)));
    out.into_iter()
        .map(|(_, p)| PodRef {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
        })
        .collect()
}

/// The next time a node's deadline passes (to look again then).
pub fn next_deadline(statuses: &[NodeMaintenanceNodeStatus], now: Timestamp) -> Option<Timestamp> {
    statuses
        .iter()
        .filter(|s| !s.deadline_exceeded && pods_left(s) > 0)
        .filter_map(|s| s.deadline_time.as_ref().map(|t| t.0))
        .filter(|t| *t > now)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DrainPlanEntry, NodeReference};
    use crate::drain::fixtures::pod;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn status(node: &str, pending: i32, evacuating: i32) -> NodeMaintenanceNodeStatus {
        NodeMaintenanceNodeStatus {
            node_ref: NodeReference { name: node.into() },
            drain_targets: vec![DrainPlanEntry {
                pod_priority: 1000,
                pod_type: PodType::Default,
                pod_selector: None,
            }],
            pods_pending_evacuation: pending,
            pods_evacuating: evacuating,
            ..Default::default()
        }
    }

    #[rstest::rstest]
    #[case::queued_longer_than_the_deadline(Some(500), Some(100), Some(500))]
    #[case::admitted_before_drain(Some(100), Some(300), Some(300))]
    #[case::only_drain(None, Some(300), Some(300))]
    #[case::neither(None, None, None)]
    fn drain_start_rows(
        #[case] admitted: Option<i64>,
        #[case] drain: Option<i64>,
        #[case] want: Option<i64>,
    ) {
        assert_eq!(drain_start(admitted.map(t), drain.map(t)), want.map(t));
    }

    #[test]
    fn a_deadline_passes_once_with_pods_left_and_stays_passed() {
        let start = |_: &str| Some(t(1000));
        let mut now = vec![status("a", 0, 2), status("b", 0, 0)];
        with_deadlines(&mut now, &[], start, Some(60), t(1059));
        assert!(!now[0].deadline_exceeded);
        assert_eq!(now[0].deadline_time, Some(Time(t(1060))));
        assert_eq!(next_deadline(&now, t(1059)), Some(t(1060)));
        let previous = now.clone();
        with_deadlines(&mut now, &previous, start, Some(60), t(1060));
        // a has pods left at its deadline; b is empty: nothing passed there.
        assert_eq!(exceeded(&now), vec![("a".to_string(), 2)]);
        assert_eq!(newly_exceeded(&now, &previous), ["a"]);
        // Later, with nothing left, a stays past its deadline (and is not new).
        let previous = now.clone();
        let mut later = vec![status("a", 0, 0), status("b", 0, 0)];
        with_deadlines(&mut later, &previous, start, Some(60), t(2000));
        assert_eq!(exceeded(&later), vec![("a".to_string(), 0)]);
        assert!(newly_exceeded(&later, &previous).is_empty());
        // No deadline: nothing passes.
        let mut none = vec![status("a", 3, 0)];
        with_deadlines(&mut none, &[], start, None, t(9999));
        assert!(!none[0].deadline_exceeded && none[0].deadline_time.is_none());
    }

    #[test]
    fn the_condition_names_the_nodes_and_stays() {
        let c = with_deadline_condition(&[], &[("a".into(), 2), ("b".into(), 1)], Some(3), t(5));
        assert_eq!(c[0].status, "True");
        assert_eq!(
            c[0].message,
            "Drain deadline passed on a (2 pods left), b (1 pod left)"
        );
        assert_eq!(with_deadline_condition(&c, &[], Some(3), t(9)), c);
        assert!(with_deadline_condition(&[], &[], None, t(1)).is_empty());
    }

    #[test]
    fn force_deletes_the_remaining_default_pods_in_plan_order() {
        use crate::api::DrainBehavior::{Skip, WaitCompleted};
        let mut passed = status("a", 1, 2);
        passed.deadline_exceeded = true;
        let within = status("b", 1, 0);
        let pods: BTreeMap<String, Vec<DrainPod>> = [
            (
                "a".to_string(),
                vec![
                    pod("high").priority(900).pod,
                    pod("low").priority(10).pod,
                    pod("job").priority(500).behavior(WaitCompleted).pod,
                    pod("kept").behavior(Skip).pod,
                    pod("agent").ds().pod,
                    pod("done").terminal().pod,
                    pod("above").priority(2000).pod,
                    DrainPod {
                        terminating: true,
                        ..pod("going").pod
                    },
                ],
            ),
            ("b".to_string(), vec![pod("other").pod]),
        ]
        .into();
        let names: Vec<String> = forced(&[passed, within], &pods)
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["low", "job", "high"]);
    }
}
