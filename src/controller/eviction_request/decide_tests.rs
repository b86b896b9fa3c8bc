//! Rows for `decide`, one or more per branch of SPEC 2.3 steps 1–8 (named `stepN_...`).

use std::time::Duration;

use rstest::rstest;

use super::*;
use crate::api::EvictionRequestStatus;
use crate::controller::eviction_request::fixtures::{IMP, pod, request, t};
use crate::controller::eviction_request::{Action, EvictionOutcome, after_eviction};

/// What a row expects. Every field is checked; `active` and `processed` only when `Some`.
#[derive(Clone, Copy, Debug)]
struct Expect {
    /// A status is written.
    written: bool,
    /// The terminal condition (type, reason) of the new status, if any.
    terminal: Option<(&'static str, &'static str)>,
    active: Option<&'static [&'static str]>,
    processed: Option<&'static [&'static str]>,
    events: &'static [&'static str],
    evict: bool,
    /// Seconds until the requeue.
    requeue: Option<u64>,
}

const E: Expect = Expect {
    written: false,
    terminal: None,
    active: None,
    processed: None,
    events: &[],
    evict: false,
    requeue: None,
};

fn settings() -> DecideSettings {
    DecideSettings::default()
}

fn status_of(decision: &Decision, request: &EvictionRequest) -> EvictionRequestStatus {
    decision
        .status
        .clone()
        .or_else(|| request.status.clone())
        .unwrap_or_default()
}

fn check(request: &EvictionRequest, decision: &Decision, expect: Expect) {
    let status = status_of(decision, request);
    assert_eq!(
        decision.status.is_some(),
        expect.written,
        "written: {decision:#?}"
    );
    let terminal = status
        .conditions
        .iter()
        .find(|c| c.status == "True")
        .map(|c| (c.type_.as_str(), c.reason.as_str()));
    assert_eq!(terminal, expect.terminal, "terminal condition");
    if let Some(active) = expect.active {
        assert_eq!(status.active_interceptors, active, "active");
    }
    if let Some(processed) = expect.processed {
        assert_eq!(status.processed_interceptors, processed, "processed");
    }
    let reasons: Vec<&str> = decision.events.iter().map(|e| e.reason).collect();
    assert_eq!(reasons, expect.events, "events");
    assert_eq!(decision.action.is_some(), expect.evict, "action");
    assert_eq!(
        decision.requeue_after,
        expect.requeue.map(Duration::from_secs),
        "requeue"
    );
}

#[rstest]
// Step 1
#[case::step1_terminal_clears_active(
    request("uid").targets(&["x.y"]).active("x.y").condition("Evicted", "PodDeleted").build(),
    Some(pod("p").build()), t(5),
    Expect { written: true, terminal: Some(("Evicted", "PodDeleted")), active: Some(&[]), processed: Some(&[]), ..E })]
#[case::step1_terminal_settled_is_noop(
    request("uid").targets(&["x.y"]).condition("Canceled", "NoRequesters").build(),
    Some(pod("p").build()), t(5),
    Expect { terminal: Some(("Canceled", "NoRequesters")), ..E })]
// Step 2
#[case::step2_pod_not_found_cancels(
    request("uid").build(), None, t(60),
    Expect { written: true, terminal: Some(("Canceled", "ValidationFailed")), events: &["Canceled"], ..E })]
#[case::step2_pod_not_found_young_request_waits(
    request("uid").build(), None, t(4),
    Expect { requeue: Some(6), ..E })]
#[case::step2_pod_other_uid_cancels(
    request("uid").build(), Some(pod("p").uid("successor").build()), t(60),
    Expect { written: true, terminal: Some(("Canceled", "ValidationFailed")), events: &["Canceled"], ..E })]
#[case::step2_pod_deleted_after_first_sight_is_evicted(
    request("uid").targets(&["x.y"]).active("x.y").build(), None, t(5),
    Expect { written: true, terminal: Some(("Evicted", "PodDeleted")), active: Some(&[]), events: &["Evicted"], ..E })]
#[case::step2_successor_after_first_sight_is_evicted(
    request("uid").targets(&["x.y"]).active("x.y").build(), Some(pod("p").uid("successor").build()), t(5),
    Expect { written: true, terminal: Some(("Evicted", "PodDeleted")), active: Some(&[]), events: &["Evicted"], ..E })]
#[case::step2_workload_pod_cancels(
    request("uid").build(), Some(pod("p").workload().build()), t(5),
    Expect { written: true, terminal: Some(("Canceled", "ValidationFailed")), events: &["Canceled"], ..E })]
#[case::step2_succeeded_pod_is_evicted(
    request("uid").targets(&[]).active(IMP).build(), Some(pod("p").phase("Succeeded").build()), t(5),
    Expect { written: true, terminal: Some(("Evicted", "PodTerminated")), active: Some(&[]), events: &["Evicted"], ..E })]
#[case::step2_failed_pod_is_evicted(
    request("uid").build(), Some(pod("p").phase("Failed").build()), t(5),
    Expect { written: true, terminal: Some(("Evicted", "PodTerminated")), events: &["Evicted"], ..E })]
// Step 3
#[case::step3_no_requesters_cancels(
    request("uid").requesters(&[]).targets(&["x.y"]).active("x.y").build(), Some(pod("p").build()), t(5),
    Expect { written: true, terminal: Some(("Canceled", "NoRequesters")), active: Some(&[]), events: &["Canceled"], ..E })]
#[case::step3_no_requesters_but_forbid_goes_on(
    request("uid").requesters(&[]).forbid().targets(&["x.y"]).active("x.y").build(), Some(pod("p").build()), t(5),
    Expect { active: Some(&["x.y"]), requeue: Some(1195), ..E })]
// Step 5 (first sight) with step 7 activating index 0 in the same update
#[case::step5_first_sight_targets_and_activates_first(
    request("uid").build(), Some(pod("p").interceptors(&["a.b", "c.d"]).build()), t(5),
    Expect { written: true, active: Some(&["a.b"]), processed: Some(&[]), events: &["InterceptorSelected"], requeue: Some(1200), ..E })]
#[case::step5_first_sight_without_interceptors_activates_imperative_which_evicts(
    request("uid").build(), Some(pod("p").build()), t(5),
    Expect { written: true, active: Some(&[IMP]), events: &["InterceptorSelected"], evict: true, requeue: Some(600), ..E })]
#[case::step5_first_sight_skips_invalid_names(
    request("uid").build(), Some(pod("p").interceptors(&["Bad", "a.b", IMP, "foo.k8s.io"]).build()), t(5),
    Expect { written: true, active: Some(&["a.b"]), events: &["InterceptorSkipped", "InterceptorSelected"], requeue: Some(1200), ..E })]
// Step 7
#[case::step7_activates_next_unprocessed(
    request("uid").targets(&["a.b", "c.d"]).raw_active(&[], &["a.b"]).build(), Some(pod("p").build()), t(100),
    Expect { written: true, active: Some(&["c.d"]), processed: Some(&["a.b"]), events: &["InterceptorSelected"], requeue: Some(1200), ..E })]
#[case::step7_silent_interceptor_not_yet_expired(
    request("uid").targets(&["a.b"]).active("a.b").activated("a.b", t(0)).build(), Some(pod("p").build()), t(1199),
    Expect { active: Some(&["a.b"]), requeue: Some(1), ..E })]
#[case::step7_heartbeat_moves_deadline(
    request("uid").targets(&["a.b"]).active("a.b").activated("a.b", t(0)).started("a.b", t(10)).heartbeat("a.b", t(1000)).build(), Some(pod("p").build()), t(1300),
    Expect { active: Some(&["a.b"]), requeue: Some(900), ..E })]
#[case::step7_completed_switches_to_next(
    request("uid").targets(&["a.b", "c.d"]).active("a.b").completed("a.b", t(50)).build(), Some(pod("p").build()), t(60),
    Expect { written: true, active: Some(&["c.d"]), processed: Some(&["a.b"]), events: &["InterceptorCompleted"], requeue: Some(1200), ..E })]
#[case::step7_expired_switches_to_next(
    request("uid").targets(&["a.b", "c.d"]).active("a.b").activated("a.b", t(0)).started("a.b", t(10)).build(), Some(pod("p").build()), t(1210),
    Expect { written: true, active: Some(&["c.d"]), processed: Some(&["a.b"]), events: &["InterceptorTimedOut"], requeue: Some(1200), ..E })]
#[case::step7_spec_deadline_expires_sooner(
    request("uid").deadline_seconds(600).targets(&["a.b"]).active("a.b").build(), Some(pod("p").build()), t(600),
    Expect { written: true, active: Some(&[IMP]), processed: Some(&["a.b"]), events: &["InterceptorTimedOut"], evict: true, requeue: Some(300), ..E })]
#[case::step7_last_pod_interceptor_done_activates_imperative(
    request("uid").targets(&["a.b"]).active("a.b").completed("a.b", t(5)).build(), Some(pod("p").build()), t(6),
    Expect { written: true, active: Some(&[IMP]), processed: Some(&["a.b"]), events: &["InterceptorCompleted"], evict: true, requeue: Some(600), ..E })]
#[case::step7_out_of_order_active_is_left_alone(
    request("uid").targets(&["a.b", "c.d"]).raw_active(&["c.d"], &[]).completed("c.d", t(5)).build(), Some(pod("p").build()), t(6),
    Expect { active: Some(&["c.d"]), processed: Some(&[]), ..E })]
#[case::step7_all_processed_waits_for_the_pod(
    request("uid").targets(&["a.b"]).all_processed().build(), Some(pod("p").build()), t(6),
    Expect { active: Some(&[]), ..E })]
#[case::step7_imperative_never_times_out_but_heartbeats(
    request("uid").targets(&[]).active(IMP).started(IMP, t(0)).build(), Some(pod("p").terminating().build()), t(5000),
    Expect { written: true, active: Some(&[IMP]), requeue: Some(600), ..E })]
#[case::step7_imperative_completed_is_processed(
    request("uid").targets(&[]).active(IMP).completed(IMP, t(5)).build(), Some(pod("p").build()), t(6),
    Expect { written: true, active: Some(&[]), processed: Some(&[IMP]), events: &["InterceptorCompleted"], ..E })]
// Step 8
#[case::step8_acts_in_the_update_that_activates_it(
    request("uid").targets(&[]).build(), Some(pod("p").build()), t(6),
    Expect { written: true, active: Some(&[IMP]), events: &["InterceptorSelected"], evict: true, requeue: Some(600), ..E })]
#[case::step8_activated_on_a_terminating_pod_waits(
    request("uid").targets(&[]).build(), Some(pod("p").terminating().build()), t(6),
    Expect { written: true, active: Some(&[IMP]), events: &["InterceptorSelected"], requeue: Some(600), ..E })]
#[case::step8_first_act_starts_and_evicts(
    request("uid").targets(&[]).active(IMP).activated(IMP, t(5)).build(), Some(pod("p").build()), t(6),
    Expect { written: true, active: Some(&[IMP]), evict: true, requeue: Some(600), ..E })]
#[case::step8_terminating_pod_waits_without_a_write_of_its_own(
    request("uid").targets(&[]).active(IMP).started(IMP, t(5)).build(), Some(pod("p").terminating().build()), t(6),
    Expect { requeue: Some(599), ..E })]
#[case::step8_daemonset_pod_is_not_evicted(
    request("uid").targets(&[]).active(IMP).started(IMP, t(5)).build(), Some(pod("p").daemonset().build()), t(6),
    Expect { written: true, requeue: Some(599), ..E })]
#[case::step8_mirror_pod_is_not_evicted(
    request("uid").targets(&[]).active(IMP).started(IMP, t(5)).build(), Some(pod("p").mirror().build()), t(6),
    Expect { written: true, requeue: Some(599), ..E })]
#[case::step8_backoff_pending_waits(
    request("uid").targets(&[]).active(IMP).started(IMP, t(100)).failures(3, Some(t(100))).build(), Some(pod("p").build()), t(102),
    Expect { requeue: Some(2), ..E })]
#[case::step8_backoff_elapsed_evicts(
    request("uid").targets(&[]).active(IMP).started(IMP, t(100)).failures(3, Some(t(100))).build(), Some(pod("p").build()), t(104),
    Expect { evict: true, requeue: Some(596), ..E })]
#[case::step8_eviction_attempt_heartbeats_after_a_minute(
    request("uid").targets(&[]).active(IMP).started(IMP, t(100)).failures(7, Some(t(100))).build(), Some(pod("p").build()), t(164),
    Expect { written: true, evict: true, requeue: Some(600), ..E })]
#[case::step8_unsupported_pod_heartbeat_half_way(
    request("uid").targets(&[]).active(IMP).started(IMP, t(0)).message(IMP, UNSUPPORTED).build(), Some(pod("p").daemonset().build()), t(600),
    Expect { written: true, requeue: Some(600), ..E })]
#[case::step8_unsupported_pod_settled_only_requeues(
    request("uid").targets(&[]).active(IMP).started(IMP, t(0)).message(IMP, UNSUPPORTED).build(), Some(pod("p").daemonset().build()), t(300),
    Expect { requeue: Some(300), ..E })]
fn decide_rows(
    #[case] request: EvictionRequest,
    #[case] pod: Option<CachedPod>,
    #[case] now: Timestamp,
    #[case] expect: Expect,
) {
    let decision = decide(&request, pod.as_ref(), now, &settings());
    check(&request, &decision, expect);
}

const UNSUPPORTED: &str = crate::controller::eviction_request::imperative::UNSUPPORTED_POD_MESSAGE;

#[test]
fn step2_messages_name_the_pod() {
    let d = decide(&request("uid").build(), None, t(60), &settings());
    let status = d.status.unwrap();
    assert_eq!(
        status.conditions[0].message,
        "Target Pod ns/p was not found."
    );
    assert_eq!(status.conditions[0].last_transition_time.0, t(60));
    let d = decide(
        &request("uid").build(),
        Some(&pod("p").workload().build()),
        t(5),
        &settings(),
    );
    assert_eq!(
        d.status.unwrap().conditions[0].message,
        "Target Pod ns/p is part of a Workload/PodGroup. Eviction of such pods is currently not supported."
    );
}

#[rstest]
#[case::pod_labels_added(&[("own", "1")], &[("app", "web")], Some(&[("app", "web"), ("own", "1")][..]))]
#[case::pod_value_wins(&[("app", "old")], &[("app", "web")], Some(&[("app", "web")][..]))]
#[case::request_labels_kept_nothing_to_do(&[("app", "web"), ("own", "1")], &[("app", "web")], None)]
#[case::no_labels_anywhere(&[], &[], None)]
fn step4_labels(
    #[case] request_labels: &[(&str, &str)],
    #[case] pod_labels: &[(&str, &str)],
    #[case] expected: Option<&[(&str, &str)]>,
) {
    let r = request("uid")
        .labels(request_labels)
        .targets(&[])
        .active(IMP)
        .started(IMP, t(0))
        .build();
    let p = pod("p").labels(pod_labels).terminating().build();
    let d = decide(&r, Some(&p), t(1), &settings());
    let expected = expected.map(|l| {
        l.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    });
    assert_eq!(d.labels, expected);
}

#[test]
fn step5_first_sight_lists_names_then_imperative() {
    let p = pod("p").interceptors(&["a.b", "c.d", "a.b"]).build();
    let d = decide(&request("uid").build(), Some(&p), t(5), &settings());
    let status = d.status.unwrap();
    let targets: Vec<&str> = status
        .target_interceptors
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(targets, ["a.b", "c.d", IMP]);
    let names: Vec<&str> = status
        .interceptors
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(names, targets);
    // Only the activated entry carries a time, and only its activationTime (S4).
    assert_eq!(
        status.interceptors[0].activation_time.as_ref().map(|t| t.0),
        Some(t(5))
    );
    assert_eq!(status.interceptors[0].start_time, None);
    assert!(status.interceptors[1..].iter().all(|i| *i
        == InterceptorStatus {
            name: i.name.clone(),
            ..Default::default()
        }));
    assert_eq!(status.observed_generation, Some(1));
}

#[rstest]
#[case::fifteen_fit(15, 15, 0)]
#[case::sixteenth_skipped(17, 15, 2)]
fn step5_cap_at_fifteen(#[case] declared: usize, #[case] kept: usize, #[case] skipped: usize) {
    let names: Vec<String> = (0..declared).map(|i| format!("i{i}.example.com")).collect();
    let (targets, skip) = target_interceptors(names, &[], &[]);
    assert_eq!(targets.len(), kept + 1);
    assert_eq!(targets.last().map(String::as_str), Some(IMP));
    assert_eq!(skip.len(), skipped);
}

#[test]
fn step5_extra_allowlist_is_honoured() {
    let (targets, skipped) =
        target_interceptors(vec!["foo.k8s.io".into()], &[], &["foo.k8s.io".into()]);
    assert_eq!(targets, ["foo.k8s.io", IMP]);
    assert!(skipped.is_empty());
}

/// Step 5 with the implicit interceptors of SPEC 5.3: after the pod's own, before the default one;
/// one the pod declares itself keeps its place; with 15 of its own, the 15th makes room (S1: 16).
#[rstest]
#[case::none(&["a.example.com"], &[], &["a.example.com", IMP], 0)]
#[case::daemonset_after_the_pods_own(&["a.example.com"], &["daemonset.apps.k8s.io"], &["a.example.com", "daemonset.apps.k8s.io", IMP], 0)]
#[case::declared_by_the_pod_first(&["kubelet.k8s.io", "a.example.com"], &["kubelet.k8s.io"], &["kubelet.k8s.io", "a.example.com", IMP], 0)]
#[case::alone(&[], &["kubelet.k8s.io"], &["kubelet.k8s.io", IMP], 0)]
fn step5_implicit_interceptors(
    #[case] declared: &[&str],
    #[case] implicit: &[&str],
    #[case] want: &[&str],
    #[case] skipped: usize,
) {
    let declared = declared.iter().map(|s| s.to_string()).collect();
    let (targets, skip) = target_interceptors(declared, implicit, &[]);
    assert_eq!(targets, want);
    assert_eq!(skip.len(), skipped);
}

#[test]
fn step5_fifteen_own_leave_room_for_the_implicit_one() {
    let names: Vec<String> = (0..15).map(|i| format!("i{i}.example.com")).collect();
    let (targets, skip) = target_interceptors(names, &["daemonset.apps.k8s.io"], &[]);
    assert_eq!(targets.len(), 16, "S1: at most 16");
    assert_eq!(targets[14], "daemonset.apps.k8s.io");
    assert_eq!(skip, ["i14.example.com"]);
}

#[rstest]
#[case::newer_generation_observed(1, 3, Some(3))]
#[case::never_backwards(5, 3, None)]
fn step6_observed_generation(
    #[case] observed: i64,
    #[case] generation: i64,
    #[case] written: Option<i64>,
) {
    let r = request("uid")
        .generation(generation)
        .targets(&["a.b"])
        .active("a.b")
        .observed(observed)
        .build();
    let d = decide(&r, Some(&pod("p").build()), t(5), &settings());
    assert_eq!(d.status.map(|s| s.observed_generation), written.map(Some));
}

#[test]
fn step7_switch_records_processed_reason_and_activation_time() {
    let r = request("uid")
        .targets(&["a.b", "c.d"])
        .active("a.b")
        .build();
    let d = decide(&r, Some(&pod("p").build()), t(1200), &settings());
    assert_eq!(
        d.processed,
        vec![("a.b".to_string(), ProcessedReason::TimedOut)]
    );
    let status = d.status.unwrap();
    assert_eq!(
        status
            .interceptor("c.d")
            .unwrap()
            .activation_time
            .as_ref()
            .map(|t| t.0),
        Some(t(1200))
    );
    // The timed-out interceptor's entry is not touched.
    assert_eq!(
        status.interceptor("a.b"),
        r.status.as_ref().unwrap().interceptor("a.b")
    );
}

#[test]
fn step8_first_act_sets_start_and_heartbeat_and_evicts_with_uid_precondition() {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .activated(IMP, t(5))
        .build();
    let d = decide(&r, Some(&pod("p").build()), t(6), &settings());
    let entry = d.status.as_ref().unwrap().interceptor(IMP).unwrap().clone();
    assert_eq!(entry.start_time.map(|t| t.0), Some(t(6)));
    assert_eq!(entry.heartbeat_time.map(|t| t.0), Some(t(6)));
    assert_eq!(
        d.action,
        Some(Action::Evict {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "uid".into()
        })
    );
}

#[rstest]
#[case::daemonset(pod("p").daemonset().build(), UNSUPPORTED)]
#[case::mirror(pod("p").mirror().build(), UNSUPPORTED)]
fn step8_waiting_messages(#[case] p: CachedPod, #[case] message: &str) {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .started(IMP, t(5))
        .build();
    let d = decide(&r, Some(&p), t(6), &settings());
    let status = d.status.unwrap();
    assert_eq!(
        status.interceptor(IMP).unwrap().message.as_deref(),
        Some(message)
    );
    // The heartbeat is not due yet: only the message changed.
    assert_eq!(
        status
            .interceptor(IMP)
            .unwrap()
            .heartbeat_time
            .as_ref()
            .map(|t| t.0),
        Some(t(5))
    );
}

#[test]
fn fractions_of_a_second_are_dropped_before_writing() {
    let now = t(5).checked_add(Duration::from_millis(700)).unwrap();
    let d = decide(
        &request("uid").build(),
        Some(&pod("p").build()),
        now,
        &settings(),
    );
    let status = d.status.unwrap();
    assert_eq!(
        status
            .interceptor(IMP)
            .unwrap()
            .activation_time
            .as_ref()
            .map(|t| t.0),
        Some(t(5))
    );
}

/// Metric inputs of a decision: `processed` (metric `processed_interceptor`) and
/// `pod_interceptors` (histogram, observed once, on first sight).
#[rstest]
#[case::first_sight_counts_the_pods_interceptors_not_the_imperative(
    request("uid").build(), Some(pod("p").interceptors(&["a.b", "c.d"]).build()), t(1),
    vec![], Some(2))]
#[case::first_sight_of_a_pod_without_interceptors_counts_zero(
    request("uid").build(), Some(pod("p").build()), t(1), vec![], Some(0))]
#[case::later_reconciles_do_not_count_again(
    request("uid").targets(&["a.b"]).active("a.b").build(), Some(pod("p").build()), t(1),
    vec![], None)]
#[case::switch_counts_the_finished_interceptor(
    request("uid").targets(&["a.b", "c.d"]).active("a.b").completed("a.b", t(2)).build(),
    Some(pod("p").build()), t(3), vec![("a.b", ProcessedReason::Completed)], None)]
#[case::pod_gone_while_imperative_active_counts_it_evicted(
    request("uid").targets(&["a.b"]).active(IMP).started(IMP, t(2)).build(), None, t(3),
    vec![(IMP, ProcessedReason::Evicted)], None)]
#[case::pod_gone_during_an_interceptors_turn_counts_it_evicted(
    request("uid").targets(&["a.b"]).active("a.b").build(), None, t(3),
    vec![("a.b", ProcessedReason::Evicted)], None)]
fn metric_inputs(
    #[case] r: EvictionRequest,
    #[case] p: Option<CachedPod>,
    #[case] now: Timestamp,
    #[case] processed: Vec<(&str, ProcessedReason)>,
    #[case] pod_interceptors: Option<usize>,
) {
    let d = decide(&r, p.as_ref(), now, &settings());
    let processed: Vec<(String, ProcessedReason)> = processed
        .into_iter()
        .map(|(n, why)| (n.to_string(), why))
        .collect();
    assert_eq!(d.processed, processed, "processed");
    assert_eq!(d.pod_interceptors, pod_interceptors, "pod_interceptors");
}

#[test]
fn imperative_eviction_of_a_gone_pod_counts_the_imperative_interceptor_evicted() {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .started(IMP, t(2))
        .build();
    let d = after_eviction(
        &r,
        EvictionOutcome::PodGone,
        t(3),
        &settings(),
        crate::cluster::Allowance::Unknown,
    );
    assert_eq!(
        d.processed,
        vec![(IMP.to_string(), ProcessedReason::Evicted)]
    );
}

#[test]
fn a_switch_is_one_event_naming_both_interceptors() {
    let r = request("uid")
        .targets(&["a.b", "c.d"])
        .active("a.b")
        .completed("a.b", t(50))
        .build();
    let d = decide(
        &r,
        Some(&pod("p").build()),
        t(60),
        &DecideSettings::default(),
    );
    let notes: Vec<(&str, &str)> = d
        .events
        .iter()
        .map(|e| (e.reason, e.note.as_str()))
        .collect();
    assert_eq!(
        notes,
        [(
            "InterceptorCompleted",
            "Interceptor a.b completed; interceptor c.d selected (2 of 3)."
        )]
    );
}

const TERMINATING: &str = "Pod ns/p is terminating; waiting for it to be deleted.";

/// A terminating pod's message rides along with a status write made anyway (first sight, a due
/// heartbeat) and never makes one of its own: the pod goes from `deletionTimestamp` to gone in
/// two watch events even with a zero grace period, and a write between them is one too many.
#[rstest]
#[case::with_first_sight(request("uid").build(), t(6), Some(TERMINATING))]
#[case::with_a_due_heartbeat(request("uid").targets(&[]).active(IMP).started(IMP, t(0)).build(), t(5000), Some(TERMINATING))]
#[case::alone_it_is_not_written(request("uid").targets(&[]).active(IMP).started(IMP, t(5)).build(), t(6), None)]
fn step8_terminating_message_rides_along(
    #[case] r: EvictionRequest,
    #[case] now: Timestamp,
    #[case] message: Option<&str>,
) {
    let d = decide(&r, Some(&pod("p").terminating().build()), now, &settings());
    assert_eq!(d.action, None);
    let written = d
        .status
        .as_ref()
        .and_then(|s| s.interceptor(IMP))
        .and_then(|i| i.message.as_deref());
    assert_eq!(written, message);
    assert_eq!(d.status.is_some(), message.is_some());
}

/// An interceptor silent since t(10) (deadline 1200 s: due at t(1210)), looked at t(1300), the
/// controller's watch of the requests last failed at `failed_at`: timed out or still given its
/// turn, and when it is looked at again.
#[rstest]
#[case::no_outage(None, true, None)]
// kube-apiserver unreachable until t(1250): the interceptor gets 1200 s after it.
#[case::outage_over_the_deadline(Some(1250), false, Some(1150))]
// An outage long before the deadline does not move it.
#[case::outage_long_before(Some(5), true, None)]
// Nor one whose end plus the deadline is past.
#[case::outage_ended_a_deadline_ago(Some(100), true, None)]
fn a_heartbeat_deadline_counts_past_an_outage(
    #[case] failed_at: Option<i64>,
    #[case] timed_out: bool,
    #[case] requeue: Option<u64>,
) {
    let r = request("uid")
        .targets(&["a.b", "c.d"])
        .active("a.b")
        .activated("a.b", t(0))
        .started("a.b", t(10))
        .build();
    let s = Surroundings {
        node_agent: false,
        registration: &|_| crate::api::Registration::Unknown,
        budgets: crate::cluster::Allowance::Unknown,
        unreachable_until: failed_at.map(t),
    };
    let d = decide_with(&r, Some(&pod("p").build()), &s, t(1300), &settings());
    assert_eq!(
        d.processed == vec![("a.b".to_string(), ProcessedReason::TimedOut)],
        timed_out,
        "{d:?}"
    );
    if let Some(secs) = requeue {
        assert_eq!(d.requeue_after, Some(Duration::from_secs(secs)), "{d:?}");
    }
}
