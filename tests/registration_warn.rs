//! Interceptor registration under `--interceptor-registration=warn`, the default (SPEC 5.5), on a
//! real kube-apiserver: creating a pod that names an unregistered interceptor prints
//! kube-apiserver's warning with the name through the real `kubectl`, and the drain behaves as
//! without registration (the interceptor keeps its turn until its heartbeat deadline; no rule S7);
//! the request gets an `UnregisteredInterceptor` event, the NodeMaintenance's node message and
//! `kubectl evictord plan` name the interceptor. This binary has its own control plane and one
//! evictord with the default registration mode.

mod support;

use std::time::Duration;

use evictord::api::{
    EvictionInterceptor, EvictionInterceptorSpec, EvictionRequest, EvictionRequestStatus,
    NodeMaintenance, ServiceAccountReference,
};
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::{create_eviction_request, node, pod};
use support::interceptor::{now, write_when_active};
use support::plugin::plugin;
use support::tools::kubectl;
use support::wait::until;

const T: Duration = Duration::from_secs(60);

async fn setup(prefix: &str) -> (Client, String) {
    support::evictord::shared(support::evictord::FAST).await;
    let c = support::cluster().await;
    let client = c.client().await;
    // evictord's own interceptors register themselves once its controllers run.
    let evis: Api<EvictionInterceptor> = Api::all(client.clone());
    until(T, "deployment.apps.k8s.io registered", || async {
        evis.get_opt("deployment.apps.k8s.io").await.ok()?
    })
    .await;
    (client, c.namespace(prefix).await)
}

async fn status(api: &Api<EvictionRequest>, name: &str) -> EvictionRequestStatus {
    api.get(name).await.expect("get").status.unwrap_or_default()
}

async fn reasons(client: &Client, ns: &str, request: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().fields(&format!("involvedObject.name={request}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// The acceptance of issue 36 in `warn`: the warning through kubectl, and the drain as today.
#[tokio::test]
async fn unregistered_interceptor_warns_and_the_drain_is_as_before() {
    let (client, ns) = setup("warn-drain").await;
    let c = support::cluster().await;
    let typo = "db.exmaple.com";
    let manifest = serde_json::to_string(&pod("p").interceptors(&[typo]).build()).unwrap();
    let out = kubectl(c, &["create", "-n", &ns, "-f", "-"], Some(&manifest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "never denied for it: {stderr}");
    assert!(
        stderr.contains(&format!(
            "Warning: interceptor \"{typo}\" is not registered (no EvictionInterceptor {typo}; rule P8): holds each eviction of this pod up to 6s unless it reports"
        )),
        "{stderr}"
    );
    let e = support::evictord::shared(support::evictord::FAST).await;
    assert!(
        e.metric("evictord_unregistered_interceptors_total{source=\"pod_admission\"}")
            .await
            >= 1.0
    );

    // The drain as without registration: the silent interceptor times out at its deadline.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let uid = pods.get("p").await.unwrap().metadata.uid.unwrap();
    let api = create_eviction_request(&client, &ns, "p", &uid, &["test.example.com"]).await;
    let s = until(T, "Evicted=True", || async {
        let s = status(&api, &uid).await;
        s.is_true("Evicted").then_some(s)
    })
    .await;
    assert_eq!(s.processed_interceptors[0], typo);
    assert!(s.interceptor(typo).unwrap().message.is_none(), "{s:?}");
    let events = until(T, "the events", || async {
        let r = reasons(&client, &ns, &uid).await;
        r.iter().any(|r| r == "InterceptorTimedOut").then_some(r)
    })
    .await;
    assert!(
        events.iter().any(|r| r == "UnregisteredInterceptor"),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|r| r == "InterceptorNotRegistered"),
        "{events:?}"
    );
    let series = format!(
        "evictionrequest_controller_processed_interceptor_total{{interceptor=\"{typo}\",reason=\"timed_out\"}}"
    );
    assert_eq!(e.metric(&series).await, 1.0);
}

/// Rule S7 is `enforce`'s: in `warn` any writer may still change a registered interceptor's
/// entry, as before registration existed; a registered interceptor names no warning.
#[tokio::test]
async fn warn_does_not_guard_entries_and_registered_names_are_quiet() {
    let (client, ns) = setup("warn-s7").await;
    let c = support::cluster().await;
    let name = "guarded-warn.example.com";
    let evi = EvictionInterceptor::new(
        name,
        EvictionInterceptorSpec {
            service_accounts: vec![ServiceAccountReference {
                namespace: "db".into(),
                name: "operator".into(),
            }],
        },
    );
    Api::<EvictionInterceptor>::all(client.clone())
        .create(&PostParams::default(), &evi)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let manifest = serde_json::to_string(&pod("p").interceptors(&[name]).build()).unwrap();
    let out = kubectl(c, &["create", "-n", &ns, "-f", "-"], Some(&manifest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("rule P8"),
        "{stderr}"
    );
    let uid = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns)
        .get("p")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    create_eviction_request(&client, &ns, "p", &uid, &["test.example.com"]).await;
    let stranger = c
        .client_as("system:serviceaccount:web:deployer", &["system:masters"])
        .await;
    let api: Api<EvictionRequest> = Api::namespaced(stranger, &ns);
    write_when_active(&api, &uid, name, |e| e.completion_time = Some(now())).await;
    let admin: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    until(T, "Evicted=True", || async {
        status(&admin, &uid).await.is_true("Evicted").then_some(())
    })
    .await;
    assert!(
        !reasons(&client, &ns, &uid)
            .await
            .iter()
            .any(|r| r == "UnregisteredInterceptor")
    );
}

/// The node maintenance's node message and `kubectl evictord plan` name the unregistered
/// interceptors of the pods they drain.
#[tokio::test]
async fn node_message_and_plan_name_unregistered_interceptors() {
    let (client, ns) = setup("warn-nm").await;
    let n = format!("{ns}-node");
    node(&n).create(&client).await;
    let silent: Vec<String> = (1..=3).map(|i| format!("silent-{i}.example.com")).collect();
    let names: Vec<&str> = silent.iter().map(String::as_str).collect();
    pod("held")
        .on_node(&n)
        .interceptors(&names)
        .create(&client, &ns)
        .await;

    let out = plugin(&["plan", &n, "-o", "json"]).await;
    assert!(out.status.success(), "{}", support::plugin::text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["pods"][0]["unregistered"],
        json!(names),
        "{report:#}"
    );
    let out = plugin(&["plan", &n]).await;
    let table = support::plugin::text(&out);
    assert!(
        table.contains("not registered: silent-1.example.com"),
        "{table}"
    );

    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": ns},
        "spec": {"stage": "Drain", "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [n]}]}]}}
    }))
    .unwrap();
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    nms.create(&PostParams::default(), &nm).await.unwrap();
    let message = until(T, "the node message naming the interceptors", || async {
        let nm = nms.get(&ns).await.ok()?;
        let m = nm.status?.node_statuses.first()?.drain_message.clone();
        m.contains("waits on unregistered interceptors")
            .then_some(m)
    })
    .await;
    assert!(
        message.starts_with(&format!(
            "Evacuating; 1 pod waits on unregistered interceptors: {ns}/held (silent-"
        )),
        "{message}"
    );
    // Drained as before (each silent interceptor times out), then completed.
    until(Duration::from_secs(90), "Drained", || async {
        let nm = nms.get(&ns).await.ok()?;
        nm.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Drained" && c.status == "True")
            .then_some(())
    })
    .await;
    let mut done = nms.get(&ns).await.unwrap();
    done.spec.stage = Some(evictord::api::Stage::Complete);
    done.metadata.managed_fields = None;
    nms.replace(&ns, &PostParams::default(), &done)
        .await
        .unwrap();
}

/// The book's registration of an interceptor in another language: its manifest through
/// `kubectl apply`, and the status heartbeat through `kubectl patch --subresource=status`.
#[tokio::test]
async fn readme_registration_with_kubectl() {
    let (client, _ns) = setup("warn-readme").await;
    let c = support::cluster().await;
    let readme = include_str!("../docs/src/interceptors/sdk.md");
    let manifest = readme
        .split("kubectl apply -f - <<'END'\n")
        .nth(1)
        .and_then(|rest| rest.split("\nEND\n").next())
        .expect("the README's EvictionInterceptor manifest");
    let out = kubectl(c, &["apply", "-f", "-"], Some(manifest));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        readme.contains(
            "kubectl patch evictioninterceptor mine.example.com --subresource=status --type=merge"
        ),
        "the README's heartbeat command"
    );
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let patch = format!(r#"{{"status":{{"heartbeatTime":"{now}","runner":"host-1"}}}}"#);
    let args = [
        "patch",
        "evictioninterceptor",
        "mine.example.com",
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ];
    let out = kubectl(c, &args, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let evi = Api::<EvictionInterceptor>::all(client.clone())
        .get("mine.example.com")
        .await
        .unwrap();
    assert_eq!(
        evi.spec.service_accounts,
        [ServiceAccountReference {
            namespace: "mine-system".into(),
            name: "mine".into()
        }]
    );
    let status = evi.status.unwrap();
    assert_eq!(status.heartbeat_time.unwrap().0, now);
    assert_eq!(status.runner.as_deref(), Some("host-1"));
    // R3: a heartbeat from the future is refused.
    let later = now
        .checked_add(jiff::SignedDuration::from_secs(3600))
        .unwrap();
    let patch = format!(r#"{{"status":{{"heartbeatTime":"{later}"}}}}"#);
    let args = [
        "patch",
        "evictioninterceptor",
        "mine.example.com",
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ];
    let out = kubectl(c, &args, None);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("rule R3"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
