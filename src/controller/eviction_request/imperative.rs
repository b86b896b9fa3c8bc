//! The controller as the `imperative-eviction.k8s.io` interceptor: SPEC 2.3 step 8
//! ([`act_as_imperative`], called by `decide`) and the bookkeeping after an Eviction API call
//! ([`after_eviction`]).
//!
//! While it is active the controller keeps its own entry alive like any interceptor: `startTime`
//! and `heartbeatTime` when it first acts, then a heartbeat half-way to the deadline (and at
//! each eviction attempt, as soon as the 60 s rule allows), so observers see progress.
//!
//! A terminating pod's "waiting for it to be deleted" message never costs a write of its own:
//! it rides along with a write made anyway (first sight, a heartbeat). kube-apiserver deletes an
//! evicted pod in two steps (`deletionTimestamp`, then gone) even with a zero grace period, and
//! a reconcile between them wrote a third status patch for 98% of the pods of a drain; with a
//! grace period every eviction paid it. The pod's own `deletionTimestamp` and the `Evicted` event
//! already say it.
//!
//! A successful Eviction API call does not set `Evicted`: the pod is only terminating, may
//! take its whole grace period, and requesters read `Evicted` as "gone". `Evicted=True` follows
//! from `decide` step 2 when the pod disappears or reaches a terminal phase; only an answer that
//! proves the pod is already gone ([`EvictionOutcome::PodGone`]) sets it at once. A success is
//! an event only: the status records what follows from the pod's change. Without interceptors an
//! eviction costs two status writes: first sight, which activates this interceptor and starts
//! its turn (`startTime`, `heartbeatTime`) before the call, and the outcome.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::backoff::{retry_at, retry_wait};
use super::deadline::{add, imperative_heartbeat_due, until};
use super::decision::{
    Action, DecideSettings, Decision, Draft, EventSpec, EventType, EvictionOutcome,
    REASON_POD_DELETED, joined_notes, pod_deleted_message,
};
use crate::api::{
    CONDITION_EVICTED, EvictionRequest, IMPERATIVE_INTERCEPTOR, InterceptorStatus,
    PodEvictionStatus,
};
use crate::cluster::{Allowance, CachedPod};

/// Message of the imperative interceptor for pods the Eviction API must not be used on.
pub const UNSUPPORTED_POD_MESSAGE: &str =
    "API-initiated eviction of DaemonSet and static pods is not supported";

/// The message of the imperative interceptor after `n` failed Eviction API calls.
pub fn failed_evictions_message(n: i32) -> String {
    format!("Could not evict a pod due to failing eviction requests, number of retries: {n}")
}

/// The event of a decision that activates the imperative interceptor and evicts in the same
/// pass, taken out of it to be told with the call's outcome ([`tell_selection_with_outcome`]):
/// one event per pass instead of two. It is the imperative interceptor's `InterceptorSelected`
/// (a pod without interceptors), or the `InterceptorCompleted` of the switch to it, which names
/// it ("Interceptor a.b completed; interceptor imperative-eviction.k8s.io selected (2 of 2)").
/// A switch that is a warning (`InterceptorTimedOut`, `InterceptorNotRegistered`) stays an event
/// of its own. `None` (the decision untouched) for any other decision.
pub fn hold_imperative_selection(d: &mut Decision) -> Option<EventSpec> {
    d.action.as_ref()?;
    let i = d.events.iter().position(|e| {
        let selected = format!("nterceptor {IMPERATIVE_INTERCEPTOR} selected (");
        match e.reason {
            "InterceptorSelected" => e.note.starts_with(&format!("I{selected}")),
            "InterceptorCompleted" => e.note.contains(&format!("; i{selected}")),
            _ => false,
        }
    })?;
    Some(d.events.remove(i))
}

/// Folds a held selection event into the first event of the decision that followed the call
/// (`Evicted` or `EvictionFailed`, whose reason and type it keeps): "Interceptor … selected (2 of
/// 2); pod … was evicted …". Without such an event the selection is told on its own.
pub fn tell_selection_with_outcome(followup: &mut Decision, selection: EventSpec) {
    match followup.events.first_mut() {
        Some(outcome) => outcome.note = joined_notes(&selection.note, &outcome.note),
        None => followup.events.insert(0, selection),
    }
}

/// The `Evicted` event of a decision that concludes `Evicted=True` (step 2: the pod is gone or
/// terminated), dropped when this controller's own eviction of the pod (`told`) was already
/// told as `Evicted`: the second event would say again what the first said, and cost every
/// evicted pod one more request. A pod that went any other way (deleted by someone, evicted by
/// another replica before a leader change) is still told.
pub fn drop_told_evicted(d: &mut Decision, told: bool) {
    if told {
        d.events.retain(|e| e.reason != CONDITION_EVICTED);
    }
}

/// How long after this controller found a request's pod gone it leaves the request to the
/// garbage collector ([`leave_to_collector`]). The collector deletes a dependent well within a
/// second of its owner on a loaded control plane; a request still there after this is written.
pub const COLLECTION_GRACE: Duration = Duration::from_secs(3);

/// Step 2's `Evicted=True` for a request that the garbage collector is about to delete, put off
/// until [`COLLECTION_GRACE`] after the pod was found gone (`gone_since`): the request is owned by
/// its pod, and this controller evicted that pod and told it in an `Evicted` event (`told`), so
/// the write would only mark an object about to be deleted — and it raced the collector, answered
/// 404 on a fifth of a pool's requests. A request still there after the grace (no garbage
/// collector, or one far behind) is written as before, without counting again the interceptor
/// turns counted when it was put off; one that other events or writes are due on, or whose pod
/// went some other way, is never put off.
pub fn leave_to_collector(
    d: &mut Decision,
    request: &EvictionRequest,
    told: bool,
    gone_since: Option<Timestamp>,
    now: Timestamp,
) {
    let concludes_evicted = d
        .status
        .as_ref()
        .is_some_and(|s| s.is_true(CONDITION_EVICTED))
        && !request.status.as_ref().is_some_and(|s| s.is_terminal());
    let only_the_status = d.labels.is_none() && d.events.is_empty() && d.action.is_none();
    let owned_by_pod =
        request.metadata.owner_references.iter().flatten().any(|o| {
            o.kind == "Pod" && o.api_version == "v1" && o.uid == request.spec.target.pod.uid
        });
    let Some(end) = gone_since.map(|t| add(t, COLLECTION_GRACE)) else {
        return;
    };
    if !(told && concludes_evicted && only_the_status && owned_by_pod) {
        return;
    }
    if now < end {
        // The interceptors' turns ended with the pod: counted now, whether or not the
        // request is still there to be written.
        *d = Decision {
            requeue_after: Some(until(now, end)),
            processed: std::mem::take(&mut d.processed),
            ..Decision::default()
        };
    } else {
        // Put off when the pod was first found gone (`gone_since` is that moment, always
        // within the grace then), and counted at that time.
        d.processed.clear();
    }
}

/// Step 8: when the imperative interceptor is active, wait for a terminating pod, refuse
/// DaemonSet and mirror pods, or evict the pod once the backoff allows it.
pub(crate) fn act_as_imperative(d: &mut Draft<'_>, pod: &CachedPod) {
    if !imperative_is_active(d) {
        return;
    }
    let now = d.now;
    let step = next_step(d, pod);
    let (deadline, min_interval) = heartbeat_settings(d);
    let writing = d.writes_status();
    let Some(entry) = d.entry_mut(IMPERATIVE_INTERCEPTOR) else {
        return;
    };
    if entry.completion_time.is_some() {
        // Done (set by hand?); step 7 moves it to processed when the status allows it.
        return;
    }
    let evict = step == Step::Evict;
    let last_heartbeat = entry.heartbeat_time.clone();
    let due = heartbeat(entry, now, deadline, min_interval, evict);
    match step {
        Step::Wait {
            message: Some(message),
        } => entry.message = Some(message),
        Step::AwaitDeletion { message } if writing || entry.heartbeat_time != last_heartbeat => {
            entry.message = Some(message);
        }
        _ => {}
    }
    d.requeue_at(due);
    if evict {
        let target = &d.request.spec.target.pod;
        d.action = Some(Action::Evict {
            namespace: d.request.metadata.namespace.clone().unwrap_or_default(),
            name: target.name.clone(),
            uid: target.uid.clone(),
        });
    }
}

/// What the imperative interceptor does in one reconciliation.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Nothing to call now; set the message when there is one.
    Wait { message: Option<String> },
    /// The pod is terminating: nothing to call; the message is set only with a status write
    /// made anyway.
    AwaitDeletion { message: String },
    /// Call the Eviction API.
    Evict,
}

/// Step 8's choice: wait for a terminating pod, refuse DaemonSet and mirror pods, wait out the
/// backoff (scheduling the retry), or evict.
fn next_step(d: &mut Draft<'_>, pod: &CachedPod) -> Step {
    if pod.is_terminating() {
        let message = format!(
            "Pod {} is terminating; waiting for it to be deleted.",
            d.pod_ref()
        );
        return Step::AwaitDeletion { message };
    }
    if pod.is_daemonset_pod() || pod.is_mirror() {
        return Step::Wait {
            message: Some(UNSUPPORTED_POD_MESSAGE.to_string()),
        };
    }
    match retry_at(
        &d.status,
        d.settings.backoff_base,
        d.settings.backoff_cap,
        d.budgets,
    ) {
        Some(at) if d.now < at => {
            d.requeue_at(at);
            Step::Wait { message: None }
        }
        _ => Step::Evict,
    }
}

/// Folds the result of the Eviction API call made for `decide`'s [`Action::Evict`] into the
/// status. `request` must be the request as the status patch of that decision returned it, so
/// that the failure counter grows from its latest value; `budgets` is what the watched
/// PodDisruptionBudgets selecting the pod say after the call (the retry's wait, [`retry_wait`]).
///
/// # Guarantees
/// `failedAPIEvictionCounter` only grows; the imperative entry is touched only while it is
/// active; a request already `Evicted` or `Canceled` is left alone.
pub fn after_eviction(
    request: &EvictionRequest,
    outcome: EvictionOutcome,
    now: Timestamp,
    settings: &DecideSettings,
    budgets: Allowance,
) -> Decision {
    let mut d = Draft::new(request, now, settings);
    if d.status.is_terminal() {
        return d.finish();
    }
    let pod_ref = d.pod_ref();
    match outcome {
        EvictionOutcome::PodGone => {
            d.conclude(
                CONDITION_EVICTED,
                REASON_POD_DELETED,
                pod_deleted_message(&pod_ref),
                EventType::Normal,
            );
        }
        EvictionOutcome::Evicted => {
            // No status write: the pod's own change triggers the next reconcile, which records
            // it (step 8's "terminating" message while it has a grace period to run, step 2's
            // `Evicted=True` once it is gone). A write here would cost every eviction one more
            // status patch and webhook call that nothing reads.
            let message = format!(
                "Pod {pod_ref} was evicted through the Eviction API; waiting for it to terminate."
            );
            d.event("Evicted", EventType::Normal, message);
        }
        EvictionOutcome::Failed {
            status_code,
            message,
            retry_after,
        } => {
            let eviction = d
                .status
                .pod_eviction_status
                .get_or_insert_with(PodEvictionStatus::default);
            eviction.failed_api_eviction_counter =
                eviction.failed_api_eviction_counter.saturating_add(1);
            eviction.last_failure_time = Some(Time(d.now));
            let n = eviction.failed_api_eviction_counter;
            record_progress(&mut d, failed_evictions_message(n));
            let wait = retry_wait(n, settings.backoff_base, settings.backoff_cap, budgets)
                .max(retry_after.unwrap_or_default());
            d.requeue_at(add(d.now, wait));
            let note = format!(
                "Eviction of Pod {pod_ref} failed ({status_code}: {message}); attempt {n}, next in {}.",
                humantime::format_duration(wait)
            );
            d.event("EvictionFailed", EventType::Warning, note);
        }
    }
    d.finish()
}

/// Sets the imperative entry's message and heartbeat after an attempt, when it is active.
fn record_progress(d: &mut Draft<'_>, message: String) {
    if !imperative_is_active(d) {
        return;
    }
    let now = d.now;
    let (deadline, min_interval) = heartbeat_settings(d);
    if let Some(entry) = d.entry_mut(IMPERATIVE_INTERCEPTOR) {
        entry.message = Some(message);
        let due = heartbeat(entry, now, deadline, min_interval, true);
        d.requeue_at(due);
    }
}

fn imperative_is_active(d: &Draft<'_>) -> bool {
    d.status.active_interceptors.first().map(String::as_str) == Some(IMPERATIVE_INTERCEPTOR)
}

/// The request's heartbeat deadline and the minimum heartbeat step.
fn heartbeat_settings(d: &Draft<'_>) -> (Duration, Duration) {
    let deadline = d
        .request
        .spec
        .heartbeat_deadline(d.settings.interceptor_deadline);
    (deadline, d.settings.min_heartbeat_interval)
}

/// Heartbeats the controller's own entry when it is due, and returns when the next one is. The
/// first heartbeat comes with `startTime` (S4). With `progress` (an eviction attempt), a
/// heartbeat is due as soon as the minimum step allows; otherwise half-way to the deadline.
fn heartbeat(
    entry: &mut InterceptorStatus,
    now: Timestamp,
    deadline: Duration,
    min_interval: Duration,
    progress: bool,
) -> Timestamp {
    let last = match entry.heartbeat_time.as_ref() {
        None => {
            entry.start_time.get_or_insert(Time(now));
            entry.heartbeat_time = Some(Time(now));
            now
        }
        Some(last) => {
            let due = if progress {
                add(last.0, min_interval)
            } else {
                imperative_heartbeat_due(last.0, deadline, min_interval)
            };
            if now >= due {
                entry.heartbeat_time = Some(Time(now));
                now
            } else {
                last.0
            }
        }
    };
    imperative_heartbeat_due(last, deadline, min_interval)
}

#[cfg(test)]
#[path = "imperative_tests.rs"]
mod tests;
