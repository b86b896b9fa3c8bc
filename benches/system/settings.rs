//! The benchmark's knobs, from environment variables (with the defaults `make bench` took 17
//! minutes on two cores before the webhook part measured HTTP/2 too, 8 of them for the three
//! drain runs; measuring both protocols about doubles the webhook part's 3.5 minutes, and
//! `EVICTORD_BENCH_BASELINE` adds half of that again; a drain run is given up after 15
//! minutes):
//!
//! | variable | default | what |
//! |---|---|---|
//! | `EVICTORD_BENCH_PARTS` | `webhook,memory,controllers,drain,pool` | which parts run |
//! | `EVICTORD_BENCH_RUNS` | `3` | runs per figure (the report quotes medians) |
//! | `EVICTORD_BENCH_PROTOCOLS` | `http1,h2,http1-new` | protocols of the webhook part (`http1`, `h2`; `http1-new`: HTTP/1.1 with a new connection per request, as kube-apiserver calls beyond its 25 idle connections, saturation only) |
//! | `EVICTORD_BENCH_CONNECTIONS` | `16` | HTTP/1.1 keep-alive connections at saturation |
//! | `EVICTORD_BENCH_RATE_CONNECTIONS` | `32` | HTTP/1.1 connection pool of the fixed-rate runs |
//! | `EVICTORD_BENCH_H2_CONNECTIONS` | `4` | HTTP/2 connections, at saturation and in the fixed-rate pool |
//! | `EVICTORD_BENCH_H2_STREAMS` | `8` | concurrent HTTP/2 streams per connection (4 × 8 = 32 requests in flight) |
//! | `EVICTORD_BENCH_BASELINE` | unset | path of another `evictord` binary (e.g. a build of an older commit) measured in the webhook part like evictord, and for idle RSS in the memory part: the report's third column |
//! | `EVICTORD_BENCH_PROFILE` | `1` | `0`: no `perf` profile of evictord (one extra HTTP/1.1 saturation run per body when `perf` works); `keep`: record call graphs with DWARF unwinding, keep `perf-<body>.data` next to the report for `perf report`, and add the inclusive (children) view of evictord's own functions |
//! | `EVICTORD_BENCH_SECONDS` | `4` | measured seconds at saturation (after 1 s warm-up) |
//! | `EVICTORD_BENCH_RATE_SECONDS` | `3` | seconds per fixed-rate run |
//! | `EVICTORD_BENCH_RATES` | `1000,5000` | fixed rates, requests/s |
//! | `EVICTORD_BENCH_PODS` | `0,10000,50000` | cached pod counts for the memory part |
//! | `EVICTORD_BENCH_REPLAY_PODS` | `150000` | cached pod counts replayed from a recording (memory part; empty: none) |
//! | `EVICTORD_BENCH_EVICTIONS` | `1000` | pods evicted per run (no interceptors) |
//! | `EVICTORD_BENCH_HANDOFFS` | `1000` | requests in flight in the hand-off run |
//! | `EVICTORD_BENCH_HANDOFF_RATE` | `100` | completions per second of the paced hand-off runs (open loop), besides the runs that write every completion at once, 32 in flight; `0`: no paced runs |
//! | `EVICTORD_BENCH_CREATES` | `1000` | EvictionRequest creates, and Eviction API calls for un-annotated pods, per webhook on/off round |
//! | `EVICTORD_BENCH_CREATE_ROUNDS` | `5` | webhook on/off rounds of the EvictionRequest create latency (issue 17 goal 6: median of 5) |
//! | `EVICTORD_BENCH_DRAIN_RUNS` | `3` | runs of the drain part |
//! | `EVICTORD_BENCH_DRAIN_NODES` | `100` | nodes of the drain part |
//! | `EVICTORD_BENCH_DRAIN_PODS_PER_NODE` | `110` | pods per node of the drain part |
//! | `EVICTORD_BENCH_POOL_NODES` | `40` | nodes of the pool part |
//! | `EVICTORD_BENCH_POOL_DRAINED` | half the nodes | nodes drained in each mode of the pool part |
//! | `EVICTORD_BENCH_POOL_PODS` | `1000` | pods of the full pool (workload mix: `tests/support/pool/workloads.rs`) |
//! | `EVICTORD_BENCH_POOL_MODES` | [`DEFAULT_MODES`](crate::pool_mode::DEFAULT_MODES) | the pool part's modes, `POOL/DRAINER` with POOL `full` or `finishable` (without the 1-replica PDB workloads) and DRAINER `kubectl-each`, `kubectl-all`, `script-each` (node after node: `kubectl drain`, the step, `kubectl uncordon`), each also as `evictord+...`, and `evictord+nodemaintenance`, `evictord+rollout`, `evictord+rollout-cordon-first` (`kubectl evictord rollout`); an `evictord+` mode ending in `+endpoints` also serves `endpoints.evictord.dev` to the pods behind a Service (issue 43: evictord then starts before the pool is created, so that its webhook gives them their readiness gate) |
//! | `EVICTORD_BENCH_POOL_TIMEOUT` | `600` | seconds a mode's drain may take before it is stopped (the modes with a per-node step get the steps' time on top: drained nodes × `EVICTORD_BENCH_POOL_STEP`) |
//! | `EVICTORD_BENCH_POOL_STEP` | `10` | seconds of the per-node step of `script-each` and the rollouts (`sleep N`, standing in for a reboot) |
//! | `EVICTORD_BENCH_POOL_MAX_UNAVAILABLE` | `2` | `--max-unavailable` of the rollouts (N or P%) |
//! | `EVICTORD_BENCH_POOL_NODE_TIMEOUT` | `120` | `kubectl drain --timeout` of each call, seconds |
//! | `EVICTORD_BENCH_POOL_START_DELAY` | `2` | seconds from binding to Running and Ready (played kubelet) |
//! | `EVICTORD_BENCH_HPA_SYNC` | `15` | seconds between the HorizontalPodAutoscaler controller's syncs in the benchmark's kube-controller-manager (its own default; the tests' is 2 s) |
//! | `EVICTORD_BENCH_POOL_GRACE` | `2` | seconds a deleted pod takes to go (played kubelet; a pod's own shorter grace period wins) |
//! | `EVICTORD_BENCH_POOL_SERVED` | `deployment.apps.k8s.io,horizontalpodautoscaler.autoscaling.k8s.io` | the interceptors the evictord under test serves (others are left out of the pods' annotation) |
//! | `EVICTORD_BENCH_POOL_EVICTORD_FLAGS` | empty (the shipped defaults) | extra `evictord serve` flags of the pool part, space-separated |
//! | `EVICTORD_BENCH_POOL_GC` | `1` | `1`: the pool runs kube-controller-manager's garbage collector, as every cluster does (an EvictionRequest goes with its pod); `0`: not (as before issue 44's runs of 2026-11-27 evening, for comparison) |
//! | `EVICTORD_BENCH_POOL_IDLE` | `30` | seconds of the idle baseline before each evictord mode's drain: evictord's requests on the settled pool with nothing to do (its watches and lease), counted per second (issue 44); `0`: none |

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use evictord::drain::admission::MaxUnavailable;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::loadgen::Protocol;

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct Settings {
    pub parts: BTreeSet<String>,
    pub runs: usize,
    pub protocols: Vec<Protocol>,
    pub connections: usize,
    pub rate_connections: usize,
    pub h2_connections: usize,
    pub h2_streams: usize,
    pub baseline: Option<PathBuf>,
    pub profile: bool,
    /// `EVICTORD_BENCH_PROFILE=keep`: DWARF call graphs, data kept, inclusive view.
    pub profile_keep: bool,
    pub warmup: Duration,
    pub saturation_time: Duration,
    pub fixed_rate_time: Duration,
    pub rates: Vec<u64>,
    pub pod_counts: Vec<usize>,
    pub replay_pod_counts: Vec<usize>,
    pub evictions: usize,
    pub handoffs: usize,
    /// Completions per second of the paced hand-off runs (`None`: not run).
    pub handoff_rate: Option<f64>,
    pub creates: usize,
    pub create_rounds: usize,
    pub drain_runs: usize,
    pub drain_nodes: usize,
    pub drain_pods_per_node: usize,
    pub pool: PoolSettings,
    /// The variables that were set, for the report.
    pub overrides: Vec<(String, String)>,
}

fn list<T: std::str::FromStr>(s: &str) -> anyhow::Result<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse().map_err(|e| anyhow::anyhow!("{p:?}: {e}")))
        .collect()
}

impl Settings {
    /// Reads the environment.
    ///
    /// # Errors
    /// When a variable does not parse.
    pub fn from_env() -> anyhow::Result<Self> {
        let mut overrides = Vec::new();
        let mut var = |name: &str, default: &str| -> String {
            match std::env::var(name) {
                Ok(v) => {
                    overrides.push((name.to_string(), v.clone()));
                    v
                }
                Err(_) => default.to_string(),
            }
        };
        let parts = var(
            "EVICTORD_BENCH_PARTS",
            "webhook,memory,controllers,drain,pool",
        )
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
        let runs = var("EVICTORD_BENCH_RUNS", "3").parse()?;
        let protocols: Vec<Protocol> =
            list(&var("EVICTORD_BENCH_PROTOCOLS", "http1,h2,http1-new"))?;
        let connections = var("EVICTORD_BENCH_CONNECTIONS", "16").parse()?;
        let rate_connections = var("EVICTORD_BENCH_RATE_CONNECTIONS", "32").parse()?;
        let h2_connections = var("EVICTORD_BENCH_H2_CONNECTIONS", "4").parse()?;
        let h2_streams = var("EVICTORD_BENCH_H2_STREAMS", "8").parse()?;
        let baseline = Some(var("EVICTORD_BENCH_BASELINE", ""))
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let profile = var("EVICTORD_BENCH_PROFILE", "1") != "0";
        let profile_keep = var("EVICTORD_BENCH_PROFILE", "1") == "keep";
        let saturation_time = Duration::from_secs_f64(var("EVICTORD_BENCH_SECONDS", "4").parse()?);
        let fixed_rate_time =
            Duration::from_secs_f64(var("EVICTORD_BENCH_RATE_SECONDS", "3").parse()?);
        let rates = list(&var("EVICTORD_BENCH_RATES", "1000,5000"))?;
        let pod_counts = list(&var("EVICTORD_BENCH_PODS", "0,10000,50000"))?;
        let replay_pod_counts = list(&var("EVICTORD_BENCH_REPLAY_PODS", "150000"))?;
        let evictions = var("EVICTORD_BENCH_EVICTIONS", "1000").parse()?;
        let handoffs = var("EVICTORD_BENCH_HANDOFFS", "1000").parse()?;
        let handoff_rate: f64 = var("EVICTORD_BENCH_HANDOFF_RATE", "100").parse()?;
        let creates = var("EVICTORD_BENCH_CREATES", "1000").parse()?;
        let create_rounds = var("EVICTORD_BENCH_CREATE_ROUNDS", "5").parse()?;
        let drain_runs = var("EVICTORD_BENCH_DRAIN_RUNS", "3").parse()?;
        let drain_nodes = var("EVICTORD_BENCH_DRAIN_NODES", "100").parse()?;
        let drain_pods_per_node = var("EVICTORD_BENCH_DRAIN_PODS_PER_NODE", "110").parse()?;
        let pool_nodes: usize = var("EVICTORD_BENCH_POOL_NODES", "40").parse()?;
        let pool_drained = match var("EVICTORD_BENCH_POOL_DRAINED", "").as_str() {
            "" => pool_nodes / 2,
            n => n.parse()?,
        };
        let pool = PoolSettings {
            nodes: pool_nodes,
            drained: pool_drained,
            pods: var("EVICTORD_BENCH_POOL_PODS", "1000").parse()?,
            modes: list(&var(
                "EVICTORD_BENCH_POOL_MODES",
                &crate::pool_mode::DEFAULT_MODES.join(","),
            ))?,
            timeout: Duration::from_secs_f64(var("EVICTORD_BENCH_POOL_TIMEOUT", "600").parse()?),
            node_timeout: Duration::from_secs_f64(
                var("EVICTORD_BENCH_POOL_NODE_TIMEOUT", "120").parse()?,
            ),
            start_delay: Duration::from_secs_f64(
                var("EVICTORD_BENCH_POOL_START_DELAY", "2").parse()?,
            ),
            grace: Duration::from_secs_f64(var("EVICTORD_BENCH_POOL_GRACE", "2").parse()?),
            hpa_sync: Duration::from_secs_f64(var("EVICTORD_BENCH_HPA_SYNC", "15").parse()?),
            step: Duration::from_secs_f64(var("EVICTORD_BENCH_POOL_STEP", "10").parse()?),
            max_unavailable: var("EVICTORD_BENCH_POOL_MAX_UNAVAILABLE", "2"),
            served: list(&var(
                "EVICTORD_BENCH_POOL_SERVED",
                &crate::support::pool::workloads::SERVED.join(","),
            ))?,
            evictord_flags: var("EVICTORD_BENCH_POOL_EVICTORD_FLAGS", "")
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            idle: Duration::from_secs_f64(var("EVICTORD_BENCH_POOL_IDLE", "30").parse()?),
            garbage_collector: match var("EVICTORD_BENCH_POOL_GC", "1").as_str() {
                "1" => true,
                "0" => false,
                other => anyhow::bail!("EVICTORD_BENCH_POOL_GC must be 0 or 1, not {other:?}"),
            },
        };
        anyhow::ensure!(runs >= 1, "EVICTORD_BENCH_RUNS must be at least 1");
        anyhow::ensure!(
            handoff_rate.is_finite() && handoff_rate >= 0.0,
            "EVICTORD_BENCH_HANDOFF_RATE must be a rate of 0 or more completions per second"
        );
        anyhow::ensure!(
            create_rounds >= 1,
            "EVICTORD_BENCH_CREATE_ROUNDS must be at least 1"
        );
        anyhow::ensure!(
            !protocols.is_empty(),
            "EVICTORD_BENCH_PROTOCOLS names no protocol"
        );
        anyhow::ensure!(
            h2_connections >= 1 && h2_streams >= 1,
            "EVICTORD_BENCH_H2_CONNECTIONS and EVICTORD_BENCH_H2_STREAMS must be at least 1"
        );
        if let Some(b) = &baseline {
            anyhow::ensure!(
                b.is_file(),
                "EVICTORD_BENCH_BASELINE={} is not a file",
                b.display()
            );
        }
        anyhow::ensure!(
            drain_runs >= 1,
            "EVICTORD_BENCH_DRAIN_RUNS must be at least 1"
        );
        anyhow::ensure!(
            drain_nodes >= 1,
            "EVICTORD_BENCH_DRAIN_NODES must be at least 1"
        );
        anyhow::ensure!(
            pool.allowed_unavailable().is_ok(),
            "EVICTORD_BENCH_POOL_MAX_UNAVAILABLE={}: want N or P% ({})",
            pool.max_unavailable,
            pool.allowed_unavailable().err().unwrap_or_default()
        );
        anyhow::ensure!(
            pool.drained >= 1 && pool.drained < pool.nodes,
            "EVICTORD_BENCH_POOL_DRAINED must be at least 1 and fewer than EVICTORD_BENCH_POOL_NODES"
        );
        Ok(Self {
            parts,
            runs,
            protocols,
            connections,
            rate_connections,
            h2_connections,
            h2_streams,
            baseline,
            profile,
            profile_keep,
            warmup: Duration::from_secs(1),
            saturation_time,
            fixed_rate_time,
            rates,
            pod_counts,
            replay_pod_counts,
            evictions,
            handoffs,
            handoff_rate: (handoff_rate > 0.0).then_some(handoff_rate),
            creates,
            create_rounds,
            drain_runs,
            drain_nodes,
            drain_pods_per_node,
            pool,
            overrides,
        })
    }
}

/// The pool part's knobs (see the module documentation).
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub nodes: usize,
    pub drained: usize,
    pub pods: usize,
    pub modes: Vec<crate::pool_mode::Mode>,
    pub timeout: Duration,
    pub node_timeout: Duration,
    pub start_delay: Duration,
    pub grace: Duration,
    /// The HorizontalPodAutoscaler controller's sync period.
    pub hpa_sync: Duration,
    /// The per-node step's duration (`sleep`).
    pub step: Duration,
    /// The rollouts' `--max-unavailable`.
    pub max_unavailable: String,
    pub served: Vec<String>,
    pub evictord_flags: Vec<String>,
    /// The idle baseline's window before an evictord mode's drain (issue 44).
    pub idle: Duration,
    /// Whether the pool runs kube-controller-manager's garbage collector.
    pub garbage_collector: bool,
}

impl PoolSettings {
    /// The per-node step, as the script and the rollouts run it (`sh -c`).
    pub fn step_command(&self) -> String {
        format!("sleep {}", self.step.as_secs_f64())
    }

    /// How many of the drained nodes `--max-unavailable` allows at once, as evictord resolves
    /// it (a percentage rounded up, at least 1).
    pub fn allowed_unavailable(&self) -> Result<usize, String> {
        let value = match self.max_unavailable.trim().parse::<i32>() {
            Ok(n) => IntOrString::Int(n),
            Err(_) => IntOrString::String(self.max_unavailable.trim().to_string()),
        };
        MaxUnavailable::parse(Some(&value)).map(|m| m.allowed(self.drained))
    }

    /// How long a mode may take: the timeout, and the per-node steps on top for the drainers
    /// that run them.
    pub fn mode_timeout(&self, drainer: crate::pool_mode::Drainer) -> Duration {
        if drainer.rolls() {
            self.timeout + self.step * self.drained as u32
        } else {
            self.timeout
        }
    }
}
