//! Rows for the registration part of `decide_with` (SPEC 5.5), per `--interceptor-registration`
//! mode: the warning event when an unregistered interceptor becomes active, the pass-over after
//! the grace under `enforce` (reason `NotRegistered`), and what stays as before.

use std::time::Duration;

use rstest::rstest;

use super::*;
use crate::api::{Registration, RegistrationMode};
use crate::controller::eviction_request::fixtures::{IMP, pod, request, t};

fn settings(mode: RegistrationMode) -> DecideSettings {
    DecideSettings {
        interceptor_registration: mode,
        unregistered_interceptor_grace: Duration::from_secs(60),
        ..DecideSettings::default()
    }
}

/// `a.b` is registered, `typo.example.com` is not, anything else is unknown.
fn known(name: &str) -> Registration {
    match name {
        "a.b" => Registration::Registered,
        "typo.example.com" => Registration::NotRegistered,
        _ => Registration::Unknown,
    }
}

fn run(r: &EvictionRequest, now: i64, mode: RegistrationMode) -> Decision {
    let s = Surroundings {
        node_agent: false,
        registration: &known,
        budgets: crate::cluster::Allowance::Unknown,
        unreachable_until: None,
    };
    decide_with(r, Some(&pod("p").build()), &s, t(now), &settings(mode))
}

fn reasons(d: &Decision) -> Vec<&'static str> {
    d.events.iter().map(|e| e.reason).collect()
}

use RegistrationMode::{Enforce, Off, Warn};

/// Activation of `name` (first in the targets) at t(5).
#[rstest]
#[case::warn_unregistered_told(Warn, "typo.example.com", &["InterceptorSelected", "UnregisteredInterceptor"], Some(1200))]
#[case::enforce_unregistered_told_requeue_at_grace(Enforce, "typo.example.com", &["InterceptorSelected", "UnregisteredInterceptor"], Some(60))]
#[case::off_unregistered_silent(Off, "typo.example.com", &["InterceptorSelected"], Some(1200))]
#[case::warn_registered_silent(Warn, "a.b", &["InterceptorSelected"], Some(1200))]
#[case::enforce_unknown_silent(Enforce, "unknown.example.com", &["InterceptorSelected"], Some(1200))]
fn activation(
    #[case] mode: RegistrationMode,
    #[case] name: &str,
    #[case] events: &[&str],
    #[case] requeue: Option<u64>,
) {
    let r = request("uid").targets(&[name]).build();
    let d = run(&r, 5, mode);
    assert_eq!(d.status.as_ref().unwrap().active_interceptors, [name]);
    assert_eq!(reasons(&d), events);
    assert_eq!(d.requeue_after, requeue.map(Duration::from_secs));
    if events.len() == 2 {
        let note = &d.events[1].note;
        let cost = match mode {
            Enforce => "passed over at 2025-01-01T00:01:05Z unless it completes (1m grace",
            _ => "holds the pod until its heartbeat deadline (20m)",
        };
        assert!(note.contains(cost), "{note}");
        assert_eq!(d.events[1].type_, EventType::Warning);
    }
}

/// An unregistered interceptor active since t(0), looked at `now`.
#[rstest]
#[case::enforce_within_grace_waits(Enforce, "typo.example.com", 59, None, Some(1))]
#[case::enforce_after_grace_passed_over(
    Enforce,
    "typo.example.com",
    60,
    Some(ProcessedReason::NotRegistered),
    None
)]
#[case::warn_after_grace_keeps_turn(Warn, "typo.example.com", 60, None, Some(1140))]
#[case::off_after_grace_keeps_turn(Off, "typo.example.com", 60, None, Some(1140))]
#[case::enforce_registered_keeps_its_deadline(Enforce, "a.b", 600, None, Some(600))]
#[case::enforce_unknown_keeps_its_deadline(Enforce, "unknown.example.com", 600, None, Some(600))]
#[case::enforce_unknown_looks_again_at_grace_end(
    Enforce,
    "unknown.example.com",
    30,
    None,
    Some(30)
)]
#[case::warn_unknown_waits_for_the_deadline(Warn, "unknown.example.com", 30, None, Some(1170))]
#[case::enforce_registered_times_out_at_deadline(
    Enforce,
    "a.b",
    1200,
    Some(ProcessedReason::TimedOut),
    None
)]
#[case::warn_unregistered_times_out_at_deadline(
    Warn,
    "typo.example.com",
    1200,
    Some(ProcessedReason::TimedOut),
    None
)]
#[case::enforce_unregistered_past_deadline_is_not_registered(
    Enforce,
    "typo.example.com",
    1300,
    Some(ProcessedReason::NotRegistered),
    None
)]
fn active_unregistered(
    #[case] mode: RegistrationMode,
    #[case] name: &str,
    #[case] now: i64,
    #[case] processed: Option<ProcessedReason>,
    #[case] requeue: Option<u64>,
) {
    let r = request("uid")
        .targets(&[name, "next.example.com"])
        .active(name)
        .activated(name, t(0))
        .build();
    let d = run(&r, now, mode);
    assert_eq!(
        d.processed,
        processed
            .map(|p| vec![(name.to_string(), p)])
            .unwrap_or_default()
    );
    if processed.is_none() {
        assert_eq!(d.requeue_after, requeue.map(Duration::from_secs));
        assert!(
            d.status.is_none(),
            "nothing written while it keeps its turn"
        );
    }
}

/// The pass-over: one event naming the reason and the next interceptor, the entry's message says
/// why (unless the interceptor wrote one), the next one activated in the same update.
#[test]
fn enforce_pass_over_event_message_and_next_activation() {
    let r = request("uid")
        .targets(&["typo.example.com", "a.b"])
        .active("typo.example.com")
        .activated("typo.example.com", t(0))
        .build();
    let d = run(&r, 61, Enforce);
    assert_eq!(reasons(&d), ["InterceptorNotRegistered"]);
    assert_eq!(
        d.events[0].note,
        "Interceptor typo.example.com passed over: no EvictionInterceptor registers it, 1m after \
         its activation (--interceptor-registration=enforce); interceptor a.b selected (2 of 3)."
    );
    let s = d.status.unwrap();
    assert_eq!(s.active_interceptors, ["a.b"]);
    assert_eq!(s.processed_interceptors, ["typo.example.com"]);
    assert!(
        s.interceptor("typo.example.com")
            .and_then(|e| e.message.as_deref())
            .is_some_and(|m| m.starts_with("Interceptor typo.example.com passed over"))
    );
    assert_eq!(
        ProcessedReason::NotRegistered.as_str(),
        "not_registered",
        "metric label"
    );
    // Its own message stays.
    let r = request("uid")
        .targets(&["typo.example.com", "a.b"])
        .active("typo.example.com")
        .activated("typo.example.com", t(0))
        .message("typo.example.com", "copying")
        .build();
    let s = run(&r, 61, Enforce).status.unwrap();
    assert_eq!(
        s.interceptor("typo.example.com")
            .unwrap()
            .message
            .as_deref(),
        Some("copying")
    );
}

/// A completed interceptor leaves as completed, registered or not; the imperative interceptor
/// (evictord itself) is never passed over.
#[test]
fn completion_and_imperative_unaffected() {
    let r = request("uid")
        .targets(&["typo.example.com"])
        .active("typo.example.com")
        .activated("typo.example.com", t(0))
        .completed("typo.example.com", t(10))
        .build();
    assert_eq!(
        run(&r, 100, Enforce).processed,
        vec![("typo.example.com".to_string(), ProcessedReason::Completed)]
    );
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .activated(IMP, t(0))
        .started(IMP, t(0))
        .build();
    let s = Surroundings {
        node_agent: false,
        registration: &|_| Registration::NotRegistered,
        budgets: crate::cluster::Allowance::Unknown,
        unreachable_until: None,
    };
    let d = decide_with(&r, Some(&pod("p").build()), &s, t(100), &settings(Enforce));
    assert!(d.processed.is_empty(), "{d:?}");
}
