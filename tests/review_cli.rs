//! `evictord review`, the offline review users run in CI: the built binary on the
//! AdmissionReviews of `tests/data/` (JSON and YAML, from a file or stdin), with and without a
//! cluster view from `--objects`, checked on the response AdmissionReview it prints; unreadable
//! input fails with a message. The last test runs the server's router on the same fixtures and
//! requires the same verdicts (issue 3 acceptance).

#[path = "data/fixture.rs"]
mod fixture;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use fixture::*;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_evictord");

/// Runs `evictord review ARGS --now NOW`, feeding `stdin` when given.
fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(BIN)
        .arg("review")
        .args(args)
        .args(["--now", NOW])
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run evictord");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(input).expect("write stdin");
    }
    child.wait_with_output().expect("wait for evictord")
}

/// Runs `evictord review` successfully and returns the printed `response`.
#[track_caller]
fn review_ok(args: &[&str], stdin: Option<&[u8]>) -> Value {
    let out = run(args, stdin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "evictord review {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let review: Value = serde_json::from_str(&stdout).expect("stdout is JSON");
    response(&review).clone()
}

/// Runs `evictord review` on a file of `tests/data/`, with the objects file or not.
#[track_caller]
fn review_file(name: &str, objects: bool) -> Value {
    let file = data_path(name);
    let objects_file = data_path(OBJECTS);
    let mut args = vec!["--file", file.to_str().unwrap()];
    if objects {
        args.extend(["--objects", objects_file.to_str().unwrap()]);
    }
    review_ok(&args, None)
}

/// Runs `evictord review` on a fixture variant, written to a temporary file.
#[track_caller]
fn review_variant(fixture: &Review, objects: bool, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("review.json");
    std::fs::write(&file, fixture.json()).unwrap();
    let objects_file = data_path(OBJECTS);
    let mut args = vec!["--file", file.to_str().unwrap()];
    if objects {
        args.extend(["--objects", objects_file.to_str().unwrap()]);
    }
    args.extend(extra);
    review_ok(&args, None)
}

/// Asserts that `evictord review` fails with a message on stderr containing `part`.
#[track_caller]
fn assert_fails(args: &[&str], stdin: Option<&[u8]>, part: &str) {
    let out = run(args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected a failure for {args:?}");
    assert!(
        out.stdout.is_empty(),
        "no response on failure: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.contains(part), "{part:?} not in stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn without_objects_lookups_are_unknown_and_only_warn() {
    let response = review_file(EVICTION_REQUEST, false);
    assert_eq!(response["uid"], review(EVICTION_REQUEST).uid());
    assert_eq!(response["allowed"], false);
    assert!(message(&response).contains("rule E3"), "{response}");
    assert_warns(&response, &["rule E7 not checked"]);
    assert_warns(&response, &["rule E8 not checked", "not checked offline"]);

    let response = review_variant(&review(EVICTION_REQUEST).named_after_pod(), false, &[]);
    assert_eq!(response["allowed"], true, "{response}");
    assert_warns(&response, &["rule E7 not checked"]);
}

#[test]
fn with_objects_a_pod_of_another_uid_denies_naming_both_uids() {
    let fixture = review(EVICTION_REQUEST).named_after_pod();
    let response = review_variant(&fixture, true, &[]);
    assert_eq!(response["allowed"], false);
    let message = message(&response);
    assert!(message.contains("rule E7"), "{message}");
    assert!(message.contains(TARGET_UID), "{message}");
    assert!(message.contains(CURRENT_UID), "{message}");
    assert!(
        message.contains("shop/checkout-7d9c6b5f4-x2kqj"),
        "{message}"
    );
    // Authorization is never checked offline, objects or not.
    assert_warns(&response, &["rule E8 not checked"]);

    // The current pod's UID passes E7; a pod that is not in the objects only warns.
    let current = fixture
        .clone()
        .set("/request/name", CURRENT_UID)
        .set("/request/object/metadata/name", CURRENT_UID)
        .set("/request/object/spec/target/pod/uid", CURRENT_UID);
    let response = review_variant(&current, true, &[]);
    assert_eq!(response["allowed"], true, "{response}");
    let gone = fixture.set("/request/object/spec/target/pod/name", "checkout-gone");
    let response = review_variant(&gone, true, &[]);
    assert_eq!(response["allowed"], true, "{response}");
    assert_warns(&response, &["pod shop/checkout-gone not found", "canceled"]);
}

#[test]
fn node_maintenance_create_is_mutated_then_validated_in_one_response() {
    let response = review_file(NODE_MAINTENANCE, true);
    assert_eq!(response["uid"], review(NODE_MAINTENANCE).uid());
    assert_eq!(response["allowed"], true, "{response}");
    let patch = patch(&response);
    let paths: Vec<&str> = patch
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|op| op["path"].as_str())
        .collect();
    assert_eq!(paths, ["/spec/stage", "/spec/drainPlan"]);
    // Warnings of the mutation (M2) and of the validation (N5 on the patched object, N6).
    assert_warns(&response, &["added default entries", "rule M2"]);
    assert_warns(
        &response,
        &[
            "selects every node",
            "degraded and unrecoverable",
            "rule N5",
        ],
    );
    assert_warns(&response, &["control-plane nodes cp-1", "rule N5"]);
    assert_warns(&response, &["rule N6"]);

    // Without objects the node checks are skipped with a warning; the patch is the same.
    let offline = review_file(NODE_MAINTENANCE, false);
    assert_eq!(offline["patch"], response["patch"]);
    assert_warns(&offline, &["nodes are unknown", "rule N5"]);

    // Selecting only the workers: no "every node" warning.
    let workers = review(NODE_MAINTENANCE).set(
        "/request/object/spec/nodeSelector/nodeSelectorTerms/0/matchExpressions",
        json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]),
    );
    let response = review_variant(&workers, true, &[]);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        !warnings(&response).iter().any(|w| w.contains("every node")),
        "{response}"
    );

    // The final verdict is the validation's: an invalid selector is denied, patch and all.
    let invalid = review(NODE_MAINTENANCE).set(
        "/request/object/spec/nodeSelector/nodeSelectorTerms",
        json!([]),
    );
    let response = review_variant(&invalid, true, &[]);
    assert_eq!(response["allowed"], false, "{response}");
    assert!(message(&response).contains("rule N1"), "{response}");
    assert_warns(&response, &["rule M2"]);
}

#[test]
fn yaml_input_and_rule_settings_are_accepted() {
    let response = review_file(HEARTBEAT, false);
    assert_eq!(response["uid"], "8f7e6d5c-4b3a-4291-8f7e-6d5c4b3a2910");
    assert_eq!(response["allowed"], true, "{response}");

    // The heartbeat moved 2 minutes: too little for a 5-minute minimum interval.
    let file = data_path(HEARTBEAT);
    let response = review_ok(
        &[
            "--file",
            file.to_str().unwrap(),
            "--min-heartbeat-interval",
            "5m",
        ],
        None,
    );
    assert_eq!(response["allowed"], false);
    let message = message(&response);
    assert!(
        message.contains("heartbeatTime") && message.contains("at least 5m"),
        "{message}"
    );
    assert!(message.contains("rule S4"), "{message}");
}

#[test]
fn stdin_is_read_when_no_file_is_given() {
    let response = review_ok(&[], Some(&review(POD).json()));
    assert_eq!(response["uid"], review(POD).uid());
    assert_eq!(response["allowed"], false);
    assert!(message(&response).contains("rule P2"), "{response}");

    let yaml = std::fs::read(data_path(HEARTBEAT)).unwrap();
    let response = review_ok(&[], Some(&yaml));
    assert_eq!(response["allowed"], true, "{response}");
}

#[test]
fn unreadable_input_fails_with_a_message() {
    assert_fails(
        &["--file", "/nonexistent/review.json"],
        None,
        "/nonexistent/review.json",
    );
    assert_fails(&[], Some(b"{\"apiVersion\": [unclosed"), "not JSON or YAML");
    assert_fails(&[], Some(b""), "the input is empty");
    let not_a_review = br#"{"apiVersion": "v1", "kind": "Pod"}"#;
    assert_fails(
        &[],
        Some(not_a_review),
        "expected apiVersion admission.k8s.io/v1",
    );
    let v1beta1 = review(POD).set("/apiVersion", "admission.k8s.io/v1beta1");
    assert_fails(&[], Some(&v1beta1.json()), "admission.k8s.io/v1beta1");
    let deployment = review(POD).set(
        "/request/resource",
        json!({"group": "apps", "version": "v1", "resource": "deployments"}),
    );
    assert_fails(&[], Some(&deployment.json()), "\"deployments\"");
    let no_request = review(POD).remove("/request");
    assert_fails(&[], Some(&no_request.json()), "has no request");
    let null_request = review(POD).set("/request", Value::Null);
    assert_fails(&[], Some(&null_request.json()), "has no request");

    let objects = data_path(OBJECTS);
    assert_fails(
        &["--objects", "/nonexistent/objects.yaml"],
        Some(&review(POD).json()),
        "/nonexistent/objects.yaml",
    );
    let dir = tempfile::tempdir().unwrap();
    let bad_objects = dir.path().join("objects.yaml");
    std::fs::write(
        &bad_objects,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
    )
    .unwrap();
    assert_fails(
        &["--objects", bad_objects.to_str().unwrap()],
        Some(&review(POD).json()),
        "unsupported kind",
    );
    assert!(objects.exists());
}

/// The Eviction API bridge offline: with the cluster view, an autoscaler's eviction of a pod with
/// interceptors is answered 429 "Eviction triggered" (nothing is written offline); without it
/// the pod is unknown and the call is allowed, as the webhook's failurePolicy would.
#[test]
fn pod_eviction_is_answered_like_the_bridge() {
    let r = review_file("pod-eviction-create.json", true);
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 429, "{r}");
    assert_eq!(r["status"]["reason"], "TooManyRequests", "{r}");
    let message = r["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "Eviction triggered: EvictionRequest shop/{CURRENT_UID} handles pod shop/checkout-7d9c6b5f4-x2kqj"
        )),
        "{message}"
    );
    let r = review_file("pod-eviction-create.json", false);
    assert_eq!(r["allowed"], true, "{r}");
}

/// An object that breaks its schema is answered as the server answers it: a denial naming the
/// field (exit 0), not an error.
#[test]
fn an_object_that_does_not_decode_is_denied_naming_the_field() {
    let bogus = review(NODE_MAINTENANCE).set("/request/object/spec/stage", "Bogus");
    let r = review_ok(&[], Some(&bogus.json()));
    assert_eq!(r["allowed"], false, "{r}");
    let message = r["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("spec.stage: unknown variant `Bogus`, expected one of"),
        "{message}"
    );
}

/// `evictord review` gives the server's verdict on the same fixture (issue 3 acceptance). For
/// a NodeMaintenance CREATE the server's two routes are called as kube-apiserver calls them:
/// mutate, apply the patch, validate.
#[tokio::test]
async fn the_offline_review_gives_the_servers_verdict() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use evictord::admission::http::AdmissionState;
    use tower::ServiceExt;

    async fn server(path: &str, fixture: &Review) -> Value {
        let router = evictord::admission::webhooks::router(Arc::new(AdmissionState {
            settings: Default::default(),
            live: None,
        }));
        let request = Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(fixture.json()))
            .unwrap();
        let answer = router.oneshot(request).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
            .await
            .unwrap();
        response(&serde_json::from_slice(&bytes).unwrap()).clone()
    }

    let verdict = |r: &Value| {
        (
            r["uid"].clone(),
            r["allowed"].clone(),
            r["status"].clone(),
            warnings(r),
        )
    };
    for (path, fixture) in [
        ("/validate/pods", review(POD)),
        (
            "/validate/pods",
            review(POD).remove("/request/object/metadata/annotations"),
        ),
        ("/validate/evictionrequests", review(EVICTION_REQUEST)),
        (
            "/validate/evictionrequests",
            review(EVICTION_REQUEST).named_after_pod(),
        ),
    ] {
        let offline = review_variant(&fixture, false, &[]);
        assert_eq!(verdict(&offline), verdict(&server(path, &fixture).await));
        assert_eq!(offline.get("patch"), None);
    }

    let fixture = review(NODE_MAINTENANCE);
    let offline = review_variant(&fixture, false, &[]);
    let mutated = server("/mutate/nodemaintenances", &fixture).await;
    assert_eq!(offline["patch"], mutated["patch"]);
    let mut object = fixture.0["request"]["object"].clone();
    json_patch::patch(
        &mut object,
        &serde_json::from_value::<json_patch::Patch>(patch(&mutated)).unwrap(),
    )
    .unwrap();
    let validated = server(
        "/validate/nodemaintenances",
        &fixture.set("/request/object", object),
    )
    .await;
    assert_eq!(offline["allowed"], validated["allowed"]);
    assert_eq!(offline["status"], validated["status"]);
    let mut both = warnings(&mutated);
    both.extend(warnings(&validated));
    assert_eq!(warnings(&offline), both);
}

/// SPEC 5.5 offline: `--objects` brings the registrations (EvictionInterceptor documents). Rule
/// P8 warns about a name the file does not register (and says nothing without a file); under
/// `--interceptor-registration=enforce` rule S7 admits the heartbeat of the registered
/// interceptor's own account and denies another's, and is skipped with a warning without a file.
#[test]
fn registrations_come_from_the_objects_file() {
    let pod = review(POD).set(
        &format!(
            "/request/object/metadata/annotations/{}",
            ANNOTATION.replace('/', "~1")
        ),
        "checkout.shop.example.com, typo.example.com",
    );
    let with = review_variant(&pod, true, &[]);
    assert_eq!(with["allowed"], true, "{with}");
    let w = warnings(&with);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("interceptor \"typo.example.com\" is not registered")
            && w[0].contains("rule P8"),
        "{w:?}"
    );
    assert!(warnings(&review_variant(&pod, false, &[])).is_empty());

    let enforce = [
        "--interceptor-registration=enforce",
        "--own-user=system:serviceaccount:evictord:evictord",
    ];
    let own = review_variant(&review(HEARTBEAT), true, &enforce);
    assert_eq!(own["allowed"], true, "{own}");
    let stranger = review(HEARTBEAT).set(
        "/request/userInfo/username",
        "system:serviceaccount:web:deployer",
    );
    let denied = review_variant(&stranger, true, &enforce);
    assert_eq!(denied["allowed"], false, "{denied}");
    assert!(message(&denied).contains("(rule S7)"), "{denied}");
    let unknown = review_variant(&stranger, false, &enforce);
    assert_eq!(unknown["allowed"], true, "{unknown}");
    assert!(
        warnings(&unknown)
            .iter()
            .any(|w| w.starts_with("rule S7 not checked")),
        "{unknown}"
    );
    // The default mode does not guard entries.
    assert_eq!(review_variant(&stranger, true, &[])["allowed"], true);
}
