//! The webhooks, end to end in-process: the body goes through the router `evictord serve` runs
//! (offline: no cluster), and the answer is checked beyond "no panic":
//! - an HTTP 200 answer is an AdmissionReview whose `response.uid` is the request's uid;
//! - a denial names a rule (`rule X1`) or, for an object that does not decode (HTTP 200 with
//!   code 422), the field;
//! - any other answer is an error status with a message, never something that looks like a
//!   review;
//! - the mutating webhook's patch applies to the object, and the result passes the rules the
//!   mutation is responsible for (stage set, plan in canonical order).
//!
//! The pure reviews with a cluster view (the Eviction API bridge with a pod that has
//! interceptors) are driven directly, after the same decoding.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, header};
use base64::Engine;
use evictord::admission::http::{AdmissionState, decode, review_request};
use evictord::admission::node_maintenance::{
    apply_patch, drain_plan_order, mutate_node_maintenance, review_node_maintenance,
};
use evictord::admission::pod_eviction::review_pod_eviction;
use evictord::admission::pod_eviction::shell::{eviction_call, respond};
use evictord::admission::webhooks::router;
use evictord::api::NodeMaintenance;
use evictord::cluster::{CachedPod, Lookup, StaticView};
use http_body_util::BodyExt;
use kube::core::DynamicObject;
use kube::core::admission::Operation;
use serde_json::Value;
use tower::ServiceExt;

thread_local! {
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

/// The router, built once (its state is read-only).
fn app() -> axum::Router {
    static APP: Mutex<Option<axum::Router>> = Mutex::new(None);
    let mut app = APP.lock().unwrap_or_else(|e| e.into_inner());
    app.get_or_insert_with(|| {
        router(Arc::new(AdmissionState {
            settings: Default::default(),
            live: None,
        }))
    })
    .clone()
}

/// POSTs `body` to `path` of the offline router; the status and the body of the answer.
pub fn post(path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    RUNTIME.with(|rt| {
        let mut rt = rt.borrow_mut();
        let rt = rt.get_or_insert_with(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
        });
        rt.block_on(async {
            let request = Request::post(path)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_vec()))
                .expect("a request");
            let response = app().oneshot(request).await.expect("infallible");
            let status = response.status().as_u16();
            let bytes = response
                .into_body()
                .collect()
                .await
                .expect("a body")
                .to_bytes();
            (status, bytes.to_vec())
        })
    })
}

/// True when `message` names a rule id such as `rule E3`, `rule S4`, `rule M2`.
pub fn names_rule(message: &str) -> bool {
    message.match_indices("rule ").any(|(i, _)| {
        let rest = &message.as_bytes()[i + 5..];
        rest.first().is_some_and(u8::is_ascii_uppercase)
            && rest.get(1).is_some_and(u8::is_ascii_digit)
    })
}

#[derive(serde::Deserialize)]
struct UidOnly {
    request: UidField,
}

#[derive(serde::Deserialize)]
struct UidField {
    uid: String,
}

/// The checks on one answer of a webhook route; returns the response AdmissionReview's
/// `response` when the answer is a review.
pub fn check_answer(input: &[u8], status: u16, body: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(body);
    if status != 200 {
        assert!(
            matches!(status, 400 | 413 | 503),
            "unexpected HTTP {status}: {text}"
        );
        assert!(!text.trim().is_empty(), "HTTP {status} without a message");
        assert!(
            !text.contains("\"allowed\""),
            "an error that looks like a review: {text}"
        );
        return None;
    }
    let review: Value = serde_json::from_slice(body).expect("HTTP 200 is JSON");
    let response = review
        .get("response")
        .cloned()
        .expect("HTTP 200 is a response AdmissionReview");
    // The uid as the server reads it: its typed decoding skips fields it does not know without
    // validating them as strictly as `Value` does (e.g. a lone surrogate escape); when that
    // decoding fails (e.g. a duplicate key) the schema denial reads the review as a `Value`,
    // where the last duplicate wins.
    let uid = serde_json::from_slice::<UidOnly>(input)
        .map(|u| u.request.uid)
        .ok()
        .or_else(|| {
            let value: Value = serde_json::from_slice(input).ok()?;
            Some(value.pointer("/request/uid")?.as_str()?.to_string())
        })
        .expect("a reviewed request has a uid");
    assert_eq!(
        response.get("uid").and_then(Value::as_str),
        Some(uid.as_str()),
        "the response must carry the request's uid"
    );
    let allowed = response.get("allowed").and_then(Value::as_bool);
    assert!(allowed.is_some(), "no allowed field: {response}");
    if allowed == Some(false) {
        let message = response
            .pointer("/status/message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let code = response.pointer("/status/code").and_then(Value::as_i64);
        match code {
            // An object that does not match the schema: the message names the field.
            Some(422) => assert!(message.contains("schema"), "{message}"),
            // The Eviction API bridge's "Eviction triggered" answer.
            Some(429) => assert!(message.starts_with("Eviction triggered"), "{message}"),
            _ => assert!(
                names_rule(message),
                "a denial that names no rule: {message:?}"
            ),
        }
    }
    Some(response)
}

/// One route: post, check.
fn route(path: &str, data: &[u8]) -> Option<Value> {
    let (status, body) = post(path, data);
    check_answer(data, status, &body)
}

/// `POST /validate/evictionrequests` (create, update, status, delete).
pub fn eviction_requests(data: &[u8]) {
    route("/validate/evictionrequests", data);
}

/// `POST /validate/pods`.
pub fn pods(data: &[u8]) {
    route("/validate/pods", data);
}

/// `POST /validate/nodemaintenances`.
pub fn validate_node_maintenances(data: &[u8]) {
    route("/validate/nodemaintenances", data);
}

/// `POST /mutate/nodemaintenances`, and the mutation applied and validated again.
pub fn mutate_node_maintenances(data: &[u8]) {
    let Some(response) = route("/mutate/nodemaintenances", data) else {
        return;
    };
    // The route agreed the body is a review; the pure functions see the same request.
    let Ok(req) = decode::<NodeMaintenance>(Some("application/json"), data) else {
        return;
    };
    let rr = review_request(&req, jiff::Timestamp::now());
    let verdict = mutate_node_maintenance(&rr);
    let Some(patch) = response.get("patch").and_then(Value::as_str) else {
        assert!(verdict.patch.is_empty(), "a patch was decided but not sent");
        return;
    };
    let sent = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .expect("the patch is base64");
    let sent: json_patch::Patch = serde_json::from_slice(&sent).expect("the patch is a JSON patch");
    let object = req
        .object
        .as_ref()
        .expect("a patched request has an object");
    let patched = apply_patch(object, &sent.0)
        .unwrap_or_else(|e| panic!("the patch does not apply to the object: {e}"));
    if req.operation == Operation::Create {
        assert!(patched.spec.stage.is_some(), "no stage after the mutation");
    }
    let plan = &patched.spec.drain_plan;
    assert!(
        plan.windows(2)
            .all(|w| drain_plan_order(&w[0], &w[1]) != std::cmp::Ordering::Greater),
        "the mutated plan is not in canonical order"
    );
    let mut again = rr.clone();
    again.object = Some(&patched);
    let verdict = review_node_maintenance(&again, &StaticView::unknown(), &Default::default());
    if let Some(message) = verdict.denied {
        assert!(
            !message.contains("canonical order") && !message.contains("spec.stage"),
            "the mutated object fails validation on what the mutation sets: {message}"
        );
    }
}

/// `POST /validate/pods-eviction` (offline: every call allowed), then the bridge's decision
/// for a pod of that name that declares an interceptor and has no request yet.
pub fn pod_evictions(data: &[u8]) {
    route("/validate/pods-eviction", data);
    let Ok(req) = decode::<DynamicObject>(Some("application/json"), data) else {
        return;
    };
    let call = eviction_call(&req, jiff::Timestamp::now());
    let mut pod = CachedPod::default();
    pod.metadata.name = Some(call.pod_name.to_string());
    pod.metadata.namespace = Some(call.namespace.to_string());
    pod.metadata.uid = Some("00000000-0000-4000-8000-000000000001".into());
    pod.metadata.annotations = Some(
        [(
            evictord::api::INTERCEPTORS_ANNOTATION.to_string(),
            "a.example.com".to_string(),
        )]
        .into(),
    );
    let decision = review_pod_eviction(
        &call,
        &Lookup::Found(Arc::new(pod)),
        &Lookup::Missing,
        &Default::default(),
    );
    let response = respond(&req, decision);
    assert_eq!(
        response.uid, req.uid,
        "the response must carry the request's uid"
    );
    if !response.allowed {
        assert!(
            response.result.message.starts_with("Eviction triggered"),
            "{}",
            response.result.message
        );
    }
}
