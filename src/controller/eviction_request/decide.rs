//! [`decide`]: SPEC 2.3 steps 1–8, in order, one function per step. Steps 1–3 can settle the
//! request (a terminal condition) and stop; steps 4–8 then bring labels, interceptor lists and
//! the active interceptor up to date, and step 8 lets the controller act as
//! `imperative-eviction.k8s.io` ([`super::imperative`]).

use std::ops::ControlFlow;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::deadline::{add, heartbeat_deadline_at, past_outage};
use super::decision::{
    DecideSettings, Decision, Draft, EventType, ProcessedReason, joined_notes, pod_deleted_message,
};
use super::imperative::act_as_imperative;
use crate::admission::names::{k8s_io_interceptor_allowed, validate_fqdn};
use crate::api::{
    CONDITION_CANCELED, CONDITION_EVICTED, CancellationPolicy, DAEMONSET_INTERCEPTOR,
    EvictionRequest, IMPERATIVE_INTERCEPTOR, InterceptorReference, InterceptorStatus,
    KUBELET_INTERCEPTOR, MAX_POD_INTERCEPTORS, PodType, Registration,
};
use crate::cluster::{Allowance, CachedPod, pod_type};

/// Condition reason: the request cannot be carried out (no such pod, pod in a workload).
pub const REASON_VALIDATION_FAILED: &str = "ValidationFailed";
pub use super::decision::REASON_POD_DELETED;
/// Condition reason: the target pod reached phase Succeeded or Failed.
pub const REASON_POD_TERMINATED: &str = "PodTerminated";
/// Condition reason: every requester withdrew.
pub const REASON_NO_REQUESTERS: &str = "NoRequesters";
/// Event reason: an interceptor no EvictionInterceptor registers became active (SPEC 5.5).
pub const EVENT_UNREGISTERED_INTERCEPTOR: &str = "UnregisteredInterceptor";
/// Event reason: an unregistered interceptor was passed over after the grace (SPEC 5.5).
pub const EVENT_INTERCEPTOR_NOT_REGISTERED: &str = "InterceptorNotRegistered";

/// What [`decide_with`] knows around the request besides its pod.
pub struct Surroundings<'a> {
    /// The target pod's node announces an `evictord node-agent`, which makes `kubelet.k8s.io`
    /// the implicit interceptor of the node's mirror pods (step 5).
    pub node_agent: bool,
    /// What is known of an interceptor's registration (SPEC 5.5; `Unknown` is never acted on).
    pub registration: &'a dyn Fn(&str) -> Registration,
    /// What the PodDisruptionBudgets selecting the pod say now (step 8's retry, [`retry_at`]).
    pub budgets: Allowance,
    /// When the controller's watch of the requests last failed, if it did: heartbeat deadlines
    /// count past it ([`past_outage`]).
    pub unreachable_until: Option<Timestamp>,
}

/// Decides what to do with `request`, given the cached target pod (`None` when the cache has no
/// pod of that name) and the time. Pure: no I/O, no clock of its own.
///
/// # Guarantees
/// - `status`, when set, is the complete new status and passes the status admission rules
///   S1–S6 against the current one: at most one interceptor switch per decision, the new active
///   interceptor's `activationTime` in the same update, `processedInterceptors` only grows,
///   `targetInterceptors` is set once, only the active interceptor's entry changes.
/// - The imperative interceptor (the controller itself) is never timed out; it heartbeats
///   before its deadline instead.
/// - `requeue_after` is set whenever something falls due without a watch event.
pub fn decide(
    request: &EvictionRequest,
    pod: Option<&CachedPod>,
    now: Timestamp,
    settings: &DecideSettings,
) -> Decision {
    decide_on_node(request, pod, false, now, settings)
}

/// [`decide`] for a pod whose node announces an `evictord node-agent` (`node_agent`), which
/// makes `kubelet.k8s.io` the implicit interceptor of the node's mirror pods (step 5).
pub fn decide_on_node(
    request: &EvictionRequest,
    pod: Option<&CachedPod>,
    node_agent: bool,
    now: Timestamp,
    settings: &DecideSettings,
) -> Decision {
    let surroundings = Surroundings {
        node_agent,
        registration: &|_| Registration::Unknown,
        budgets: Allowance::Unknown,
        unreachable_until: None,
    };
    decide_with(request, pod, &surroundings, now, settings)
}

/// [`decide`] knowing the pod's node and the interceptor registrations (SPEC 5.5): an
/// unregistered interceptor that becomes active is told in an `UnregisteredInterceptor` event
/// (unless registration is off), and under `--interceptor-registration=enforce` it is passed over
/// `--unregistered-interceptor-grace` after its activation (reason `NotRegistered`).
pub fn decide_with(
    request: &EvictionRequest,
    pod: Option<&CachedPod>,
    surroundings: &Surroundings<'_>,
    now: Timestamp,
    settings: &DecideSettings,
) -> Decision {
    let mut draft = Draft::new(request, now, settings);
    draft.node_agent = surroundings.node_agent;
    draft.registration = surroundings.registration;
    draft.budgets = surroundings.budgets;
    draft.unreachable_until = surroundings.unreachable_until;
    // A `Break` only means "settled, stop here"; everything to do is in the draft either way.
    let _ = run_steps(&mut draft, pod);
    draft.finish()
}

fn run_steps(d: &mut Draft<'_>, pod: Option<&CachedPod>) -> ControlFlow<()> {
    settle_terminal(d)?;
    let pod = check_target(d, pod)?;
    check_requesters(d)?;
    sync_labels(d, pod);
    init_interceptors(d, pod);
    observe_generation(d);
    select_interceptor(d);
    tell_unregistered_activation(d);
    // Step 8 in the same pass: when step 7 has just activated the imperative interceptor, the
    // controller starts its turn in that update (S4 lets the entry of the interceptor active
    // after the update change), so a request without interceptors costs one status write less.
    act_as_imperative(d, pod);
    ControlFlow::Continue(())
}

/// Step 1: an `Evicted` or `Canceled` request is finished; only an active interceptor left
/// over from before the condition is cleared (S2 allows it once the request is terminal).
fn settle_terminal(d: &mut Draft<'_>) -> ControlFlow<()> {
    if !d.status.is_terminal() {
        return ControlFlow::Continue(());
    }
    d.status.active_interceptors.clear();
    ControlFlow::Break(())
}

/// Step 2: the target pod must exist with the requested UID, not belong to a workload and not
/// have terminated already.
fn check_target<'p>(
    d: &mut Draft<'_>,
    pod: Option<&'p CachedPod>,
) -> ControlFlow<(), &'p CachedPod> {
    let pod_ref = d.pod_ref();
    let Some(pod) = pod.filter(|p| p.uid() == d.request.spec.target.pod.uid) else {
        if !d.status.target_interceptors.is_empty() {
            // We saw the pod before (first sight needs it): it has been deleted.
            d.conclude(
                CONDITION_EVICTED,
                REASON_POD_DELETED,
                pod_deleted_message(&pod_ref),
                EventType::Normal,
            );
        } else if let Some(until) = young_request_grace_end(d) {
            d.requeue_at(until);
        } else {
            let message = format!("Target Pod {pod_ref} was not found.");
            d.conclude(
                CONDITION_CANCELED,
                REASON_VALIDATION_FAILED,
                message,
                EventType::Warning,
            );
        }
        return ControlFlow::Break(());
    };
    if pod.in_workload() {
        let message = format!(
            "Target Pod {pod_ref} is part of a Workload/PodGroup. Eviction of such pods is currently not supported."
        );
        d.conclude(
            CONDITION_CANCELED,
            REASON_VALIDATION_FAILED,
            message,
            EventType::Warning,
        );
        return ControlFlow::Break(());
    }
    if pod.is_terminal() {
        let phase = pod.status.phase.as_deref().unwrap_or_default();
        let message = format!("Target Pod {pod_ref} has terminated (phase {phase}).");
        d.conclude(
            CONDITION_EVICTED,
            REASON_POD_TERMINATED,
            message,
            EventType::Normal,
        );
        return ControlFlow::Break(());
    }
    ControlFlow::Continue(pod)
}

/// When a request whose pod the cache has never shown is still within
/// [`DecideSettings::pod_not_found_grace`], the end of that grace.
fn young_request_grace_end(d: &Draft<'_>) -> Option<Timestamp> {
    let created = d.request.metadata.creation_timestamp.as_ref()?.0;
    let end = add(created, d.settings.pod_not_found_grace);
    (d.now < end).then_some(end)
}

/// Step 3: with no requester left the request is canceled, unless an interceptor has forbidden
/// cancellation (then it goes on until the pod is gone).
fn check_requesters(d: &mut Draft<'_>) -> ControlFlow<()> {
    if !d.request.spec.requesters.is_empty()
        || d.status.cancellation_policy() == CancellationPolicy::Forbid
    {
        return ControlFlow::Continue(());
    }
    let message = "Every requester withdrew from the eviction request.".to_string();
    d.conclude(
        CONDITION_CANCELED,
        REASON_NO_REQUESTERS,
        message,
        EventType::Normal,
    );
    ControlFlow::Break(())
}

/// Step 4: the request carries the pod's labels (the pod's value wins) so that interceptors can
/// watch requests with the label selectors they use for pods. Labels of the request's own are
/// kept. evictord's own requesters (the node maintenance controller, the Eviction API bridge,
/// the kubectl plugin) create requests with the labels already, so this patches only requests
/// of other requesters, or a pod relabelled since.
fn sync_labels(d: &mut Draft<'_>, pod: &CachedPod) {
    let current = d.request.metadata.labels.clone().unwrap_or_default();
    let mut desired = current.clone();
    desired.extend(
        pod.labels()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    if desired != current {
        d.labels = Some(desired);
    }
}

/// Step 5: on first sight, fix the interceptors from the pod's annotation, the implicit ones of
/// SPEC 5.3 and the imperative one, and give each an empty status entry.
fn init_interceptors(d: &mut Draft<'_>, pod: &CachedPod) {
    if !d.status.target_interceptors.is_empty() {
        return;
    }
    let implicit = implicit_interceptors(pod, d.node_agent, d.settings.daemonset_interceptor);
    let (names, skipped) = target_interceptors(
        pod.interceptors(),
        &implicit,
        &d.settings.extra_k8s_io_interceptors,
    );
    if !skipped.is_empty() {
        let note = format!(
            "Skipped interceptors of Pod {} that cannot be targeted (not a valid name, reserved, not allowlisted or beyond {MAX_POD_INTERCEPTORS}): {}",
            d.pod_ref(),
            skipped
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        d.event("InterceptorSkipped", EventType::Warning, note);
    }
    // The imperative interceptor is always last and is not the pod's.
    d.pod_interceptors = Some(names.len().saturating_sub(1));
    d.status.target_interceptors = names
        .iter()
        .map(|name| InterceptorReference { name: name.clone() })
        .collect();
    d.status.interceptors = names
        .into_iter()
        .map(|name| InterceptorStatus {
            name,
            ..Default::default()
        })
        .collect();
}

/// The interceptors evictord adds to those a pod declares (SPEC 2.3 step 5, 5.3), in place of the
/// annotation the in-tree DaemonSet controller and kubelet would set on their pods:
/// `daemonset.apps.k8s.io` for a DaemonSet's pod while that interceptor runs, `kubelet.k8s.io`
/// for a mirror pod on a node whose node agent announced itself (`node_agent`).
pub fn implicit_interceptors(
    pod: &CachedPod,
    node_agent: bool,
    daemonset_interceptor: bool,
) -> Vec<&'static str> {
    match pod_type(pod) {
        PodType::DaemonSet if daemonset_interceptor => vec![DAEMONSET_INTERCEPTOR],
        PodType::Static if node_agent => vec![KUBELET_INTERCEPTOR],
        _ => Vec::new(),
    }
}

/// The `targetInterceptors` for the interceptors a pod declares and the `implicit` ones evictord
/// adds after them, and the declared names that were skipped. The pod webhook normally keeps bad
/// annotations out, but a pod admitted while it was down must not make the controller write a
/// status the request webhook denies forever (S1): names that are not FQDNs, the reserved
/// imperative name, non-allowlisted `*.k8s.io` names and names past the 15th (past the 14th
/// when an implicit one must fit too: S1 allows 16 with the imperative one) are skipped;
/// duplicates are dropped silently (the first occurrence keeps its place, also when the pod
/// declares an implicit interceptor itself).
pub fn target_interceptors(
    declared: Vec<String>,
    implicit: &[&str],
    extra_k8s_io: &[String],
) -> (Vec<String>, Vec<String>) {
    let room = MAX_POD_INTERCEPTORS.saturating_sub(
        implicit
            .iter()
            .filter(|i| !declared.iter().any(|d| d == *i))
            .count(),
    );
    let mut names: Vec<String> = Vec::new();
    let mut skipped = Vec::new();
    for name in declared {
        if names.contains(&name) {
            continue;
        }
        let valid =
            validate_fqdn(&name).is_ok() && k8s_io_interceptor_allowed(&name, extra_k8s_io, false);
        if valid && names.len() < room {
            names.push(name);
        } else {
            skipped.push(name);
        }
    }
    for name in implicit {
        if !names.iter().any(|n| n == name) {
            names.push((*name).to_string());
        }
    }
    names.push(IMPERATIVE_INTERCEPTOR.to_string());
    (names, skipped)
}

/// Step 6: record the generation of the spec this decision is based on (never backwards, S6).
fn observe_generation(d: &mut Draft<'_>) {
    if let Some(generation) = d.request.metadata.generation
        && d.status
            .observed_generation
            .is_none_or(|seen| seen < generation)
    {
        d.status.observed_generation = Some(generation);
    }
}

/// Step 7: keep exactly one interceptor working. The active one leaves when it completed or
/// its heartbeat expired, and the next one is activated in the same update (S2).
fn select_interceptor(d: &mut Draft<'_>) {
    let Some(active) = d.status.active_interceptors.first().cloned() else {
        return activate_next(d);
    };
    let Some(reason) = finished(d, &active) else {
        return;
    };
    // S3: the name added to processedInterceptors must be the next target in order. A status
    // that breaks this was not written by us; admission would deny the switch, so leave it.
    let k = d.status.processed_interceptors.len();
    if d.status.target_interceptors.get(k).map(|t| t.name.as_str()) != Some(active.as_str()) {
        return;
    }
    d.status.processed_interceptors.push(active.clone());
    d.status.active_interceptors.clear();
    let before = d.events.len();
    match reason {
        ProcessedReason::Completed => {
            d.event(
                "InterceptorCompleted",
                EventType::Normal,
                format!("Interceptor {active} completed."),
            );
        }
        ProcessedReason::TimedOut => {
            let deadline = d
                .request
                .spec
                .heartbeat_deadline(d.settings.interceptor_deadline);
            let note = format!(
                "Interceptor {active} timed out: no heartbeat for {}.",
                humantime::format_duration(deadline)
            );
            d.event("InterceptorTimedOut", EventType::Warning, note);
        }
        ProcessedReason::NotRegistered => {
            let note = format!(
                "Interceptor {active} passed over: no EvictionInterceptor registers it, {} after its \
                 activation (--interceptor-registration=enforce).",
                humantime::format_duration(d.settings.unregistered_interceptor_grace)
            );
            if let Some(entry) = d.entry_mut(&active)
                && entry.message.as_deref().is_none_or(str::is_empty)
            {
                entry.message = Some(note.clone());
            }
            d.event(EVENT_INTERCEPTOR_NOT_REGISTERED, EventType::Warning, note);
        }
        // `finished` never says so: the Evicted condition records it (`Draft::conclude`).
        ProcessedReason::Evicted => {}
    }
    d.processed.push((active, reason));
    let switch = (d.events.len() == before + 1).then_some(before);
    activate_next(d);
    // One event per switch (SPEC 2.3 step 7): the completion or timeout names the interceptor
    // selected next, instead of a second event right after it (one write fewer per hand-off).
    if let Some(i) = switch
        && d.events.len() == i + 2
        && d.events[i + 1].reason == "InterceptorSelected"
    {
        let selected = d.events.remove(i + 1);
        d.events[i].note = joined_notes(&d.events[i].note, &selected.note);
    }
}

/// Whether the active interceptor is done, and why; otherwise schedules a look at its deadline
/// (and, for an unregistered one under `enforce`, at the end of its grace). The imperative
/// interceptor is the controller itself: it heartbeats while it works and is never timed out,
/// or a request whose controller was down longer than the deadline would be left with nobody to
/// evict the pod.
fn finished(d: &mut Draft<'_>, name: &str) -> Option<ProcessedReason> {
    let entry = d.status.interceptor(name)?;
    if entry.completion_time.is_some() {
        return Some(ProcessedReason::Completed);
    }
    if name == IMPERATIVE_INTERCEPTOR {
        return None;
    }
    let grace_end = unregistered_grace_end(d, entry);
    let look_at_grace_end = grace_end.or_else(|| unknown_grace_end(d, entry));
    let deadline = past_outage(
        heartbeat_deadline_at(d.request, entry, d.settings.interceptor_deadline)?,
        d.unreachable_until,
        d.request
            .spec
            .heartbeat_deadline(d.settings.interceptor_deadline),
    );
    if grace_end.is_some_and(|end| d.now >= end) {
        return Some(ProcessedReason::NotRegistered);
    }
    if d.now >= deadline {
        return Some(ProcessedReason::TimedOut);
    }
    d.requeue_at(deadline);
    // At the end of the grace of an unregistered interceptor, and also when the registration is not known yet (the cache syncing): by the end of the grace it
    // may be, and a look then costs one reconcile. Never a time already passed (no busy loop
    // while it stays unknown).
    if let Some(end) = look_at_grace_end
        && end > d.now
    {
        d.requeue_at(end);
    }
    None
}

/// Under `enforce`, when the registration of `entry`'s interceptor is unknown: the end of its
/// grace, when a look may find out.
fn unknown_grace_end(d: &Draft<'_>, entry: &InterceptorStatus) -> Option<Timestamp> {
    if !d.settings.interceptor_registration.enforces()
        || (d.registration)(&entry.name) != Registration::Unknown
    {
        return None;
    }
    d.request
        .unregistered_grace_end_at(entry, d.settings.unregistered_interceptor_grace)
}

/// Under `enforce`, when the interceptor of `entry` is known not to be registered: the end of its
/// grace (the definition admission rule S2 checks the hand-over against).
fn unregistered_grace_end(d: &Draft<'_>, entry: &InterceptorStatus) -> Option<Timestamp> {
    if !d.settings.interceptor_registration.enforces()
        || (d.registration)(&entry.name) != Registration::NotRegistered
    {
        return None;
    }
    d.request
        .unregistered_grace_end_at(entry, d.settings.unregistered_interceptor_grace)
}

/// After step 7: when this decision made an interceptor active that no EvictionInterceptor
/// registers, a warning event says what that costs (and under `enforce`, a look at the end of
/// its grace is scheduled).
fn tell_unregistered_activation(d: &mut Draft<'_>) {
    if !d.settings.interceptor_registration.reports() {
        return;
    }
    let Some(active) = d.status.active_interceptors.first().cloned() else {
        return;
    };
    let was = d
        .request
        .status
        .as_ref()
        .and_then(|s| s.active_interceptors.first());
    if was == Some(&active) || (d.registration)(&active) != Registration::NotRegistered {
        return;
    }
    let Some(entry) = d.status.interceptor(&active).cloned() else {
        return;
    };
    let note = match unregistered_grace_end(d, &entry) {
        Some(end) => {
            d.requeue_at(end);
            format!(
                "Interceptor {active} is active but no EvictionInterceptor registers it: it is passed \
                 over at {end} unless it completes ({} grace, --interceptor-registration=enforce).",
                humantime::format_duration(d.settings.unregistered_interceptor_grace)
            )
        }
        None => format!(
            "Interceptor {active} is active but no EvictionInterceptor registers it: a mistyped or \
             uninstalled interceptor holds the pod until its heartbeat deadline ({}).",
            humantime::format_duration(
                d.request
                    .spec
                    .heartbeat_deadline(d.settings.interceptor_deadline)
            )
        ),
    };
    d.event(EVENT_UNREGISTERED_INTERCEPTOR, EventType::Warning, note);
}

/// Activates the first unprocessed interceptor, if any is left (with none left the request
/// waits for the pod to go away).
fn activate_next(d: &mut Draft<'_>) {
    let k = d.status.processed_interceptors.len();
    let total = d.status.target_interceptors.len();
    let Some(next) = d.status.target_interceptors.get(k).map(|t| t.name.clone()) else {
        return;
    };
    let (now, request, default_deadline) = (d.now, d.request, d.settings.interceptor_deadline);
    let Some(entry) = d.entry_mut(&next) else {
        return;
    };
    entry.activation_time = Some(Time(now));
    let deadline = heartbeat_deadline_at(request, entry, default_deadline);
    d.status.active_interceptors = vec![next.clone()];
    d.event(
        "InterceptorSelected",
        EventType::Normal,
        format!("Interceptor {next} selected ({} of {total}).", k + 1),
    );
    // The imperative interceptor is the controller itself: it acts in this same decision
    // (step 8) and schedules its own heartbeat; it never times out.
    if next != IMPERATIVE_INTERCEPTOR
        && let Some(deadline) = deadline
    {
        d.requeue_at(deadline);
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "decide_registration_tests.rs"]
mod registration_tests;
