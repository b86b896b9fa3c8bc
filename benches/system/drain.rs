//! Part 4: a node maintenance drain on the real control plane (kube-apiserver v1.20 + etcd).
//!
//! N fake nodes with a common label, P pods per node bound by `spec.nodeName`
//! (`terminationGracePeriodSeconds: 0`, no interceptors, no PDBs), all created before a fresh
//! `evictord serve` (all controllers, the fast flags of the tests, webhook registered) starts;
//! then one NodeMaintenance with `stage: Drain` selecting the label (`matchExpressions` `Exists`).
//! Measured: the time from its creation until its status says `Drained=True` (polled every
//! 500 ms, so ±0.5 s; given up after 15 minutes, reporting the pods remaining), evictions per
//! second (pods evicted ÷ that time) and evictord's peak RSS (`VmHWM`) at the end; what the
//! drain cost kube-apiserver (its own request counters, per evicted pod, the benchmark's own
//! polls taken out); and the CPU time kube-apiserver, etcd and evictord used over the drain
//! (`/proc/PID/stat`: the control plane is the bottleneck at scale).
//!
//! Repeated `EVICTORD_BENCH_DRAIN_RUNS` times (default 3; the report quotes medians), each run on
//! its own nodes, namespace and NodeMaintenance (selecting only that run's nodes) with a fresh
//! `evictord serve`; after each run the maintenance, its EvictionRequests, the nodes and the
//! webhook registration are removed so the next run starts from the same state.

use std::time::{Duration, Instant};

use evictord::api::{CONDITION_DRAINED, NodeMaintenance};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde::Serialize;

use crate::cluster::{create_pods, delete_requests, unregister_webhooks};
use crate::loadgen::median;
use crate::processes::{control_plane_pids, status_bytes};
use crate::prom::{per_pod, request_totals};
use crate::settings::Settings;
use crate::support;

const LABEL: &str = "bench.evictord.dev/drain";
const POLL: Duration = Duration::from_millis(500);
const GIVE_UP: Duration = Duration::from_secs(15 * 60);

/// One drain run.
#[derive(Clone, Debug, Serialize)]
pub struct DrainRun {
    pub pods: usize,
    /// Pods in the whole cluster (so in evictord's cache) when the maintenance was created.
    pub pods_in_cluster: usize,
    pub create_seconds: f64,
    /// From starting `evictord serve` to its webhook registered (it lists every pod first).
    pub start_seconds: f64,
    /// Removing the run: maintenance, webhook registration, requests, pods, nodes.
    pub clean_up_seconds: f64,
    /// Whether `Drained=True` was seen before giving up.
    pub drained: bool,
    /// From the NodeMaintenance create to `Drained=True` (or to giving up).
    pub drain_seconds: f64,
    pub pods_evicted: usize,
    pub pods_remaining: usize,
    pub evictions_per_second: f64,
    pub evictord_peak_rss_bytes: u64,
    pub evictord_rss_bytes: u64,
    /// kube-apiserver requests during the run (its `apiserver_request_total`, all clients) per
    /// pod evicted, by `VERB resource[/subresource] code`, largest first (a 409/422 is a write
    /// refused because the object had changed).
    pub api_requests_per_pod: Vec<(String, f64)>,
    /// Admission webhook calls kube-apiserver made during the run per pod evicted, by webhook.
    pub webhook_calls_per_pod: Vec<(String, f64)>,
    /// Every request kube-apiserver served during the run (all series, all clients), minus the
    /// benchmark's own polls, per pod evicted.
    pub api_requests_per_pod_total: f64,
    /// The writes among them (POST, PUT, PATCH, DELETE, DELETECOLLECTION, APPLY).
    pub api_writes_per_pod: f64,
    /// The benchmark's own requests during the run (status polls, pod counts), taken out above.
    pub benchmark_requests: u64,
    /// CPU used over the drain, in cores (1.0 = one CPU busy the whole time).
    pub cpu_cores: CpuShare,
}

/// CPU used over the drain by each process, in cores; `None` when the process was not found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CpuShare {
    pub kube_apiserver: Option<f64>,
    pub etcd: Option<f64>,
    pub evictord: Option<f64>,
    /// CPUs of the machine (the share is cores ÷ this).
    pub machine_cpus: usize,
    /// Why a process was not found.
    pub note: Option<String>,
}

/// Part 4 results.
#[derive(Clone, Debug, Serialize)]
pub struct DrainResults {
    pub nodes: usize,
    pub pods_per_node: usize,
    pub evictord_flags: Vec<String>,
    pub give_up_seconds: u64,
    pub runs: Vec<DrainRun>,
    pub median_drain_seconds: f64,
    pub median_evictions_per_second: f64,
    pub median_peak_rss_bytes: f64,
}

async fn create_nodes(client: &Client, names: &[String], run: &str) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
        .map(|n| {
            let api = api.clone();
            async move {
                let node = support::fixtures::node(n).label(LABEL, run).build();
                api.create(&PostParams::default(), &node)
                    .await
                    .map(|_| ())
                    .map_err(|e| anyhow::anyhow!("creating node {n}: {e}"))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Runs part 4.
pub async fn run(s: &Settings) -> anyhow::Result<DrainResults> {
    let c = support::cluster().await;
    support::evictord::install_crds(c).await;
    let client = c.client().await;
    let mut runs = Vec::new();
    for k in 0..s.drain_runs {
        let r = drain_once(c, &client, s, k).await?;
        runs.push(r);
    }
    Ok(DrainResults {
        nodes: s.drain_nodes,
        pods_per_node: s.drain_pods_per_node,
        evictord_flags: support::evictord::FAST
            .iter()
            .map(|f| f.to_string())
            .collect(),
        give_up_seconds: GIVE_UP.as_secs(),
        median_drain_seconds: median(runs.iter().map(|r| r.drain_seconds)),
        median_evictions_per_second: median(runs.iter().map(|r| r.evictions_per_second)),
        median_peak_rss_bytes: median(runs.iter().map(|r| r.evictord_peak_rss_bytes as f64)),
        runs,
    })
}

/// One run: nodes and pods, a fresh evictord, the NodeMaintenance, the wait; then clean-up.
async fn drain_once(
    c: &support::TestCluster,
    client: &Client,
    s: &Settings,
    k: usize,
) -> anyhow::Result<DrainRun> {
    let (n, p) = (s.drain_nodes, s.drain_pods_per_node);
    let run = format!("run-{k}");
    let nodes: Vec<String> = (0..n).map(|i| format!("drain-{k}-{i:04}")).collect();
    create_nodes(client, &nodes, &run).await?;
    let ns = c.namespace("bench-drain").await;
    let t = Instant::now();
    let far = Instant::now() + Duration::from_secs(3600);
    let pods = create_pods(client, &ns, "p", 0..n * p, far, |name, i| {
        support::fixtures::pod(name).on_node(&nodes[i % n]).build()
    })
    .await?;
    let create_seconds = t.elapsed().as_secs_f64();
    eprintln!(
        "[drain] run {}/{}: {n} nodes, {} pods created in {create_seconds:.1}s",
        k + 1,
        s.drain_runs,
        pods.len()
    );
    let total = pods.len();
    drop(pods);

    let t = Instant::now();
    let e = support::Evictord::start(c, support::evictord::FAST).await;
    e.register_webhooks(c, "evictord").await;
    let start_seconds = t.elapsed().as_secs_f64();
    let pid = e
        .pid()
        .ok_or_else(|| anyhow::anyhow!("evictord has no pid"))?;

    let name = format!("bench-drain-{k}");
    let nm = support::fixtures::draining_maintenance(&name, LABEL, &run, "benchmark");
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let before = support::apiserver::counters(client).await?;
    let pods_in_cluster = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    let (apiserver_pid, etcd_pid, note) = control_plane_pids(c);
    let cpu = |pid: Option<u32>| pid.and_then(crate::loadgen::cpu_time);
    let cpu0 = [cpu(apiserver_pid), cpu(etcd_pid), cpu(Some(pid))];
    let t0 = Instant::now();
    api.create(&PostParams::default(), &nm).await?;
    let mut drained = false;
    let mut last_log = Instant::now();
    // The benchmark's own requests while the counters run: the `counters` scrape before, and
    // every poll below.
    let mut benchmark_requests = 1u64;
    while t0.elapsed() < GIVE_UP {
        tokio::time::sleep(POLL).await;
        benchmark_requests += 1;
        let Ok(nm) = api.get(&name).await else {
            continue;
        };
        if nm
            .status
            .as_ref()
            .is_some_and(|st| st.is_true(CONDITION_DRAINED))
        {
            drained = true;
            break;
        }
        if last_log.elapsed() >= Duration::from_secs(30) {
            last_log = Instant::now();
            benchmark_requests += 1;
            let left = pods_remaining(client, &ns).await.unwrap_or(usize::MAX);
            eprintln!(
                "[drain] {:.0}s: {left}/{total} pods remaining",
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let drain_seconds = t0.elapsed().as_secs_f64();
    let cpu1 = [cpu(apiserver_pid), cpu(etcd_pid), cpu(Some(pid))];
    let cores: Vec<Option<f64>> = cpu0
        .iter()
        .zip(&cpu1)
        .map(|(a, b)| Some(b.as_ref()?.saturating_sub(*a.as_ref()?).as_secs_f64() / drain_seconds))
        .collect();
    let cpu_cores = CpuShare {
        kube_apiserver: cores[0],
        etcd: cores[1],
        evictord: cores[2],
        machine_cpus: crate::machine::cpus(),
        note,
    };
    let after = support::apiserver::counters(client).await?;
    let evictord_peak_rss_bytes = status_bytes(pid, "VmHWM:")?;
    let evictord_rss_bytes = status_bytes(pid, "VmRSS:")?;
    let remaining = pods_remaining(client, &ns).await?;
    let evicted = total.saturating_sub(remaining);
    eprintln!(
        "[drain] {}: {evicted}/{total} pods evicted in {drain_seconds:.1}s ({:.0}/s), peak RSS {:.1} MiB",
        if drained { "Drained" } else { "gave up" },
        evicted as f64 / drain_seconds,
        evictord_peak_rss_bytes as f64 / 1048576.0
    );
    if !drained {
        eprintln!(
            "--- evictord log (tail) ---\n{}",
            support::control_plane::tail(&e.logs(), 40)
        );
    }
    let per_pod = |metric: &str| per_pod(&before, &after, metric, evicted);
    let api_requests_per_pod = per_pod(support::apiserver::REQUESTS);
    let webhook_calls_per_pod = per_pod(support::apiserver::WEBHOOK_CALLS);
    let (requests, writes) = request_totals(&before, &after);
    let per = |n: f64| n.max(0.0) / evicted.max(1) as f64;
    let api_requests_per_pod_total = per(requests - benchmark_requests as f64);
    let api_writes_per_pod = per(writes);
    eprintln!(
        "[drain] kube-apiserver: {api_requests_per_pod_total:.2} requests ({api_writes_per_pod:.2} writes) per evicted pod; CPU over the drain: kube-apiserver {}, etcd {}, evictord {} cores",
        fmt_cores(cpu_cores.kube_apiserver),
        fmt_cores(cpu_cores.etcd),
        fmt_cores(cpu_cores.evictord)
    );
    let t = Instant::now();
    clean_up(client, &api, &name, &ns, &run).await?;
    drop(e);
    let clean_up_seconds = t.elapsed().as_secs_f64();
    eprintln!("[drain] evictord ready in {start_seconds:.1}s, clean-up {clean_up_seconds:.1}s");
    Ok(DrainRun {
        pods: total,
        pods_in_cluster,
        create_seconds,
        start_seconds,
        clean_up_seconds,
        drained,
        drain_seconds,
        pods_evicted: evicted,
        pods_remaining: remaining,
        evictions_per_second: evicted as f64 / drain_seconds.max(1e-9),
        evictord_peak_rss_bytes,
        evictord_rss_bytes,
        api_requests_per_pod,
        webhook_calls_per_pod,
        api_requests_per_pod_total,
        api_writes_per_pod,
        benchmark_requests,
        cpu_cores,
    })
}

fn fmt_cores(c: Option<f64>) -> String {
    c.map_or("?".into(), |c| format!("{c:.2}"))
}

/// With evictord still running (it removes the maintenance's finalizer and the maintenance's
/// EvictionRequests): unregisters the webhooks (the bulk deletions that follow need no review),
/// deletes the maintenance and waits until it is gone, then removes whatever is left of the
/// run's EvictionRequests, its pods and its nodes.
async fn clean_up(
    client: &Client,
    api: &Api<NodeMaintenance>,
    name: &str,
    ns: &str,
    run: &str,
) -> anyhow::Result<()> {
    unregister_webhooks(client).await?;
    api.delete(name, &DeleteParams::default()).await?;
    let gone = Instant::now();
    while api.get_opt(name).await?.is_some() {
        anyhow::ensure!(
            gone.elapsed() < Duration::from_secs(120),
            "NodeMaintenance {name} was not deleted within 120s"
        );
        tokio::time::sleep(POLL).await;
    }
    delete_requests(client, ns).await?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Api::<Node>::all(client.clone())
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{LABEL}={run}")),
        )
        .await?;
    Ok(())
}

async fn pods_remaining(client: &Client, ns: &str) -> anyhow::Result<usize> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len())
}
