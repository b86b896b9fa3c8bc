//! Fixture builder shared by `tests/http.rs` and `tests/review_cli.rs` (included with
//! `#[path]`): loads the AdmissionReviews of `tests/data/` as kube-apiserver sends them and
//! derives the variants a test needs (`review(POD).set("/request/dryRun", true)`).

#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

use serde_json::Value;

/// Pod CREATE whose interceptor annotation names `drain` (not an FQDN: rule P2).
pub const POD: &str = "pod-create-annotated.json";
/// EvictionRequest CREATE named `evict-checkout` instead of the pod UID (rule E3).
pub const EVICTION_REQUEST: &str = "evictionrequest-create.json";
/// NodeMaintenance CREATE with a partial drain plan and no stage, selecting every linux node.
pub const NODE_MAINTENANCE: &str = "nodemaintenance-create.json";
/// An interceptor's heartbeat: UPDATE of `evictionrequests/status` (YAML), valid at [`NOW`].
pub const HEARTBEAT: &str = "evictionrequest-status-heartbeat.yaml";
/// Nodes and a pod for `--objects`.
pub const OBJECTS: &str = "objects.yaml";

/// The review time the fixtures are written for.
pub const NOW: &str = "2026-01-01T00:00:00Z";
/// UID of the target pod in the EvictionRequest fixtures.
pub const TARGET_UID: &str = "9a8d3e5c-2b1f-4a6e-8c7d-1e2f3a4b5c6d";
/// UID of the pod of that name in [`OBJECTS`] (it was recreated).
pub const CURRENT_UID: &str = "1b2c3d4e-5f60-4718-293a-4b5c6d7e8f90";
/// The interceptor annotation.
pub const ANNOTATION: &str = "evictord.dev/eviction-interceptors";

/// Path of a file in `tests/data/`.
pub fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// An AdmissionReview being built from a fixture file.
#[derive(Clone, Debug)]
pub struct Review(pub Value);

/// Loads a fixture (JSON or YAML).
pub fn review(name: &str) -> Review {
    let path = data_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Review(serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

impl Review {
    /// Sets the member at a JSON pointer; the parent must exist.
    pub fn set(mut self, pointer: &str, value: impl Into<Value>) -> Self {
        let (parent, key) = split(pointer);
        let target = self
            .0
            .pointer_mut(parent)
            .unwrap_or_else(|| panic!("no {parent} in the fixture"));
        match target {
            Value::Object(map) => {
                map.insert(key, value.into());
            }
            Value::Array(items) => {
                let i: usize = key.parse().expect("array index");
                items[i] = value.into();
            }
            other => panic!("{parent} is not a container: {other}"),
        }
        self
    }

    /// Removes the member at a JSON pointer (which must exist).
    pub fn remove(mut self, pointer: &str) -> Self {
        let (parent, key) = split(pointer);
        let removed = self
            .0
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .and_then(|m| m.remove(&key));
        assert!(removed.is_some(), "no {pointer} in the fixture");
        self
    }

    /// Names the EvictionRequest after its target pod UID (passes E3).
    pub fn named_after_pod(self) -> Self {
        let uid = self.0["request"]["object"]["spec"]["target"]["pod"]["uid"].clone();
        self.set("/request/name", uid.clone())
            .set("/request/object/metadata/name", uid)
    }

    /// The request uid.
    pub fn uid(&self) -> String {
        self.0["request"]["uid"]
            .as_str()
            .expect("request.uid")
            .to_string()
    }

    /// The review as JSON, padded with container environment variables until the body is at
    /// least `bytes` long (a realistic large pod for benchmarks).
    pub fn padded_json(&self, bytes: usize) -> Vec<u8> {
        let mut env = Vec::new();
        loop {
            let body = self
                .clone()
                .set("/request/object/spec/containers/0/env", env.clone())
                .json();
            if body.len() >= bytes {
                return body;
            }
            let i = env.len();
            env.push(serde_json::json!({"name": format!("FEATURE_FLAG_{i:03}"), "value": format!("enabled-{i}")}));
        }
    }

    /// The JSON body with arrays nested `depth` deep at `pointer` (written as text: a
    /// `serde_json::Value` that deep would overflow the test's own stack when dropped).
    pub fn nested_json(self, pointer: &str, depth: usize) -> Vec<u8> {
        const MARK: &str = "\"nested-here\"";
        let text = String::from_utf8(self.set(pointer, "nested-here").json()).unwrap();
        assert_eq!(text.matches(MARK).count(), 1, "{MARK} once in the fixture");
        text.replace(MARK, &format!("{}{}", "[".repeat(depth), "]".repeat(depth)))
            .into_bytes()
    }

    /// The JSON body.
    pub fn json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).expect("JSON")
    }
}

/// The parent pointer and the (unescaped) last key of a JSON pointer.
fn split(pointer: &str) -> (&str, String) {
    let (parent, key) = pointer
        .rsplit_once('/')
        .unwrap_or_else(|| panic!("{pointer:?} is not a JSON pointer"));
    (parent, key.replace("~1", "/").replace("~0", "~"))
}

/// The `response` of a response AdmissionReview, checked to be `admission.k8s.io/v1`.
pub fn response(review: &Value) -> &Value {
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{review}");
    assert_eq!(review["kind"], "AdmissionReview", "{review}");
    &review["response"]
}

/// The warnings of a response (empty when absent).
pub fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The denial message of a response.
pub fn message(response: &Value) -> &str {
    response["status"]["message"].as_str().unwrap_or_default()
}

/// Asserts that some warning contains every one of `parts`.
#[track_caller]
pub fn assert_warns(response: &Value, parts: &[&str]) {
    let all = warnings(response);
    assert!(
        all.iter().any(|w| parts.iter().all(|p| w.contains(p))),
        "no warning contains {parts:?}: {all:#?}"
    );
}

/// The JSON patch of a response, decoded from base64.
pub fn patch(response: &Value) -> Value {
    use base64::Engine;
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    let encoded = response["patch"]
        .as_str()
        .expect("patch is a base64 string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("patch is base64");
    serde_json::from_slice(&bytes).expect("patch is JSON")
}
