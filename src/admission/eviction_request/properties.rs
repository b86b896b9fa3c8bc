//! Property test of the status rules S1–S6: random sequences of status writes (activations,
//! hand-offs, heartbeats forwards and backwards, edits of `processedInterceptors`, conditions,
//! times near and far from now) are reviewed one after the other, each against the status the
//! previous admitted writes left. Whatever the webhook admits keeps every interceptor's
//! `heartbeatTime` monotonic (never removed, never backwards) and `processedInterceptors`
//! append-only, over the whole sequence and not just pair by pair.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::core::admission::Operation;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::fixtures::{IMP, UID, initialized, now, request, user};
use super::review_eviction_request;
use crate::admission::{ReviewRequest, Settings};
use crate::api::{CONDITION_EVICTED, EvictionRequest, EvictionRequestStatus};
use crate::cluster::StaticView;

/// One edit of a status write; a write is one to three edits.
#[derive(Clone, Debug)]
enum Edit {
    /// Activate target `i` (with its `activationTime`).
    Activate(usize),
    /// Move the active interceptor to `processedInterceptors` and activate the next target.
    HandOff,
    ClearActive,
    PushProcessed(usize),
    PopProcessed,
    ReverseProcessed,
    /// Entry `i`: heartbeat at now + offset seconds.
    Heartbeat(usize, i64),
    /// What an interceptor usually writes: entry `i` started (if it was not) and heartbeating now.
    Beat(usize),
    ClearHeartbeat(usize),
    /// Entry `i`: startTime at now + offset seconds.
    Start(usize, i64),
    /// Entry `i`: completionTime at now + offset seconds.
    Complete(usize, i64),
    Evicted,
}

fn edit() -> impl Strategy<Value = Edit> {
    let entry = 0usize..3;
    let offset = prop_oneof![3 => -5i64..15, 1 => -3000i64..3000];
    prop_oneof![
        2 => entry.clone().prop_map(Edit::Activate),
        3 => Just(Edit::HandOff),
        1 => Just(Edit::ClearActive),
        1 => entry.clone().prop_map(Edit::PushProcessed),
        1 => Just(Edit::PopProcessed),
        1 => Just(Edit::ReverseProcessed),
        4 => (entry.clone(), offset.clone()).prop_map(|(i, o)| Edit::Heartbeat(i, o)),
        6 => entry.clone().prop_map(Edit::Beat),
        1 => entry.clone().prop_map(Edit::ClearHeartbeat),
        2 => (entry.clone(), offset.clone()).prop_map(|(i, o)| Edit::Start(i, o)),
        2 => (entry, offset).prop_map(|(i, o)| Edit::Complete(i, o)),
        1 => Just(Edit::Evicted),
    ]
}

/// A write: how long after the previous one it comes, and its edits.
fn writes() -> impl Strategy<Value = Vec<(u64, Vec<Edit>)>> {
    proptest::collection::vec(
        (
            prop_oneof![0u64..30, 30u64..200, 1000u64..1500],
            proptest::collection::vec(edit(), 1..4),
        ),
        1..40,
    )
}

fn at(now: Timestamp, offset: i64) -> Time {
    Time(
        now.saturating_add(jiff::SignedDuration::from_secs(offset))
            .unwrap(),
    )
}

fn apply_edit(s: &mut EvictionRequestStatus, edit: &Edit, now: Timestamp) {
    let name = |s: &EvictionRequestStatus, i: usize| s.target_interceptors[i].name.clone();
    match *edit {
        Edit::Activate(i) => {
            let n = name(s, i);
            s.active_interceptors = vec![n.clone()];
            if let Some(e) = s.interceptors.iter_mut().find(|e| e.name == n) {
                e.activation_time = Some(Time(now));
            }
        }
        Edit::HandOff => {
            if let Some(active) = s.active_interceptors.pop() {
                s.processed_interceptors.push(active);
            }
            let k = s.processed_interceptors.len();
            if k < s.target_interceptors.len() {
                apply_edit(s, &Edit::Activate(k), now);
            }
        }
        Edit::ClearActive => s.active_interceptors.clear(),
        Edit::PushProcessed(i) => {
            let n = name(s, i);
            s.processed_interceptors.push(n);
        }
        Edit::PopProcessed => {
            s.processed_interceptors.pop();
        }
        Edit::ReverseProcessed => s.processed_interceptors.reverse(),
        Edit::Heartbeat(i, o) => s.interceptors[i].heartbeat_time = Some(at(now, o)),
        Edit::Beat(i) => {
            let e = &mut s.interceptors[i];
            e.start_time.get_or_insert(Time(now));
            e.heartbeat_time = Some(Time(now));
        }
        Edit::ClearHeartbeat(i) => s.interceptors[i].heartbeat_time = None,
        Edit::Start(i, o) => s.interceptors[i].start_time = Some(at(now, o)),
        Edit::Complete(i, o) => s.interceptors[i].completion_time = Some(at(now, o)),
        Edit::Evicted => s.conditions.push(Condition {
            type_: CONDITION_EVICTED.into(),
            status: "True".into(),
            reason: "PodDeleted".into(),
            message: String::new(),
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
}

/// What a sequence showed, for the non-vacuity checks.
#[derive(Default)]
struct Admitted {
    writes: usize,
    heartbeats_moved: usize,
    processed_grew: usize,
}

fn run_sequence(
    writes: &[(u64, Vec<Edit>)],
    settings: &Settings,
) -> Result<Admitted, TestCaseError> {
    let user = user();
    let view = StaticView::unknown();
    let mut stored: EvictionRequest = request(UID).status(initialized()).build();
    let mut clock = now();
    let mut admitted = Admitted::default();
    // Over the whole sequence: the latest heartbeat each interceptor has shown, and every
    // processed list so far (each admitted one must extend the one before).
    let mut latest_heartbeat: BTreeMap<String, Timestamp> = BTreeMap::new();
    for (after, edits) in writes {
        clock = clock.checked_add(Duration::from_secs(*after)).unwrap();
        let old = stored.status.clone().unwrap_or_default();
        let mut status = old.clone();
        for e in edits {
            apply_edit(&mut status, e, clock);
        }
        let mut new = stored.clone();
        new.status = Some(status.clone());
        let req = ReviewRequest {
            operation: Operation::Update,
            sub_resource: Some("status"),
            namespace: stored.metadata.namespace.as_deref(),
            name: UID,
            object: Some(&new),
            old_object: Some(&stored),
            user: &user,
            dry_run: false,
            now: clock,
        };
        if !review_eviction_request(&req, &view, settings).allowed() {
            continue;
        }
        admitted.writes += 1;
        prop_assert!(
            status
                .processed_interceptors
                .starts_with(&old.processed_interceptors),
            "processedInterceptors rewritten: {:?} -> {:?} by {edits:?}",
            old.processed_interceptors,
            status.processed_interceptors
        );
        admitted.processed_grew +=
            usize::from(status.processed_interceptors.len() > old.processed_interceptors.len());
        for entry in &status.interceptors {
            let before = latest_heartbeat.get(&entry.name).copied();
            match (before, entry.heartbeat_time.as_ref()) {
                (Some(b), None) => {
                    return Err(TestCaseError::fail(format!(
                        "{}: heartbeat {b} removed by {edits:?}",
                        entry.name
                    )));
                }
                (Some(b), Some(h)) => {
                    prop_assert!(
                        h.0 >= b,
                        "{}: heartbeat {b} -> {} by {edits:?}",
                        entry.name,
                        h.0
                    );
                    if h.0 > b {
                        prop_assert!(
                            Duration::try_from(h.0.duration_since(b)).unwrap()
                                >= settings.min_heartbeat_interval,
                            "{}: heartbeat step below the minimum",
                            entry.name
                        );
                        admitted.heartbeats_moved += 1;
                    }
                }
                (None, Some(_)) | (None, None) => {}
            }
            if let Some(h) = &entry.heartbeat_time {
                latest_heartbeat.insert(entry.name.clone(), h.0);
            }
        }
        prop_assert!(status.active_interceptors.len() <= 1);
        prop_assert!(
            status
                .processed_interceptors
                .iter()
                .zip(&status.target_interceptors)
                .all(|(p, t)| *p == t.name),
            "processedInterceptors out of target order: {:?}",
            status.processed_interceptors
        );
        stored = new;
    }
    // The imperative interceptor is last in every admitted target list.
    let status = stored.status.unwrap_or_default();
    prop_assert_eq!(
        status.target_interceptors.last().map(|t| t.name.as_str()),
        Some(IMP)
    );
    Ok(admitted)
}

#[test]
fn admitted_status_writes_keep_heartbeats_monotonic_and_processed_append_only() {
    let settings = Settings::default();
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        // Failures are reported with their minimal input; nothing is written to the tree.
        failure_persistence: None,
        ..Config::default()
    });
    // `run` takes a `Fn`: the totals are kept in a cell.
    let totals = std::cell::RefCell::new(Admitted::default());
    runner
        .run(&writes(), |writes| {
            let a = run_sequence(&writes, &settings)?;
            let mut total = totals.borrow_mut();
            total.writes += a.writes;
            total.heartbeats_moved += a.heartbeats_moved;
            total.processed_grew += a.processed_grew;
            Ok(())
        })
        .unwrap();
    let total = totals.into_inner();
    // Not vacuous: the generator gets plenty of writes of each kind past the webhook.
    assert!(total.writes >= 2000, "{} writes admitted", total.writes);
    assert!(
        total.heartbeats_moved >= 200,
        "{} heartbeats moved",
        total.heartbeats_moved
    );
    assert!(
        total.processed_grew >= 200,
        "{} hand-offs",
        total.processed_grew
    );
}
