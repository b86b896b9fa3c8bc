//! The I/O shell of the eviction request controller: a kube-runtime `Controller` on
//! EvictionRequests (triggered by the shared cache's change stream, plus pod changes mapped to
//! the request named after the pod UID), which applies [`decide`]'s decisions: labels, one
//! status patch guarded by `resourceVersion`, the eviction call, events, the requeue.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::events::{Event, EventType as KubeEventType};

use crate::controller::events::EventQueue;
use crate::controller::resync_ticks;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span};

use super::decide::EVENT_UNREGISTERED_INTERCEPTOR;
use super::{
    Action, BridgedRequester, DecideSettings, Decision, EventSpec, EventType, EvictionOutcome,
    Retention, Surroundings, after_eviction, bridged_requester, decide_with, drop_told_evicted,
    hold_imperative_selection, leave_to_collector, retention, tell_selection_with_outcome,
};
use crate::api::{EVICTION_API_REQUESTER, EvictionRequest};
use crate::cluster::{Allowance, CachedPod, Caches, held_names_note};
use crate::controller::eviction_api::EvictionApi;
use crate::controller::own_writes::{OwnWrites, Remembered};
use crate::drain::leaving::has_node_agent;
use crate::metrics::{
    ControllerLabel, InterceptorLabel, ProcessedLabels, RequesterLabel, ResultLabel, SourceLabel,
    metrics,
};

const CONTROLLER: &str = "evictionrequest";

/// Errors of one reconciliation (retried with a short backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The label patch failed.
    #[error("patching labels of {0}: {1}")]
    Labels(String, #[source] kube::Error),
    /// The status patch failed (409/422 on a concurrent write: reconciled again at once).
    #[error("patching status of {0}: {1}")]
    Status(String, #[source] kube::Error),
    /// Deleting an ended request after its retention failed.
    #[error("deleting the ended request {0}: {1}")]
    Delete(String, #[source] kube::Error),
    /// Removing the expired Eviction API bridge requester failed.
    #[error("removing the expired requester {EVICTION_API_REQUESTER} of {0}: {1}")]
    Requesters(String, #[source] kube::Error),
}

/// What the reconciler needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Shared caches.
    pub caches: Arc<Caches>,
    /// Decision settings.
    pub settings: DecideSettings,
    /// Events, written off the reconcile path.
    pub events: EventQueue,
    /// Cancelled when this replica stops leading: a reconcile still running then makes no new
    /// Eviction API call (the next leader does).
    pub stop: CancellationToken,
    /// Eviction API (version discovered once).
    pub eviction: EvictionApi,
    /// Writes of this controller the cache has not shown yet.
    pub own_writes: OwnWrites,
    /// Pods this controller evicted (by `namespace/name`, the version it saw before the
    /// eviction) whose eviction the pod cache has not shown yet: a reconcile in between (the
    /// watch event of the request's own status write often comes first) would decide on the
    /// old pod and call the Eviction API a second time, for a pod already gone.
    pub evicted_pods: OwnWrites,
    /// Requests (by UID) whose pod this controller evicted and told `Evicted` about: the pod's
    /// going does not tell it again ([`drop_told_evicted`]).
    pub told_evicted: Remembered,
    /// Requests (by UID) whose target pod this controller found gone, since when: a request
    /// owned by its pod is left to the garbage collector for a while ([`leave_to_collector`]).
    pub gone_targets: Remembered,
}

/// How long a reconcile that found the cache behind its own write waits at most: the watch
/// event of the write normally triggers the next reconcile well before.
const CACHE_CATCH_UP: Duration = Duration::from_secs(2);

fn controller_label() -> ControllerLabel {
    ControllerLabel {
        controller: CONTROLLER,
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let caches = ctx.caches.clone();
    caches.wait_synced().await;
    let requests = caches.eviction_requests.store().clone();
    let gauges = tokio::spawn(refresh_gauges(ctx.clone(), shutdown.clone()));
    // Existing requests are reconciled at start and every RESYNC (what a lagging change
    // stream skipped); otherwise changes trigger reconciles.
    let initial = resync_ticks();
    Controller::for_shared_stream(caches.eviction_requests.changes(), requests)
        .watches_shared_stream(caches.pods.changes(), |pod| {
            Some(ObjectRef::<EvictionRequest>::new(pod.uid()).within(pod.namespace()))
        })
        .reconcile_on(retries_allowed(caches.clone()))
        .reconcile_all_on(initial)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "reconcile did not complete");
            }
        })
        .await;
    gauges.abort();
}

/// The requests whose refused eviction may be retried now: each time a PodDisruptionBudget
/// changes to allow a disruption, the requests with failed Eviction API calls for pods it selects
/// (their backoff is cut short, [`super::backoff::retry_at`]).
fn retries_allowed(caches: Arc<Caches>) -> impl Stream<Item = ObjectRef<EvictionRequest>> + Send {
    let changes = caches.budgets.changes();
    changes
        .filter(|b| std::future::ready(b.allows()))
        .flat_map(move |budget| {
            let refs: Vec<ObjectRef<EvictionRequest>> = caches
                .eviction_requests
                .all()
                .into_iter()
                .filter(|r| r.metadata.namespace.as_deref() == Some(budget.namespace.as_str()))
                .filter(|r| r.status.as_ref().is_some_and(|s| s.failed_evictions() > 0))
                .filter(|r| {
                    caches
                        .pods
                        .get(Some(&budget.namespace), &r.spec.target.pod.name)
                        .is_some_and(|p| budget.selects(&p))
                })
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect();
            futures::stream::iter(refs)
        })
}

fn error_policy(_req: Arc<EvictionRequest>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    let (Error::Status(_, e) | Error::Labels(_, e) | Error::Requesters(_, e) | Error::Delete(_, e)) =
        error;
    // Every write is to the request itself: gone means deleted meanwhile (by the garbage
    // collector once its pod is gone, or by a user), and its deletion ends its reconciles.
    if crate::controller::is_not_found(e) {
        debug!(%error, "the request was deleted meanwhile; nothing left to write");
        return Requeue::await_change();
    }
    crate::controller::requeue_after_error(CONTROLLER, crate::controller::is_conflict(e), error)
}

async fn reconcile(req: Arc<EvictionRequest>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = std::time::Instant::now();
    let key = format!("{}/{}", req.namespace().unwrap_or_default(), req.name_any());
    let span = info_span!("reconcile", controller = CONTROLLER, request = %key);
    let result = reconcile_inner(req, &ctx).instrument(span).await;
    metrics()
        .reconcile_duration
        .get_or_create(&controller_label())
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_inner(req: Arc<EvictionRequest>, ctx: &Context) -> Result<Requeue, Error> {
    // Read the latest cached copy: the trigger may be older than the store.
    let ns = req.namespace().unwrap_or_default();
    let req = ctx
        .caches
        .eviction_requests
        .get(Some(&ns), &req.name_any())
        .unwrap_or(req);
    let key = format!("{ns}/{}", req.name_any());
    if ctx
        .own_writes
        .behind(&key, req.metadata.resource_version.as_deref())
    {
        debug!("the cache has not shown our last write yet; waiting for its watch event");
        return Ok(Requeue::requeue(CACHE_CATCH_UP));
    }
    let now = Timestamp::now();
    let kept = retention(&req, now, ctx.settings.ended_request_retention);
    if kept == Retention::Delete {
        delete_ended(ctx, &req).await?;
        return Ok(Requeue::await_change());
    }
    let bridged = bridged_requester(&req, now, ctx.settings.eviction_api_requester_ttl);
    if let BridgedRequester::Expired { index } = bridged {
        expire_bridged_requester(ctx, &req, index).await?;
        // The update's watch event reconciles the request again: step 3 cancels it when no
        // requester is left.
        return Ok(Requeue::requeue(CACHE_CATCH_UP));
    }
    let pod = ctx.caches.pods.get(Some(&ns), &req.spec.target.pod.name);
    let pod_key = format!("{ns}/{}", req.spec.target.pod.name);
    let pod_version = pod
        .as_ref()
        .and_then(|p| p.metadata.resource_version.clone());
    if ctx.evicted_pods.behind(&pod_key, pod_version.as_deref()) {
        debug!(
            "the cache still shows the pod from before our eviction; waiting for its watch event"
        );
        return Ok(Requeue::requeue(CACHE_CATCH_UP));
    }
    let request_uid = req.metadata.uid.clone().unwrap_or_default();
    if pod
        .as_deref()
        .is_none_or(|p| p.uid() != req.spec.target.pod.uid)
    {
        ctx.gone_targets.insert(&request_uid, now);
    }
    let node_agent = pod
        .as_ref()
        .and_then(|p| p.spec.node_name.as_deref())
        .and_then(|n| ctx.caches.nodes.get(None, n))
        .is_some_and(|n| has_node_agent(&n));
    let mut decision = {
        let caches = &ctx.caches;
        // The budgets matter only to a refused eviction's retry (step 8).
        let budgets = match pod.as_deref() {
            Some(p)
                if req
                    .status
                    .as_ref()
                    .is_some_and(|s| s.failed_evictions() > 0) =>
            {
                caches.budgets.allowance(p)
            }
            _ => Allowance::Unknown,
        };
        let surroundings = Surroundings {
            node_agent,
            registration: &|name| caches.registration(name),
            budgets,
            unreachable_until: caches.eviction_requests.last_error(),
        };
        decide_with(&req, pod.as_deref(), &surroundings, now, &ctx.settings)
    };
    let told = ctx.told_evicted.contains(&request_uid);
    drop_told_evicted(&mut decision, told);
    let gone_since = ctx.gone_targets.since(&request_uid);
    leave_to_collector(&mut decision, &req, told, gone_since, now);
    // Told with the call's outcome: one event per pass (and one write fewer per eviction).
    let selection = hold_imperative_selection(&mut decision);
    let (updated, mut requeue) = apply(ctx, &req, &decision).await?;
    if let BridgedRequester::ExpiresIn(left) = bridged {
        requeue = earliest(requeue, Some(left));
    }
    if let Retention::DeleteIn(left) = kept {
        requeue = earliest(requeue, Some(left));
    }
    if let Some(Action::Evict {
        namespace,
        name,
        uid,
    }) = &decision.action
    {
        if ctx.stop.is_cancelled() {
            debug!("no longer leading; leaving the eviction to the next leader");
            if let Some(selection) = selection {
                publish(ctx, &updated, &[selection]);
            }
            return Ok(Requeue::await_change());
        }
        let outcome = ctx.eviction.evict(&ctx.client, namespace, name, uid).await;
        let outcome = explain_refusal(ctx, pod.as_deref(), outcome);
        if outcome == super::EvictionOutcome::Evicted {
            ctx.evicted_pods.record(&pod_key, pod_version.as_deref());
        }
        let result = match &outcome {
            super::EvictionOutcome::Evicted => "success",
            super::EvictionOutcome::PodGone => "pod_gone",
            super::EvictionOutcome::Failed {
                status_code: 429, ..
            } => "too_many_requests",
            super::EvictionOutcome::Failed { .. } => "failure",
        };
        metrics()
            .imperative_evictions
            .get_or_create(&ResultLabel { result })
            .inc();
        if outcome == super::EvictionOutcome::Evicted {
            ctx.told_evicted.insert(&request_uid, Timestamp::now());
        }
        // What the budgets say after the call sets the retry's wait (held while one refuses).
        let budgets = pod
            .as_deref()
            .map_or(Allowance::Unknown, |p| ctx.caches.budgets.allowance(p));
        let mut followup =
            after_eviction(&updated, outcome, Timestamp::now(), &ctx.settings, budgets);
        if let Some(selection) = selection {
            tell_selection_with_outcome(&mut followup, selection);
        }
        let (_, later) = apply(ctx, &updated, &followup).await?;
        requeue = earliest(requeue, later);
    }
    Ok(match requeue {
        Some(d) => Requeue::requeue(d),
        None => Requeue::await_change(),
    })
}

/// A 429 from a PodDisruptionBudget that counts a pod back under an evicted pod's name as
/// disrupted: the outcome's message (the request's `EvictionFailed` event) says which budget,
/// which name and until when, and so does a log line — the Eviction API's own message names
/// neither, and the wait lasts up to two minutes per evicted sibling (the StatefulSet straggler
/// of issue 45). Any other outcome is returned as it is.
fn explain_refusal(
    ctx: &Context,
    pod: Option<&CachedPod>,
    outcome: EvictionOutcome,
) -> EvictionOutcome {
    let (
        EvictionOutcome::Failed {
            status_code: 429,
            message,
            retry_after,
        },
        Some(pod),
    ) = (&outcome, pod)
    else {
        return outcome;
    };
    let ns = pod.namespace();
    let back = |name: &str| {
        ctx.caches
            .pods
            .get(Some(ns), name)
            .is_some_and(|p| !p.is_terminating())
    };
    let held = ctx.caches.budgets.held_names(pod, back, Timestamp::now());
    let Some(note) = held_names_note(&held) else {
        return outcome;
    };
    info!(pod = %pod.name(), %note, "eviction refused: a budget holds an evicted pod's name");
    EvictionOutcome::Failed {
        status_code: 429,
        message: format!("{message} ({note})"),
        retry_after: *retry_after,
    }
}

/// Deletes an ended request whose retention has passed (precondition: the same object).
async fn delete_ended(ctx: &Context, req: &EvictionRequest) -> Result<(), Error> {
    let name = req.name_any();
    let api: Api<EvictionRequest> =
        Api::namespaced(ctx.client.clone(), &req.namespace().unwrap_or_default());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: req.metadata.uid.clone(),
            resource_version: req.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            debug!("ended request deleted after its retention");
            metrics().ended_requests_deleted.inc();
            Ok(())
        }
        // Gone already, or changed since (then it is reconciled again).
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(Error::Delete(name, e)),
    }
}

/// Removes the Eviction API bridge's requester (entry `index`), guarded by `test` operations so
/// that a concurrent change of the requesters fails this patch instead of being overwritten.
async fn expire_bridged_requester(
    ctx: &Context,
    req: &EvictionRequest,
    index: usize,
) -> Result<(), Error> {
    let name = req.name_any();
    let api: Api<EvictionRequest> =
        Api::namespaced(ctx.client.clone(), &req.namespace().unwrap_or_default());
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": req.resource_version()},
        {"op": "test", "path": format!("/spec/requesters/{index}/name"), "value": EVICTION_API_REQUESTER},
        {"op": "remove", "path": format!("/spec/requesters/{index}")},
    ]))
    .unwrap_or_default();
    let written = api
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .map_err(|e| Error::Requesters(name.clone(), e))?;
    metrics().eviction_api_requesters_expired.inc();
    let last = req
        .eviction_api_last_call()
        .map_or_else(|| "its creation".to_string(), |t| t.to_string());
    let event = Event {
        type_: KubeEventType::Normal,
        reason: "RequesterExpired".into(),
        note: Some(format!(
            "No Eviction API call for pod {} since {last} (TTL {}): requester {EVICTION_API_REQUESTER} removed",
            req.spec.target.pod.name,
            humantime::format_duration(ctx.settings.eviction_api_requester_ttl)
        )),
        action: "Reconcile".into(),
        secondary: None,
    };
    ctx.events.publish(event, written.object_ref(&()));
    Ok(())
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Applies labels, status, events and metrics of one decision; returns the request as written.
async fn apply(
    ctx: &Context,
    req: &EvictionRequest,
    d: &Decision,
) -> Result<(EvictionRequest, Option<Duration>), Error> {
    let ns = req.namespace().unwrap_or_default();
    let name = req.name_any();
    let api: Api<EvictionRequest> = Api::namespaced(ctx.client.clone(), &ns);
    let key = format!("{ns}/{name}");
    let mut current = req.clone();
    if let Some(labels) = &d.labels {
        let patch =
            json!({"metadata": {"labels": labels, "resourceVersion": current.resource_version()}});
        let written = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::Labels(name.clone(), e))?;
        ctx.own_writes
            .record(&key, current.metadata.resource_version.as_deref());
        current = written;
    }
    if let Some(status) = &d.status {
        // One JSON patch: the test makes a concurrent writer's update fail this one (409/422)
        // instead of being overwritten; `add` replaces the whole status.
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": current.resource_version()},
            {"op": "add", "path": "/status", "value": status},
        ]))
        .unwrap_or_default();
        let written = api
            .patch_status(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .map_err(|e| Error::Status(name.clone(), e))?;
        ctx.own_writes
            .record(&key, current.metadata.resource_version.as_deref());
        current = written;
    }
    if let Some(n) = d.pod_interceptors {
        metrics().pod_interceptors.observe(n as f64);
    }
    let unregistered = d
        .events
        .iter()
        .filter(|e| e.reason == EVENT_UNREGISTERED_INTERCEPTOR)
        .count();
    if unregistered > 0 {
        metrics()
            .unregistered_interceptors
            .get_or_create(&SourceLabel {
                source: "activation",
            })
            .inc_by(unregistered as u64);
    }
    for (interceptor, reason) in &d.processed {
        metrics()
            .processed_interceptor
            .get_or_create(&ProcessedLabels {
                interceptor: interceptor.clone(),
                reason: reason.as_str(),
            })
            .inc();
    }
    publish(ctx, &current, &d.events);
    Ok((current, d.requeue_after))
}

/// Queues events on the request (written in the background).
fn publish(ctx: &Context, request: &EvictionRequest, events: &[EventSpec]) {
    let reference = request.object_ref(&());
    for e in events {
        let event = Event {
            type_: match e.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: e.reason.to_string(),
            note: Some(e.note.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        ctx.events.publish(event, reference.clone());
    }
}

/// Recomputes the gauges (active interceptor, active requester, open requests) from the cache,
/// and forgets the own writes of requests that are gone.
async fn refresh_gauges(ctx: Arc<Context>, shutdown: CancellationToken) {
    let caches = &ctx.caches;
    let m = metrics();
    loop {
        m.active_interceptor.clear();
        m.active_requester.clear();
        let mut open = 0;
        for r in caches.eviction_requests.all() {
            let status = r.status.clone().unwrap_or_default();
            if status.is_terminal() {
                continue;
            }
            open += 1;
            for a in &status.active_interceptors {
                m.active_interceptor
                    .get_or_create(&InterceptorLabel {
                        interceptor: a.clone(),
                    })
                    .inc();
            }
            for q in &r.spec.requesters {
                m.active_requester
                    .get_or_create(&RequesterLabel {
                        requester: q.name.clone(),
                    })
                    .inc();
            }
        }
        m.open_requests.set(open);
        ctx.own_writes.retain(|key| {
            key.split_once('/')
                .is_some_and(|(ns, name)| caches.eviction_requests.get(Some(ns), name).is_some())
        });
        let uids: std::collections::HashSet<String> = caches
            .eviction_requests
            .all()
            .iter()
            .filter_map(|r| r.metadata.uid.clone())
            .collect();
        ctx.told_evicted.retain(|uid| uids.contains(uid));
        ctx.gone_targets.retain(|uid| uids.contains(uid));
        ctx.evicted_pods.retain(|key| {
            key.split_once('/')
                .is_some_and(|(ns, name)| caches.pods.get(Some(ns), name).is_some())
        });
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_label_is_one_of_the_zeroed_ones() {
        assert!(crate::metrics::CONTROLLERS.contains(&CONTROLLER));
    }
}
