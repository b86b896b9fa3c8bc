//! evictord names itself on every Kubernetes API request and counts its own requests (issue 44,
//! per-client accounting), refereed by kube-apiserver's audit log of every request (Metadata
//! level, this binary's own control plane): `evictord serve` runs as a user of its own
//! (impersonated), so every request it makes is found in the log whatever client made it; each
//! carries `evictord/<version> (<component>; <replica>)`, and `evictord_kube_api_requests_total`
//! agrees with the log request for request, by component, verb, resource and code. The node
//! agent and the plugin name themselves too. evictord runs with `--kube-api-qps` and
//! `--kube-api-burst`, and the log shows it never sent more than they allow in any second.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use evictord::api::EvictionRequest;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::PostParams;
use support::audit::{AuditedRequest, requests};
use support::control_plane::cluster_with_request_audit;
use support::evictord::{FAST, SpawnOptions, http_get, install_crds};
use support::fixtures::{create_eviction_request, node, pod};
use support::node_agent::Agent;
use support::plugin::{plugin, text};
use support::wait::until;
use support::{Evictord, TestCluster};

const T: Duration = Duration::from_secs(60);
/// The replica's pod name, which the user agents of `evictord serve` carry.
const REPLICA: &str = "evictord-accounting-0";
/// The user `evictord serve` runs as (impersonated, bound to cluster-admin).
const USER: &str = "evictord-accounting";
/// evictord's client-side rate limit: low enough that its start (discovery, the caches' lists
/// and watches, the interceptors', leader election: about 30 requests) needs it.
const QPS: usize = 5;
const BURST: usize = 5;

fn user_agent(component: &str, identity: Option<&str>) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match identity {
        Some(i) => format!("evictord/{version} ({component}; {i})"),
        None => format!("evictord/{version} ({component})"),
    }
}

/// Requests by (verb, resource, code).
type Tally = BTreeMap<(String, String, String), u64>;

/// `evictord_kube_api_requests_total` of `component` in the exposition `text`.
fn counted(text: &str, component: &str) -> Tally {
    let mut tally = Tally::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("evictord_kube_api_requests_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ").expect("a sample");
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_else(|| panic!("{name} in {line}"))
        };
        let n: f64 = value.trim().parse().expect("a number");
        if label("component") == component && n > 0.0 {
            *tally
                .entry((label("verb"), label("resource"), label("code")))
                .or_default() += n as u64;
        }
    }
    tally
}

/// The audited requests of `user_agent`.
fn audited(log: &[AuditedRequest], user_agent: &str) -> Tally {
    let mut tally = Tally::new();
    for r in log.iter().filter(|r| r.user_agent == user_agent) {
        *tally
            .entry((r.verb.clone(), r.resource.clone(), r.code.to_string()))
            .or_default() += 1;
    }
    tally
}

/// The tally without watches that are still open: kube-apiserver logs a watch only once it
/// ends, so the log has at most as many watches as were started.
fn agreeing(counted: &Tally, audited: &Tally) -> (Tally, Tally) {
    let is_watch = |key: &(String, String, String)| key.0 == "watch";
    let watches_within = audited
        .iter()
        .filter(|(k, _)| is_watch(k))
        .all(|(k, n)| counted.get(k).is_some_and(|c| c >= n));
    let without_watches = |t: &Tally| -> Tally {
        t.iter()
            .filter(|(k, _)| !is_watch(k))
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    };
    if watches_within {
        (without_watches(counted), without_watches(audited))
    } else {
        (counted.clone(), audited.clone())
    }
}

/// Waits until the counter of each component on the `/metrics` of `probe_port` equals the
/// audit log's count of its user agent's requests, key for key (watches: at least as many
/// counted as logged, see [`agreeing`]). A request between the two reads (a lease renewal, a
/// poll) can make one snapshot differ: the next agrees.
async fn counter_agrees_with_audit(log: &Path, probe_port: u16, components: &[(&str, String)]) {
    let mut last = Vec::new();
    for _ in 0..80 {
        let (_, text) = http_get(probe_port, "/metrics").await.expect("/metrics");
        let audit = requests(log);
        last = components
            .iter()
            .map(|(component, ua)| agreeing(&counted(&text, component), &audited(&audit, ua)))
            .collect();
        if last.iter().all(|(c, a)| c == a && !c.is_empty()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for ((component, _), (counted, audited)) in components.iter().zip(last) {
        assert_eq!(
            counted, audited,
            "{component}: evictord_kube_api_requests_total (left) against the audit log (right)"
        );
        assert!(!counted.is_empty(), "{component}: no request counted");
    }
}

async fn bind_cluster_admin(c: &TestCluster, user: &str) {
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(c.client().await)
        .create(&PostParams::default(), &binding)
        .await
        .expect("ClusterRoleBinding");
}

#[tokio::test]
async fn every_request_names_its_component_and_is_counted() {
    let c = cluster_with_request_audit().await;
    let log = c.request_audit.clone().expect("audit log");
    install_crds(c).await;
    bind_cluster_admin(c, USER).await;
    let client = c.client().await;
    let ns = c.namespace("accounting").await;

    let mut args = FAST.to_vec();
    let (qps, burst) = (
        format!("--kube-api-qps={QPS}"),
        format!("--kube-api-burst={BURST}"),
    );
    args.extend(["--leader-election", &qps, &burst]);
    let e = Evictord::spawn(
        c,
        &args,
        SpawnOptions {
            kubeconfig: Some(c.kubeconfig_as(USER)),
            env: vec![("POD_NAME".into(), REPLICA.into())],
            ..Default::default()
        },
    );
    e.ready().await;
    e.register_webhooks(c, "evictord").await;

    // One eviction: the controller's Eviction API call.
    let p = pod("p").create(&client, &ns).await;
    let uid = p.metadata.uid.clone().unwrap();
    let requests_api: Api<EvictionRequest> =
        create_eviction_request(&client, &ns, "p", &uid, &["test.example.com"]).await;
    until(T, "the request Evicted", || async {
        let s = requests_api.get(&uid).await.ok()?.status?;
        s.is_true("Evicted").then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    until(T, "the pod gone", || async {
        pods.get_opt("p").await.unwrap().is_none().then_some(())
    })
    .await;

    // The node agent (named after its node) and the plugin.
    let node_name = format!("{ns}-node");
    node(&node_name).create(&client).await;
    let dir = c.dir.join(format!("static-pods-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let agent = Agent::start(c, &node_name, &dir);
    agent.ready().await;
    let out = plugin(&["plan", &node_name]).await;
    assert!(
        out.status.success(),
        "kubectl evictord plan: {}",
        text(&out)
    );

    let serve: Vec<(&str, String)> = ["webhook", "controller", "interceptor"]
        .into_iter()
        .map(|component| (component, user_agent(component, Some(REPLICA))))
        .collect();
    let agent_ua = user_agent("node-agent", Some(&node_name));
    let plugin_ua = user_agent("plugin", None);

    // Every request of evictord serve's user carries one of its user agents, each is used,
    // and nothing else claims to be evictord.
    let audit = requests(&log);
    let unnamed: Vec<_> = audit
        .iter()
        .filter(|r| r.user == USER && !serve.iter().any(|(_, ua)| *ua == r.user_agent))
        .collect();
    assert!(
        unnamed.is_empty(),
        "evictord's requests without its user agent: {unnamed:#?}"
    );
    for (_, ua) in &serve {
        assert!(
            audit.iter().any(|r| r.user == USER && r.user_agent == *ua),
            "no request from {ua}"
        );
    }
    let strangers: Vec<_> = audit
        .iter()
        .filter(|r| r.user_agent.starts_with("evictord"))
        .filter(|r| {
            !serve.iter().any(|(_, ua)| *ua == r.user_agent)
                && r.user_agent != agent_ua
                && r.user_agent != plugin_ua
        })
        .collect();
    assert!(
        strangers.is_empty(),
        "unexpected evictord user agents: {strangers:#?}"
    );
    assert!(
        audit.iter().any(|r| r.user_agent == agent_ua),
        "no request from {agent_ua}"
    );
    assert!(
        audit.iter().any(|r| r.user_agent == plugin_ua),
        "no request from {plugin_ua}"
    );

    // The controller holds the lease and made the one Eviction API call, under its name.
    let controller = audited(&audit, &serve[1].1);
    assert!(
        controller
            .keys()
            .any(|(_, resource, _)| resource == "leases"),
        "no Lease request from the controller: {controller:?}"
    );
    let evictions: Vec<_> = audit
        .iter()
        .filter(|r| r.verb == "create" && r.resource == "pods/eviction")
        .collect();
    assert!(
        evictions.len() == 1 && evictions[0].user_agent == serve[1].1 && evictions[0].code == 201,
        "{evictions:#?}"
    );

    // No second with more requests than the rate limit allows (a little slack for the time
    // between sending and kube-apiserver's receiving).
    let mut sent: Vec<SystemTime> = audit
        .iter()
        .filter(|r| r.user == USER)
        .map(|r| r.received)
        .collect();
    sent.sort();
    let busiest = sent
        .iter()
        .map(|t| {
            sent.iter()
                .filter(|u| *u >= t && u.duration_since(*t).unwrap() < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or_default();
    assert!(
        busiest <= BURST + QPS + 2,
        "{busiest} requests within a second, with --kube-api-qps={QPS} --kube-api-burst={BURST}"
    );

    // The counters agree with the audit log, request for request.
    counter_agrees_with_audit(&log, e.probe_port, &serve).await;
    counter_agrees_with_audit(&log, agent.probe_port, &[("node-agent", agent_ua)]).await;
}
