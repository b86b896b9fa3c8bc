//! Table tests of the Deployment interceptor's decisions: a row per rule.

use std::time::Duration;

use rstest::rstest;

use super::*;

fn pod(uid: &str) -> SurgedPod {
    SurgedPod {
        name: format!("pod-{uid}"),
        uid: uid.into(),
    }
}

fn record(base: i32, uids: &[&str]) -> SurgeRecord {
    SurgeRecord {
        base,
        pods: uids.iter().map(|u| pod(u)).collect(),
        abandoned: Vec::new(),
    }
}

fn abandoned(base: i32, uids: &[&str]) -> SurgeRecord {
    SurgeRecord {
        base,
        pods: Vec::new(),
        abandoned: uids.iter().map(|u| pod(u)).collect(),
    }
}

fn with_record(f: DeploymentFacts, r: SurgeRecord) -> DeploymentFacts {
    DeploymentFacts {
        record: Ok(Some(r)),
        ..f
    }
}

/// A settled RollingUpdate Deployment of `replicas`, all available, maxSurge 1.
fn facts(replicas: i32) -> DeploymentFacts {
    DeploymentFacts {
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
    }
}

fn surged(base: i32, uids: &[&str], available: i32) -> DeploymentFacts {
    let r = record(base, uids);
    DeploymentFacts {
        replicas: r.expected_replicas(),
        status_replicas: r.expected_replicas(),
        updated_replicas: r.expected_replicas(),
        available_replicas: available,
        record: Ok(Some(r)),
        ..facts(base)
    }
}

fn kind(step: &Step) -> &'static str {
    match step {
        Step::Skip(_) => "skip",
        Step::Join { .. } => "join",
        Step::Wait(_) => "wait",
        Step::Ready(_) => "ready",
        Step::Abandon { .. } => "abandon",
    }
}

#[rstest]
#[case::hpa(DeploymentFacts { hpa: Some("h".into()), ..facts(1) }, "skip", "HorizontalPodAutoscaler h")]
#[case::paused(DeploymentFacts { paused: true, ..facts(1) }, "skip", "is paused")]
#[case::recreate(DeploymentFacts { strategy: Strategy::Recreate, ..facts(1) }, "skip", "Recreate")]
#[case::rollout_old_pods(DeploymentFacts { updated_replicas: 0, ..facts(1) }, "skip", "rollout")]
// A generation not observed yet (the settler's own restore of spec.replicas bumps it too) is
// waited for, not taken for a rollout; past UNOBSERVED_WAIT it is (unobserved_generation_rows).
#[case::not_observed_waits(DeploymentFacts { observed_generation: 3, ..facts(1) }, "wait", "observes generation 4 of Deployment d (observed 3)")]
#[case::not_observed_but_paused(DeploymentFacts { observed_generation: 3, paused: true, ..facts(1) }, "skip", "is paused")]
#[case::max_surge_zero(DeploymentFacts { max_surge: 0, max_unavailable: 1, ..facts(3) }, "skip", "maxSurge 0")]
#[case::bad_annotation(DeploymentFacts { record: Err("x".into()), ..facts(1) }, "skip", "unreadable")]
#[case::first_pod_joins(facts(1), "join", "")]
#[case::no_room(surged(3, &["a"], 3), "wait", "maxSurge 1 is in use by other pods")]
#[case::room_for_second(DeploymentFacts { max_surge: 2, ..surged(3, &["a"], 3) }, "join", "")]
// Our own surge bumped the generation: not a rollout.
#[case::own_surge_not_a_rollout(DeploymentFacts { max_surge: 2, observed_generation: 3, ..surged(3, &["a"], 3) }, "join", "")]
#[case::covered_waiting(surged(1, &["p"], 1), "wait", "from 1 replicas, one more for this pod; waiting until the surge is available")]
#[case::covered_ready(surged(1, &["p"], 2), "ready", "the pod may go")]
#[case::covered_not_observed(DeploymentFacts { observed_generation: 3, ..surged(1, &["p"], 2) }, "wait", "")]
#[case::user_scaled(DeploymentFacts { replicas: 5, ..surged(1, &["p"], 2) }, "abandon", "changed to 5 by someone else")]
#[case::user_scaled_other_pod(DeploymentFacts { replicas: 5, ..surged(1, &["a"], 2) }, "abandon", "expected 2")]
// A pod whose surge was abandoned is not surged again.
#[case::abandoned_pod(with_record(facts(4), abandoned(4, &["p"])), "skip", "changed to 4 by someone else")]
// Others surge from the user's value.
#[case::after_abandon_others_join(with_record(facts(4), abandoned(4, &["a"])), "join", "")]
fn activation_rows(#[case] f: DeploymentFacts, #[case] expected: &str, #[case] text: &str) {
    let step = on_activation(&f, "d", &pod("p"), Duration::ZERO);
    assert_eq!(kind(&step), expected, "{step:?}");
    let message = match &step {
        Step::Skip(m) | Step::Wait(m) | Step::Ready(m) => m.clone(),
        Step::Abandon { message, record } => {
            assert_eq!(record.base, f.replicas, "the user's value is the new base");
            message.clone()
        }
        Step::Join { .. } => String::new(),
    };
    assert!(message.contains(text), "{message:?} lacks {text:?}");
}

/// Progress messages change only with the state: a request's message stays the same while the
/// counts it waits on move (availability, another pod joining or leaving the surge, pods
/// becoming ready).
#[rstest]
// Covered, waiting: availability 1 → 2 of 3 wanted.
#[case::covered_availability_moves(surged(1, &["p", "a"], 1), surged(1, &["p", "a"], 2))]
// Covered, waiting: another pod joins the surge.
#[case::covered_another_pod_joins(DeploymentFacts { max_surge: 2, ..surged(3, &["p"], 3) }, DeploymentFacts { max_surge: 2, ..surged(3, &["p", "a"], 4) })]
// No room: the surge's pods' availability moves.
#[case::no_room_availability_moves(surged(3, &["a"], 3), surged(3, &["a"], 4))]
fn messages_stay_while_the_state_does(
    #[case] before: DeploymentFacts,
    #[case] after: DeploymentFacts,
) {
    let message = |f: &DeploymentFacts| match on_activation(f, "d", &pod("p"), Duration::ZERO) {
        Step::Wait(m) => m,
        other => panic!("not waiting: {other:?}"),
    };
    assert_eq!(message(&before), message(&after));
}

/// A request told that it waits for room keeps that message while the room comes back (the
/// settler's write not observed yet, the ReplicaSet deleting the extra pod); a request told
/// something else, or nothing yet, is told this look's reason.
#[rstest]
#[case::room_then_not_observed(Some(ROOM), NOT_OBSERVED, ROOM)]
#[case::room_then_scaling_down(Some(ROOM), SCALING_DOWN, ROOM)]
#[case::room_then_room(Some(ROOM), ROOM, ROOM)]
#[case::first_look_not_observed(None, NOT_OBSERVED, NOT_OBSERVED)]
#[case::other_wait_then_scaling_down(Some(NOT_OBSERVED), SCALING_DOWN, SCALING_DOWN)]
#[case::other_wait_then_room(Some(NOT_OBSERVED), ROOM, ROOM)]
fn waiting_to_join_rows(#[case] shown: Option<&str>, #[case] wait: &str, #[case] told: &str) {
    let room = no_room("d", 1);
    let real = |m: &str| {
        if m == ROOM {
            room.clone()
        } else {
            m.to_string()
        }
    };
    assert_eq!(
        waiting_to_join(shown.map(real).as_deref(), room.clone(), real(wait)),
        real(told)
    );
}

const ROOM: &str = "<no_room>";
const NOT_OBSERVED: &str = "waiting until the Deployment controller observes generation 5";
const SCALING_DOWN: &str = "waiting until Deployment d has come down to its 3 replicas";

/// The message a join writes is the one the looks after it find: no second write.
#[test]
fn a_join_writes_the_message_the_wait_keeps() {
    let Step::Join { record, .. } = on_activation(&facts(3), "d", &pod("p"), Duration::ZERO) else {
        panic!("no join")
    };
    let after = surged(3, &["p"], 3);
    assert_eq!(after.record, Ok(Some(record.clone())));
    assert_eq!(
        on_activation(&after, "d", &pod("p"), Duration::ZERO),
        Step::Wait(super::surged("d", record.base))
    );
}

/// A wait whose count of ready pods moves keeps its message.
#[test]
fn confirmed_message_has_no_moving_count() {
    let r = record(3, &["p"]);
    let one = confirmed(&r, &[readiness("a", true, false)]);
    let two = confirmed(
        &r,
        &[readiness("a", true, false), readiness("b", true, false)],
    );
    assert!(one.is_err());
    assert_eq!(one, two);
}

#[test]
fn join_adds_one_replica_on_top_of_the_base() {
    let f = DeploymentFacts {
        max_surge: 2,
        ..surged(3, &["a"], 3)
    };
    assert_eq!(
        on_activation(&f, "d", &pod("p"), Duration::ZERO),
        Step::Join {
            record: record(3, &["a", "p"]),
            replicas: 5,
            from: 4
        }
    );
    assert_eq!(
        on_activation(&facts(1), "d", &pod("p"), Duration::ZERO),
        Step::Join {
            record: record(1, &["p"]),
            replicas: 2,
            from: 1
        }
    );
}

#[rstest]
#[case::nothing_recorded(facts(1), vec![], None)]
#[case::pending(surged(1, &["a"], 2), vec![("a", Fate::Pending)], None)]
#[case::gone_restores(surged(1, &["a"], 2), vec![("a", Fate::Gone)], Some(Settle { record: None, replicas: Some((2, 1)), finished: 1, undone: 0, abandoned: false }))]
#[case::canceled_undoes(surged(1, &["a"], 2), vec![("a", Fate::Kept)], Some(Settle { record: None, replicas: Some((2, 1)), finished: 0, undone: 1, abandoned: false }))]
#[case::one_of_two_gone(surged(3, &["a", "b"], 5), vec![("a", Fate::Gone), ("b", Fate::Pending)], Some(Settle { record: Some(record(3, &["b"])), replicas: Some((5, 4)), finished: 1, undone: 0, abandoned: false }))]
// Someone else scaled: drop the record, leave their replicas.
#[case::user_scaled(DeploymentFacts { replicas: 7, ..surged(1, &["a"], 2) }, vec![("a", Fate::Pending)], Some(Settle { record: Some(abandoned(7, &["a"])), replicas: None, finished: 0, undone: 0, abandoned: true }))]
// Abandoned pods are forgotten once gone, without touching replicas.
#[case::abandoned_pending(with_record(facts(7), abandoned(7, &["a"])), vec![("a", Fate::Pending)], None)]
#[case::abandoned_gone(with_record(facts(7), abandoned(7, &["a"])), vec![("a", Fate::Gone)], Some(Settle { record: None, replicas: None, finished: 0, undone: 0, abandoned: false }))]
fn settle_rows(
    #[case] f: DeploymentFacts,
    #[case] fates: Vec<(&str, Fate)>,
    #[case] expected: Option<Settle>,
) {
    let fates: Vec<(SurgedPod, Fate)> = fates.into_iter().map(|(u, f)| (pod(u), f)).collect();
    assert_eq!(settle(&f, &fates), expected);
}

/// A row's expected hand-over: the record's pods, the replicas written, the pods taken in.
type HandedOver<'a> = Option<(&'a [&'a str], Option<(i32, i32)>, &'a [&'a str])>;

fn surge_of(max_surge: i32, f: DeploymentFacts) -> DeploymentFacts {
    DeploymentFacts { max_surge, ..f }
}

#[rstest]
// The place of a pod gone goes to the pod waiting: spec.replicas stays.
#[case::gone_to_the_waiting(surged(1, &["a"], 2), &[("a", Fate::Gone)], &["b"], Some((&["b"][..], None, &["b"][..])))]
#[case::nobody_waiting(surged(1, &["a"], 2), &[("a", Fate::Gone)], &[], None)]
#[case::first_come_first(surged(1, &["a"], 2), &[("a", Fate::Gone)], &["b", "c"], Some((&["b"][..], None, &["b"][..])))]
// Two places finished, one taken: the other is given back.
#[case::more_places_than_waiting(surge_of(2, surged(3, &["a", "b"], 5)), &[("a", Fate::Gone), ("b", Fate::Gone)], &["c"], Some((&["c"][..], Some((5, 4)), &["c"][..])))]
#[case::one_of_two_gone(surge_of(2, surged(3, &["a", "b"], 5)), &[("a", Fate::Gone), ("b", Fate::Pending)], &["c", "d"], Some((&["b", "c"][..], None, &["c"][..])))]
// A canceled request's place is given back: its pod stays.
#[case::canceled_given_back(surged(1, &["a"], 2), &[("a", Fate::Kept)], &["b"], None)]
#[case::gone_and_canceled(surge_of(2, surged(1, &["a", "b"], 3)), &[("a", Fate::Gone), ("b", Fate::Kept)], &["c"], Some((&["c"][..], Some((3, 2)), &["c"][..])))]
// maxSurge lowered during the surge: no place beyond it.
#[case::max_surge_lowered(surged(3, &["a", "b"], 5), &[("a", Fate::Gone), ("b", Fate::Pending)], &["c"], None)]
// A pod the surge covers or abandoned is not taken in again.
#[case::covered_not_taken(surge_of(2, surged(3, &["a", "b"], 5)), &[("a", Fate::Gone), ("b", Fate::Pending)], &["b"], None)]
#[case::user_scaled(DeploymentFacts { replicas: 7, ..surged(1, &["a"], 2) }, &[("a", Fate::Gone)], &["b"], None)]
fn hand_over_rows(
    #[case] f: DeploymentFacts,
    #[case] fates: &[(&str, Fate)],
    #[case] waiting: &[&str],
    #[case] expected: HandedOver<'_>,
) {
    let fates: Vec<(SurgedPod, Fate)> = fates.iter().map(|(u, f)| (pod(u), *f)).collect();
    let waiting: Vec<SurgedPod> = waiting.iter().map(|u| pod(u)).collect();
    let s = settle(&f, &fates).expect("a settling write");
    let got = hand_over(&f, &s, &waiting);
    let expected = expected.map(|(pods, replicas, taken)| {
        let base = f.record.clone().unwrap().unwrap().base;
        (
            Settle {
                record: Some(record(base, pods)),
                replicas,
                ..s.clone()
            },
            taken.iter().map(|u| pod(u)).collect::<Vec<_>>(),
        )
    });
    assert_eq!(got, expected);
}

#[rstest]
#[case::surged(facts(2), true)]
#[case::paused(DeploymentFacts { paused: true, ..facts(2) }, false)]
#[case::autoscaled(DeploymentFacts { hpa: Some("h".into()), ..facts(2) }, false)]
#[case::recreate(DeploymentFacts { strategy: Strategy::Recreate, ..facts(2) }, false)]
#[case::rolling_out(DeploymentFacts { updated_replicas: 1, ..facts(2) }, false)]
#[case::no_max_surge(DeploymentFacts { max_surge: 0, ..facts(2) }, false)]
fn may_hand_over_rows(#[case] f: DeploymentFacts, #[case] may: bool) {
    assert_eq!(may_hand_over(&f, "d"), may);
}

#[rstest]
#[case::just_seen(Duration::ZERO, "wait")]
#[case::within_the_bound(UNOBSERVED_WAIT - Duration::from_secs(1), "wait")]
// The controller may be down: an unobserved generation then counts as a rollout, as before.
#[case::past_the_bound_a_rollout(UNOBSERVED_WAIT, "skip")]
fn unobserved_generation_rows(#[case] unobserved_for: Duration, #[case] expected: &str) {
    let f = DeploymentFacts {
        observed_generation: 3,
        ..facts(1)
    };
    let step = on_activation(&f, "d", &pod("p"), unobserved_for);
    assert_eq!(kind(&step), expected, "{step:?}");
    if expected == "skip" {
        assert_eq!(
            step,
            Step::Skip("no surge: a rollout of Deployment d is in progress".into())
        );
    }
    // The surge's own change of the generation is never waited for.
    let own = DeploymentFacts {
        max_surge: 2,
        observed_generation: 3,
        ..surged(3, &["a"], 3)
    };
    assert_eq!(
        kind(&on_activation(&own, "d", &pod("p"), unobserved_for)),
        "join"
    );
}

fn readiness(uid: &str, ready: bool, terminating: bool) -> PodReadiness {
    PodReadiness {
        uid: uid.into(),
        ready,
        terminating,
    }
}

#[rstest]
// Base 3, pod p covered: the three others are ready.
#[case::enough_without_the_covered(&[("p", true, false), ("a", true, false), ("b", true, false), ("c", true, false)], true)]
// The replacement is not ready yet (the status still counted a deleted one).
#[case::replacement_not_ready(&[("p", true, false), ("a", true, false), ("b", true, false), ("c", false, false)], false)]
// A ready pod being deleted does not count.
#[case::terminating_does_not_count(&[("p", true, false), ("a", true, false), ("b", true, false), ("c", true, true)], false)]
// The covered pod itself never counts.
#[case::covered_does_not_count(&[("p", true, false), ("a", true, false), ("b", true, false)], false)]
fn confirmed_rows(#[case] pods: &[(&str, bool, bool)], #[case] ok: bool) {
    let pods: Vec<PodReadiness> = pods.iter().map(|(u, r, t)| readiness(u, *r, *t)).collect();
    let result = confirmed(&record(3, &["p"]), &pods);
    assert_eq!(result.is_ok(), ok, "{result:?}");
    if let Err(why) = result {
        assert_eq!(
            why,
            "waiting until 3 of its pods the surge does not cover are ready before the pod goes"
        );
    }
}

#[rstest]
#[case::ready(serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}), true, false)]
#[case::not_ready(serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}), false, false)]
#[case::other_condition_only(serde_json::json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}), false, false)]
#[case::no_status(serde_json::json!({}), false, false)]
#[case::terminating(serde_json::json!({"metadata": {"deletionTimestamp": "2026-11-26T00:00:00Z"},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]}}), true, true)]
fn pod_readiness_rows(
    #[case] mut pod: serde_json::Value,
    #[case] ready: bool,
    #[case] terminating: bool,
) {
    pod["metadata"]["uid"] = "u".into();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).unwrap();
    assert_eq!(PodReadiness::of(&pod), readiness("u", ready, terminating));
}

/// The HPA interceptor's form: any base, any cover.
#[rstest]
#[case::base_two_met(2, &[("p", true, false), ("a", true, false), ("b", true, false)], true)]
#[case::base_two_short(2, &[("p", true, false), ("a", true, false), ("b", false, false)], false)]
#[case::base_zero(0, &[], true)]
fn confirmed_over_rows(#[case] base: i32, #[case] pods: &[(&str, bool, bool)], #[case] ok: bool) {
    let pods: Vec<PodReadiness> = pods.iter().map(|(u, r, t)| readiness(u, *r, *t)).collect();
    assert_eq!(confirmed_over(base, |uid| uid == "p", &pods).is_ok(), ok);
}

/// (the pod as read: UID and terminating; `None`: not found), whether the covered pod "u" left.
#[rstest]
#[case::not_found(None, true)]
#[case::running(Some(("u", false)), false)]
#[case::terminating(Some(("u", true)), true)]
#[case::replaced_by_another(Some(("v", false)), true)]
fn has_left_rows(#[case] pod: Option<(&str, bool)>, #[case] left: bool) {
    assert_eq!(has_left(pod, "u"), left);
}

/// A surged Deployment of 1 (spec.replicas 2) with its ReplicaSets counting `status_replicas`
/// active pods, its generation observed or not.
fn counting(status_replicas: i32, observed: bool) -> DeploymentFacts {
    DeploymentFacts {
        status_replicas,
        observed_generation: if observed { 4 } else { 3 },
        ..surged(1, &["a"], 2)
    }
}

/// One row per case of [`counted_out`]: the covered pod `a` is terminating.
#[rstest]
// The ReplicaSet controller has not seen it terminating: it still counts it with the surge pod.
#[case::still_counted(counting(2, true), 1, false)]
// It has: only the surge pod is active.
#[case::counted_out(counting(1, true), 1, true)]
// It has, and already started a replacement (counted again): wait until the pod is gone.
#[case::replaced_already(counting(2, true), 1, false)]
// The Deployment controller has not observed the current generation: its count is not one to trust.
#[case::not_observed(counting(1, false), 1, false)]
// Two covered pods terminating, one counted out so far.
#[case::one_of_two(DeploymentFacts { status_replicas: 2, ..surged(1, &["a", "b"], 3) }, 2, false)]
#[case::both(DeploymentFacts { status_replicas: 1, ..surged(1, &["a", "b"], 3) }, 2, true)]
fn a_terminating_pod_counts_as_gone_once_its_replicasets_counted_it_out(
    #[case] f: DeploymentFacts,
    #[case] terminating: i32,
    #[case] expected: bool,
) {
    assert_eq!(counted_out(&f, terminating), expected);
}

/// One row per case of [`scaling_down`]: a settled Deployment of 3 (spec.replicas 3).
#[rstest]
// As many pods as it wants, by its status and by its pods: a surge may start.
#[case::settled(facts(3), 3, false)]
// Fewer (a pod terminating, its replacement not created yet): nothing to delete, a surge may start.
#[case::short(DeploymentFacts { status_replicas: 2, ..facts(3) }, 2, false)]
// Its status still counts the pod the lowered count makes extra.
#[case::status_over(DeploymentFacts { status_replicas: 4, ..facts(3) }, 3, true)]
// Its status does not count it yet (the replacement created after the status was written), its
// pods do.
#[case::pods_over(facts(3), 4, true)]
fn a_surge_waits_while_the_deployment_comes_down_to_its_replicas(
    #[case] f: DeploymentFacts,
    #[case] active_pods: usize,
    #[case] waits: bool,
) {
    let why = scaling_down(&f, "d", active_pods);
    assert_eq!(why.is_some(), waits, "{why:?}");
    if let Some(why) = why {
        assert!(why.contains("come down to its 3 replicas"), "{why}");
    }
}

/// A pod of labels `hash` (its pod-template-hash), controlled by `owner` (kind, name).
fn owned_pod(
    hash: Option<&str>,
    owner: Option<(&str, &str)>,
    terminating: bool,
) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    let mut pod = k8s_openapi::api::core::v1::Pod::default();
    pod.metadata.labels = hash.map(|h| [("pod-template-hash".to_string(), h.to_string())].into());
    pod.metadata.owner_references = owner.map(|(kind, name)| {
        vec![OwnerReference {
            kind: kind.into(),
            name: name.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]
    });
    pod.metadata.deletion_timestamp = terminating.then(|| Time(jiff::Timestamp::now()));
    pod
}

/// One row per case of [`active_in`] for Deployment `web`.
#[rstest]
#[case::its_replicaset(owned_pod(Some("abc"), Some(("ReplicaSet", "web-abc")), false), true)]
#[case::terminating(owned_pod(Some("abc"), Some(("ReplicaSet", "web-abc")), true), false)]
// Another Deployment's ReplicaSet whose name starts alike.
#[case::another_deployment(owned_pod(Some("abc"), Some(("ReplicaSet", "web-api-abc")), false), false)]
#[case::another_kind(owned_pod(Some("abc"), Some(("StatefulSet", "web-abc")), false), false)]
#[case::bare(owned_pod(Some("abc"), None, false), false)]
#[case::no_hash(owned_pod(None, Some(("ReplicaSet", "web-abc")), false), false)]
fn a_pod_is_active_in_a_deployment_when_one_of_its_replicasets_controls_it(
    #[case] pod: k8s_openapi::api::core::v1::Pod,
    #[case] active: bool,
) {
    assert_eq!(active_in(&pod, "web"), active);
}

/// The settling write of `f` when its covered pods' fates are `fates`.
fn settling(f: &DeploymentFacts, fates: &[(&str, Fate)]) -> Settle {
    let fates: Vec<(SurgedPod, Fate)> = fates.iter().map(|(u, f)| (pod(u), *f)).collect();
    settle(f, &fates).expect("a settling write")
}

#[rstest]
// A pod of the Deployment is still on a cordoned node: its place is kept for it.
#[case::kept_for_a_pod_due(surged(3, &["a"], 4), &[("a", Fate::Gone)], 1, Duration::ZERO, true)]
#[case::kept_within_the_bound(surged(3, &["a"], 4), &[("a", Fate::Gone)], 2, HOLD_MAX - Duration::from_secs(1), true)]
#[case::given_back_after_the_bound(surged(3, &["a"], 4), &[("a", Fate::Gone)], 1, HOLD_MAX, false)]
#[case::given_back_with_no_pod_due(surged(3, &["a"], 4), &[("a", Fate::Gone)], 0, Duration::ZERO, false)]
// An undone surge gives its place back: its pod stays, nobody is due to take it.
#[case::undone(surged(3, &["a"], 4), &[("a", Fate::Kept)], 1, Duration::ZERO, false)]
#[case::gone_and_undone(surge_of(2, surged(3, &["a", "b"], 5)), &[("a", Fate::Gone), ("b", Fate::Kept)], 1, Duration::ZERO, false)]
// Room left in the surge: a pod that comes raises spec.replicas itself, a kept place would idle.
#[case::room_left(surge_of(2, surged(3, &["a"], 4)), &[("a", Fate::Gone)], 1, Duration::ZERO, false)]
#[case::full_at_max_surge_two(surge_of(2, surged(3, &["a", "b"], 5)), &[("a", Fate::Gone), ("b", Fate::Pending)], 1, Duration::ZERO, true)]
// Someone else scaled, or the Deployment may no longer surge: given back as before.
#[case::user_scaled(DeploymentFacts { replicas: 7, ..surged(3, &["a"], 4) }, &[("a", Fate::Gone)], 1, Duration::ZERO, false)]
#[case::autoscaled(DeploymentFacts { hpa: Some("h".into()), ..surged(3, &["a"], 4) }, &[("a", Fate::Gone)], 1, Duration::ZERO, false)]
#[case::paused(DeploymentFacts { paused: true, ..surged(3, &["a"], 4) }, &[("a", Fate::Gone)], 1, Duration::ZERO, false)]
#[case::rolling_out(DeploymentFacts { updated_replicas: 1, ..surged(3, &["a"], 4) }, &[("a", Fate::Gone)], 1, Duration::ZERO, false)]
fn hold_rows(
    #[case] f: DeploymentFacts,
    #[case] fates: &[(&str, Fate)],
    #[case] due: usize,
    #[case] held_for: Duration,
    #[case] kept: bool,
) {
    let s = settling(&f, fates);
    assert_eq!(hold(&f, "d", &s, due, held_for), kept);
}

#[rstest]
#[case::its_replicaset(Some("h1"), "d-h1", true, true)]
#[case::another_deployments(Some("h1"), "dx-h1", true, false)]
#[case::a_prefix_of_the_name(Some("h1"), "d-h1-x", true, false)]
#[case::not_the_controller(Some("h1"), "d-h1", false, false)]
#[case::no_hash_label(None, "d-h1", true, false)]
fn owned_by_rows(
    #[case] hash: Option<&str>,
    #[case] owner: &str,
    #[case] controller: bool,
    #[case] owned: bool,
) {
    let o = OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: owner.into(),
        uid: "u".into(),
        controller: Some(controller),
        block_owner_deletion: None,
    };
    assert_eq!(owned_by("d", hash, std::iter::once(&o)), owned);
}
