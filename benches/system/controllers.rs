//! Part 3: the eviction request controller on the real control plane (kube-apiserver v1.20 +
//! etcd, `evictord serve` in release mode with the webhook registered), each measurement in its
//! own namespace:
//!
//! - **evictions/s**: N pods without interceptors, N EvictionRequests created at once (32 in
//!   flight), time from the first create to the last `Evicted=True` seen by a watch;
//! - **interceptor hand-off**: N pods with two interceptors; once every request has the first
//!   one active, the benchmark completes them all (as the interceptor would: a status write
//!   setting `startTime` and `completionTime`, 32 in flight) and a watch times, per request,
//!   from the write's success to the second interceptor being active. The time is split where
//!   the benchmark can see it: write returned → its own watch sees the completion (watch
//!   delivery; evictord's watch is served by the same watch cache), → its watch sees the second
//!   interceptor active (evictord: its watch, queue, reconcile, the status write with its
//!   webhook call, and the delivery of that write); and evictord's own histograms on
//!   `/metrics` (reconcile duration, admission duration, any other duration histogram it
//!   exports) over the run say how much of the second part is evictord's work, and
//!   kube-apiserver's own (its request duration of each EvictionRequest write, its calls of the
//!   webhook, etcd's part: [`crate::prom::apiserver_series`]) how much is the API server's. The
//!   same runs again with the completions paced (`EVICTORD_BENCH_HANDOFF_RATE` a second, open
//!   loop) show the hand-off when the benchmark's own writes do not saturate the API server;
//! - **webhook overhead seen by clients**: EvictionRequest create latency (4 in flight) with the
//!   webhook registered and not registered, alternating, against an evictord with
//!   `--controllers=none` (so nothing else touches the requests), `EVICTORD_BENCH_CREATE_ROUNDS`
//!   rounds (default 5; the report quotes the median p99 ratio), with kube-apiserver's and
//!   evictord's own histograms of each round: how long the API server took per create with and
//!   without the webhook, how long it spent calling it, and how long evictord took to answer;
//!
//! - **Eviction API bridge overhead**: Eviction API calls (`pods/eviction`, 4 in flight) for
//!   un-annotated pods with the webhooks registered and not registered, alternating — what every
//!   `kubectl drain` of pods without interceptors pays for the bridge.
//!
//! The node maintenance drain benchmark is part 4 ([`crate::drain`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evictord::api::EvictionRequest;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::json;

use crate::cluster::{create_pods, delete_requests, unregister_webhooks};
use crate::controllers_overhead::{create_runs, eviction_call_runs};
use crate::settings::Settings;
use crate::support::{self, TestCluster};

const FIRST: &str = "first.bench.example.com";
const SECOND: &str = "second.bench.example.com";
const REQUESTER: &str = "bench.evictord.dev";
/// Parallel writes of the benchmark's "interceptors" and "requesters".
const WRITERS: usize = 32;

/// The time each EvictionRequest (by name) first satisfied each predicate, seen by a watch.
#[derive(Clone, Default)]
struct Seen {
    evicted: HashMap<String, Instant>,
    canceled: HashMap<String, Instant>,
    first_active: HashMap<String, Instant>,
    /// The first interceptor's `completionTime` set.
    first_completed: HashMap<String, Instant>,
    second_active: HashMap<String, Instant>,
    latest: HashMap<String, EvictionRequest>,
}

/// Watches the EvictionRequests of `ns` in the background.
fn track(client: &Client, ns: &str) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            let Ok(er) = item else { continue };
            let now = Instant::now();
            let name = er.metadata.name.clone().unwrap_or_default();
            let status = er.status.clone().unwrap_or_default();
            let mut s = s.lock().expect("lock");
            if status.is_true("Evicted") {
                s.evicted.entry(name.clone()).or_insert(now);
            }
            if status.is_true("Canceled") {
                s.canceled.entry(name.clone()).or_insert(now);
            }
            if status
                .interceptors
                .iter()
                .any(|i| i.name == FIRST && i.completion_time.is_some())
            {
                s.first_completed.entry(name.clone()).or_insert(now);
            }
            match status.active_interceptors.first().map(String::as_str) {
                Some(FIRST) => {
                    s.first_active.entry(name.clone()).or_insert(now);
                }
                Some(SECOND) => {
                    s.second_active.entry(name.clone()).or_insert(now);
                }
                _ => {}
            }
            s.latest.insert(name, er);
        }
    });
    (seen, task)
}

/// Polls until `done(seen)` or the timeout; returns whether it became true.
async fn wait_for(
    seen: &Arc<Mutex<Seen>>,
    timeout: Duration,
    done: impl Fn(&Seen) -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done(&seen.lock().expect("lock")) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn request_for(pod: &Pod) -> EvictionRequest {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": name, "uid": uid}}, "requesters": [{"name": REQUESTER}]}
    }))
    .expect("EvictionRequest")
}

/// Creates one EvictionRequest per pod with `parallel` in flight; returns each create's latency.
pub(crate) async fn create_requests(
    client: &Client,
    ns: &str,
    pods: &[Pod],
    parallel: usize,
) -> anyhow::Result<Vec<Duration>> {
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let results: Vec<anyhow::Result<Duration>> = futures::stream::iter(pods.iter())
        .map(|pod| {
            let api = api.clone();
            async move {
                let er = request_for(pod);
                let t = Instant::now();
                api.create(&PostParams::default(), &er)
                    .await
                    .map_err(|e| anyhow::anyhow!("creating EvictionRequest: {e}"))?;
                Ok(t.elapsed())
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    results.into_iter().collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Percentiles of a latency sample, in milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

pub(crate) fn latency(mut v: Vec<Duration>) -> Latency {
    v.sort_unstable();
    Latency {
        samples: v.len(),
        p50_ms: ms(crate::loadgen::percentile(&v, 50.0)),
        p99_ms: ms(crate::loadgen::percentile(&v, 99.0)),
        max_ms: ms(v.last().copied().unwrap_or_default()),
    }
}

/// One evictions/s run.
#[derive(Clone, Debug, Serialize)]
pub struct EvictionRun {
    pub pods: usize,
    pub evicted: usize,
    pub canceled: usize,
    pub create_seconds: f64,
    pub total_seconds: f64,
    pub evictions_per_second: f64,
}

/// One hand-off run.
#[derive(Clone, Debug, Serialize)]
pub struct HandoffRun {
    pub in_flight: usize,
    pub handed_off: usize,
    /// Completions written per second, open loop (`None`: all at once, [`WRITERS`] in flight).
    pub completion_rate: Option<f64>,
    pub completion_writes_seconds: f64,
    /// Completion write returned → second interceptor active (seen by the benchmark's watch).
    pub latency: Latency,
    /// Completion write returned → the benchmark's watch sees it (watch delivery).
    pub watch_delivery: Latency,
    /// The benchmark's watch sees the completion → it sees the second interceptor active
    /// (evictord's share: its watch, queue, reconcile and status write, plus one delivery).
    pub controller: Latency,
    /// evictord's own duration histograms over the run (from its `/metrics`).
    pub evictord_histograms: Vec<crate::prom::Delta>,
    /// kube-apiserver's own histograms over the run ([`crate::prom::apiserver_series`]): how
    /// long it took to serve the EvictionRequest writes (the benchmark's completions, evictord's
    /// status writes), its calls of the webhook, and etcd's part.
    pub apiserver_histograms: Vec<crate::prom::Delta>,
}

/// One create-latency round pair.
#[derive(Clone, Debug, Serialize)]
pub struct CreateRun {
    pub creates: usize,
    pub with_webhook: Latency,
    pub without_webhook: Latency,
    pub p99_ratio: f64,
    /// kube-apiserver's own histograms ([`crate::prom::apiserver_series`]) over the round with
    /// the webhook: the creates as it served them, and its calls of the webhook.
    pub apiserver_with_webhook: Vec<crate::prom::Delta>,
    /// The same over the round without the webhook.
    pub apiserver_without_webhook: Vec<crate::prom::Delta>,
    /// evictord's own review time of those creates (`evictord_admission_duration_seconds`).
    pub evictord_with_webhook: Vec<crate::prom::Delta>,
}

/// One Eviction API call-latency round pair (un-annotated pods, bridge on / off).
#[derive(Clone, Debug, Serialize)]
pub struct EvictionCallRun {
    pub calls: usize,
    pub with_webhook: Latency,
    pub without_webhook: Latency,
    pub p99_ratio: f64,
    pub p99_added_ms: f64,
}

/// Part 3 results.
#[derive(Clone, Debug, Serialize)]
pub struct ControllerResults {
    pub evictions: Vec<EvictionRun>,
    /// Hand-offs with every completion written at once ([`WRITERS`] in flight): the goal's runs.
    pub handoffs: Vec<HandoffRun>,
    /// Hand-offs with the completions paced (`EVICTORD_BENCH_HANDOFF_RATE`).
    pub paced_handoffs: Vec<HandoffRun>,
    pub creates: Vec<CreateRun>,
    pub eviction_calls: Vec<EvictionCallRun>,
    pub evictord_flags: Vec<String>,
    pub pods_in_cluster_before: usize,
}

pub(crate) fn plain_pod(name: &str, _i: usize) -> Pod {
    support::fixtures::pod(name).build()
}

fn handoff_pod(name: &str, _i: usize) -> Pod {
    support::fixtures::pod(name)
        .interceptors(&[FIRST, SECOND])
        .build()
}

async fn eviction_run(c: &TestCluster, n: usize) -> anyhow::Result<EvictionRun> {
    let client = c.client().await;
    let ns = c.namespace("bench-evict").await;
    let far = Instant::now() + Duration::from_secs(600);
    let pods = create_pods(&client, &ns, "p", 0..n, far, plain_pod).await?;
    let (seen, watch) = track(&client, &ns);
    let t0 = Instant::now();
    create_requests(&client, &ns, &pods, WRITERS).await?;
    let create_seconds = t0.elapsed().as_secs_f64();
    let timeout = Duration::from_secs(60 + n as u64 / 5);
    wait_for(&seen, timeout, |s| s.evicted.len() + s.canceled.len() >= n).await;
    watch.abort();
    let s = seen.lock().expect("lock").clone();
    remove_run(&client, &ns).await?;
    let last = s.evicted.values().max().copied().unwrap_or(t0);
    let total = last.duration_since(t0).as_secs_f64();
    Ok(EvictionRun {
        pods: n,
        evicted: s.evicted.len(),
        canceled: s.canceled.len(),
        create_seconds,
        total_seconds: total,
        evictions_per_second: s.evicted.len() as f64 / total.max(1e-9),
    })
}

fn now_time() -> Time {
    Time(jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("now"))
}

/// The first interceptor completes: one status write with start and completion time (retried
/// on conflicts with the controller's own writes). Returns when it succeeded.
async fn complete_first(
    api: &Api<EvictionRequest>,
    mut obj: EvictionRequest,
) -> anyhow::Result<Instant> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    for _ in 0..20 {
        let mut status = obj.status.clone().unwrap_or_default();
        let entry = status
            .interceptors
            .iter_mut()
            .find(|i| i.name == FIRST)
            .ok_or_else(|| anyhow::anyhow!("{name}: no {FIRST} entry"))?;
        let now = now_time();
        entry.start_time.get_or_insert(now.clone());
        entry.heartbeat_time = Some(now.clone());
        entry.completion_time = Some(now);
        obj.status = Some(status);
        obj.metadata.managed_fields = None;
        match api
            .replace_status(&name, &PostParams::default(), &obj)
            .await
        {
            Ok(_) => return Ok(Instant::now()),
            Err(kube::Error::Api(e)) if e.code == 409 => obj = api.get(&name).await?,
            Err(e) => anyhow::bail!("{name}: completing {FIRST}: {e}"),
        }
    }
    anyhow::bail!("{name}: too many conflicts")
}

/// evictord's duration histograms that can say where a hand-off's time goes (everything but
/// the ones about other work).
fn handoff_histogram(series: &str) -> bool {
    !["pod_interceptors", "drain_duration", "deployment_"]
        .iter()
        .any(|skip| series.contains(skip))
}

pub(crate) async fn scrape(
    e: &support::Evictord,
) -> std::collections::BTreeMap<String, crate::prom::Series> {
    e.probe("/metrics")
        .await
        .map(|(_, body)| crate::prom::histograms(&body))
        .unwrap_or_default()
}

/// evictord's review time of EvictionRequest creates.
pub(crate) fn create_admission_histogram(series: &str) -> bool {
    series.starts_with("evictord_admission_duration_seconds")
        && series.contains("evictionrequests")
        && series.contains("CREATE")
}

/// Writes the first interceptor's completion of each of `objects`: all at once, [`WRITERS`] in
/// flight, or (`rate`) one every 1/rate seconds, each at its scheduled time whatever the
/// earlier ones are doing (open loop). Returns when each write returned, by request name.
async fn complete_all(
    api: &Api<EvictionRequest>,
    objects: Vec<EvictionRequest>,
    rate: Option<f64>,
) -> anyhow::Result<HashMap<String, Instant>> {
    let complete = |obj: EvictionRequest| {
        let api = api.clone();
        async move {
            let name = obj.metadata.name.clone().unwrap_or_default();
            complete_first(&api, obj).await.map(|t| (name, t))
        }
    };
    let written: Vec<anyhow::Result<(String, Instant)>> = match rate {
        None => {
            futures::stream::iter(objects)
                .map(complete)
                .buffer_unordered(WRITERS)
                .collect()
                .await
        }
        Some(rate) => {
            let start = tokio::time::Instant::now();
            let tasks: Vec<_> = objects
                .into_iter()
                .enumerate()
                .map(|(i, obj)| {
                    let at = start + Duration::from_secs_f64(i as f64 / rate);
                    let write = complete(obj);
                    tokio::spawn(async move {
                        tokio::time::sleep_until(at).await;
                        write.await
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(tasks.len());
            for t in tasks {
                out.push(t.await.map_err(anyhow::Error::from).and_then(|r| r));
            }
            out
        }
    };
    written.into_iter().collect()
}

async fn handoff_run(
    c: &TestCluster,
    e: &support::Evictord,
    n: usize,
    rate: Option<f64>,
) -> anyhow::Result<HandoffRun> {
    let client = c.client().await;
    let ns = c.namespace("bench-handoff").await;
    let far = Instant::now() + Duration::from_secs(600);
    let pods = create_pods(&client, &ns, "p", 0..n, far, handoff_pod).await?;
    let (seen, watch) = track(&client, &ns);
    create_requests(&client, &ns, &pods, WRITERS).await?;
    let timeout = Duration::from_secs(60 + n as u64 / 5);
    anyhow::ensure!(
        wait_for(&seen, timeout, |s| s.first_active.len() >= n).await,
        "the first interceptor did not become active on all {n} requests within {timeout:?}"
    );
    // Every request now waits on the first interceptor: all n are in flight.
    let objects: Vec<EvictionRequest> = seen
        .lock()
        .expect("lock")
        .latest
        .values()
        .cloned()
        .collect();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let metrics_before = scrape(e).await;
    let apiserver_before = crate::prom::scrape_apiserver(&client).await;
    let t0 = Instant::now();
    let written = complete_all(&api, objects, rate).await?;
    let completion_writes_seconds = t0.elapsed().as_secs_f64();
    wait_for(&seen, timeout, |s| s.second_active.len() >= n).await;
    let metrics_after = scrape(e).await;
    let apiserver_after = crate::prom::scrape_apiserver(&client).await;
    watch.abort();
    let s = seen.lock().expect("lock").clone();
    remove_run(&client, &ns).await?;
    let samples: Vec<Duration> = written
        .iter()
        .filter_map(|(name, t)| {
            s.second_active
                .get(name)
                .map(|a| a.saturating_duration_since(*t))
        })
        .collect();
    let (mut delivery, mut controller) = (Vec::new(), Vec::new());
    for (name, t) in &written {
        if let Some(seen) = s.first_completed.get(name) {
            delivery.push(seen.saturating_duration_since(*t));
            if let Some(active) = s.second_active.get(name) {
                controller.push(active.saturating_duration_since(*seen));
            }
        }
    }
    Ok(HandoffRun {
        in_flight: n,
        handed_off: samples.len(),
        completion_rate: rate,
        completion_writes_seconds,
        latency: latency(samples),
        watch_delivery: latency(delivery),
        controller: latency(controller),
        evictord_histograms: crate::prom::deltas(
            &metrics_before,
            &metrics_after,
            handoff_histogram,
        ),
        apiserver_histograms: crate::prom::apiserver_deltas(&apiserver_before, &apiserver_after),
    })
}

/// Deletes a run's requests, then its pods, so that nothing of it is left for the controller to
/// work on during the next run (the hand-off requests would otherwise time out and evict).
pub(crate) async fn remove_run(client: &Client, ns: &str) -> anyhow::Result<()> {
    delete_requests(client, ns).await?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Ok(())
}

/// Runs part 3.
pub async fn run(s: &Settings) -> anyhow::Result<ControllerResults> {
    let c = support::cluster().await;
    support::evictord::install_crds(c).await;
    let client = c.client().await;
    let pods_in_cluster_before = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    // A long interceptor deadline: the hand-off must be by completion, never by timeout.
    let flags = [
        "--interceptor-deadline=10m",
        "--min-heartbeat-interval=1s",
        "--eviction-backoff-base=1s",
        "--eviction-backoff-cap=4s",
    ];
    let mut evictions = Vec::new();
    let mut handoffs = Vec::new();
    let mut paced_handoffs = Vec::new();
    {
        let e = support::Evictord::start(c, &flags).await;
        e.register_webhooks(c, "evictord").await;
        for run in 0..s.runs {
            let r = eviction_run(c, s.evictions).await?;
            eprintln!(
                "[controllers] evictions run {}/{}: {} evicted in {:.1}s ({:.0}/s)",
                run + 1,
                s.runs,
                r.evicted,
                r.total_seconds,
                r.evictions_per_second
            );
            evictions.push(r);
        }
        for run in 0..s.runs {
            for rate in std::iter::once(None).chain(s.handoff_rate.map(Some)) {
                let r = handoff_run(c, &e, s.handoffs, rate).await?;
                eprintln!(
                    "[controllers] hand-off run {}/{} ({}): {} handed off, p50 {:.0} ms, p99 {:.0} ms (watch delivery p99 {:.0} ms, then evictord p99 {:.0} ms)",
                    run + 1,
                    s.runs,
                    rate.map_or_else(
                        || format!("completions {WRITERS} in flight"),
                        |r| format!("completions paced at {r:.0}/s")
                    ),
                    r.handed_off,
                    r.latency.p50_ms,
                    r.latency.p99_ms,
                    r.watch_delivery.p99_ms,
                    r.controller.p99_ms
                );
                match rate {
                    None => handoffs.push(r),
                    Some(_) => paced_handoffs.push(r),
                }
            }
        }
    }
    let (creates, eviction_calls) = {
        let e = support::Evictord::start(c, &["--controllers=none"]).await;
        let creates = create_runs(c, &e, s.creates, s.create_rounds).await?;
        let calls = eviction_call_runs(c, &e, s.creates, s.runs).await?;
        (creates, calls)
    };
    unregister_webhooks(&client).await?;
    Ok(ControllerResults {
        evictions,
        handoffs,
        paced_handoffs,
        creates,
        eviction_calls,
        evictord_flags: flags.iter().map(|f| f.to_string()).collect(),
        pods_in_cluster_before,
    })
}
