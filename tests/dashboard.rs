//! The chart's Grafana dashboard: the ConfigMap real `helm template` renders for
//! `metrics.dashboard.enabled` carries the sidecar label and a dashboard in Grafana's JSON model
//! (a Prometheus data source variable every query uses); every query parses under real
//! `promtool` (each written as a recording rule, Grafana's variables replaced by values), and
//! every metric a query names is exposed on a real evictord's `/metrics`.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::tools::{promtool, run};

/// The dashboard JSON as the chart renders it in its ConfigMap (and the ConfigMap).
fn rendered() -> (serde_norway::Value, Value) {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/evictord");
    let chart = chart.display().to_string();
    let args = [
        "template",
        "evictord",
        &chart,
        "--namespace",
        "evictord",
        "--set",
        "metrics.dashboard.enabled=true",
        "--show-only",
        "templates/dashboard.yaml",
    ];
    let out = run("helm", &args, None, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cm: serde_norway::Value = serde_norway::from_str(&stdout).expect("ConfigMap YAML");
    let json = cm["data"]["evictord.json"]
        .as_str()
        .expect("data.evictord.json");
    let dashboard: Value = serde_json::from_str(json).expect("dashboard JSON");
    (cm, dashboard)
}

/// Every panel, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(nested) = p["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// Every query with Grafana's variables replaced by values PromQL accepts.
fn queries(d: &Value) -> Vec<String> {
    panels(d)
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| {
            t["expr"]
                .as_str()
                .expect("expr")
                .replace("$__rate_interval", "5m")
                .replace("$__range", "1h")
                .replace("$namespace", ".*")
        })
        .collect()
}

/// The metric families a query names (histogram series and counters by family name).
fn families(query: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut word = String::new();
    for c in query.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        let w = std::mem::take(&mut word);
        if ["evictord_", "evictionrequest_", "nodemaintenance_"]
            .iter()
            .any(|p| w.starts_with(p))
        {
            let family = ["_bucket", "_sum", "_count", "_total"]
                .iter()
                .find_map(|s| w.strip_suffix(s))
                .unwrap_or(&w);
            out.insert(family.to_string());
        }
    }
    out
}

#[test]
fn the_dashboard_follows_grafanas_model_and_the_sidecar_finds_it() {
    let (cm, d) = rendered();
    assert_eq!(cm["kind"].as_str(), Some("ConfigMap"));
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    assert!(
        d["schemaVersion"].as_i64().unwrap_or(0) >= 39,
        "schemaVersion"
    );
    assert_eq!(d["uid"].as_str(), Some("evictord"));
    let vars = d["templating"]["list"].as_array().expect("templating");
    let ds = vars
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a data source variable");
    assert_eq!(ds["query"].as_str(), Some("prometheus"));
    let var = format!("${{{}}}", ds["name"].as_str().unwrap());
    let mut ids = BTreeSet::new();
    for p in panels(&d) {
        assert!(ids.insert(p["id"].as_i64().expect("id")), "duplicate id");
        assert!(p["gridPos"].is_object(), "gridPos of {}", p["title"]);
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(
            p["datasource"]["uid"].as_str(),
            Some(var.as_str()),
            "{}",
            p["title"]
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"].as_str(), Some(var.as_str()));
        }
    }
    // What the issue asks the dashboard to show.
    let text = d.to_string();
    for metric in [
        "evictord_admission_requests_total",
        "evictord_admission_duration_seconds_bucket",
        "evictionrequest_controller_imperative_evictions_total",
        "evictionrequest_controller_active_interceptor",
        "evictionrequest_controller_open_requests",
        "nodemaintenance_controller_maintenances",
        "nodemaintenance_controller_pods_pending_evacuation",
        "nodemaintenance_controller_pods_evacuating",
        "nodemaintenance_controller_drain_duration_seconds_bucket",
        "evictord_deployment_interceptor_surges_total",
    ] {
        assert!(text.contains(metric), "the dashboard shows {metric}");
    }
}

#[test]
fn every_query_parses_under_promtool() {
    let (_, d) = rendered();
    let rules: Vec<Value> = queries(&d)
        .into_iter()
        .enumerate()
        .map(
            |(i, expr)| serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": expr}),
        )
        .collect();
    assert!(rules.len() > 20, "{} queries", rules.len());
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dashboard-rules.yaml");
    let doc = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, doc.to_string()).expect("write rules");
    let out = Command::new(promtool())
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool check rules");
    assert!(
        out.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn every_metric_the_dashboard_names_is_exposed() {
    let (_, d) = rendered();
    let named: BTreeSet<String> = queries(&d).iter().flat_map(|q| families(q)).collect();
    assert!(named.len() > 15, "{named:?}");
    // The families labelled by open values (resources, interceptor and requester names) get
    // their first series from requests: one evicted by the imperative interceptor, one held by
    // an interceptor that never heartbeats (within its 10-minute deadline, while this runs).
    let e = support::evictord::shared(support::evictord::FAST).await;
    let c = support::cluster().await;
    let (client, ns) = (c.client().await, c.namespace("dashboard").await);
    let evicted = support::fixtures::pod("evicted").create(&client, &ns).await;
    let uid = evicted.metadata.uid.expect("uid");
    let api = support::fixtures::create_eviction_request(
        &client,
        &ns,
        "evicted",
        &uid,
        &["dash.example.com"],
    )
    .await;
    let held = support::fixtures::pod("held")
        .interceptors(&["hold.example.com"])
        .create(&client, &ns)
        .await;
    let held_uid = held.metadata.uid.expect("uid");
    let mut held_request =
        support::fixtures::eviction_request("held", &held_uid, &["dash.example.com"]);
    held_request.spec.heartbeat_deadline_seconds = Some(600);
    api.create(&Default::default(), &held_request)
        .await
        .expect("the held pod's EvictionRequest");
    support::wait::until(
        std::time::Duration::from_secs(60),
        "the pod evicted",
        || async {
            let s = api.get(&uid).await.ok()?.status?;
            s.is_true("Evicted").then_some(())
        },
    )
    .await;
    // The request gauges are refreshed every 10 s.
    let text = support::wait::until(
        std::time::Duration::from_secs(60),
        "the held request in the gauges",
        || async {
            let (status, text) = e.probe("/metrics").await?;
            (status == 200 && text.contains("interceptor=\"hold.example.com\"")).then_some(text)
        },
    )
    .await;
    let missing: Vec<&String> = named
        .iter()
        .filter(|f| !text.contains(&format!("# TYPE {f} ")))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard names metrics /metrics does not expose: {missing:?}\n{text}"
    );
}
