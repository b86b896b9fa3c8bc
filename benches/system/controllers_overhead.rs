//! Part 3's overhead runs, against an evictord with `--controllers=none`: EvictionRequest create
//! latency with the webhook registered and not registered, and the Eviction API bridge's cost to
//! every Eviction API call for a pod without interceptors (see [`crate::controllers`]).

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use serde_json::json;

use crate::cluster::{create_pods, delete_requests, unregister_webhooks};
use crate::controllers::{
    CreateRun, EvictionCallRun, create_admission_histogram, create_requests, latency, plain_pod,
    remove_run, scrape,
};
use crate::support::{self, TestCluster};

pub(crate) async fn create_runs(
    c: &TestCluster,
    e: &support::Evictord,
    m: usize,
    runs: usize,
) -> anyhow::Result<Vec<CreateRun>> {
    let client = c.client().await;
    let ns = c.namespace("bench-create").await;
    let far = Instant::now() + Duration::from_secs(600);
    let pods = create_pods(&client, &ns, "p", 0..m, far, plain_pod).await?;
    // Warm-up, discarded: the apiserver's first calls to the webhook open its connections.
    e.register_webhooks(c, "evictord").await;
    create_requests(&client, &ns, &pods[..pods.len().min(50)], 4).await?;
    delete_requests(&client, &ns).await?;
    let mut out = Vec::new();
    for run in 0..runs {
        let mut with = None;
        let mut without = None;
        let (mut apiserver_with, mut apiserver_without, mut evictord_with) =
            (Vec::new(), Vec::new(), Vec::new());
        // Alternate which goes first.
        let order = if run % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for webhook in order {
            if webhook {
                e.register_webhooks(c, "evictord").await;
            } else {
                unregister_webhooks(&client).await?;
            }
            let (apiserver_before, evictord_before) = (
                crate::prom::scrape_apiserver(&client).await,
                scrape(e).await,
            );
            let lat = latency(create_requests(&client, &ns, &pods, 4).await?);
            let apiserver = crate::prom::apiserver_deltas(
                &apiserver_before,
                &crate::prom::scrape_apiserver(&client).await,
            );
            let evictord = crate::prom::deltas(
                &evictord_before,
                &scrape(e).await,
                create_admission_histogram,
            );
            eprintln!(
                "[controllers] create latency, webhook {}: p50 {:.1} ms, p99 {:.1} ms",
                if webhook { "on" } else { "off" },
                lat.p50_ms,
                lat.p99_ms
            );
            delete_requests(&client, &ns).await?;
            if webhook {
                evictord_with = evictord;
                apiserver_with = apiserver;
                with = Some(lat);
            } else {
                apiserver_without = apiserver;
                without = Some(lat);
            }
        }
        let (with, without) = (with.expect("measured"), without.expect("measured"));
        out.push(CreateRun {
            creates: m,
            p99_ratio: with.p99_ms / without.p99_ms,
            with_webhook: with,
            without_webhook: without,
            apiserver_with_webhook: apiserver_with,
            apiserver_without_webhook: apiserver_without,
            evictord_with_webhook: evictord_with,
        });
    }
    drop(pods);
    remove_run(&client, &ns).await?;
    Ok(out)
}

/// Calls the Eviction API (policy/v1beta1, the version kube-apiserver v1.20 serves) once for each
/// pod, `parallel` in flight; returns each call's latency.
async fn evict_pods(
    client: &Client,
    ns: &str,
    pods: &[Pod],
    parallel: usize,
) -> anyhow::Result<Vec<Duration>> {
    let results: Vec<anyhow::Result<Duration>> = futures::stream::iter(pods.iter())
        .map(|pod| {
            let client = client.clone();
            async move {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let body = json!({
                    "apiVersion": "policy/v1beta1", "kind": "Eviction",
                    "metadata": {"name": name, "namespace": ns},
                });
                let request =
                    http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"))
                        .header(http::header::CONTENT_TYPE, "application/json")
                        .body(serde_json::to_vec(&body)?)?;
                let t = Instant::now();
                let _: serde_json::Value = client
                    .request(request)
                    .await
                    .map_err(|e| anyhow::anyhow!("evicting pod {name}: {e}"))?;
                Ok(t.elapsed())
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    results.into_iter().collect()
}

pub(crate) async fn eviction_call_runs(
    c: &TestCluster,
    e: &support::Evictord,
    m: usize,
    runs: usize,
) -> anyhow::Result<Vec<EvictionCallRun>> {
    let client = c.client().await;
    let ns = c.namespace("bench-evict-call").await;
    let far = Instant::now() + Duration::from_secs(600);
    let mut round = 0usize;
    let mut measure = |webhook: bool| {
        round += 1;
        let (client, ns, prefix) = (client.clone(), ns.clone(), format!("r{round}"));
        async move {
            if webhook {
                e.register_webhooks(c, "evictord").await;
            } else {
                unregister_webhooks(&client).await?;
            }
            let pods = create_pods(&client, &ns, &prefix, 0..m, far, plain_pod).await?;
            let lat = latency(evict_pods(&client, &ns, &pods, 4).await?);
            eprintln!(
                "[controllers] eviction call latency, webhook {}: p50 {:.1} ms, p99 {:.1} ms",
                if webhook { "on" } else { "off" },
                lat.p50_ms,
                lat.p99_ms
            );
            anyhow::Ok(lat)
        }
    };
    // Warm-up, discarded: the apiserver's first calls to the webhook open its connections.
    measure(true).await?;
    let mut out = Vec::new();
    for run in 0..runs {
        let first = run % 2 == 0;
        let a = measure(first).await?;
        let b = measure(!first).await?;
        let (with, without) = if first { (a, b) } else { (b, a) };
        out.push(EvictionCallRun {
            calls: m,
            p99_ratio: with.p99_ms / without.p99_ms,
            p99_added_ms: with.p99_ms - without.p99_ms,
            with_webhook: with,
            without_webhook: without,
        });
    }
    remove_run(&client, &ns).await?;
    Ok(out)
}
