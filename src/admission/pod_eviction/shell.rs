//! The I/O shell of the Eviction API bridge: decodes the call, reads the pod and its request,
//! runs [`review_pod_eviction`], writes what it decided (server-side apply of the request, or
//! delete-and-apply of a canceled one), records the pod event and answers. It holds no rule.
//!
//! Unlike the other webhooks the bridge has a side effect (it creates or joins the request), so
//! it is registered with `sideEffects: NoneOnDryRun` and writes nothing on a dry run. A failed
//! write is HTTP 503: the webhook's `failurePolicy: Ignore` then lets the Eviction API decide, as
//! if evictord were not installed. A write that is still in flight when the answer is due
//! ([`deadline`](super::deadline)) finishes in the background, and the call is answered as
//! decided (429 "Eviction triggered"), so a slow kube-apiserver makes drainers retry instead of
//! evicting the pod past its interceptors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::response::StatusDetails;
use kube::{Api, Client};
use tracing::{Instrument, debug, info_span, warn};

use super::deadline::{answer_budget, caller_timeout};
use super::{
    BridgeDecision, BridgeWrite, EvictionCall, PodEvent, confirm_live, review_pod_eviction,
};
use crate::admission::Lookups;
use crate::admission::http::{AdmissionBody, AdmissionState, HandlerError, answer, decode};
use crate::admission::registration::POD_EVICTION_TIMEOUT_SECONDS;
use crate::api::{EVICTION_API_REQUESTER, EvictionRequest, IMPERATIVE_EVICTION_ANNOTATION};
use crate::cluster::{CachedPod, ClusterView, LiveContext, Lookup, PodLookup, prepare};
use crate::metrics::{AdmissionLabels, OutcomeLabel, metrics};
use crate::recorder::{Event, EventType, Recorder, reporter};
use crate::telemetry::ADMISSION_SPAN;

/// The `resource` label of the bridge's admission metrics.
const RESOURCE: &str = "pods/eviction";

/// The `outcome` label of a call answered 429 "Eviction triggered" while its write was still in
/// flight.
pub const OUTCOME_WRITE_PENDING: &str = "intercepted_write_pending";

/// The axum handler of `POST /validate/pods-eviction`.
pub async fn handle(
    State(state): State<Arc<AdmissionState>>,
    RawQuery(query): RawQuery,
    body: AdmissionBody,
) -> Response {
    let started = Instant::now();
    let timeout = caller_timeout(query.as_deref()).unwrap_or(Duration::from_secs(
        POD_EVICTION_TIMEOUT_SECONDS.unsigned_abs().into(),
    ));
    let answer_by = tokio::time::Instant::from_std(started) + answer_budget(timeout);
    let (verdict, outcome, response) = match decode::<DynamicObject>(
        body.content_type(),
        &body.bytes,
    )
    .and_then(|req| check_subresource(&req).map(|()| req))
    {
        Err(e) => {
            warn!(resource = RESOURCE, error = %e, "bad admission request");
            ("error", "error", e.into_response())
        }
        Ok(req) => {
            let span = info_span!(ADMISSION_SPAN, resource = RESOURCE, uid = %req.uid, name = %req.name, namespace = req.namespace.as_deref().unwrap_or(""));
            match review(&state, &req, answer_by).instrument(span).await {
                Ok(Reviewed { decision, pending }) => {
                    let verdict = if decision.too_many_requests.is_some() {
                        "denied"
                    } else {
                        "allowed"
                    };
                    let outcome = if pending {
                        OUTCOME_WRITE_PENDING
                    } else {
                        decision.outcome.label()
                    };
                    let resp = respond(&req, decision);
                    (verdict, outcome, answer(&resp))
                }
                Err(e) => {
                    warn!(resource = RESOURCE, uid = %req.uid, name = %req.name, namespace = req.namespace.as_deref().unwrap_or(""), error = %e, "eviction call not bridged; failurePolicy decides");
                    ("error", "error", e.into_response())
                }
            }
        }
    };
    let m = metrics();
    m.eviction_api_calls
        .get_or_create(&OutcomeLabel { outcome })
        .inc();
    let labels = AdmissionLabels {
        resource: RESOURCE,
        operation: "CREATE",
        verdict,
    };
    m.admission_requests.get_or_create(&labels).inc();
    m.admission_duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    response
}

/// Refuses anything but a `pods/eviction` request.
fn check_subresource(req: &AdmissionRequest<DynamicObject>) -> Result<(), HandlerError> {
    if req.resource.resource == "pods" && req.sub_resource.as_deref() == Some("eviction") {
        return Ok(());
    }
    Err(HandlerError::BadRequest(format!(
        "this webhook reviews pods/eviction, got a request for {:?} subresource {:?}; check the webhook configuration's rules",
        req.resource.resource, req.sub_resource
    )))
}

/// The call as the decision reads it.
pub fn eviction_call<'a>(
    req: &'a AdmissionRequest<DynamicObject>,
    now: Timestamp,
) -> EvictionCall<'a> {
    let object = req.object.as_ref();
    let dry_run_in_body = object
        .and_then(|o| o.data.pointer("/deleteOptions/dryRun"))
        .and_then(|v| v.as_array())
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some("All")));
    let acting_for = object
        .and_then(|o| o.metadata.annotations.as_ref())
        .and_then(|a| a.get(IMPERATIVE_EVICTION_ANNOTATION))
        .map(String::as_str);
    EvictionCall {
        namespace: req.namespace.as_deref().unwrap_or(""),
        pod_name: &req.name,
        user: &req.user_info,
        dry_run: req.dry_run || dry_run_in_body,
        acting_for,
        now,
    }
}

/// What [`review`] decided, and whether its write was still in flight when the answer was due.
#[derive(Debug)]
pub struct Reviewed {
    /// The decision.
    pub decision: BridgeDecision,
    /// The write (or the event) goes on in the background after the answer.
    pub pending: bool,
}

/// Decides on the live cluster (offline: every call is allowed) and writes what was decided,
/// waiting for the write until `answer_by` and no longer.
///
/// # Errors
/// `NotReady` before the caches synced; `Lookup` when the pod lookup or a write fails.
pub async fn review(
    state: &AdmissionState,
    req: &AdmissionRequest<DynamicObject>,
    answer_by: tokio::time::Instant,
) -> Result<Reviewed, HandlerError> {
    let call = eviction_call(req, Timestamp::now());
    let Some(live) = &state.live else {
        return Ok(Reviewed {
            decision: review_pod_eviction(
                &call,
                &Lookup::Unknown,
                &Lookup::Unknown,
                &state.settings,
            ),
            pending: false,
        });
    };
    if !live.caches.synced() {
        return Err(HandlerError::NotReady);
    }
    let lookups = Lookups {
        pods: vec![PodLookup {
            namespace: call.namespace.into(),
            name: call.pod_name.into(),
            uid: None,
        }],
        ..Lookups::default()
    };
    let view = prepare(live, &lookups).await?;
    let pod = view.pod(call.namespace, call.pod_name);
    let request = match &pod {
        Lookup::Found(p) => view.eviction_request(p.namespace(), p.uid()),
        _ => Lookup::Missing,
    };
    let mut decision = review_pod_eviction(&call, &pod, &request, &state.settings);
    if let Lookup::Found(p) = &pod
        && confirm_live(&call, &pod, &decision)
    {
        let request = live_request(live, p).await?;
        debug!(
            "evictord's own eviction call not yet in the cache; decided on a live read of its request"
        );
        decision = review_pod_eviction(&call, &pod, &request, &state.settings);
    }
    // Taken out of the decision: only the answer's parts of it are read after this.
    let write = decision.write.take();
    let event = match (decision.event.take(), &pod) {
        (Some(event), Lookup::Found(pod)) => Some((Arc::clone(pod), event)),
        _ => None,
    };
    let pending = if write.is_some() || event.is_some() {
        write_by(&live.client, write, event, answer_by).await?
    } else {
        false
    };
    debug!(
        outcome = decision.outcome.label(),
        pending, "eviction call reviewed"
    );
    Ok(Reviewed { decision, pending })
}

/// Writes the request and records the event in a task of their own, waiting for them until
/// `answer_by`. `Ok(true)`: still in flight then; the task goes on, and reports its end in the
/// log (a late failure is written again by the caller's next retry, which finds no request).
///
/// # Errors
/// The write's error, when it failed in time.
async fn write_by(
    client: &Client,
    write: Option<BridgeWrite>,
    event: Option<(Arc<CachedPod>, PodEvent)>,
    answer_by: tokio::time::Instant,
) -> Result<bool, kube::Error> {
    let client = client.clone();
    let started = Instant::now();
    let mut task = tokio::spawn(
        async move {
            if let Some(write) = &write {
                apply_write(&client, write).await?;
            }
            if let Some((pod, event)) = &event {
                record(&client, pod, event).await;
            }
            Ok::<(), kube::Error>(())
        }
        .in_current_span(),
    );
    match tokio::time::timeout_at(answer_by, &mut task).await {
        Ok(Ok(result)) => result.map(|()| false),
        Ok(Err(join)) => {
            // The write panicked: answer as if it failed (503, failurePolicy decides).
            Err(kube::Error::Service(join.to_string().into()))
        }
        Err(_) => {
            warn!(
                waited_ms = started.elapsed().as_millis(),
                "eviction call answered 429 while its write is still in flight; kube-apiserver is slow"
            );
            tokio::spawn(
                async move {
                    match task.await {
                        Ok(Ok(())) => debug!(
                            took_ms = started.elapsed().as_millis(),
                            "late bridge write done"
                        ),
                        Ok(Err(e)) => warn!(
                            error = %e,
                            "late bridge write failed; the caller's next retry writes it again"
                        ),
                        Err(e) => warn!(error = %e, "late bridge write panicked"),
                    }
                }
                .in_current_span(),
            );
            Ok(true)
        }
    }
}

/// The pod's request (named after its UID) read live: a consistent read, which holds every
/// write kube-apiserver acknowledged before the call.
async fn live_request(
    live: &LiveContext,
    pod: &CachedPod,
) -> Result<Lookup<Arc<EvictionRequest>>, kube::Error> {
    let api: Api<EvictionRequest> = Api::namespaced(live.client.clone(), pod.namespace());
    Ok(match api.get_opt(pod.uid()).await? {
        Some(r) => Lookup::Found(Arc::new(r)),
        None => Lookup::Missing,
    })
}

/// Writes the request: server-side apply as [`EVICTION_API_REQUESTER`] (creates it or joins it,
/// the requesters being a list-map keyed by name), after deleting a canceled one.
///
/// # Errors
/// When kube-apiserver refuses or cannot be reached.
pub async fn apply_write(client: &Client, write: &BridgeWrite) -> Result<(), kube::Error> {
    let (request, replaced) = match write {
        BridgeWrite::Apply(r) => (r, None),
        BridgeWrite::Replace { old_uid, request } => (request, Some(old_uid)),
    };
    let namespace = request.metadata.namespace.as_deref().unwrap_or_default();
    let name = request.metadata.name.as_deref().unwrap_or_default();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), namespace);
    if let Some(old_uid) = replaced {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(old_uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            // Already gone, or already replaced by someone else: apply joins what is there.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let params = PatchParams::apply(EVICTION_API_REQUESTER).force();
    api.patch(name, &params, &Patch::Apply(&**request)).await?;
    Ok(())
}

async fn record(client: &Client, pod: &CachedPod, event: &PodEvent) {
    let recorder = Recorder::new(client.clone(), reporter("evictord-eviction-api"));
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name().to_string()),
        namespace: Some(pod.namespace().to_string()),
        uid: Some(pod.uid().to_string()),
        ..ObjectReference::default()
    };
    let e = Event {
        type_: EventType::Normal,
        reason: event.reason.into(),
        note: Some(event.message.clone()),
        action: "Evict".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&e, &reference).await {
        warn!(pod = %format!("{}/{}", pod.namespace(), pod.name()), reason = event.reason, error = %err, "recording the pod event failed");
    }
}

/// The AdmissionResponse: allowed with warnings, or denied with 429 TooManyRequests
/// (kube-apiserver passes the code and message on to the caller).
///
/// No `retryAfterSeconds`: kube-apiserver would turn it into a `Retry-After` header, and
/// client-go (kubectl, the autoscalers, the descheduler) then retries up to ten times inside
/// the client without a word, so the drainer shows nothing for a minute. Without it the drainer
/// sees each answer and retries on its own schedule (kubectl: "will retry after 5s"), exactly as
/// for a PodDisruptionBudget's 429.
pub fn respond(
    req: &AdmissionRequest<DynamicObject>,
    decision: BridgeDecision,
) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(req);
    if !decision.warnings.is_empty() {
        response.warnings = Some(decision.warnings);
    }
    let Some(message) = decision.too_many_requests else {
        return response;
    };
    let mut denied = response.deny(message);
    denied.result.code = 429;
    denied.result.reason = "TooManyRequests".into();
    denied.result.details = Some(StatusDetails {
        name: req.name.clone(),
        group: String::new(),
        kind: "pods".into(),
        uid: String::new(),
        causes: Vec::new(),
        retry_after_seconds: 0,
    });
    denied
}
