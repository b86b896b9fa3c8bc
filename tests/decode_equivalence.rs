//! The pod webhook decodes a partial pod (`AdmittedPod`: name, namespace, the interceptor
//! annotation) instead of the full cached pod. Its answers must not change: every pod review of
//! the fuzz corpus, the test data and a set of edge cases (escaped keys, duplicate keys, odd
//! annotation values, updates) is decoded both ways and must get the same answer — the same
//! verdict and the same response AdmissionReview, or the same kind of error.
//!
//! The EvictionRequest webhook decodes a partial EvictionRequest (`AdmittedEvictionRequest`: spec
//! and status whole, four metadata fields): every EvictionRequest review of the fuzz corpus, the
//! test data and a set of edge cases (labels, annotations, managed fields, owner references on
//! both objects, as kube-apiserver sends them) gets the answer of the full decode, against an
//! empty view and against the test data's cluster.
//!
//! Every webhook decodes the AdmissionReview envelope without the fields no review reads
//! (`requestKind`, `requestResource`, `requestSubResource`, `options`): on every body of every
//! admission corpus and the test data, the decoded request equals kube-core's decode with those
//! fields unset, or both fail alike.
//!
//! Also: the response encoder writes the AdmissionReview field by field; it must produce what the
//! general encoder (through `serde_json::Value`) produces, for every kind of answer.

#[path = "data/fixture.rs"]
mod fixture;

use std::path::PathBuf;

use evictord::admission::Settings;
use evictord::admission::eviction_request::review_eviction_request;
use evictord::admission::http::{
    HandlerError, ResponseReview, check_objects, decode, respond, review_request,
};
use evictord::admission::offline::view_from_objects;
use evictord::admission::partial::{AdmittedEvictionRequest, AdmittedPod};
use evictord::admission::pod::review_pod;
use evictord::api::EvictionRequest;
use evictord::cluster::{CachedPod, ClusterView, StaticView};
use jiff::Timestamp;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::{Value, json};

const JSON: Option<&str> = Some("application/json");

/// What the handler would answer: the response AdmissionReview, or the error's kind and text.
fn answer<K>(body: &[u8]) -> Result<Value, String>
where
    K: kube::Resource
        + serde::de::DeserializeOwned
        + evictord::admission::partial::InterceptorAnnotation,
{
    let req: AdmissionRequest<K> = decode::<K>(JSON, body).map_err(kind)?;
    check_objects(&req).map_err(kind)?;
    let verdict = review_pod(
        &review_request(&req, Timestamp::UNIX_EPOCH),
        &Settings::default(),
    );
    Ok(serde_json::to_value(ResponseReview::from(respond(&req, verdict))).unwrap())
}

fn kind(e: HandlerError) -> String {
    match e {
        HandlerError::BadRequest(_) => "400 bad request".into(),
        HandlerError::InvalidObject { response, .. } => {
            format!("422 invalid object: {}", response.result.message)
        }
        other => format!("other: {other}"),
    }
}

fn read_dir(dir: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.display().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// A pod review with `annotations` (raw JSON text) on the object, and on the old object for an
/// UPDATE.
fn with_annotations(operation: &str, annotations: &str, old: Option<&str>) -> Vec<u8> {
    let object = |a: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"ns","labels":{{"app":"x"}},"annotations":{a}}},"spec":{{"containers":[{{"name":"c","image":"i"}}]}}}}"#
        )
    };
    let old = old.map_or(String::new(), |o| format!(r#","oldObject":{}"#, object(o)));
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u-1","kind":{{"group":"","version":"v1","kind":"Pod"}},"resource":{{"group":"","version":"v1","resource":"pods"}},"name":"p","namespace":"ns","operation":"{operation}","userInfo":{{"username":"alice"}},"object":{}{old}}}}}"#,
        object(annotations)
    )
    .into_bytes()
}

fn edge_cases() -> Vec<(String, Vec<u8>)> {
    let a = "evictord.dev/eviction-interceptors";
    let cases: Vec<(&str, String, Option<String>)> = vec![
        ("CREATE", "null".into(), None),
        ("CREATE", "{}".into(), None),
        ("CREATE", format!(r#"{{"{a}":"db.example.com"}}"#), None),
        (
            "CREATE",
            format!(r#"{{"{a}":"db.example.com,,x.example.com"}}"#),
            None,
        ),
        (
            "CREATE",
            format!(r#"{{"{a}":"imperative-eviction.k8s.io"}}"#),
            None,
        ),
        // The key written with an escaped slash is the same key.
        (
            "CREATE",
            r#"{"evictord.dev\/eviction-interceptors":"Not A Name"}"#.into(),
            None,
        ),
        // An escaped value.
        (
            "CREATE",
            format!(r#"{{"{a}":"db.example.com,\u0062ad name"}}"#),
            None,
        ),
        // Duplicate keys: the last one counts.
        (
            "CREATE",
            format!(r#"{{"{a}":"ok.example.com","{a}":"bad name"}}"#),
            None,
        ),
        (
            "CREATE",
            format!(r#"{{"{a}":"bad name","{a}":"ok.example.com"}}"#),
            None,
        ),
        // Values that are not strings.
        ("CREATE", format!(r#"{{"{a}":7}}"#), None),
        ("CREATE", r#"{"other":7}"#.into(), None),
        ("CREATE", r#"{"other":null}"#.into(), None),
        ("CREATE", r#"["not","a","map"]"#.into(), None),
        (
            "UPDATE",
            format!(r#"{{"{a}":"a.example.com"}}"#),
            Some(format!(r#"{{"{a}":"a.example.com"}}"#)),
        ),
        (
            "UPDATE",
            format!(r#"{{"{a}":"b.example.com"}}"#),
            Some(format!(r#"{{"{a}":"a.example.com"}}"#)),
        ),
        (
            "UPDATE",
            "{}".into(),
            Some(format!(r#"{{"{a}":"a.example.com"}}"#)),
        ),
        (
            "UPDATE",
            format!(r#"{{"{a}":" a.example.com "}}"#),
            Some(format!(r#"{{"{a}":"a.example.com"}}"#)),
        ),
        (
            "DELETE",
            "{}".into(),
            Some(format!(r#"{{"{a}":"bad name"}}"#)),
        ),
    ];
    cases
        .into_iter()
        .enumerate()
        .map(|(i, (op, new, old))| {
            (
                format!("edge case {i}: {op} {new} (old {old:?})"),
                with_annotations(op, &new, old.as_deref()),
            )
        })
        .collect()
}

#[test]
fn the_partial_pod_gets_the_answers_of_the_full_pod() {
    let mut inputs = read_dir("fuzz/corpus/pods");
    let fixture = "tests/data/pod-create-annotated.json";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(fixture);
    inputs.push((fixture.to_string(), std::fs::read(path).unwrap()));
    inputs.extend(edge_cases());
    let mut denied = 0;
    for (name, body) in &inputs {
        let full = answer::<CachedPod>(body);
        let partial = answer::<AdmittedPod>(body);
        assert_eq!(partial, full, "{name}");
        if full
            .as_ref()
            .is_ok_and(|v| v["response"]["allowed"] == json!(false))
        {
            denied += 1;
        }
    }
    // Not vacuous: denials and allowances both compared.
    assert!(
        denied >= 8,
        "only {denied} denials among {} inputs",
        inputs.len()
    );
    println!(
        "{} pod reviews, {denied} denied, answered alike",
        inputs.len()
    );
}

fn general(response: AdmissionResponse) -> Value {
    let review: AdmissionReview<DynamicObject> = response.clone().into_review();
    let mut value = serde_json::to_value(&review).unwrap();
    if let (Some(patch), Some(slot)) = (&response.patch, value.pointer_mut("/response/patch")) {
        use base64::Engine;
        *slot = Value::String(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    value
}

#[test]
fn the_field_by_field_encoder_writes_what_the_general_one_writes() {
    let body = with_annotations("CREATE", "{}", None);
    let req: AdmissionRequest<AdmittedPod> = decode(JSON, &body).unwrap();
    let allowed = AdmissionResponse::from(&req);
    let mut denied = AdmissionResponse::from(&req).deny("x is wrong (rule P2)");
    denied.result.code = 403;
    denied.result.reason = "Forbidden".into();
    let mut warned = AdmissionResponse::from(&req);
    warned.warnings = Some(vec!["one".into(), "two \"quoted\"".into()]);
    let patched = AdmissionResponse::from(&req)
        .with_patch(json_patch::Patch(vec![]))
        .unwrap();
    let mut audited = AdmissionResponse::from(&req);
    audited
        .audit_annotations
        .insert("evictord.dev/rule".into(), "E3".into());
    let add: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/spec/stage", "value": "Idle"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "é \" \u{1}"}
    ]))
    .unwrap();
    let raw_patch = AdmissionResponse::from(&req).with_patch(add).unwrap();
    let invalid = AdmissionResponse::invalid("unreadable");
    for (name, response) in [
        ("allowed", allowed),
        ("denied", denied),
        ("warnings", warned),
        ("empty patch", patched),
        ("audit annotations", audited),
        ("patch", raw_patch),
        ("invalid", invalid),
    ] {
        let fast = serde_json::to_value(ResponseReview::from(response.clone())).unwrap();
        assert_eq!(fast, general(response), "{name}");
    }
}

/// What the EvictionRequest webhook answers on `view` when it decodes `K`.
fn eviction_request_answer<K>(
    body: &[u8],
    view: &dyn ClusterView,
    as_full: impl Fn(&K) -> &EvictionRequest,
) -> Result<Value, String>
where
    K: kube::Resource + serde::de::DeserializeOwned,
{
    let req: AdmissionRequest<K> = decode::<K>(JSON, body).map_err(kind)?;
    check_objects(&req).map_err(kind)?;
    let now: Timestamp = fixture::NOW.parse().unwrap();
    let rr = review_request(&req, now);
    let verdict = review_eviction_request(&rr.map_objects(as_full), view, &Settings::default());
    Ok(serde_json::to_value(ResponseReview::from(respond(&req, verdict))).unwrap())
}

/// Metadata as kube-apiserver sends it on an EvictionRequest the controller has written to:
/// the pod's labels, annotations, owner references, finalizers, three field managers.
fn busy_metadata() -> Value {
    json!({
        "labels": {"app": "checkout", "pod-template-hash": "7d9c6b5f4", "tier": "web"},
        "annotations": {"note": "x", "evictord.dev/eviction-interceptors": "not read here"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "checkout-7d9c6b5f4-x2kqj",
            "uid": fixture::TARGET_UID, "controller": false}],
        "finalizers": ["example.com/keep"],
        "resourceVersion": "48213",
        "uid": "7e1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b",
        "generation": 3,
        "managedFields": [
            {"manager": "kubectl-create", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2025-12-31T23:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {".": {}, "f:requesters": {}, "f:target": {".": {}, "f:pod": {}}}}},
            {"manager": "evictord", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2025-12-31T23:50:00Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {".": {}, "f:activeInterceptors": {}, "f:interceptors": {}}}},
            {"manager": "checkout-interceptor", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {"f:interceptors": {}}}}
        ]
    })
}

/// Edge cases over the two fixtures: each sets `pointer` (on both objects where it names
/// `{side}`) to a value.
fn eviction_request_edge_cases() -> Vec<(String, Vec<u8>)> {
    let sides = |r: fixture::Review, pointer: &str, value: Value| {
        ["object", "oldObject"].into_iter().fold(r, |r, side| {
            let p = pointer.replace("{side}", side);
            if r.0
                .pointer(&format!("/request/{side}"))
                .is_some_and(Value::is_object)
            {
                r.set(&p, value.clone())
            } else {
                r
            }
        })
    };
    let mut cases = Vec::new();
    for name in [fixture::EVICTION_REQUEST, fixture::HEARTBEAT] {
        let base = || fixture::review(name);
        let busy = busy_metadata();
        let mut with_busy = base();
        for side in ["object", "oldObject"] {
            if let Some(Value::Object(meta)) = with_busy
                .0
                .pointer_mut(&format!("/request/{side}/metadata"))
            {
                for (k, v) in busy.as_object().unwrap() {
                    meta.insert(k.clone(), v.clone());
                }
            }
        }
        let variants: Vec<(&str, fixture::Review)> = vec![
            ("as is", base()),
            ("busy metadata", with_busy),
            (
                "generateName",
                sides(
                    base(),
                    "/request/{side}/metadata/generateName",
                    json!("evict-"),
                ),
            ),
            (
                "no name",
                sides(base(), "/request/{side}/metadata/name", Value::Null),
            ),
            (
                "other namespace",
                sides(base(), "/request/{side}/metadata/namespace", json!("other")),
            ),
            (
                "created long ago",
                sides(
                    base(),
                    "/request/{side}/metadata/creationTimestamp",
                    json!("2020-01-01T00:00:00Z"),
                ),
            ),
            (
                "creationTimestamp not a time",
                sides(
                    base(),
                    "/request/{side}/metadata/creationTimestamp",
                    json!("yesterday"),
                ),
            ),
            (
                "name not a string",
                sides(base(), "/request/{side}/metadata/name", json!(7)),
            ),
            (
                "metadata null",
                sides(base(), "/request/{side}/metadata", Value::Null),
            ),
            ("no spec", base().remove("/request/object/spec")),
            (
                "escaped name",
                sides(
                    base(),
                    "/request/{side}/metadata/name",
                    json!("9a8d\"é\u{1}"),
                ),
            ),
        ];
        for (what, r) in variants {
            cases.push((format!("{name}: {what}"), r.json()));
        }
        let no_meta = base().remove("/request/object/metadata");
        cases.push((format!("{name}: no metadata"), no_meta.json()));
    }
    cases
}

#[test]
fn the_partial_eviction_request_gets_the_answers_of_the_full_one() {
    let mut inputs = read_dir("fuzz/corpus/eviction_requests");
    inputs.extend(eviction_request_edge_cases());
    let objects = std::fs::read(fixture::data_path(fixture::OBJECTS)).unwrap();
    let cluster = view_from_objects(&objects).unwrap();
    let empty = StaticView::unknown();
    let (mut denied, mut allowed, mut errors) = (0, 0, 0);
    for (name, body) in &inputs {
        for (view_name, view) in [
            ("empty view", &empty as &dyn ClusterView),
            ("cluster", &cluster),
        ] {
            let full = eviction_request_answer::<EvictionRequest>(body, view, |o| o);
            let partial = eviction_request_answer::<AdmittedEvictionRequest>(body, view, |o| &*o.0);
            assert_eq!(partial, full, "{name} ({view_name})");
            match &full {
                Ok(v) if v["response"]["allowed"] == json!(false) => denied += 1,
                Ok(_) => allowed += 1,
                Err(_) => errors += 1,
            }
        }
    }
    // Not vacuous: allowances, denials and errors all compared.
    assert!(
        allowed >= 8 && denied >= 8 && errors >= 4,
        "{allowed} allowed, {denied} denied, {errors} errors"
    );
    println!(
        "{} EvictionRequest reviews × 2 views: {allowed} allowed, {denied} denied, {errors} errors, answered alike",
        inputs.len()
    );
}

#[test]
fn the_partial_eviction_request_skips_metadata_kube_apiserver_has_validated() {
    // The one difference, by design: metadata fields no rule reads are not type-checked (a
    // validating webhook only ever sees objects kube-apiserver has validated).
    let body = fixture::review(fixture::HEARTBEAT)
        .set("/request/object/metadata/labels", json!(7))
        .json();
    let empty = StaticView::unknown();
    let full = eviction_request_answer::<EvictionRequest>(&body, &empty, |o| o);
    let partial = eviction_request_answer::<AdmittedEvictionRequest>(&body, &empty, |o| &*o.0);
    assert!(
        full.unwrap_err()
            .starts_with("422 invalid object: metadata.labels")
    );
    assert_eq!(partial.unwrap()["response"]["allowed"], json!(true));
}

/// kube-core's decode, as every webhook did before: the request with the four fields no review
/// reads unset, or the kind of error.
fn kube_core_decode(body: &[u8]) -> Result<Value, String> {
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(_) => {
            let value: Value = serde_json::from_slice(body).map_err(|_| "400 bad request")?;
            return Err(
                evictord::admission::http::schema_denial::<DynamicObject>(&value)
                    .map_or_else(|| "400 bad request".to_string(), kind),
            );
        }
    };
    if evictord::admission::http::check_version(&review.types.api_version, &review.types.kind)
        .is_err()
    {
        return Err("400 bad request".into());
    }
    let mut req: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|_| "400 bad request".to_string())?;
    req.request_kind = None;
    req.request_resource = None;
    req.request_sub_resource = None;
    req.options = None;
    Ok(request_value(&req))
}

fn request_value(req: &AdmissionRequest<DynamicObject>) -> Value {
    let mut v = serde_json::to_value(req).unwrap();
    v["types"] = serde_json::to_value(&req.types).unwrap();
    v
}

#[test]
fn the_envelope_decodes_what_kube_core_decodes() {
    let mut inputs = Vec::new();
    for target in [
        "pods",
        "eviction_requests",
        "pod_evictions",
        "mutate_node_maintenances",
        "validate_node_maintenances",
    ] {
        inputs.extend(read_dir(&format!("fuzz/corpus/{target}")));
    }
    for name in [
        fixture::POD,
        fixture::EVICTION_REQUEST,
        fixture::NODE_MAINTENANCE,
        fixture::HEARTBEAT,
    ] {
        inputs.push((name.to_string(), fixture::review(name).json()));
    }
    inputs.extend(edge_cases());
    inputs.extend(eviction_request_edge_cases());
    inputs.push(("not UTF-8".into(), b"{\"apiVersion\":\"\xff\"}".to_vec()));
    inputs.push((
        "no request".into(),
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
    ));
    inputs.push((
        "v1beta1".into(),
        br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
            .to_vec(),
    ));
    let (mut decoded, mut failed) = (0, 0);
    for (name, body) in &inputs {
        let ours = decode::<DynamicObject>(JSON, body)
            .map(|r| request_value(&r))
            .map_err(kind);
        assert_eq!(ours, kube_core_decode(body), "{name}");
        if ours.is_ok() {
            decoded += 1
        } else {
            failed += 1
        }
    }
    assert!(
        decoded >= 30 && failed >= 3,
        "{decoded} decoded, {failed} failed"
    );
    println!(
        "{} bodies: {decoded} decoded alike, {failed} failed alike",
        inputs.len()
    );
}
