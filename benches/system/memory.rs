//! Part 2: memory. Pods are created through the API of a real control plane (bounded, parallel
//! creator) up to each level N; at each level a fresh `evictord serve` (all controllers, caches
//! of every resource) is started, becomes ready (every store has received its initial list, so
//! the pod cache holds all N pods), settles, and its RSS is read from `/proc/PID/status`. The
//! per-pod cost is the least-squares slope of RSS over N; levels the control plane could not
//! reach in time are extrapolated from that slope and labelled as such.
//!
//! Beyond what the control plane holds, the pods are replayed ([`crate::replay`]): a recording
//! of real pods from this control plane, served as the cluster-wide pod list by a proxy in
//! front of it, at each level of `EVICTORD_BENCH_REPLAY_PODS` and at the largest real level
//! (so the report can compare the replayed feed with the real one at the same size).
//!
//! With `EVICTORD_BENCH_BASELINE`, the idle RSS (empty cluster, all controllers) of this build
//! and of the baseline binary are measured first, alternating, started the same way.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use serde::Serialize;

use crate::cluster::{bench_pod, create_pods};
use crate::processes::status_bytes;
use crate::settings::Settings;
use crate::{replay, support};

/// Upper bound on the time spent creating pods for the memory part.
const CREATE_BUDGET: Duration = Duration::from_secs(180);
/// Pod counts the issue asks about beyond what is measured; extrapolated when not reached.
const EXTRAPOLATE: [usize; 3] = [10_000, 50_000, 150_000];

/// RSS at one level.
#[derive(Clone, Debug, Serialize)]
pub struct Level {
    pub pods: usize,
    pub rss_bytes: Vec<u64>,
    pub median_rss_bytes: u64,
    /// Peak RSS (`VmHWM`, which includes the initial list), median of the runs.
    pub median_peak_rss_bytes: u64,
    /// (median RSS − idle median RSS) / pods.
    pub bytes_per_pod: Option<f64>,
}

/// RSS with the pod cache fed by the replay.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayResults {
    pub levels: Vec<Level>,
    /// Median seconds from start to ready (every cache listed), per level.
    pub median_ready_seconds: Vec<(usize, f64)>,
    pub recorded_pods: usize,
    pub recording_bytes: usize,
    pub recording_path: String,
    /// Replayed median RSS ÷ real median RSS at the largest real level.
    pub replay_vs_real: Option<(usize, f64)>,
}

/// Part 2 results.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryResults {
    pub levels: Vec<Level>,
    pub idle_rss_bytes: u64,
    /// Least-squares slope of median RSS over cached pods.
    pub bytes_per_pod_slope: Option<f64>,
    /// Between the two largest levels (free of the one-time costs of a first list).
    pub bytes_per_pod_marginal: Option<f64>,
    /// RSS predicted as idle + slope × N, for the levels not measured.
    pub extrapolated: Vec<(usize, u64)>,
    pub pods_created: usize,
    pub create_seconds: f64,
    pub create_per_second: f64,
    pub requested_levels: Vec<usize>,
    pub note: Option<String>,
    pub replay: Option<Result<ReplayResults, String>>,
    /// Idle RSS of this build and of `EVICTORD_BENCH_BASELINE`, started the same way.
    pub idle_vs_baseline: Option<Result<IdlePair, String>>,
}

/// Idle RSS (connected, all controllers, empty cluster) of this build and of the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct IdlePair {
    pub evictord_rss_bytes: Vec<u64>,
    pub baseline_rss_bytes: Vec<u64>,
    pub median_evictord_rss_bytes: u64,
    pub median_baseline_rss_bytes: u64,
}

/// Measures [`IdlePair`]: `runs` times this build, then the baseline.
async fn idle_pair(
    c: &support::TestCluster,
    baseline: &Path,
    runs: usize,
) -> anyhow::Result<IdlePair> {
    use crate::evictord_process::{Binary, start_evictord};
    let scratch = c.dir.join("bench-idle");
    let cert_dir = scratch.join("certs");
    std::fs::create_dir_all(&cert_dir)?;
    let bundle = evictord::tls::generate(
        &evictord::tls::serving_names(None, None),
        Duration::from_secs(7 * 86400),
        jiff::Timestamp::now(),
    )?;
    evictord::tls::write_dir(&cert_dir, &bundle)?;
    let baseline = Binary {
        name: "baseline",
        path: baseline,
    };
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    for run in 0..runs {
        for binary in [Binary::this_build(), baseline] {
            let server =
                start_evictord(binary, &cert_dir, &scratch, Some(&c.kubeconfig), true).await?;
            let (rss, _) = settled_rss(server.child.id()).await?;
            drop(server);
            eprintln!(
                "[memory] idle, {} run {}/{runs}: RSS {:.1} MiB",
                binary.name,
                run + 1,
                rss as f64 / 1048576.0
            );
            if binary.name == "baseline" {
                theirs.push(rss);
            } else {
                mine.push(rss);
            }
        }
    }
    Ok(IdlePair {
        median_evictord_rss_bytes: median_u64(&mine),
        median_baseline_rss_bytes: median_u64(&theirs),
        evictord_rss_bytes: mine,
        baseline_rss_bytes: theirs,
    })
}

/// The pid of the `evictord serve` listening on `webhook_port` (found by its command line).
pub fn pid_of(webhook_port: u16) -> anyhow::Result<u32> {
    let needle = format!("--webhook-addr=127.0.0.1:{webhook_port}");
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.contains(&needle.as_bytes()) && args.contains(&b"serve".as_slice()) {
            return Ok(pid);
        }
    }
    anyhow::bail!("no evictord process listening on port {webhook_port}")
}

pub fn median_u64(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    (den > 0.0).then(|| num / den)
}

/// RSS and peak RSS of a freshly started, ready and settled `evictord serve`.
async fn fresh_rss(c: &support::TestCluster) -> anyhow::Result<(u64, u64)> {
    let e = support::Evictord::start(c, &[]).await;
    let pid = pid_of(e.webhook_port)?;
    let rss = settled_rss(pid).await?;
    drop(e);
    Ok(rss)
}

/// RSS and peak RSS of a ready process after a 3 s settle (ready means every store has its
/// initial list; the list buffers are freed meanwhile).
async fn settled_rss(pid: u32) -> anyhow::Result<(u64, u64)> {
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok((status_bytes(pid, "VmRSS:")?, status_bytes(pid, "VmHWM:")?))
}

/// Pods recorded for the replay.
const RECORDED: usize = 1000;
/// How long a replayed level may take to become ready.
const REPLAY_READY: Duration = Duration::from_secs(300);

/// RSS, peak RSS and seconds to ready of a fresh `evictord serve` whose pod cache is fed by a
/// replay of `pods` pods.
async fn replay_rss(
    c: &support::TestCluster,
    client: &Client,
    recording: &std::sync::Arc<replay::Recording>,
    pods: usize,
) -> anyhow::Result<(u64, u64, f64)> {
    let proxy = replay::start(client.clone(), recording.clone(), pods, &c.dir).await?;
    let started = Instant::now();
    let e = support::Evictord::spawn(
        c,
        &[],
        support::evictord::SpawnOptions {
            kubeconfig: Some(proxy.kubeconfig.clone()),
            ..Default::default()
        },
    );
    let pid = e
        .pid()
        .ok_or_else(|| anyhow::anyhow!("evictord did not start"))?;
    anyhow::ensure!(
        support::evictord::readyz_within(e.probe_port, REPLAY_READY).await,
        "evictord fed {pods} replayed pods was not ready within {}s:\n{}",
        REPLAY_READY.as_secs(),
        support::control_plane::tail(&e.logs(), 20)
    );
    let ready = started.elapsed().as_secs_f64();
    let (rss, peak) = settled_rss(pid).await?;
    drop(e);
    drop(proxy);
    Ok((rss, peak, ready))
}

/// The replayed levels: `counts` and the largest real level (for the comparison).
async fn run_replay(
    s: &Settings,
    c: &support::TestCluster,
    client: &Client,
    ns: &str,
    real: &[Level],
    idle: Option<u64>,
    report_dir: &Path,
) -> anyhow::Result<ReplayResults> {
    let recording = std::sync::Arc::new(replay::record(client, ns, RECORDED, report_dir).await?);
    let largest_real = real.iter().filter(|l| l.pods > 0).max_by_key(|l| l.pods);
    let mut counts = s.replay_pod_counts.clone();
    counts.extend(largest_real.map(|l| l.pods));
    counts.sort_unstable();
    counts.dedup();
    let mut levels = Vec::new();
    let mut ready_times = Vec::new();
    for &n in &counts {
        let (mut rss, mut peaks, mut ready) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..s.runs {
            let (r, p, t) = replay_rss(c, client, &recording, n).await?;
            eprintln!(
                "[memory] {n} replayed pods cached, run {}/{}: RSS {:.1} MiB, ready in {t:.1} s",
                run + 1,
                s.runs,
                r as f64 / 1048576.0
            );
            rss.push(r);
            peaks.push(p);
            ready.push((t * 1000.0) as u64);
        }
        let median_rss = median_u64(&rss);
        levels.push(Level {
            pods: n,
            median_rss_bytes: median_rss,
            median_peak_rss_bytes: median_u64(&peaks),
            rss_bytes: rss,
            bytes_per_pod: idle.map(|i| (median_rss as f64 - i as f64) / n as f64),
        });
        ready_times.push((n, median_u64(&ready) as f64 / 1000.0));
    }
    let replay_vs_real = largest_real.and_then(|r| {
        levels.iter().find(|l| l.pods == r.pods).map(|l| {
            (
                r.pods,
                l.median_rss_bytes as f64 / r.median_rss_bytes as f64,
            )
        })
    });
    Ok(ReplayResults {
        levels,
        median_ready_seconds: ready_times,
        recorded_pods: recording.items.len(),
        recording_bytes: recording.bytes,
        recording_path: recording.path.display().to_string(),
        replay_vs_real,
    })
}

/// Runs part 2.
pub async fn run(s: &Settings, report_dir: &Path) -> anyhow::Result<MemoryResults> {
    let c = support::cluster().await;
    support::evictord::install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("bench-mem").await;
    let mut counts = s.pod_counts.clone();
    counts.sort_unstable();
    counts.dedup();
    let started = Instant::now();
    let deadline = started + CREATE_BUDGET;
    // The parts before this one leave no pods behind; should one have failed half-way, its
    // pods count as cached ones (evictord caches every pod of the cluster).
    let existing = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    if existing > 0 {
        eprintln!("[memory] {existing} pods were already in the cluster");
    }
    let idle_vs_baseline = match &s.baseline {
        Some(b) if existing == 0 => {
            Some(idle_pair(c, b, s.runs).await.map_err(|e| format!("{e:#}")))
        }
        Some(_) => Some(Err(format!(
            "not measured: {existing} pods were already in the cluster"
        ))),
        None => None,
    };
    let mut created = existing;
    let mut create_time = Duration::ZERO;
    let mut levels = Vec::new();
    let mut note = None;
    for &n in &counts {
        if n > created {
            let t = Instant::now();
            let made = create_pods(
                &client,
                &ns,
                "web-7d9c6b5f4",
                created..n,
                deadline,
                bench_pod,
            )
            .await?
            .len();
            create_time += t.elapsed();
            created += made;
            let rate = (created - existing) as f64 / create_time.as_secs_f64();
            eprintln!("[memory] {created} pods in the cluster ({rate:.0} created/s)");
            if created < n {
                note = Some(format!(
                    "the control plane took pods at {rate:.0}/s: only {created} of {n} were created within the {}s budget; larger levels are extrapolated",
                    CREATE_BUDGET.as_secs()
                ));
            }
        }
        let mut rss = Vec::new();
        let mut peaks = Vec::new();
        for run in 0..s.runs {
            let (r, peak) = fresh_rss(c).await?;
            peaks.push(peak);
            eprintln!(
                "[memory] {created} pods cached, run {}/{}: RSS {:.1} MiB",
                run + 1,
                s.runs,
                r as f64 / 1048576.0
            );
            rss.push(r);
        }
        levels.push(Level {
            pods: created,
            median_rss_bytes: median_u64(&rss),
            median_peak_rss_bytes: median_u64(&peaks),
            rss_bytes: rss,
            bytes_per_pod: None,
        });
        if created < n {
            break;
        }
    }
    let idle = levels
        .iter()
        .find(|l| l.pods == 0)
        .map(|l| l.median_rss_bytes);
    let base = idle.unwrap_or_else(|| levels.first().map_or(0, |l| l.median_rss_bytes));
    for l in &mut levels {
        if l.pods > 0 && idle.is_some() {
            l.bytes_per_pod = Some((l.median_rss_bytes as f64 - base as f64) / l.pods as f64);
        }
    }
    let points: Vec<(f64, f64)> = levels
        .iter()
        .map(|l| (l.pods as f64, l.median_rss_bytes as f64))
        .collect();
    let per_pod = slope(&points);
    let marginal = match levels.as_slice() {
        [.., a, b] if b.pods > a.pods => {
            Some((b.median_rss_bytes as f64 - a.median_rss_bytes as f64) / (b.pods - a.pods) as f64)
        }
        _ => None,
    };
    let replay = if s.replay_pod_counts.is_empty() {
        None
    } else {
        Some(
            run_replay(s, c, &client, &ns, &levels, idle, report_dir)
                .await
                .map_err(|e| format!("{e:#}")),
        )
    };
    let replayed: Vec<usize> = match &replay {
        Some(Ok(r)) => r.levels.iter().map(|l| l.pods).collect(),
        _ => Vec::new(),
    };
    let max_measured = levels.iter().map(|l| l.pods).max().unwrap_or(0);
    let extrapolated = per_pod
        .map(|b| {
            EXTRAPOLATE
                .iter()
                .filter(|&&n| n > max_measured && !replayed.contains(&n))
                .map(|&n| (n, (base as f64 + b * n as f64) as u64))
                .collect()
        })
        .unwrap_or_default();
    Ok(MemoryResults {
        levels,
        idle_rss_bytes: base,
        bytes_per_pod_slope: per_pod,
        bytes_per_pod_marginal: marginal,
        extrapolated,
        pods_created: created,
        create_seconds: create_time.as_secs_f64(),
        create_per_second: created as f64 / create_time.as_secs_f64().max(1e-9),
        requested_levels: counts,
        note,
        replay,
        idle_vs_baseline,
    })
}
