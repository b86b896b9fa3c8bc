//! Table tests of the HPA interceptor's decisions: a row per rule.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rstest::rstest;

use super::*;
use crate::interceptor::deployment::surge::DeploymentFacts;
use crate::interceptor::hpa::target::{Autoscaler, Workload};
use crate::interceptor::hpa::workload::DeploymentPart;

fn pod(uid: &str) -> SurgedPod {
    SurgedPod {
        name: format!("pod-{uid}"),
        uid: uid.into(),
    }
}

fn limits(min: i32, max: i32) -> Limits {
    Limits { min, max }
}

/// A record over `before` from `base` replicas covering `uids`.
fn record(before: Limits, base: i32, uids: &[&str]) -> HpaSurgeRecord {
    HpaSurgeRecord {
        before,
        base,
        pods: uids.iter().map(|u| pod(u)).collect(),
        abandoned: Vec::new(),
    }
}

fn abandoned(before: Limits, uids: &[&str]) -> HpaSurgeRecord {
    HpaSurgeRecord {
        abandoned: uids.iter().map(|u| pod(u)).collect(),
        ..record(before, 1, &[])
    }
}

fn deployment() -> Workload {
    Workload {
        api_version: Some("apps/v1".into()),
        kind: "Deployment".into(),
        name: "web".into(),
    }
}

/// The autoscaler `h` at `now`, with `record`.
fn hpa(now: Limits, record: Option<HpaSurgeRecord>) -> AutoscalerFacts {
    AutoscalerFacts {
        autoscaler: Autoscaler {
            name: "h".into(),
            target: deployment(),
        },
        limits: now,
        record: Ok(record),
    }
}

/// The autoscaler after the surge of `r` was written.
fn surged(r: HpaSurgeRecord) -> AutoscalerFacts {
    hpa(r.expected(), Some(r))
}

/// A settled RollingUpdate Deployment of `replicas`, all available, maxSurge 1, maxUnavailable 0.
fn web(replicas: i32) -> WorkloadFacts {
    WorkloadFacts {
        workload: deployment(),
        replicas,
        available: replicas,
        caught_up: true,
        deployment: Some(DeploymentPart {
            facts: DeploymentFacts {
                replicas,
                paused: false,
                strategy: Strategy::RollingUpdate,
                max_surge: 1,
                max_unavailable: 0,
                generation: 4,
                observed_generation: 4,
                status_replicas: replicas,
                updated_replicas: replicas,
                available_replicas: replicas,
                hpa: None,
                record: Ok(None),
            },
            max_surge: Some(IntOrString::Int(1)),
            max_unavailable: Some(IntOrString::Int(0)),
        }),
    }
}

fn with_facts(mut w: WorkloadFacts, change: impl FnOnce(&mut DeploymentFacts)) -> WorkloadFacts {
    if let Some(d) = &mut w.deployment {
        change(&mut d.facts);
    }
    w
}

fn with_surge(mut w: WorkloadFacts, surge: IntOrString, unavailable: IntOrString) -> WorkloadFacts {
    if let Some(d) = &mut w.deployment {
        d.max_surge = Some(surge);
        d.max_unavailable = Some(unavailable);
    }
    w
}

/// Any other workload (a StatefulSet): no surge settings of its own.
fn statefulset(replicas: i32, available: i32) -> WorkloadFacts {
    WorkloadFacts {
        workload: Workload {
            api_version: Some("apps/v1".into()),
            kind: "StatefulSet".into(),
            name: "db".into(),
        },
        replicas,
        available,
        caught_up: true,
        deployment: None,
    }
}

fn available(mut w: WorkloadFacts, replicas: i32, available: i32) -> WorkloadFacts {
    w.replicas = replicas;
    w.available = available;
    w
}

fn kind(step: &Step) -> &'static str {
    match step {
        Step::Skip(_) => "skip",
        Step::Join(_) => "join",
        Step::Wait(_) => "wait",
        Step::Ready(_) => "ready",
        Step::Abandon { .. } => "abandon",
        Step::Adopt { .. } => "adopt",
    }
}

#[rstest]
#[case::paused(hpa(limits(1, 3), None), with_facts(web(1), |f| f.paused = true), "skip", "Deployment web is paused")]
#[case::recreate(hpa(limits(1, 3), None), with_facts(web(1), |f| f.strategy = Strategy::Recreate), "skip", "Recreate")]
#[case::rollout_old_pods(hpa(limits(1, 3), None), with_facts(web(2), |f| f.updated_replicas = 1), "skip", "rollout of Deployment web")]
// Not observed yet (the autoscaler scaling it back after a surge bumps the generation too): wait.
#[case::not_observed_waits(hpa(limits(1, 3), None), with_facts(web(1), |f| f.observed_generation = 3), "wait", "observes generation")]
#[case::max_surge_zero(
    hpa(limits(1, 3), None),
    with_surge(web(3), IntOrString::Int(0), IntOrString::Int(1)),
    "skip",
    "maxSurge 0"
)]
#[case::scaled_to_zero(hpa(limits(1, 3), None), web(0), "skip", "scaled to zero")]
#[case::bad_annotation(AutoscalerFacts { record: Err("x".into()), ..hpa(limits(1, 3), None) }, web(1), "skip", "unreadable")]
#[case::first_pod_joins(hpa(limits(1, 3), None), web(1), "join", "")]
#[case::no_room(surged(record(limits(1, 5), 3, &["a"])), web(4), "wait", "it is in use by other pods, or being given back")]
#[case::room_for_second(surged(record(limits(1, 5), 3, &["a"])), with_surge(web(4), IntOrString::Int(2), IntOrString::Int(0)), "join", "")]
// Room is a Deployment's maxSurge at the base, not at the surged size: 25% of 4 is 1, of 5 is 2.
#[case::room_at_the_base(surged(record(limits(1, 8), 4, &["a"])), with_surge(web(5), IntOrString::String("25%".into()), IntOrString::Int(0)), "wait", "it is in use by other pods, or being given back")]
// The autoscaler scaling the Deployment for the surge bumped its generation: not a rollout.
#[case::own_surge_not_a_rollout(surged(record(limits(1, 5), 3, &["a"])), with_facts(with_surge(web(4), IntOrString::Int(2), IntOrString::Int(0)), |f| f.observed_generation = 3), "join", "")]
// Any other workload surges one pod at a time.
#[case::other_workload_joins(hpa(limits(1, 3), None), statefulset(1, 1), "join", "")]
#[case::other_workload_one_at_a_time(surged(record(limits(1, 3), 1, &["a"])), statefulset(2, 2), "wait", "it is in use by other pods, or being given back")]
#[case::covered_waiting_for_the_autoscaler(surged(record(limits(1, 3), 1, &["p"])), web(1), "wait", "raised minReplicas of HorizontalPodAutoscaler h from 1 to 2; waiting until Deployment web has 2 available replicas")]
#[case::covered_waiting_for_pods(surged(record(limits(1, 3), 1, &["p"])), available(web(2), 2, 1), "wait", "waiting until Deployment web has 2 available replicas")]
#[case::covered_not_observed(surged(record(limits(1, 3), 1, &["p"])), WorkloadFacts { caught_up: false, ..web(2) }, "wait", "")]
#[case::covered_ready(surged(record(limits(1, 3), 1, &["p"])), web(2), "ready", "raised minReplicas of HorizontalPodAutoscaler h from 1 to 2; Deployment web has 2 available replicas")]
#[case::covered_ready_statefulset(surged(record(limits(1, 3), 1, &["p"])), statefulset(2, 2), "ready", "the pod may go")]
#[case::floor_taken(hpa(limits(4, 4), Some(record(limits(1, 3), 1, &["p"]))), web(2), "abandon", "changed to 4 by someone else during a surge (expected 2)")]
#[case::ceiling_taken(hpa(limits(2, 9), Some(record(limits(1, 3), 1, &["p"]))), web(2), "adopt", "maxReplicas of HorizontalPodAutoscaler h was changed to 9")]
// A pod whose surge was abandoned is not surged again; others surge from the user's floor.
#[case::abandoned_pod(hpa(limits(4, 4), Some(abandoned(limits(4, 4), &["p"]))), web(4), "skip", "changed to 4 by someone else during the surge for this pod")]
#[case::after_abandon_others_join(hpa(limits(4, 6), Some(abandoned(limits(4, 6), &["a"]))), web(4), "join", "")]
fn activation_rows(
    #[case] h: AutoscalerFacts,
    #[case] w: WorkloadFacts,
    #[case] expected: &str,
    #[case] text: &str,
) {
    let step = on_activation(&h, &w, &pod("p"), std::time::Duration::ZERO);
    assert_eq!(kind(&step), expected, "{step:?}");
    let message = match &step {
        Step::Skip(m) | Step::Wait(m) | Step::Ready(m) => m.clone(),
        Step::Abandon { message, .. } | Step::Adopt { message, .. } => message.clone(),
        Step::Join(_) => String::new(),
    };
    assert!(message.contains(text), "{message:?} lacks {text:?}");
}

/// A covered pod's wait is told in one message from the surge's start until the workload has
/// the replicas ([`covered_wait`], also the message the interceptor writes with the raise): the
/// counts that move meanwhile would each cost the request a status write.
#[rstest]
#[case::autoscaler_not_synced(web(1))]
#[case::pods_not_available(available(web(2), 2, 1))]
#[case::not_observed(WorkloadFacts { caught_up: false, ..web(2) })]
fn a_covered_wait_is_one_message(#[case] w: WorkloadFacts) {
    let r = record(limits(1, 3), 1, &["p"]);
    let step = on_activation(&surged(r.clone()), &w, &pod("p"), std::time::Duration::ZERO);
    assert_eq!(step, Step::Wait(covered_wait("h", &w.workload, &r)));
}

#[rstest]
// One pod of a 1-replica Deployment: the floor goes to 2.
#[case::floor(hpa(limits(1, 3), None), web(1), record(limits(1, 3), 1, &["p"]), limits(2, 3))]
// At the ceiling: it goes up with the floor.
#[case::at_the_ceiling(hpa(limits(1, 1), None), web(1), record(limits(1, 1), 1, &["p"]), limits(2, 2))]
// Scaled above the floor by load: the floor goes one above the replicas.
#[case::above_the_floor(hpa(limits(2, 10), None), web(5), record(limits(2, 10), 5, &["p"]), limits(6, 10))]
// A second pod within maxSurge 2 keeps the base.
#[case::second(surged(record(limits(1, 5), 3, &["a"])), with_surge(web(4), IntOrString::Int(2), IntOrString::Int(0)), record(limits(1, 5), 3, &["a", "p"]), limits(5, 5))]
// After an abandoned surge: from the user's floor, the abandoned pod kept in the record.
#[case::after_abandon(hpa(limits(4, 6), Some(abandoned(limits(4, 6), &["a"]))), web(4), HpaSurgeRecord { abandoned: vec![pod("a")], ..record(limits(4, 6), 4, &["p"]) }, limits(5, 6))]
fn joins(
    #[case] h: AutoscalerFacts,
    #[case] w: WorkloadFacts,
    #[case] r: HpaSurgeRecord,
    #[case] to: Limits,
) {
    assert_eq!(
        on_activation(&h, &w, &pod("p"), std::time::Duration::ZERO),
        Step::Join(Write {
            from: h.limits,
            to,
            record: Some(r)
        })
    );
}

#[rstest]
// The user's floor stays; the ceiling only the surge raised goes back, never below their floor.
#[case::floor_ceiling_back_to_their_floor(limits(1, 3), 3, &["p", "q"], limits(4, 5), limits(4, 4), limits(4, 4))]
#[case::floor_ceiling_back(limits(1, 1), 1, &["p"], limits(1, 2), limits(1, 1), limits(1, 1))]
#[case::floor_and_ceiling_theirs(limits(1, 1), 1, &["p"], limits(5, 7), limits(5, 7), limits(5, 7))]
// Only their ceiling: it becomes the one to keep; the floor stays raised.
#[case::ceiling_only(limits(1, 3), 1, &["p"], limits(2, 9), limits(1, 9), limits(2, 9))]
#[case::no_change(limits(1, 3), 1, &["p"], limits(2, 3), limits(0, 0), limits(0, 0))]
fn user_changes(
    #[case] before: Limits,
    #[case] base: i32,
    #[case] pods: &[&str],
    #[case] now: Limits,
    #[case] kept: Limits,
    #[case] written: Limits,
) {
    let r = record(before, base, pods);
    match taken_over(now, &r) {
        None => assert_eq!(kept, limits(0, 0), "a change was expected"),
        Some((next, to, taken)) => {
            assert_eq!((next.before, to), (kept, written));
            if taken == Taken::Floor {
                assert!(next.pods.is_empty() && next.abandoned.len() == pods.len());
            } else {
                assert_eq!(next.pods.len(), pods.len());
            }
        }
    }
}

fn settled(write: Write, finished: usize, undone: usize, taken: Option<Taken>) -> Option<Settle> {
    Some(Settle {
        write,
        finished,
        undone,
        taken,
    })
}

fn w(from: Limits, to: Limits, record: Option<HpaSurgeRecord>) -> Write {
    Write { from, to, record }
}

#[rstest]
#[case::nothing_recorded(hpa(limits(1, 3), None), vec![], None)]
#[case::pending(surged(record(limits(1, 3), 1, &["a"])), vec![("a", Fate::Pending)], None)]
#[case::gone_restores(surged(record(limits(1, 3), 1, &["a"])), vec![("a", Fate::Gone)], settled(w(limits(2, 3), limits(1, 3), None), 1, 0, None))]
#[case::gone_restores_the_ceiling(surged(record(limits(1, 1), 1, &["a"])), vec![("a", Fate::Gone)], settled(w(limits(2, 2), limits(1, 1), None), 1, 0, None))]
#[case::canceled_undoes(surged(record(limits(1, 3), 1, &["a"])), vec![("a", Fate::Kept)], settled(w(limits(2, 3), limits(1, 3), None), 0, 1, None))]
#[case::one_of_two_gone(surged(record(limits(1, 5), 3, &["a", "b"])), vec![("a", Fate::Gone), ("b", Fate::Pending)], settled(w(limits(5, 5), limits(4, 5), Some(record(limits(1, 5), 3, &["b"]))), 1, 0, None))]
// Someone else set the floor: drop the surge, keep their floor, put back the ceiling it raised.
#[case::floor_taken(hpa(limits(1, 2), Some(record(limits(1, 1), 1, &["a"]))), vec![("a", Fate::Pending)], settled(w(limits(1, 2), limits(1, 1), Some(abandoned(limits(1, 1), &["a"]))), 0, 0, Some(Taken::Floor)))]
#[case::ceiling_taken(hpa(limits(2, 9), Some(record(limits(1, 3), 1, &["a"]))), vec![("a", Fate::Pending)], settled(w(limits(2, 9), limits(2, 9), Some(record(limits(1, 9), 1, &["a"]))), 0, 0, Some(Taken::Ceiling)))]
// Abandoned pods are forgotten once gone, without touching the limits.
#[case::abandoned_pending(hpa(limits(4, 4), Some(abandoned(limits(4, 4), &["a"]))), vec![("a", Fate::Pending)], None)]
#[case::abandoned_gone(hpa(limits(4, 4), Some(abandoned(limits(4, 4), &["a"]))), vec![("a", Fate::Gone)], settled(w(limits(4, 4), limits(4, 4), None), 0, 0, None))]
fn settle_rows(
    #[case] h: AutoscalerFacts,
    #[case] fates: Vec<(&str, Fate)>,
    #[case] expected: Option<Settle>,
) {
    let fates: Vec<(SurgedPod, Fate)> = fates.into_iter().map(|(u, f)| (pod(u), f)).collect();
    assert_eq!(settle(&h, &fates), expected);
}

#[rstest]
#[case::below_the_raised_floor(3, 4, Some(4))]
#[case::two_below(3, 5, Some(5))]
#[case::at_it(4, 4, None)]
#[case::above_it(6, 4, None)]
#[case::scaled_to_zero(0, 4, None)]
fn scale_to_floor_rows(#[case] replicas: i32, #[case] floor: i32, #[case] expected: Option<i32>) {
    assert_eq!(scale_to_floor(replicas, floor), expected);
}

/// A row's expected hand-over: the record's pods, the limits written, the pods taken in.
type HandedOver<'a> = Option<(&'a [&'a str], Limits, &'a [&'a str])>;

/// A Deployment of `replicas` with maxSurge `n`.
fn surging(n: i32, replicas: i32) -> WorkloadFacts {
    with_surge(web(replicas), IntOrString::Int(n), IntOrString::Int(0))
}

#[rstest]
// The place of a pod gone goes to the pod waiting: the floor stays raised.
#[case::gone_to_the_waiting(surged(record(limits(3, 6), 3, &["a"])), surging(1, 4), &[("a", Fate::Gone)], &["b"], Some((&["b"][..], limits(4, 6), &["b"][..])))]
#[case::nobody_waiting(surged(record(limits(3, 6), 3, &["a"])), surging(1, 4), &[("a", Fate::Gone)], &[], None)]
#[case::first_come_first(surged(record(limits(3, 6), 3, &["a"])), surging(1, 4), &[("a", Fate::Gone)], &["b", "c"], Some((&["b"][..], limits(4, 6), &["b"][..])))]
// At the ceiling: the ceiling the surge raised stays raised with the floor.
#[case::raised_ceiling_stays(surged(record(limits(3, 3), 3, &["a"])), surging(1, 4), &[("a", Fate::Gone)], &["b"], Some((&["b"][..], limits(4, 4), &["b"][..])))]
// Two places finished, one taken: the other is given back.
#[case::more_places_than_waiting(surged(record(limits(3, 6), 3, &["a", "b"])), surging(2, 5), &[("a", Fate::Gone), ("b", Fate::Gone)], &["c"], Some((&["c"][..], limits(4, 6), &["c"][..])))]
#[case::one_of_two_gone(surged(record(limits(3, 6), 3, &["a", "b"])), surging(2, 5), &[("a", Fate::Gone), ("b", Fate::Pending)], &["c", "d"], Some((&["b", "c"][..], limits(5, 6), &["c"][..])))]
// A canceled request's place is given back: its pod stays.
#[case::canceled_given_back(surged(record(limits(3, 6), 3, &["a"])), surging(1, 4), &[("a", Fate::Kept)], &["b"], None)]
// maxSurge lowered during the surge: no place beyond it.
#[case::max_surge_lowered(surged(record(limits(3, 6), 3, &["a", "b"])), surging(1, 5), &[("a", Fate::Gone), ("b", Fate::Pending)], &["c"], None)]
// A pod the surge covers or abandoned is not taken in again.
#[case::covered_not_taken(surged(record(limits(3, 6), 3, &["a", "b"])), surging(2, 5), &[("a", Fate::Gone), ("b", Fate::Pending)], &["b"], None)]
#[case::abandoned_not_taken(hpa(limits(4, 6), Some(HpaSurgeRecord { abandoned: vec![pod("x")], ..record(limits(3, 6), 3, &["a"]) })), surging(1, 4), &[("a", Fate::Gone), ("x", Fate::Pending)], &["x"], None)]
// Someone else set the floor: the surge is abandoned, nothing handed over.
#[case::floor_taken(hpa(limits(5, 6), Some(record(limits(3, 6), 3, &["a"]))), surging(1, 5), &[("a", Fate::Gone)], &["b"], None)]
// Only while the Deployment has the replicas the surge wants (the autoscaler did not scale it
// below): otherwise the floor goes back and the waiting pod joins as any other.
#[case::below_the_surge(surged(record(limits(3, 6), 3, &["a"])), surging(1, 3), &[("a", Fate::Gone)], &["b"], None)]
// A Deployment it would not surge any more, or another workload: the place is given back.
#[case::paused(surged(record(limits(3, 6), 3, &["a"])), with_facts(surging(1, 4), |f| f.paused = true), &[("a", Fate::Gone)], &["b"], None)]
#[case::rolling_out(surged(record(limits(3, 6), 3, &["a"])), with_facts(surging(1, 4), |f| f.updated_replicas = 1), &[("a", Fate::Gone)], &["b"], None)]
#[case::no_max_surge(surged(record(limits(3, 6), 3, &["a"])), with_surge(web(4), IntOrString::Int(0), IntOrString::Int(1)), &[("a", Fate::Gone)], &["b"], None)]
#[case::statefulset(surged(record(limits(3, 6), 3, &["a"])), statefulset(4, 4), &[("a", Fate::Gone)], &["b"], None)]
fn hand_over_rows(
    #[case] h: AutoscalerFacts,
    #[case] w: WorkloadFacts,
    #[case] fates: &[(&str, Fate)],
    #[case] waiting: &[&str],
    #[case] expected: HandedOver<'_>,
) {
    let fates: Vec<(SurgedPod, Fate)> = fates.iter().map(|(u, f)| (pod(u), *f)).collect();
    let waiting: Vec<SurgedPod> = waiting.iter().map(|u| pod(u)).collect();
    let s = settle(&h, &fates).expect("a settling write");
    let got = hand_over(&h, &w, &s, &waiting);
    let expected = expected.map(|(pods, to, taken)| {
        let r = h.record.clone().unwrap().unwrap();
        let next = HpaSurgeRecord {
            pods: pods.iter().map(|u| pod(u)).collect(),
            ..r
        };
        (
            Settle {
                write: Write {
                    from: h.limits,
                    to,
                    record: Some(next),
                },
                ..s.clone()
            },
            taken.iter().map(|u| pod(u)).collect::<Vec<_>>(),
        )
    });
    assert_eq!(got, expected);
}
