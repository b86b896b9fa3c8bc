//! Part 1's request bodies: the annotated pod, the EvictionRequest heartbeat and create reviews,
//! each in [`UID_VARIANTS`] copies that differ only in their `request.uid`.

use jiff::{Timestamp, ToSpan};
use serde_json::Value;

use crate::fixture::{ANNOTATION, HEARTBEAT, POD, Review, review};
use crate::loadgen::{Bodies, ReviewBody};

/// The pod bodies (built once: padding is slow).
static POD_BODIES: std::sync::OnceLock<Vec<ReviewBody>> = std::sync::OnceLock::new();

/// Request bodies of each kind differ only in their `request.uid` (a server must echo it; the
/// load generator checks it): this many variants, sent in turn.
pub const UID_VARIANTS: usize = 64;

/// The `i`-th review uid of body kind `kind` (UUID-shaped, distinct across kinds).
pub(crate) fn request_uid(kind: u32, i: usize) -> String {
    format!("{kind:08x}-be4c-4000-8000-{i:012x}")
}

/// [`UID_VARIANTS`] copies of `fixture` with distinct `request.uid`s.
fn uid_variants(fixture: Review, kind: u32) -> Vec<ReviewBody> {
    (0..UID_VARIANTS)
        .map(|i| {
            let body = fixture
                .clone()
                .set("/request/uid", request_uid(kind, i))
                .json();
            ReviewBody::new(body).expect("a fixture with request.uid")
        })
        .collect()
}

/// A realistic body: the pod fixture with a valid four-interceptor annotation, padded to about
/// 10 KiB with environment variables (as `benches/review.rs` does).
fn pod_bodies() -> Vec<ReviewBody> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(
        ANNOTATION.into(),
        "checkout.shop.example.com, pdb.example.com, statefulset.apps.k8s.io, drain-guard.example.org"
            .into(),
    );
    let fixture = review(POD).set("/request/object/metadata/annotations", annotations);
    let padded: Value =
        serde_json::from_slice(&fixture.padded_json(10 * 1024)).expect("padded pod review");
    uid_variants(Review(padded), 1)
}

/// What kube-apiserver sends in the metadata of an EvictionRequest the controller and an
/// interceptor have written to, besides name, namespace, uid and times: the labels the controller
/// copied from the pod (SPEC 2.3 step 4) and the managed fields of its three writers (the
/// requester, evictord's status, the interceptor's heartbeat). Webhooks get `managedFields`
/// (kubernetes/kubernetes#96688); the test fixture leaves them out for readability.
fn written_metadata() -> Value {
    serde_json::json!({
        "labels": {"app": "checkout", "pod-template-hash": "7d9c6b5f4", "tier": "web", "team": "payments"},
        "managedFields": [
            {"manager": "evictord", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2025-12-31T23:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:team": {}, "f:tier": {}}},
                          "f:spec": {".": {}, "f:requesters": {}, "f:target": {".": {}, "f:pod": {".": {}, "f:name": {}, "f:uid": {}}}}}},
            {"manager": "evictord", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2025-12-31T23:50:00Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {".": {}, "f:activeInterceptors": {}, "f:interceptors": {}, "f:observedGeneration": {}, "f:targetInterceptors": {}}}},
            {"manager": "checkout-interceptor", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {"f:interceptors": {}}}}
        ]
    })
}

/// The interceptor heartbeat fixture with the metadata of [`written_metadata`] (5 KiB), re-timed
/// to `now` (the rules check heartbeats against the clock: the new heartbeat is now, the
/// previous one two minutes ago).
fn heartbeat_bodies(now: Timestamp) -> Vec<ReviewBody> {
    let t = |offset: jiff::Span| -> Value {
        let ts = now.checked_add(offset).expect("timestamp");
        Value::String(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
    };
    let mut r = review(HEARTBEAT);
    for side in ["object", "oldObject"] {
        for (key, value) in written_metadata().as_object().expect("an object") {
            r = r.set(&format!("/request/{side}/metadata/{key}"), value.clone());
        }
        r = r
            .set(
                &format!("/request/{side}/metadata/creationTimestamp"),
                t((-60).minutes()),
            )
            .set(
                &format!("/request/{side}/status/interceptors/0/activationTime"),
                t((-10).minutes()),
            )
            .set(
                &format!("/request/{side}/status/interceptors/0/startTime"),
                t((-10).minutes()),
            )
            .set(
                &format!("/request/{side}/status/interceptors/0/expectedFinishTime"),
                t(10.minutes()),
            );
    }
    r = r
        .set(
            "/request/oldObject/status/interceptors/0/heartbeatTime",
            t((-2).minutes()),
        )
        .set(
            "/request/object/status/interceptors/0/heartbeatTime",
            t(0.seconds()),
        );
    uid_variants(r, 2)
}

/// One request body kind.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Body {
    Pod,
    Heartbeat,
    Create,
}

impl Body {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Body::Pod => "pod_create_annotated_10KiB",
            Body::Heartbeat => "evictionrequest_status_heartbeat",
            Body::Create => "evictionrequest_create_cached_pod",
        }
    }
    pub(crate) fn path(self) -> &'static str {
        match self {
            Body::Pod => "/validate/pods",
            Body::Heartbeat | Body::Create => "/validate/evictionrequests",
        }
    }
    /// Fresh bodies (the heartbeat is re-timed for every phase; each phase lasts seconds);
    /// `creates` are the EvictionRequest create reviews.
    pub(crate) fn bodies(self, creates: &[ReviewBody]) -> Bodies {
        Bodies::new(match self {
            Body::Pod => POD_BODIES.get_or_init(pod_bodies).clone(),
            Body::Heartbeat => heartbeat_bodies(Timestamp::now()),
            Body::Create => creates.to_vec(),
        })
    }
}
