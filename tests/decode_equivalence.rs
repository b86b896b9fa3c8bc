//! The pod webhook decodes a partial pod (`AdmittedPod`: name, namespace, the interceptor
//! annotation) instead of the full cached pod. Its answers must not change: every pod review of
//! the fuzz corpus, the test data and a set of edge cases (escaped keys, duplicate keys, odd
//! annotation values, updates) is decoded both ways and must get the same answer — the same
//! verdict and the same response AdmissionReview, or the same kind of error.
//!
//! Also: the response encoder writes the AdmissionReview field by field; it must produce what the
//! general encoder (through `serde_json::Value`) produces, for every kind of answer.

use std::path::PathBuf;

use evictord::admission::Settings;
use evictord::admission::http::{
    HandlerError, ResponseReview, check_objects, decode, respond, review_request,
};
use evictord::admission::partial::AdmittedPod;
use evictord::admission::pod::review_pod;
use evictord::cluster::CachedPod;
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
