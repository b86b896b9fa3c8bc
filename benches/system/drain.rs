//! Part 4: a node maintenance drain on the real control plane (kube-apiserver v1.20 + etcd).
//!
//! N fake nodes with a common label, P pods per node bound by `spec.nodeName`
//! (`terminationGracePeriodSeconds: 0`, no interceptors, no PDBs), all created before a fresh
//! `evictord serve` (all controllers, the fast flags of the tests, webhook registered) starts;
//! then one NodeMaintenance with `stage: Drain` selecting the label (`matchExpressions` `Exists`).
//! Measured: the time from its creation until its status says `Drained=True` (polled every
//! 500 ms, so ±0.5 s; given up after 15 minutes, reporting the pods remaining), evictions per
//! second (pods evicted ÷ that time) and evictord's peak RSS (`VmHWM`) at the end. One run: it is
//! long.

use std::time::{Duration, Instant};

use evictord::api::{CONDITION_DRAINED, NodeMaintenance};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::json;

use crate::memory::{create_pods, status_bytes};
use crate::settings::Settings;
use crate::support;

const LABEL: &str = "bench.evictord.dev/drain";
const POLL: Duration = Duration::from_millis(500);
const GIVE_UP: Duration = Duration::from_secs(15 * 60);

/// Part 4 results (one run).
#[derive(Clone, Debug, Serialize)]
pub struct DrainResults {
    pub nodes: usize,
    pub pods_per_node: usize,
    pub pods: usize,
    pub create_seconds: f64,
    pub evictord_flags: Vec<String>,
    /// Whether `Drained=True` was seen before giving up.
    pub drained: bool,
    /// From the NodeMaintenance create to `Drained=True` (or to giving up).
    pub drain_seconds: f64,
    pub pods_evicted: usize,
    pub pods_remaining: usize,
    pub evictions_per_second: f64,
    pub evictord_peak_rss_bytes: u64,
    pub evictord_rss_bytes: u64,
    pub give_up_seconds: u64,
}

async fn pods_remaining(client: &Client, ns: &str) -> anyhow::Result<usize> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len())
}

async fn create_nodes(client: &Client, names: &[String]) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
        .map(|n| {
            let api = api.clone();
            async move {
                let node = support::fixtures::node(n).label(LABEL, "true").build();
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
    let (n, p) = (s.drain_nodes, s.drain_pods_per_node);
    let nodes: Vec<String> = (0..n).map(|i| format!("drain-{i:04}")).collect();
    create_nodes(&client, &nodes).await?;
    let ns = c.namespace("bench-drain").await;
    let t = Instant::now();
    let far = Instant::now() + Duration::from_secs(3600);
    let pods = create_pods(&client, &ns, "p", 0..n * p, far, |name, i| {
        support::fixtures::pod(name).on_node(&nodes[i % n]).build()
    })
    .await?;
    let create_seconds = t.elapsed().as_secs_f64();
    eprintln!(
        "[drain] {} nodes, {} pods created in {create_seconds:.1}s",
        n,
        pods.len()
    );
    let total = pods.len();
    drop(pods);

    let flags = support::evictord::FAST;
    let e = support::Evictord::start(c, flags).await;
    e.register_webhooks(c, "evictord").await;
    let pid = e
        .pid()
        .ok_or_else(|| anyhow::anyhow!("evictord has no pid"))?;

    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "bench-drain"},
        "spec": {
            "nodeSelector": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": LABEL, "operator": "Exists"}]}
            ]},
            "stage": "Drain",
            "reason": "benchmark",
        }
    }))?;
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let t0 = Instant::now();
    api.create(&PostParams::default(), &nm).await?;
    let mut drained = false;
    let mut last_log = Instant::now();
    while t0.elapsed() < GIVE_UP {
        tokio::time::sleep(POLL).await;
        let Ok(nm) = api.get("bench-drain").await else {
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
            let left = pods_remaining(&client, &ns).await.unwrap_or(usize::MAX);
            eprintln!(
                "[drain] {:.0}s: {left}/{total} pods remaining",
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let drain_seconds = t0.elapsed().as_secs_f64();
    let evictord_peak_rss_bytes = status_bytes(pid, "VmHWM:")?;
    let evictord_rss_bytes = status_bytes(pid, "VmRSS:")?;
    let remaining = pods_remaining(&client, &ns).await?;
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
    Ok(DrainResults {
        nodes: n,
        pods_per_node: p,
        pods: total,
        create_seconds,
        evictord_flags: flags.iter().map(|f| f.to_string()).collect(),
        drained,
        drain_seconds,
        pods_evicted: evicted,
        pods_remaining: remaining,
        evictions_per_second: evicted as f64 / drain_seconds.max(1e-9),
        evictord_peak_rss_bytes,
        evictord_rss_bytes,
        give_up_seconds: GIVE_UP.as_secs(),
    })
}
