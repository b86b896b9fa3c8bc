//! The one generic HTTP handler: decode an `admission.k8s.io/v1` AdmissionReview, prepare the
//! lookups, run the pure review, encode the answer. It holds no business logic.
//!
//! Rule violations are HTTP 200 with `allowed: false`; unreadable input is HTTP 400 (413 for
//! bodies over the limit); an internal failure (caches not synced, API unreachable) is HTTP 503
//! so that the webhook's `failurePolicy` decides.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use jiff::Timestamp;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::de::DeserializeOwned;
use tracing::{Instrument, info_span, warn};

use super::envelope::decode_review;
use super::{Lookups, ReviewRequest, Settings, Verdict};
use crate::cluster::{ClusterView, LiveContext, RegistrationView, StaticView, prepare};
use crate::metrics::{AdmissionLabels, metrics};
use crate::telemetry::ADMISSION_SPAN;

pub use super::answer::{ResponseReview, answer};
pub use super::body::{AdmissionBody, MAX_BODY_BYTES};

/// A webhook: a resource and its pure functions.
pub struct Webhook<K: 'static> {
    /// Resource name, for metrics and logs (`evictionrequests`, `pods`, `nodemaintenances`).
    pub resource: &'static str,
    /// `validate` or `mutate`.
    pub kind: &'static str,
    /// The lookups the review will make (prepared by the server before calling `review`).
    pub lookups: for<'a> fn(&ReviewRequest<'a, K>, &dyn ClusterView) -> Lookups<'a>,
    /// The review.
    pub review: fn(&ReviewRequest<'_, K>, &dyn ClusterView, &Settings) -> Verdict,
    /// Whether the review reads the cluster at all (if not, it runs before the caches sync).
    pub needs_cluster: fn(&ReviewRequest<'_, K>) -> bool,
    /// The sub-resources it is registered for besides the resource itself (`status`).
    pub sub_resources: &'static [&'static str],
}

/// What the handler needs.
pub struct AdmissionState {
    /// Rule settings.
    pub settings: Settings,
    /// The cluster, or `None` offline.
    pub live: Option<Arc<LiveContext>>,
}

/// Why a request could not be reviewed.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The body is not a JSON AdmissionReview of `admission.k8s.io/v1`.
    #[error("{0}")]
    BadRequest(String),
    /// The caches have not synced yet.
    #[error("watch caches are not synced yet; retry shortly")]
    NotReady,
    /// A live lookup or access review failed.
    #[error("cluster lookup failed: {0}")]
    Lookup(#[from] kube::Error),
    /// A well-formed AdmissionReview whose object does not match the resource's schema (an
    /// unknown enum value, a missing required field): answered with a denial that names the
    /// field, not with HTTP 400, which kube-apiserver reports as "rejected our request for an
    /// unknown reason" (the mutating webhook runs before schema validation, so it sees these).
    #[error("{}", .response.result.message)]
    InvalidObject {
        /// The resource of the request (a route answers only its own).
        resource: String,
        /// The denial.
        response: Box<AdmissionResponse>,
    },
}

impl IntoResponse for HandlerError {
    fn into_response(self) -> Response {
        let status = match self {
            HandlerError::InvalidObject { response, .. } => return answer(&response),
            HandlerError::BadRequest(_) => StatusCode::BAD_REQUEST,
            HandlerError::NotReady | HandlerError::Lookup(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{self}\n"),
        )
            .into_response()
    }
}

/// Decodes an AdmissionReview request body.
///
/// # Errors
/// `BadRequest` with a message for a wrong content type, malformed JSON, another version than
/// `admission.k8s.io/v1`, or a missing `request`.
pub fn decode<K>(
    content_type: Option<&str>,
    body: &[u8],
) -> Result<AdmissionRequest<K>, HandlerError>
where
    K: kube::Resource + DeserializeOwned,
{
    let ct = content_type.unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(HandlerError::BadRequest(format!(
            "Content-Type must be application/json, got {ct:?}"
        )));
    }
    let review = match decode_review::<K>(body) {
        Ok(r) => r,
        Err(e) => {
            let malformed = || HandlerError::BadRequest(format!("malformed AdmissionReview: {e}"));
            let value: serde_json::Value = serde_json::from_slice(body).map_err(|_| malformed())?;
            return Err(schema_denial::<K>(&value).unwrap_or_else(malformed));
        }
    };
    check_version(&review.types.api_version, &review.types.kind)?;
    review
        .request
        .ok_or_else(|| HandlerError::BadRequest("AdmissionReview has no request".into()))
}

/// For an AdmissionReview of `admission.k8s.io/v1` whose `object` or `oldObject` does not decode
/// as `K`: the denial naming the field, the value and what is allowed, e.g. `spec.stage: unknown
/// variant `Drian`, expected one of `Idle`, `Cordon`, `Drain`, `Complete``. `None` when the
/// envelope itself is wrong (then the request is malformed: HTTP 400).
pub fn schema_denial<K: kube::Resource + DeserializeOwned>(
    review: &serde_json::Value,
) -> Option<HandlerError> {
    // The envelope without the objects (they may not even be Kubernetes objects).
    let mut bare = review.clone();
    for field in ["object", "oldObject"] {
        if let Some(slot) = bare.pointer_mut(&format!("/request/{field}")) {
            *slot = serde_json::Value::Null;
        }
    }
    let envelope: AdmissionReview<DynamicObject> = serde_json::from_value(bare).ok()?;
    check_version(&envelope.types.api_version, &envelope.types.kind).ok()?;
    let req: AdmissionRequest<DynamicObject> = envelope.try_into().ok()?;
    let message = ["object", "oldObject"].into_iter().find_map(|field| {
        let obj = review
            .pointer(&format!("/request/{field}"))
            .filter(|v| !v.is_null())?;
        let err = serde_path_to_error::deserialize::<_, K>(obj.clone()).err()?;
        Some(format!(
            "{}: {} (the {field} does not match the {} schema)",
            err.path(),
            err.inner(),
            req.kind.kind
        ))
    })?;
    let mut denied = AdmissionResponse::from(&req).deny(message);
    denied.result.code = 422;
    denied.result.reason = "Invalid".into();
    Some(HandlerError::InvalidObject {
        resource: req.resource.resource.clone(),
        response: Box::new(denied),
    })
}

/// Accepts only `admission.k8s.io/v1` `AdmissionReview`.
///
/// # Errors
/// `BadRequest` naming what was received.
pub fn check_version(api_version: &str, kind: &str) -> Result<(), HandlerError> {
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(HandlerError::BadRequest(format!(
            "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got apiVersion {api_version:?} kind {kind:?} (register the webhook with admissionReviewVersions: [v1])"
        )));
    }
    Ok(())
}

/// Refuses a request for another resource than the webhook's: every route must review only
/// what it is registered for. (A Pod decodes leniently, so without this an EvictionRequest sent
/// to the Pod route by a misconfigured webhook would be allowed unreviewed.)
///
/// # Errors
/// `BadRequest` naming the resource received and the one expected.
pub fn check_resource<K: kube::Resource>(
    webhook: &Webhook<K>,
    req: &AdmissionRequest<K>,
) -> Result<(), HandlerError> {
    if req.resource.resource != webhook.resource {
        return Err(wrong_resource(webhook.resource, &req.resource.resource));
    }
    match req.sub_resource.as_deref() {
        None => Ok(()),
        Some(sub) if webhook.sub_resources.contains(&sub) => Ok(()),
        Some(sub) => Err(HandlerError::BadRequest(format!(
            "this webhook reviews {} and {:?}, got a request for the {sub:?} sub-resource; check the \
             webhook configuration's rules",
            webhook.resource, webhook.sub_resources
        ))),
    }
}

/// Refuses an AdmissionReview without the objects its operation always carries: kube-apiserver
/// sends `object` on CREATE and UPDATE and `oldObject` on UPDATE and DELETE, so such a review did
/// not come from it and no rule can be checked on it (an HTTP 400, like any malformed review,
/// rather than a denial that could name no rule).
///
/// # Errors
/// `BadRequest` naming the operation and the missing field.
pub fn check_objects<K: kube::Resource>(req: &AdmissionRequest<K>) -> Result<(), HandlerError> {
    let missing = match req.operation {
        Operation::Create | Operation::Update if req.object.is_none() => Some("object"),
        Operation::Update | Operation::Delete if req.old_object.is_none() => Some("oldObject"),
        _ => None,
    };
    match missing {
        Some(field) => Err(HandlerError::BadRequest(format!(
            "the AdmissionReview of a {} carries no {field}; kube-apiserver always sends it",
            operation_label(&req.operation)
        ))),
        None => Ok(()),
    }
}

fn wrong_resource(expected: &str, got: &str) -> HandlerError {
    HandlerError::BadRequest(format!(
        "this webhook reviews {expected}, got a request for {got:?}; check the webhook configuration's rules"
    ))
}

/// The typed view of an admission request that reviews take.
pub fn review_request<K: kube::Resource>(
    req: &AdmissionRequest<K>,
    now: Timestamp,
) -> ReviewRequest<'_, K> {
    ReviewRequest {
        operation: req.operation.clone(),
        sub_resource: req.sub_resource.as_deref(),
        namespace: req.namespace.as_deref(),
        name: &req.name,
        object: req.object.as_ref(),
        old_object: req.old_object.as_ref(),
        user: &req.user_info,
        dry_run: req.dry_run,
        now,
    }
}

/// Turns a verdict into the AdmissionResponse for `req` (same uid, warnings, JSONPatch).
pub fn respond<K: kube::Resource>(
    req: &AdmissionRequest<K>,
    verdict: Verdict,
) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(req);
    if !verdict.warnings.is_empty() {
        response.warnings = Some(verdict.warnings);
    }
    if let Some(message) = verdict.denied {
        let mut denied = response.deny(message);
        denied.result.code = 403;
        denied.result.reason = "Forbidden".into();
        return denied;
    }
    if verdict.patch.is_empty() {
        return response;
    }
    match response
        .clone()
        .with_patch(json_patch::Patch(verdict.patch))
    {
        Ok(r) => r,
        // Cannot happen for JSON values; refuse rather than admit an unmutated object.
        Err(e) => response.deny(format!("internal: encoding the patch failed: {e}")),
    }
}

/// Runs one webhook on a decoded request against the live cluster (or offline).
///
/// # Errors
/// `NotReady` before the caches synced (when the review needs the cluster), `Lookup` when a
/// live lookup fails.
pub async fn review_live<K>(
    webhook: &Webhook<K>,
    state: &AdmissionState,
    req: &AdmissionRequest<K>,
) -> Result<AdmissionResponse, HandlerError>
where
    K: kube::Resource,
{
    let rr = review_request(req, Timestamp::now());
    let verdict = match &state.live {
        Some(live) if (webhook.needs_cluster)(&rr) => {
            if !live.caches.synced() {
                return Err(HandlerError::NotReady);
            }
            let cache_view = prepare(live, &Lookups::default()).await?;
            let lookups = (webhook.lookups)(&rr, &cache_view);
            let view = prepare(live, &lookups).await?;
            (webhook.review)(&rr, &view, &state.settings)
        }
        Some(live) => (webhook.review)(&rr, &RegistrationView::new(&live.caches), &state.settings),
        None => (webhook.review)(&rr, &StaticView::unknown(), &state.settings),
    };
    Ok(respond(req, verdict))
}

fn operation_label(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

async fn handle<K>(
    webhook: &'static Webhook<K>,
    state: Arc<AdmissionState>,
    body: AdmissionBody,
) -> Response
where
    K: kube::Resource + DeserializeOwned + Send + Sync,
{
    let started = Instant::now();
    let decoded = decode::<K>(body.content_type(), &body.bytes)
        .map_err(|e| match e {
            // Another resource's object does not decode here: the route is wrong, not the object.
            HandlerError::InvalidObject { resource, .. } if resource != webhook.resource => {
                wrong_resource(webhook.resource, &resource)
            }
            e => e,
        })
        .and_then(|req| {
            check_resource(webhook, &req)?;
            check_objects(&req)?;
            Ok(req)
        });
    let (operation, verdict, response) = match decoded {
        Err(e) => {
            warn!(resource = webhook.resource, error = %e, "bad admission request");
            ("-", "error", e.into_response())
        }
        Ok(req) => {
            let op = operation_label(&req.operation);
            let span = info_span!(ADMISSION_SPAN, resource = webhook.resource, webhook = webhook.kind, operation = op, uid = %req.uid, name = %req.name, namespace = req.namespace.as_deref().unwrap_or(""));
            match review_live(webhook, &state, &req).instrument(span).await {
                Ok(resp) => {
                    let v = if resp.allowed { "allowed" } else { "denied" };
                    (op, v, answer(&resp))
                }
                Err(e) => {
                    warn!(resource = webhook.resource, uid = %req.uid, name = %req.name, namespace = req.namespace.as_deref().unwrap_or(""), error = %e, "admission request failed");
                    (op, "error", e.into_response())
                }
            }
        }
    };
    let labels = AdmissionLabels {
        resource: webhook.resource,
        operation,
        verdict,
    };
    let m = metrics();
    m.admission_requests.get_or_create(&labels).inc();
    m.admission_duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    response
}

/// Adds a POST route for `webhook` at `path`.
pub fn route<K>(
    router: Router<Arc<AdmissionState>>,
    path: &str,
    webhook: &'static Webhook<K>,
) -> Router<Arc<AdmissionState>>
where
    K: kube::Resource + DeserializeOwned + Send + Sync + 'static,
{
    router.route(
        path,
        post(
            move |State(state): State<Arc<AdmissionState>>, body: AdmissionBody| {
                handle(webhook, state, body)
            },
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::{Bytes, to_bytes};
    use axum::http::{HeaderValue, StatusCode};
    use serde_json::{Value, json};

    use super::{AdmissionBody, AdmissionState, handle};
    use crate::admission::eviction_request::fixtures::{NS, UID, request};
    use crate::admission::webhooks::VALIDATE_EVICTION_REQUESTS;
    use crate::cluster::{Authorizer, Caches, LiveContext};

    /// A server whose caches never sync: its kube-apiserver (a closed loopback port) refuses
    /// every connection.
    fn unsynced() -> Arc<AdmissionState> {
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        Arc::new(AdmissionState {
            settings: Default::default(),
            live: Some(Arc::new(LiveContext {
                caches: Caches::start(&client),
                authorizer: Authorizer::new(client.clone()),
                client,
            })),
        })
    }

    fn review(operation: &str, sub_resource: Option<&str>) -> AdmissionBody {
        let er = serde_json::to_value(request(UID).build()).unwrap();
        let old = (operation == "UPDATE").then(|| er.clone());
        let mut call = json!({
            "uid": "u-1", "operation": operation, "name": UID, "namespace": NS,
            "kind": {"group": "evictord.dev", "version": "v1alpha1", "kind": "EvictionRequest"},
            "resource": {"group": "evictord.dev", "version": "v1alpha1", "resource": "evictionrequests"},
            "userInfo": {"username": "alice"}, "object": er, "oldObject": old
        });
        if let Some(s) = sub_resource {
            call["subResource"] = json!(s);
        }
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": call});
        AdmissionBody {
            content_type: Some(HeaderValue::from_static("application/json")),
            bytes: Bytes::from(serde_json::to_vec(&body).unwrap()),
        }
    }

    /// Status updates (S1-S6) read nothing of the cluster, so they are answered before the
    /// caches sync; a create (E7, E8 read the pod cache and ask access reviews) waits with 503.
    #[tokio::test]
    async fn status_updates_are_answered_before_the_caches_sync() {
        let state = unsynced();
        let status = handle(
            &VALIDATE_EVICTION_REQUESTS,
            state.clone(),
            review("UPDATE", Some("status")),
        )
        .await;
        assert_eq!(status.status(), StatusCode::OK);
        let answer: Value =
            serde_json::from_slice(&to_bytes(status.into_body(), 1 << 20).await.unwrap()).unwrap();
        assert_eq!(answer["response"]["uid"], "u-1");
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        let create = handle(&VALIDATE_EVICTION_REQUESTS, state, review("CREATE", None)).await;
        assert_eq!(create.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
