//! Rows for `after_eviction` (SPEC 2.3 step 8, after the Eviction API call), and for telling
//! the imperative interceptor's selection with the outcome of the call it made in the same pass.

use std::time::Duration;

use rstest::rstest;

use super::*;
use crate::controller::eviction_request::backoff::{backoff, next_attempt_at};
use crate::controller::eviction_request::decide;
use crate::controller::eviction_request::fixtures::{IMP, pod, request, t};

fn failed(retry_after: Option<u64>) -> EvictionOutcome {
    EvictionOutcome::Failed {
        status_code: 429,
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        retry_after: retry_after.map(Duration::from_secs),
    }
}

/// A call refused at t(110) for a request whose imperative turn started at t(100), with `before`
/// earlier failures (the last at t(50)), folded in as the budgets say after the call.
fn refused_at_110(before: i32, retry_after: Option<u64>, budgets: Allowance) -> Decision {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .started(IMP, t(100))
        .failures(before, Some(t(50)))
        .build();
    after_eviction(
        &r,
        failed(retry_after),
        t(110),
        &DecideSettings::default(),
        budgets,
    )
}

#[rstest]
// counter before, outcome retry-after, counter after, requeue seconds (the earlier of the retry
// and the controller's next heartbeat, due at t(700))
#[case::first_failure_backs_off_one_second(0, None, 1, 1)]
#[case::fifth_failure_doubles(4, None, 5, 16)]
#[case::retry_after_longer_than_backoff_wins(0, Some(30), 1, 30)]
#[case::backoff_longer_than_retry_after_wins(9, Some(30), 10, 512)]
#[case::capped_at_1000s_but_heartbeat_first(40, None, 41, 590)]
fn step8_failure_counts_and_backs_off(
    #[case] before: i32,
    #[case] retry_after: Option<u64>,
    #[case] after: i32,
    #[case] requeue: u64,
) {
    let d = refused_at_110(before, retry_after, Allowance::Unknown);
    let status = d.status.unwrap();
    let eviction = status.pod_eviction_status.as_ref().unwrap();
    assert_eq!(eviction.failed_api_eviction_counter, after);
    assert_eq!(
        eviction.last_failure_time.as_ref().map(|t| t.0),
        Some(t(110))
    );
    let entry = status.interceptor(IMP).unwrap();
    assert_eq!(
        entry.message.as_deref(),
        Some(
            format!(
                "Could not evict a pod due to failing eviction requests, number of retries: {after}"
            )
            .as_str()
        )
    );
    // 10 s after the last heartbeat: too soon for another (60 s rule).
    assert_eq!(entry.heartbeat_time.as_ref().map(|t| t.0), Some(t(100)));
    assert_eq!(d.requeue_after, Some(Duration::from_secs(requeue)));
    assert_eq!(d.events.len(), 1);
    assert_eq!(
        (d.events[0].reason, d.events[0].type_),
        ("EvictionFailed", EventType::Warning)
    );
    assert!(d.events[0].note.contains("429"), "{}", d.events[0].note);
    // The backoff is recoverable from the status alone (restart).
    let at = next_attempt_at(&status, Duration::from_secs(1), Duration::from_secs(1000));
    let backoff = backoff(after, Duration::from_secs(1), Duration::from_secs(1000));
    assert_eq!(at, t(110).checked_add(backoff).ok());
}

#[rstest]
// counter before, what the watched budgets say after the call, requeue seconds (and the event's
// "next in")
#[case::refusing_budget_holds_the_first_retry(0, Allowance::Refuses, 10, "10s")]
#[case::refusing_budget_leaves_a_longer_backoff(5, Allowance::Refuses, 32, "32s")]
#[case::allowing_budget_cuts_a_long_backoff(8, Allowance::Allows, 2, "2s")]
#[case::allowing_budget_leaves_a_shorter_one(0, Allowance::Allows, 1, "1s")]
#[case::no_budget_keeps_the_backoff(0, Allowance::NoBudget, 1, "1s")]
#[case::unknown_keeps_the_backoff(3, Allowance::Unknown, 8, "8s")]
fn step8_failure_waits_as_the_budgets_say(
    #[case] before: i32,
    #[case] budgets: Allowance,
    #[case] requeue: u64,
    #[case] next: &str,
) {
    let d = refused_at_110(before, None, budgets);
    assert_eq!(d.requeue_after, Some(Duration::from_secs(requeue)));
    let note = &d.events[0].note;
    assert!(note.ends_with(&format!("next in {next}.")), "{note}");
    // The pass that wakes then makes the call: the same schedule, read back from the status.
    let status = d.status.unwrap();
    let at = retry_at(
        &status,
        Duration::from_secs(1),
        Duration::from_secs(1000),
        budgets,
    );
    assert_eq!(at, t(110 + requeue as i64).into());
}

#[test]
fn step8_failure_heartbeats_when_a_minute_passed() {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .started(IMP, t(0))
        .build();
    let d = after_eviction(
        &r,
        failed(None),
        t(61),
        &DecideSettings::default(),
        Allowance::Unknown,
    );
    let status = d.status.unwrap();
    assert_eq!(
        status
            .interceptor(IMP)
            .unwrap()
            .heartbeat_time
            .as_ref()
            .map(|t| t.0),
        Some(t(61))
    );
}

#[test]
fn step8_failure_while_imperative_not_active_only_counts() {
    // The request moved on (e.g. an interceptor was added by hand): S4 forbids touching the entry.
    let r = request("uid").targets(&[]).all_processed().build();
    let d = after_eviction(
        &r,
        failed(None),
        t(10),
        &DecideSettings::default(),
        Allowance::Unknown,
    );
    let status = d.status.unwrap();
    assert_eq!(status.failed_evictions(), 1);
    assert_eq!(status.interceptor(IMP).unwrap().message, None);
    assert_eq!(d.requeue_after, Some(Duration::from_secs(1)));
}

#[test]
fn step8_success_waits_for_the_pod_to_go() {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .started(IMP, t(100))
        .failures(2, Some(t(90)))
        .build();
    let d = after_eviction(
        &r,
        EvictionOutcome::Evicted,
        t(101),
        &DecideSettings::default(),
        Allowance::Unknown,
    );
    // Not Evicted yet, nothing written: the pod's change triggers the next step.
    assert_eq!(d.status, None, "a success writes no status");
    assert_eq!(
        d.events
            .iter()
            .map(|e| (e.reason, e.note.as_str()))
            .collect::<Vec<_>>(),
        [(
            "Evicted",
            "Pod ns/p was evicted through the Eviction API; waiting for it to terminate."
        )]
    );
    assert_eq!(d.requeue_after, None);
    assert_eq!(d.action, None);
}

#[test]
fn step8_pod_gone_is_evicted_at_once() {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .started(IMP, t(100))
        .build();
    let d = after_eviction(
        &r,
        EvictionOutcome::PodGone,
        t(101),
        &DecideSettings::default(),
        Allowance::Unknown,
    );
    let status = d.status.unwrap();
    let c = status.condition("Evicted").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "PodDeleted")
    );
    assert!(status.active_interceptors.is_empty());
    assert_eq!(
        d.events.iter().map(|e| e.reason).collect::<Vec<_>>(),
        ["Evicted"]
    );
    assert_eq!(d.requeue_after, None);
}

#[rstest]
#[case::failed(failed(Some(5)))]
#[case::evicted(EvictionOutcome::Evicted)]
#[case::gone(EvictionOutcome::PodGone)]
fn step8_terminal_request_is_left_alone(#[case] outcome: EvictionOutcome) {
    let r = request("uid")
        .targets(&[])
        .condition("Canceled", "NoRequesters")
        .build();
    assert!(
        after_eviction(
            &r,
            outcome,
            t(5),
            &DecideSettings::default(),
            Allowance::Unknown
        )
        .is_noop()
    );
}

/// The events of one pass: decide, hold the selection, the call's outcome, fold it in.
fn one_pass(request: &EvictionRequest, outcome: EvictionOutcome) -> (Decision, Vec<EventSpec>) {
    let settings = DecideSettings::default();
    let mut first = decide(request, Some(&pod("p").build()), t(5), &settings);
    let held = hold_imperative_selection(&mut first);
    let mut followup = after_eviction(request, outcome, t(6), &settings, Allowance::Unknown);
    if let Some(selection) = held {
        tell_selection_with_outcome(&mut followup, selection);
    }
    (first, followup.events)
}

#[rstest]
// request, outcome, the pass's events (reason, type, note prefix)
#[case::first_sight_evicted_is_one_event(
    request("uid").build(), EvictionOutcome::Evicted,
    &[("Evicted", EventType::Normal, "Interceptor imperative-eviction.k8s.io selected (1 of 1); pod ns/p was evicted through the Eviction API; waiting for it to terminate.")])]
#[case::first_sight_refused_is_one_warning(
    request("uid").build(), failed(None),
    &[("EvictionFailed", EventType::Warning, "Interceptor imperative-eviction.k8s.io selected (1 of 1); eviction of Pod ns/p failed (429: ")])]
#[case::first_sight_pod_gone_is_one_event(
    request("uid").build(), EvictionOutcome::PodGone,
    &[("Evicted", EventType::Normal, "Interceptor imperative-eviction.k8s.io selected (1 of 1); ")])]
#[case::retry_has_no_selection_to_tell(
    request("uid").targets(&[]).active(IMP).started(IMP, t(0)).failures(1, Some(t(0))).build(), failed(None),
    &[("EvictionFailed", EventType::Warning, "Eviction of Pod ns/p failed (429: ")])]
#[case::completion_and_selection_told_with_the_eviction(
    request("uid").targets(&["a.b"]).active("a.b").completed("a.b", t(2)).build(), EvictionOutcome::Evicted,
    &[("Evicted", EventType::Normal, "Interceptor a.b completed; interceptor imperative-eviction.k8s.io selected (2 of 2); pod ns/p was evicted through the Eviction API")])]
#[case::completion_and_selection_told_with_the_refusal(
    request("uid").targets(&["a.b"]).active("a.b").completed("a.b", t(2)).build(), failed(None),
    &[("EvictionFailed", EventType::Warning, "Interceptor a.b completed; interceptor imperative-eviction.k8s.io selected (2 of 2); eviction of Pod ns/p failed (429: ")])]
#[case::a_timed_out_switch_stays_a_warning_of_its_own(
    request("uid").deadline_seconds(1).targets(&["a.b"]).active("a.b").build(), EvictionOutcome::Evicted,
    &[("Evicted", EventType::Normal, "Pod ns/p was evicted through the Eviction API")])]
fn the_selection_is_told_with_the_outcome(
    #[case] request: EvictionRequest,
    #[case] outcome: EvictionOutcome,
    #[case] expected: &[(&str, EventType, &str)],
) {
    let (first, events) = one_pass(&request, outcome);
    assert!(first.action.is_some(), "the pass evicts");
    assert!(
        first
            .events
            .iter()
            .all(|e| e.reason != "InterceptorSelected"),
        "{:?}",
        first.events
    );
    let got: Vec<_> = events.iter().map(|e| (e.reason, e.type_)).collect();
    let want: Vec<_> = expected.iter().map(|(r, ty, _)| (*r, *ty)).collect();
    assert_eq!(got, want, "{events:?}");
    for (e, (_, _, note)) in events.iter().zip(expected) {
        assert!(
            e.note.starts_with(note),
            "{:?} does not start with {note:?}",
            e.note
        );
    }
}

#[test]
fn a_selection_without_a_call_stays_in_its_decision() {
    // A pod interceptor is selected: no call in this pass, nothing held.
    let r = request("uid").build();
    let mut d = decide(
        &r,
        Some(&pod("p").interceptors(&["a.b"]).build()),
        t(5),
        &DecideSettings::default(),
    );
    let before = d.clone();
    assert_eq!(hold_imperative_selection(&mut d), None);
    assert_eq!(d, before);
}

#[test]
fn a_held_selection_is_told_alone_when_the_outcome_tells_nothing() {
    let selection = EventSpec {
        reason: "InterceptorSelected",
        type_: EventType::Normal,
        note: "Interceptor imperative-eviction.k8s.io selected (1 of 1).".into(),
    };
    let mut followup = Decision::default();
    tell_selection_with_outcome(&mut followup, selection.clone());
    assert_eq!(followup.events, vec![selection]);
}

/// The pod gone after the imperative interceptor's eviction: the conclusion's `Evicted` event is
/// dropped when this controller told that eviction already, kept otherwise; the status
/// (`Evicted=True`) is written either way.
#[rstest]
#[case::told_by_this_controller(true, &[])]
#[case::gone_some_other_way(false, &["Evicted"])]
fn a_told_eviction_is_not_told_again(#[case] told: bool, #[case] events: &[&str]) {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .started(IMP, t(100))
        .build();
    let mut d = decide(&r, None, t(110), &DecideSettings::default());
    drop_told_evicted(&mut d, told);
    let reasons: Vec<&str> = d.events.iter().map(|e| e.reason).collect();
    assert_eq!(reasons, events);
    assert!(d.status.unwrap().is_true(crate::api::CONDITION_EVICTED));
}

/// The pod gone after this controller's own eviction: a request owned by its pod is left to the
/// garbage collector for [`COLLECTION_GRACE`] after the pod was found gone (at `t(110)`), then
/// written; the interceptor turns that ended with the pod are counted once, when it is put off.
/// Found gone at t(110); the grace ends at t(113).
#[rstest]
// told, owner UID, now, written, requeue seconds, processed counted
#[case::own_eviction_owned_request_left_to_the_collector(true, Some("uid"), 110, false, Some(3), 1)]
#[case::still_within_the_grace(true, Some("uid"), 112, false, Some(1), 1)]
#[case::still_there_after_the_grace_is_written(true, Some("uid"), 113, true, None, 0)]
#[case::pod_gone_some_other_way_is_written_at_once(false, Some("uid"), 110, true, None, 1)]
#[case::request_not_owned_by_its_pod_is_written_at_once(true, None, 110, true, None, 1)]
#[case::owned_by_another_pod_is_written_at_once(true, Some("other"), 110, true, None, 1)]
fn an_owned_request_is_left_to_the_garbage_collector(
    #[case] told: bool,
    #[case] owner: Option<&str>,
    #[case] now: i64,
    #[case] written: bool,
    #[case] requeue: Option<u64>,
    #[case] processed: usize,
) {
    let mut r = request("uid").targets(&[]).active(IMP).started(IMP, t(100));
    if let Some(uid) = owner {
        r = r.owned_by(uid);
    }
    let r = r.build();
    let mut d = decide(&r, None, t(now), &DecideSettings::default());
    drop_told_evicted(&mut d, told);
    leave_to_collector(&mut d, &r, told, Some(t(110)), t(now));
    assert_eq!(
        d.status
            .as_ref()
            .is_some_and(|s| s.is_true(crate::api::CONDITION_EVICTED)),
        written
    );
    assert_eq!(d.requeue_after, requeue.map(Duration::from_secs), "{d:#?}");
    assert_eq!(d.processed.len(), processed, "{d:#?}");
}

/// Only a decision that does nothing but conclude `Evicted=True` is put off: an already ended
/// request's clean-up, or a request the collector will not delete, is left as decided.
#[test]
fn an_ended_request_is_never_put_off() {
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .condition("Evicted", "PodDeleted")
        .owned_by("uid")
        .build();
    let mut d = decide(&r, None, t(110), &DecideSettings::default());
    let before = d.clone();
    leave_to_collector(&mut d, &r, true, Some(t(110)), t(110));
    assert_eq!(d, before);
}
