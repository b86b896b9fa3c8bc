//! The Eviction API bridge on a real control plane, driven by the real `kubectl` binary:
//! `kubectl drain` waits for a pod's interceptor and finishes when evictord has evicted the pod,
//! a server dry run writes nothing, an aborted drain's requester expires after the TTL, a raw
//! Eviction API call gets 429 "Eviction triggered", a PodDisruptionBudget still decides
//! evictord's own eviction, and a request write slower than kube-apiserver's patience is answered
//! 429 in time and finished after.

mod support;

use std::process::{Child, Stdio};
use std::time::Duration;

use evictord::api::{EVICTION_API_REQUESTER, EvictionRequest};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use support::fixtures::{blocking_pdb, node, pdb_api, pod};
use support::interceptor::{now, write_when_active};
use support::process::wait_exit;
use support::tools::{kubectl, kubectl_command};
use support::wait::until;

const T: Duration = Duration::from_secs(60);
/// A short requester TTL (kubectl retries every 5 s, so a running drain keeps it).
const TTL: &str = "--eviction-api-requester-ttl=12s";
const FLAGS: &[&str] = &[
    "--interceptor-deadline=120s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=2s",
    TTL,
];

async fn setup(prefix: &str) -> (Client, String) {
    support::evictord::shared(FLAGS).await;
    let c = support::cluster().await;
    (c.client().await, c.namespace(prefix).await)
}

/// The pod's EvictionRequest once it lists the bridge's requester.
async fn bridged_request(api: &Api<EvictionRequest>, uid: &str) -> EvictionRequest {
    until(
        T,
        &format!("EvictionRequest {uid} with the bridge requester"),
        || async {
            api.get_opt(uid)
                .await
                .unwrap()
                .filter(|r| r.has_requester(EVICTION_API_REQUESTER))
        },
    )
    .await
}

/// `kubectl drain NODE` in the background, output to files in the cluster's scratch directory.
async fn drain(node: &str, extra: &[&str]) -> (Child, std::path::PathBuf) {
    let c = support::cluster().await;
    let out = c.dir.join(format!("drain-{node}.log"));
    let file = std::fs::File::create(&out).unwrap();
    let mut args = vec![
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=150s",
    ];
    args.extend_from_slice(extra);
    let child = kubectl_command(c, &args)
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("kubectl drain");
    (child, out)
}

/// One Eviction API call for pod `name`, as `kubectl create --raw` (no client-side retry of a
/// 429, unlike kube's client).
fn raw_eviction(c: &support::TestCluster, ns: &str, name: &str) -> std::process::Output {
    let body = format!(
        r#"{{"apiVersion":"policy/v1beta1","kind":"Eviction","metadata":{{"name":"{name}","namespace":"{ns}"}}}}"#
    );
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}/eviction");
    kubectl(c, &["create", "--raw", &path, "-f", "-"], Some(&body))
}

async fn gone(client: &Client, ns: &str, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.get_opt(name).await.unwrap().is_none()
}

#[tokio::test]
async fn kubectl_drain_waits_for_the_interceptor_then_evictord_evicts() {
    let (client, ns) = setup("bridge-drain").await;
    node("bridge-n1").create(&client).await;
    pod("plain")
        .on_node("bridge-n1")
        .replicaset("web")
        .create(&client, &ns)
        .await;
    let db = pod("db")
        .on_node("bridge-n1")
        .replicaset("db")
        .interceptors(&["db.example.com"])
        .create(&client, &ns)
        .await;
    let uid = db.metadata.uid.clone().unwrap();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);

    let (mut child, log) = drain("bridge-n1", &[]).await;
    let r = bridged_request(&api, &uid).await;
    let caller =
        r.metadata.annotations.as_ref().unwrap()["evictord.dev/eviction-api-caller"].clone();
    assert!(caller.starts_with("user "), "caller recorded: {caller}");
    let owner = &r.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Pod", uid.as_str())
    );
    until(T, "the un-annotated pod evicted at once", || async {
        gone(&client, &ns, "plain").await.then_some(())
    })
    .await;

    // The interceptor heartbeats; the drain keeps waiting.
    write_when_active(&api, &uid, "db.example.com", |e| {
        e.start_time = Some(now());
        e.heartbeat_time = Some(now());
        e.message = Some("moving data".into());
    })
    .await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "kubectl drain must wait"
    );
    assert!(
        !gone(&client, &ns, "db").await,
        "the annotated pod waits for its interceptor"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("Eviction triggered"),
        "kubectl shows the bridge's answer:\n{text}"
    );
    assert!(
        text.contains("interceptor db.example.com active since"),
        "{text}"
    );

    write_when_active(&api, &uid, "db.example.com", |e| {
        e.completion_time = Some(now());
        e.message = Some("data moved".into());
    })
    .await;
    let code = wait_exit(&mut child, &log, T).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "kubectl drain succeeds:\n{text}");
    assert!(gone(&client, &ns, "db").await);
    assert!(text.contains("pod/plain evicted"), "{text}");
    // kubectl's own call never evicted the annotated pod: evictord did, once, and kubectl's next
    // retry found it gone.
    assert!(!text.contains("pod/db evicted"), "{text}");
    // Owned by its pod, the request is left to a garbage collector for a few seconds (none runs
    // here), then marked.
    let s = until(T, "the request Evicted", || async {
        let s = api.get(&uid).await.ok()?.status?;
        s.is_true("Evicted").then_some(s)
    })
    .await;
    assert_eq!(
        s.processed_interceptors,
        ["db.example.com", "imperative-eviction.k8s.io"]
    );
    assert_eq!(s.failed_evictions(), 0);

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let list = events
        .list(&ListParams::default().fields("involvedObject.name=db"))
        .await
        .unwrap();
    assert!(
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("EvictionIntercepted")
                && e.message.as_deref().unwrap_or("").contains(&uid)),
        "an event on the pod names the request: {:?}",
        list.items
            .iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    let e = support::evictord::shared(FLAGS).await;
    assert!(
        e.metric("evictord_eviction_api_calls_total{outcome=\"intercepted\"}")
            .await
            >= 1.0
    );
    assert!(
        e.metric("evictord_eviction_api_calls_total{outcome=\"allowed_no_interceptors\"}")
            .await
            >= 1.0
    );
    assert!(
        e.metric("evictord_eviction_api_calls_total{outcome=\"allowed_own_eviction\"}")
            .await
            >= 1.0
    );
}

#[tokio::test]
async fn kubectl_drain_server_dry_run_creates_nothing() {
    let (client, ns) = setup("bridge-dry").await;
    node("bridge-n2").create(&client).await;
    let p = pod("db")
        .on_node("bridge-n2")
        .replicaset("db")
        .interceptors(&["db.example.com"])
        .create(&client, &ns)
        .await;
    let (mut child, log) = drain("bridge-n2", &["--dry-run=server"]).await;
    let code = wait_exit(&mut child, &log, T).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("dry run: evictord would create EvictionRequest"),
        "the warning says what would happen:\n{text}"
    );
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    assert!(
        api.get_opt(p.metadata.uid.as_deref().unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert!(!gone(&client, &ns, "db").await);
}

#[tokio::test]
async fn aborted_drain_cancels_after_the_ttl() {
    let (client, ns) = setup("bridge-abort").await;
    node("bridge-n3").create(&client).await;
    let p = pod("db")
        .on_node("bridge-n3")
        .replicaset("db")
        .interceptors(&["silent.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let (mut child, _log) = drain("bridge-n3", &[]).await;
    bridged_request(&api, &uid).await;
    child.kill().unwrap();
    let _ = child.wait();
    let started = std::time::Instant::now();
    let s = until(T, "Canceled=True after the TTL", || async {
        let s = api.get(&uid).await.unwrap().status.unwrap_or_default();
        s.is_true("Canceled").then_some(s)
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "not before the TTL"
    );
    assert_eq!(s.condition("Canceled").unwrap().reason, "NoRequesters");
    let r = api.get(&uid).await.unwrap();
    assert!(r.spec.requesters.is_empty(), "{:?}", r.spec.requesters);
    assert!(!gone(&client, &ns, "db").await, "the pod stays");

    // A new drain replaces the canceled request.
    let (mut child, _log) = drain("bridge-n3", &[]).await;
    until(T, "a new request replaces the canceled one", || async {
        let r = api.get_opt(&uid).await.unwrap()?;
        let open = !r.is_terminal() && r.has_requester(EVICTION_API_REQUESTER);
        open.then_some(())
    })
    .await;
    child.kill().unwrap();
    let _ = child.wait();
}

#[tokio::test]
async fn raw_eviction_gets_429_and_the_pdb_still_decides_evictords_own_eviction() {
    let (client, ns) = setup("bridge-pdb").await;
    let c = support::cluster().await;
    let p = pod("db")
        .label("app", "db")
        .interceptors(&["db.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    blocking_pdb(&client, &ns, "db", "app", "db", 1).await;
    let raw = || raw_eviction(c, &ns, "db");

    let out = raw();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success());
    assert!(
        err.contains("TooManyRequests") || err.contains("429"),
        "{err}"
    );
    assert!(err.contains("Eviction triggered: EvictionRequest"), "{err}");

    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    bridged_request(&api, &uid).await;
    write_when_active(&api, &uid, "db.example.com", |e| {
        e.start_time = Some(now());
        e.completion_time = Some(now());
    })
    .await;
    // evictord's own eviction is refused by the PodDisruptionBudget, and it backs off.
    until(T, "failed evictions counted", || async {
        let s = api.get(&uid).await.unwrap().status.unwrap_or_default();
        (s.failed_evictions() >= 2).then_some(())
    })
    .await;
    let out = raw();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("imperative-eviction.k8s.io is evicting it"),
        "{err}"
    );
    assert!(err.contains("failing eviction requests"), "{err}");
    assert!(!gone(&client, &ns, "db").await, "the budget holds");

    pdb_api(&client, &ns)
        .delete("db", &Default::default())
        .await
        .unwrap();
    until(T, "evicted once the budget is gone", || async {
        let s = api.get(&uid).await.unwrap().status.unwrap_or_default();
        s.is_true("Evicted").then_some(())
    })
    .await;
    assert!(gone(&client, &ns, "db").await);
}

/// A TCP listener on loopback that accepts connections and never answers (not even the TLS
/// handshake): a webhook that always runs into its timeout. Holds at most 64 connections.
fn silent_listener() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().take(64) {
            held.push(conn);
        }
    });
    port
}

/// A validating webhook on EvictionRequests in namespaces labelled `label=true` that takes
/// `timeout_seconds` on every write and is then ignored: a kube-apiserver slow to write requests.
async fn slow_request_writes(client: &Client, name: &str, label: &str, timeout_seconds: i32) {
    let ca = std::fs::read(
        support::evictord::shared(FLAGS)
            .await
            .cert_dir
            .join("ca.crt"),
    )
    .unwrap();
    let config: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "slow.evictord.test",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{}/", silent_listener()),
                "caBundle": k8s_openapi::ByteString(ca),
            },
            "rules": [{
                "apiGroups": ["evictord.dev"],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["evictionrequests"],
            }],
            "namespaceSelector": {"matchLabels": {label: "true"}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": timeout_seconds,
            "admissionReviewVersions": ["v1"],
        }],
    }))
    .unwrap();
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.create(&Default::default(), &config).await.unwrap();
    // kube-apiserver picks new configurations up asynchronously.
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

/// Just after a kube-apiserver restart the bridge's write of the request can take longer than
/// kube-apiserver waits for the bridge (3 s); the call must then not fail open (which evicts
/// the pod past its interceptors) but be answered 429 in time, the write finishing after it.
#[tokio::test]
async fn slow_request_write_is_answered_429_before_the_timeout_and_finishes_later() {
    let (client, ns) = setup("bridge-slow").await;
    let c = support::cluster().await;
    let label = "evictord.test/slow-request-writes";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {label: "true"}}})),
        )
        .await
        .unwrap();
    let webhook = format!("slow-request-writes-{ns}");
    // Every write of a request in this namespace takes 5 s, more than the bridge's 3 s.
    slow_request_writes(&client, &webhook, label, 5).await;
    let p = pod("db")
        .interceptors(&["db.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let e = support::evictord::shared(FLAGS).await;
    let pending = "evictord_eviction_api_calls_total{outcome=\"intercepted_write_pending\"}";
    let before = e.metric(pending).await;

    let out = raw_eviction(c, &ns, "db");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "the call must not fail open and evict: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("Eviction triggered"), "{err}");
    assert!(
        !gone(&client, &ns, "db").await,
        "the interceptor runs first"
    );
    assert_eq!(e.metric(pending).await, before + 1.0);

    // The write goes on after the answer.
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    bridged_request(&api, &uid).await;
    assert!(!gone(&client, &ns, "db").await);
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&webhook, &Default::default())
        .await
        .unwrap();
}
