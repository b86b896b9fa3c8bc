//! The metrics of the book's metrics table (docs/src/reference/metrics.md) on a real
//! kube-apiserver, after one eviction through two interceptors (played by the test: each writes
//! its own status entry with `startTime` and `completionTime`) and the imperative one. This
//! binary has its own control plane and a single evictord, so the values are exactly this test's.

mod support;

use std::time::Duration;

use evictord::api::{EvictionRequest, EvictionRequestStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::Evictord;
use support::evictord::{install_crds, metric_sum};
use support::fixtures::pod;
use support::interceptor::{now, write_entry};
use support::wait::until;

const T: Duration = Duration::from_secs(60);
const IMP: &str = "imperative-eviction.k8s.io";

/// Metric names in the first column of the book's metrics table (counters with their
/// OpenMetrics sample suffix `_total`).
fn readme_metrics() -> Vec<String> {
    let readme = include_str!("../docs/src/reference/metrics.md");
    let section = readme
        .split("## Operations")
        .nth(1)
        .expect("Operations section");
    let mut names = Vec::new();
    for line in section.lines().take_while(|l| !l.starts_with("**Alerts**")) {
        let Some(row) = line.strip_prefix("| `") else {
            continue;
        };
        let cell = row.split(" | ").next().unwrap_or_default();
        names.extend(
            cell.split('`')
                .filter(|n| {
                    ["evictord_", "evictionrequest_", "nodemaintenance_"]
                        .iter()
                        .any(|p| n.starts_with(p))
                })
                .map(str::to_string),
        );
    }
    names
}

async fn status(api: &Api<EvictionRequest>, name: &str) -> EvictionRequestStatus {
    api.get(name).await.expect("get").status.unwrap_or_default()
}

#[tokio::test]
async fn metrics_after_an_eviction_through_two_interceptors() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("metrics").await;
    let e = Evictord::start(c, support::evictord::FAST).await;
    e.register_webhooks(c, "evictord").await;

    let (a, b) = ("first.example.com", "second.example.com");
    let p = pod("p").interceptors(&[a, b]).create(&client, &ns).await;
    let uid = p.metadata.uid.clone().unwrap();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "p", "uid": uid}}, "requesters": [{"name": "test.example.com"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &er)
        .await
        .expect("create EvictionRequest");

    let e = &e;
    let mut during = String::new();
    for interceptor in [a, b] {
        until(T, &format!("{interceptor} active"), || async {
            (status(&api, &uid).await.active_interceptors == [interceptor]).then_some(())
        })
        .await;
        write_entry(&api, &uid, interceptor, |s| s.start_time = Some(now())).await;
        if interceptor == a {
            // The gauges are recomputed every 10 s: heartbeat (6 s deadline) until they show
            // the open request.
            let series =
                format!("evictionrequest_controller_active_interceptor{{interceptor=\"{a}\"}} 1");
            for _ in 0..15 {
                let text = e.probe("/metrics").await.expect("/metrics").1;
                if text.contains(&series) {
                    during = text;
                    break;
                }
                write_entry(&api, &uid, a, |s| s.heartbeat_time = Some(now())).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            let m = |series: &str| metric_sum(&during, series);
            assert_eq!(m(&series[..series.len() - 2]), 1.0, "{during}");
            assert_eq!(
                m("evictionrequest_controller_active_requester{requester=\"test.example.com\"}"),
                1.0,
                "{during}"
            );
            assert_eq!(
                m("evictionrequest_controller_open_requests "),
                1.0,
                "{during}"
            );
        }
        write_entry(&api, &uid, interceptor, |s| s.completion_time = Some(now())).await;
    }
    until(T, "Evicted=True", || async {
        status(&api, &uid).await.is_true("Evicted").then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    until(T, "pod deleted", || async {
        pods.get_opt("p").await.unwrap().is_none().then_some(())
    })
    .await;
    // The gauges are recomputed every 10 s.
    until(Duration::from_secs(25), "no open request", || async {
        let text = e.probe("/metrics").await?.1;
        (text.contains("evictionrequest_controller_open_requests 0")
            && metric_sum(&text, "evictionrequest_controller_active_interceptor{") == 0.0)
            .then_some(())
    })
    .await;

    let (_, text) = e.probe("/metrics").await.expect("/metrics");
    let m = |series: &str| metric_sum(&text, series);
    let processed = |i: &str, reason: &str| {
        m(&format!(
            "evictionrequest_controller_processed_interceptor_total{{interceptor=\"{i}\",reason=\"{reason}\"}}"
        ))
    };
    let expected = [
        ("evictionrequest_controller_pod_interceptors_count ", 1.0),
        ("evictionrequest_controller_pod_interceptors_sum ", 2.0),
        (
            "evictionrequest_controller_pod_interceptors_bucket{le=\"1.0\"}",
            0.0,
        ),
        (
            "evictionrequest_controller_pod_interceptors_bucket{le=\"2.0\"}",
            1.0,
        ),
        (
            "evictionrequest_controller_imperative_evictions_total{result=\"success\"}",
            1.0,
        ),
        ("evictionrequest_controller_imperative_evictions_total", 1.0),
        (
            "evictionrequest_controller_processed_interceptor_total",
            3.0,
        ),
        ("evictionrequest_controller_active_requester{", 0.0),
        ("evictionrequest_controller_active_interceptor{", 0.0),
        ("evictionrequest_controller_open_requests ", 0.0),
        ("nodemaintenance_controller_pods_pending_evacuation ", 0.0),
        ("nodemaintenance_controller_pods_evacuating ", 0.0),
        (
            "nodemaintenance_controller_drain_duration_seconds_count ",
            0.0,
        ),
    ];
    for (series, value) in expected {
        assert_eq!(m(series), value, "{series}\n{text}");
    }
    assert_eq!(processed(a, "completed"), 1.0, "{text}");
    assert_eq!(processed(b, "completed"), 1.0, "{text}");
    assert_eq!(processed(IMP, "evicted"), 1.0, "{text}");
    assert!(
        m(
            "evictord_admission_requests_total{resource=\"evictionrequests\",operation=\"CREATE\",verdict=\"allowed\"}"
        ) >= 1.0,
        "{text}"
    );
    assert!(
        m("evictord_reconcile_duration_seconds_count{controller=\"evictionrequest\"}") >= 1.0,
        "{text}"
    );
    assert_eq!(
        m("nodemaintenance_controller_maintenances{"),
        0.0,
        "no maintenance: {text}"
    );

    // Every metric the book lists was exposed (declared while the request was open or after
    // the eviction; a counter by its name without `_total`), and nothing evictord exposes is
    // missing from the book.
    let readme = readme_metrics();
    assert!(
        readme.len() >= 16,
        "the book's metrics table parsed: {readme:?}"
    );
    // Labelled families whose label values are open (interceptor and requester names) get
    // series from this scenario; those with a fixed set of values are exposed at zero from the
    // start.
    for name in &readme {
        let family = name.strip_suffix("_total").unwrap_or(name);
        let declared = format!("# TYPE {family} ");
        assert!(
            text.contains(&declared) || during.contains(&declared),
            "docs/src/reference/metrics.md lists {name}, /metrics does not expose it:\n{during}\n{text}"
        );
    }
    for line in text.lines().chain(during.lines()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let family = rest.split(' ').next().unwrap_or_default();
            assert!(
                readme
                    .iter()
                    .any(|n| n == family || n.strip_suffix("_total") == Some(family)),
                "/metrics exposes {family}, docs/src/reference/metrics.md does not list it: {readme:?}"
            );
        }
    }
}
