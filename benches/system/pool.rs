//! Part 5 (issues 35 and 41): a node pool drained, and rolled, side by side with `kubectl drain`,
//! on the real control plane (kube-apiserver v1.20 + etcd + kube-controller-manager's workload, disruption and HPA
//! controllers), with the played scheduler and kubelet of `tests/support/pool/`.
//!
//! Each mode runs on a fresh pool (`EVICTORD_BENCH_POOL_NODES` nodes, the first
//! `EVICTORD_BENCH_POOL_DRAINED` drained, about `EVICTORD_BENCH_POOL_PODS` pods of the workload
//! mix `tests/support/pool/workloads.rs`), the *full* one or the *finishable* one (without the
//! 1-replica Deployments behind `minAvailable: 1`, on which `kubectl drain` alone waits forever):
//! - `kubectl-each`: the real `kubectl drain NODE` (`$EVICTORD_TOOLS`), node after node, the
//!   loop going on to the next node when a call fails (`|| continue`), each call with
//!   `--timeout=EVICTORD_BENCH_POOL_NODE_TIMEOUT`;
//! - `kubectl-all`: one `kubectl drain` of every drained node (it cordons them all first);
//! - the same two with `evictord+`: `evictord serve` (release build, the shipped defaults and
//!   `EVICTORD_BENCH_POOL_EVICTORD_FLAGS`) started on the settled pool, its webhooks registered
//!   (the Eviction API bridge among them); without it, no webhook is registered;
//! - `evictord+nodemaintenance`: one NodeMaintenance in stage Drain selecting the drained nodes;
//! - `script-each` (issue 41), with or without evictord: the script users write to roll a pool
//!   today, node after node `kubectl drain NODE`, the per-node step (`sleep
//!   EVICTORD_BENCH_POOL_STEP`, standing in for a reboot), `kubectl uncordon NODE`;
//! - `evictord+rollout` and `evictord+rollout-cordon-first`: `kubectl evictord rollout` of the
//!   drained nodes with `--max-unavailable EVICTORD_BENCH_POOL_MAX_UNAVAILABLE`, the same step as
//!   `--exec` (and `--cordon-first`). [`crate::pool_drive`] runs each.
//!
//! A mode's drain is stopped after `EVICTORD_BENCH_POOL_TIMEOUT` (plus the steps' time where it
//! runs them). Sampled every 100 ms from the played kubelet's watch caches from the drain's start
//! until the Deployments and StatefulSets are back (at most 2 minutes after the drain ended):
//! each workload's available pods against its replica count before the drain, and the pool's
//! nodes, cordoned, not Ready or held by a maintenance ([`crate::support::pool::measure`]). Also kube-apiserver's own
//! request counters and histograms over the same window, the CPU of kube-apiserver, etcd and
//! evictord, evictord's peak RSS, and with evictord what its EvictionRequests say (how long each
//! interceptor was active, the messages of the worst workload's requests). Raw samples, the
//! `kubectl` output and a plot per mode are written next to the report.
//!
//! kube-apiserver writes every request to its audit log while the part runs, and each mode's
//! requests are split by client ([`crate::pool_clients`], issue 44); before an evictord mode's
//! drain, an idle baseline of `EVICTORD_BENCH_POOL_IDLE` seconds counts evictord's requests
//! with nothing to do.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use evictord::api::EvictionRequest;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::cluster::{delete_requests, unregister_webhooks};
use crate::pool_clients::{ClientFigures, Window};
use crate::pool_drive::{Run, delete_maintenances, delete_rollout, drain_with_maintenance};
use crate::pool_mode::{Drainer, Mode};
use crate::pool_results::{ModeOutcome, ModeResult, PoolResults, RowFigures, Worst};
use crate::settings::{PoolSettings, Settings};
use crate::support;
use crate::support::pool::measure::{Samples, WorkloadFigures};
use crate::support::pool::schedule::Timing;
use crate::support::pool::workloads::{self, Kind, WORKLOAD_LABEL};
use crate::support::pool::{DRAIN_LABEL, KUBECTL_DRAIN_FLAGS, Pool, Spec};

/// How long the pool may take to settle before a mode.
const SETTLE: Duration = Duration::from_secs(600);
/// How long the Deployments and StatefulSets may take to come back after a drain.
const RESTORE: Duration = Duration::from_secs(120);

/// Runs part 5; `progress` gets the results after each mode (the report is written then).
pub async fn run(
    s: &Settings,
    dir: &Path,
    progress: &mut dyn FnMut(&PoolResults) -> anyhow::Result<()>,
) -> anyhow::Result<PoolResults> {
    let p = &s.pool;
    // Every request to the audit log for the split by client, before kube-controller-manager
    // starts (kube-apiserver restarts to take it up; main turns it off after the part).
    let audit = support::control_plane::cluster()
        .await
        .set_request_audit(true)
        .await;
    // As in every real cluster: an EvictionRequest goes with its pod, collected by the
    // garbage collector within the kube-controller-manager of the workload controllers (one
    // discovery cache for all of them), which starts with the CRDs installed.
    support::evictord::install_crds(support::control_plane::cluster().await).await;
    if p.garbage_collector {
        support::control_plane::set_garbage_collector_within_controller_manager();
    }
    // The endpoint controllers too: issue 43's figure watches the Services' endpoints.
    let c = support::control_plane::cluster_with_endpoint_controllers().await;
    let client = c.client().await;
    unregister_webhooks(&client).await?;
    let mut results = PoolResults {
        nodes: p.nodes,
        drained: p.drained,
        pods: p.pods,
        timeout_seconds: p.timeout.as_secs_f64(),
        node_timeout_seconds: p.node_timeout.as_secs_f64(),
        step_seconds: p.step.as_secs_f64(),
        max_unavailable: p.max_unavailable.clone(),
        start_delay_seconds: p.start_delay.as_secs_f64(),
        grace_seconds: p.grace.as_secs_f64(),
        hpa_sync_seconds: p.hpa_sync.as_secs_f64(),
        garbage_collector: p.garbage_collector,
        kubectl_flags: KUBECTL_DRAIN_FLAGS.iter().map(|f| f.to_string()).collect(),
        evictord_flags: p.evictord_flags.clone(),
        served: p.served.clone(),
        mix: workloads::MIX.to_vec(),
        modes: Vec::new(),
    };
    for (k, mode) in p.modes.iter().enumerate() {
        eprintln!("[pool] mode {}/{}: {}", k + 1, p.modes.len(), mode.id());
        let result = run_mode(c, &client, p, *mode, k, dir, audit.as_deref())
            .await
            .map_err(|e| format!("{e:#}"));
        if let Err(e) = &result {
            eprintln!("[pool] {} failed: {e}", mode.id());
            // Whatever the failed mode left registered must not reach the next one.
            let _ = unregister_webhooks(&client).await;
        }
        results.modes.push(ModeOutcome {
            id: mode.id(),
            result,
        });
        progress(&results)?;
    }
    Ok(results)
}

async fn run_mode(
    c: &support::TestCluster,
    client: &Client,
    p: &PoolSettings,
    mode: Mode,
    k: usize,
    dir: &Path,
    audit: Option<&Path>,
) -> anyhow::Result<ModeResult> {
    let id = format!("pool{k}");
    if let Some(log) = audit {
        // Each mode reads its own requests: the log starts empty (kube-apiserver appends).
        std::fs::OpenOptions::new()
            .write(true)
            .open(log)
            .and_then(|f| f.set_len(0))
            .map_err(|e| anyhow::anyhow!("truncating the audit log {}: {e}", log.display()))?;
    }
    let ns = c.namespace("bench-pool").await;
    let spec = Spec {
        nodes: p.nodes,
        drained: p.drained,
        pods: p.pods,
        variant: mode.variant,
        timing: Timing {
            start_delay: p.start_delay,
            grace: p.grace,
        },
        served: mode.served(&p.served),
        at_least_one: false,
    };
    let start_evictord = || async {
        let t = Instant::now();
        let flags: Vec<&str> = p.evictord_flags.iter().map(String::as_str).collect();
        let e = support::Evictord::start(c, &flags).await;
        e.register_webhooks(c, "evictord").await;
        (e, t.elapsed().as_secs_f64())
    };
    // With `+endpoints`, evictord runs before the pool is created, as it would be installed
    // before the workloads: its pod webhook gives the pods that declare the interceptor their
    // readiness gate (a pod created without it is only delayed, never taken out of its endpoints).
    let early = if mode.endpoints {
        Some(start_evictord().await)
    } else {
        None
    };
    let t = Instant::now();
    let pool = Pool::create(c, client, &ns, &id, &spec).await?;
    let create_seconds = t.elapsed().as_secs_f64();
    let settle_seconds = pool.wait_settled(SETTLE).await?.as_secs_f64();
    eprintln!(
        "[pool] {} pods of {} workloads on {} nodes settled in {settle_seconds:.0} s",
        pool.pod_count(),
        pool.workloads.len(),
        pool.nodes.len()
    );
    let (evictord, evictord_start_seconds) = match early {
        Some((e, seconds)) => (Some(e), Some(seconds)),
        None if mode.evictord => {
            let (e, seconds) = start_evictord().await;
            (Some(e), Some(seconds))
        }
        None => (None, None),
    };
    // The idle baseline: evictord on the settled pool with nothing to do.
    let idle = if evictord.is_some() && audit.is_some() && !p.idle.is_zero() {
        let from = SystemTime::now();
        tokio::time::sleep(p.idle).await;
        Some(Window {
            from,
            to: SystemTime::now(),
        })
    } else {
        None
    };
    let evictord_pid = evictord.as_ref().and_then(|e| e.pid());
    let (apiserver_pid, etcd_pid, _) = crate::processes::control_plane_pids(c);
    let cpu = |pid: Option<u32>| pid.and_then(crate::loadgen::cpu_time);
    let cpu0 = [cpu(apiserver_pid), cpu(etcd_pid), cpu(evictord_pid)];
    let window_from = SystemTime::now();
    let counters0 = support::apiserver::counters(client).await?;
    let histograms0 = crate::prom::scrape_apiserver(client).await;
    let deadline = p.mode_timeout(mode.drainer);
    let sampler = pool
        .sample(deadline + RESTORE + Duration::from_secs(60))
        .await?;
    let request_watch = crate::pool_requests::RequestWatch::start(client, &ns).await;
    let endpoints_timeline = support::endpoints::Timeline::start_namespace(client, &ns).await;
    let behind_services = crate::pool_endpoints::watched(&pool);
    let t0 = Instant::now();
    let log = dir.join(format!("pool-{}-kubectl.log", mode.slug()));
    // Each call of the mode appends: start from an empty log, not an earlier run's.
    if log.exists() {
        std::fs::remove_file(&log)?;
    }
    let run = Run {
        c,
        p,
        t0,
        deadline,
        log: &log,
    };
    let (completed, calls) = match mode.drainer {
        Drainer::KubectlEach => {
            let mut calls = Vec::new();
            for node in &pool.drained {
                if t0.elapsed() >= deadline {
                    break;
                }
                calls.push(run.kubectl_drain(std::slice::from_ref(node)).await?);
            }
            let all =
                calls.len() == pool.drained.len() && calls.iter().all(|c| c.exit_code == Some(0));
            (all, calls)
        }
        Drainer::KubectlAll => {
            let call = run.kubectl_drain(&pool.drained).await?;
            (call.exit_code == Some(0), vec![call])
        }
        Drainer::NodeMaintenance => (
            drain_with_maintenance(client, &ns, &id, deadline).await?,
            Vec::new(),
        ),
        Drainer::ScriptEach => run.script_each(&pool.drained).await?,
        Drainer::Rollout | Drainer::RolloutCordonFirst => {
            let selector = format!("{DRAIN_LABEL}={id}");
            let cordon_first = mode.drainer == Drainer::RolloutCordonFirst;
            let call = run
                .rollout(&ns, &selector, &pool.drained, cordon_first)
                .await?;
            (call.exit_code == Some(0), vec![call])
        }
    };
    let completion_seconds = t0.elapsed().as_secs_f64();
    let stopped_at_timeout = !completed && completion_seconds >= deadline.as_secs_f64();
    eprintln!(
        "[pool] {}: {} after {completion_seconds:.0} s",
        mode.id(),
        if completed {
            "completed"
        } else {
            "not completed"
        }
    );
    let restore = pool.wait_restored(RESTORE).await;
    let endpoints = crate::pool_endpoints::figures(
        &endpoints_timeline,
        &behind_services,
        spec.served.iter().any(|s| s == workloads::ENDPOINTS),
    );
    drop(endpoints_timeline);
    let restore_seconds = t0.elapsed().as_secs_f64() - completion_seconds;
    let samples = sampler.stop().await;
    let window = t0.elapsed().as_secs_f64();
    let cpu1 = [cpu(apiserver_pid), cpu(etcd_pid), cpu(evictord_pid)];
    let cores: Vec<Option<f64>> = cpu0
        .iter()
        .zip(&cpu1)
        .map(|(a, b)| Some(b.as_ref()?.saturating_sub(*a.as_ref()?).as_secs_f64()))
        .collect();
    let counters1 = support::apiserver::counters(client).await?;
    let histograms1 = crate::prom::scrape_apiserver(client).await;
    let request_window = Window {
        from: window_from,
        to: SystemTime::now(),
    };
    let evicted = samples.departures.len();
    let (requests, writes) = crate::prom::request_totals(&counters0, &counters1);
    let per = |n: f64| n.max(0.0) / evicted.max(1) as f64;
    let (requests_figures, pod_classes) = if mode.evictord {
        let (figures, classes) = request_watch.stop().await;
        (Some(figures), Some(classes))
    } else {
        (None, None)
    };
    let evictord_peak_rss_bytes =
        evictord_pid.and_then(|pid| crate::processes::status_bytes(pid, "VmHWM:").ok());
    let all = |w: &WorkloadFigures| matches!(w.tracked.kind, Kind::Deployment | Kind::StatefulSet);
    let worst_deployment = worst(&samples, client, &ns, mode.evictord, |w| w.tracked.goal).await;
    let worst = worst(&samples, client, &ns, mode.evictord, all).await;
    let mut files = crate::pool_files::write(
        dir,
        &mode,
        &samples,
        [worst.as_ref(), worst_deployment.as_ref()],
        completion_seconds,
    )?;
    if mode.drainer != Drainer::NodeMaintenance {
        files.push(file_name(&log));
    }
    let node_rolls = crate::pool_nodes::rolls(&samples, &pool.drained);
    let roll_summary = crate::pool_nodes::summary(&node_rolls, completion_seconds);
    let result = ModeResult {
        mode,
        id: mode.id(),
        pods: pool.pod_count(),
        create_seconds,
        settle_seconds,
        evictord_start_seconds,
        completed,
        completion_seconds,
        stopped_at_timeout,
        calls,
        restored: restore.is_ok(),
        restore_seconds,
        samples: samples.samples,
        sampled_seconds: samples.seconds,
        rows: row_figures(&samples, &pool),
        deployment_replica_seconds: kind_sum(&samples, Kind::Deployment),
        deployment_min_ratio: samples
            .workloads
            .iter()
            .filter(|w| w.tracked.kind == Kind::Deployment)
            .map(|w| w.min_ratio)
            .fold(1.0, f64::min),
        statefulset_replica_seconds: kind_sum(&samples, Kind::StatefulSet),
        floors_broken: samples
            .floors_broken()
            .iter()
            .map(|w| w.tracked.name.clone())
            .collect(),
        pods_left_on_drained: samples.left_on_drained.clone(),
        daemonset_pods_left_on_drained: samples.daemonset_pods_left_on_drained,
        pods_evicted: evicted,
        pods_at_start: samples.pods_on_drained_at_start,
        moves_per_pod: samples.moves_per_pod(),
        most_unavailable: samples.nodes.most_unavailable.clone(),
        most_held: samples.nodes.most_held.clone(),
        allowed_unavailable: mode
            .drainer
            .is_rollout()
            .then(|| p.allowed_unavailable().ok())
            .flatten(),
        step_seconds: mode.drainer.rolls().then_some(p.step.as_secs_f64()),
        node_rolls,
        roll_summary,
        last_departures: samples.departures.iter().rev().take(5).cloned().collect(),
        endpoints,
        api_requests_per_evicted_pod: per(requests),
        api_writes_per_evicted_pod: per(writes),
        api_requests_top: crate::prom::per_pod(
            &counters0,
            &counters1,
            support::apiserver::REQUESTS,
            evicted,
        )
        .into_iter()
        .take(12)
        .collect(),
        webhook_calls_per_evicted_pod: crate::prom::per_pod(
            &counters0,
            &counters1,
            support::apiserver::WEBHOOK_CALLS,
            evicted,
        ),
        apiserver_histograms: crate::pool_clients::top_histograms(&histograms0, &histograms1),
        kube_apiserver_cpu_cores: cores[0].map(|s| s / window),
        etcd_cpu_cores: cores[1].map(|s| s / window),
        evictord_cpu_seconds: cores[2],
        evictord_cpu_cores: cores[2].map(|s| s / window),
        evictord_peak_rss_bytes,
        requests: requests_figures,
        clients: None,
        worst,
        worst_deployment,
        played: pool.played.stats.summary(),
        files,
        clean_up_seconds: 0.0,
    };
    eprintln!(
        "[pool] {}: Deployments {:.1} replica-s below desired (min {:.2}), StatefulSets {:.1}, {} PDB floors broken, {} pods left on drained nodes, {} evicted of {} there at the start, at most {} nodes cordoned or NotReady at once{}, {:.1} kube-apiserver requests per evicted pod",
        result.id,
        result.deployment_replica_seconds,
        result.deployment_min_ratio,
        result.statefulset_replica_seconds,
        result.floors_broken.len(),
        result.pods_left_on_drained.len(),
        evicted,
        result.pods_at_start,
        result.most_unavailable.count,
        result.most_held.as_ref().map_or(String::new(), |h| format!(
            " ({} held by maintenances)",
            h.count
        )),
        result.api_requests_per_evicted_pod
    );
    let t = Instant::now();
    clean_up(client, &ns, pool, evictord, mode).await?;
    c.delete_namespace(&ns).await;
    let clean_up_seconds = t.elapsed().as_secs_f64();
    // Read once evictord and the played kubelet stopped: kube-apiserver logs a watch when it
    // ends (a moment after its client went).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let clients = audit.map(|log| {
        ClientFigures::read(
            log,
            request_window,
            idle,
            evicted,
            result.requests.as_ref().map(|r| r.intercepted_pods),
            pod_classes.as_ref(),
        )
    });
    if let Some(f) = &clients {
        eprintln!("[pool] {}: {}", result.id, f.summary());
    }
    Ok(ModeResult {
        clean_up_seconds,
        clients,
        ..result
    })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Σ replica-seconds below desired over the workloads of `kind`.
fn kind_sum(samples: &Samples, kind: Kind) -> f64 {
    samples
        .workloads
        .iter()
        .filter(|w| w.tracked.kind == kind)
        .map(|w| w.availability.unavailable_replica_seconds)
        .sum()
}

/// Each row's figures.
fn row_figures(samples: &Samples, pool: &Pool) -> Vec<RowFigures> {
    let moved: std::collections::BTreeSet<&str> = samples
        .departures
        .iter()
        .map(|d| d.workload.as_str())
        .collect();
    workloads::MIX
        .iter()
        .filter_map(|row| {
            let ws: Vec<_> = samples
                .workloads
                .iter()
                .filter(|w| w.tracked.row == row.name)
                .collect();
            let worst = ws.iter().max_by(|a, b| {
                a.availability
                    .unavailable_replica_seconds
                    .total_cmp(&b.availability.unavailable_replica_seconds)
            })?;
            let carried = pool
                .workloads
                .iter()
                .find(|w| w.row.name == row.name)
                .map(|w| w.interceptors.clone())
                .unwrap_or_default();
            Some(RowFigures {
                row: row.name.into(),
                what: row.what.into(),
                kind: row.kind,
                declared: row.interceptors.iter().map(|i| i.to_string()).collect(),
                carried,
                goal: ws.iter().any(|w| w.tracked.goal),
                workloads: ws.len(),
                moved: ws
                    .iter()
                    .filter(|w| moved.contains(w.tracked.name.as_str()))
                    .count(),
                replica_seconds: ws
                    .iter()
                    .map(|w| w.availability.unavailable_replica_seconds)
                    .sum(),
                min_ratio: ws.iter().map(|w| w.min_ratio).fold(1.0, f64::min),
                worst: worst.tracked.name.clone(),
                with_loss: ws
                    .iter()
                    .filter(|w| w.availability.unavailable_replica_seconds > 0.0)
                    .count(),
                floors_broken: ws
                    .iter()
                    .filter(|w| w.availability.floor_broken_samples > 0)
                    .count(),
            })
        })
        .collect()
}

/// Of the workloads `of` keeps whose pods moved, the one that lost the most replica-seconds,
/// with its EvictionRequests' messages when evictord ran.
async fn worst(
    samples: &Samples,
    client: &Client,
    ns: &str,
    evictord: bool,
    of: impl Fn(&WorkloadFigures) -> bool,
) -> Option<Worst> {
    let moved: std::collections::BTreeSet<&str> = samples
        .departures
        .iter()
        .map(|d| d.workload.as_str())
        .collect();
    let w = samples
        .workloads
        .iter()
        .filter(|w| of(w))
        .filter(|w| moved.contains(w.tracked.name.as_str()))
        .max_by(|a, b| {
            a.availability
                .unavailable_replica_seconds
                .total_cmp(&b.availability.unavailable_replica_seconds)
                .then(b.min_ratio.total_cmp(&a.min_ratio))
        })?;
    let mut messages = Vec::new();
    if evictord {
        let api: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
        let selector = format!("{WORKLOAD_LABEL}={}", w.tracked.name);
        if let Ok(list) = api.list(&ListParams::default().labels(&selector)).await {
            for r in list.items {
                for i in r.status.iter().flat_map(|s| s.interceptors.iter()) {
                    let m = format!("{}: {}", i.name, i.message.as_deref().unwrap_or_default());
                    if !messages.contains(&m) {
                        messages.push(m);
                    }
                }
            }
        }
    }
    let desired = f64::from(w.tracked.desired.max(1));
    Some(Worst {
        workload: w.tracked.name.clone(),
        row: w.tracked.row.clone(),
        desired: w.tracked.desired,
        replica_seconds: w.availability.unavailable_replica_seconds,
        min_available: w.availability.min_available,
        messages,
        ratio: w
            .availability
            .changes
            .iter()
            .map(|(t, a)| (*t, f64::from(*a) / desired))
            .collect(),
    })
}

/// Stops the drain's leftovers: the webhooks, the NodeMaintenance (named after the namespace)
/// or what a rollout (named after it too) left (evictord still running, so it removes their
/// finalizers), evictord, the EvictionRequests, the pool.
async fn clean_up(
    client: &Client,
    ns: &str,
    pool: Pool,
    evictord: Option<support::Evictord>,
    mode: Mode,
) -> anyhow::Result<()> {
    unregister_webhooks(client).await?;
    if mode.drainer == Drainer::NodeMaintenance {
        let named = ListParams::default().fields(&format!("metadata.name={ns}"));
        delete_maintenances(client, named).await?;
    }
    if mode.drainer.is_rollout() {
        delete_rollout(client, ns).await?;
    }
    drop(evictord);
    delete_requests(client, ns).await?;
    pool.remove().await
}
