//! The soak (`make soak`, `tests/soak.rs`): the pool of [`super::pool`] drained over and over —
//! part of it by NodeMaintenances under a MaintenanceBudget (a rolling maintenance, a few nodes
//! at a time), part by the real `kubectl drain` through the Eviction API bridge at the same
//! time — while a seeded schedule of faults ([`schedule`]) hits evictord's two replicas
//! ([`replicas`]) and the control plane, and a checker ([`checker`]) watches the invariants the
//! whole time. This module holds the pieces between them: the fault timeline, the faults'
//! effects, the drain rounds and the end's leftovers check.

pub mod agents;
pub mod checker;
pub mod evidence;
pub mod replicas;
pub mod schedule;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evictord::api::{
    EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION, EXCLUDE_FROM_EXTERNAL_LB_LABEL, MAINTENANCE_TAINT,
    MAINTENANCE_TAINT_BEFORE_ANNOTATION, NodeMaintenance, Stage, UNSCHEDULABLE_BEFORE_ANNOTATION,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::TestCluster;
use super::pool::Pool;
use super::pool::workloads::Kind;
use replicas::Replicas;
use schedule::{Fault, Planned};

/// Label of the nodes the rolling maintenance drains (value: the pool's id); the
/// MaintenanceBudget selects them by it.
pub const MAINTAINED_LABEL: &str = "soak.evictord.dev/maintained";
/// Label of every NodeMaintenance of the soak (value: the round).
pub const ROUND_LABEL: &str = "soak.evictord.dev/round";

/// What happened when: the faults and the drain rounds, for every failure message.
#[derive(Clone, Default)]
pub struct Timeline {
    start: Arc<Mutex<Option<Instant>>>,
    events: Arc<Mutex<Vec<(f64, String)>>>,
}

impl Timeline {
    pub fn new(start: Instant) -> Self {
        Self {
            start: Arc::new(Mutex::new(Some(start))),
            events: Arc::default(),
        }
    }

    pub fn note(&self, what: impl Into<String>) {
        let t = self
            .start
            .lock()
            .unwrap()
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        let what = what.into();
        eprintln!("soak {t:7.1} s: {what}");
        self.events.lock().unwrap().push((t, what));
    }

    pub fn render(&self) -> String {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|(t, w)| format!("  {t:7.1} s  {w}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Where the earlier build's binary and CRDs are (`SOAK_OLD_BUILD`, the directory
/// `tests/tools/soak-old-build.sh` prints).
pub struct OldBuild {
    pub bin: std::path::PathBuf,
    pub crds: std::path::PathBuf,
    /// Set while the zero-downtime goal is suspended (shared with the checker): when this build
    /// has no `--shutdown-delay` (before 0a2fe35) it closes its webhook's connections at once on
    /// SIGTERM, so a bridge call cut then fails open and a drainer's eviction may go past the
    /// pod's interceptors while the upgrade stops its replicas.
    pub goal_suspended: Option<Arc<AtomicBool>>,
}

impl OldBuild {
    /// The build in `dir` (`evictord`, `crds/`); the goal is suspended during its replicas'
    /// stops when its `serve --help` has no `--shutdown-delay`.
    pub fn at(dir: &std::path::Path) -> OldBuild {
        let bin = dir.join("evictord");
        let help = std::process::Command::new(&bin)
            .args(["serve", "--help"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        OldBuild {
            bin,
            crds: dir.join("crds"),
            goal_suspended: (!help.contains("--shutdown-delay"))
                .then(|| Arc::new(AtomicBool::new(false))),
        }
    }
}

/// How long after an upgrade's roll the goal stays suspended: a drainer's call cut by the last
/// stop is answered within the webhook's timeout, and its pod leaves then.
const GOAL_SUSPENDED_AFTER_ROLL: Duration = Duration::from_secs(10);

/// The CRD files of this build (the chart's).
pub fn current_crds() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/evictord/crds")
}

/// Applies the CRD files in `dir` as the book's upgrade section says
/// (`kubectl apply --server-side -f <dir>`), then waits until every one is Established.
pub fn apply_crds(c: &TestCluster, dir: &std::path::Path) -> anyhow::Result<()> {
    let dir = dir.to_string_lossy().to_string();
    let out = super::tools::kubectl(c, &["apply", "--server-side", "-f", &dir], None);
    anyhow::ensure!(
        out.status.success(),
        "kubectl apply --server-side -f {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = super::tools::kubectl(
        c,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &dir,
        ],
        None,
    );
    anyhow::ensure!(
        out.status.success(),
        "CRDs of {dir} not Established: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The resources whose kube-controller-manager informers a drain of the pool waits on.
const KCM_INFORMERS: &[&str] = &[
    "pods",
    "replicasets",
    "deployments",
    "statefulsets",
    "poddisruptionbudgets",
    "horizontalpodautoscalers",
];

/// How long the soak waits for kube-controller-manager's informers after a kube-apiserver
/// restart.
const KCM_RECOVERY_BOUND: Duration = Duration::from_secs(120);

/// The resources of [`KCM_INFORMERS`] that kube-controller-manager's shared informers started
/// a watch of, in the audit lines `text` (JSON lines at the Metadata level).
pub fn informers_watching(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["verb"] == "watch"
                && e["userAgent"].as_str().is_some_and(|a| {
                    a.starts_with("kube-controller-manager") && a.ends_with("shared-informers")
                })
                && e["responseStatus"]["code"]
                    .as_i64()
                    .is_none_or(|c| c == 200)
        })
        .filter_map(|e| e["objectRef"]["resource"].as_str().map(str::to_string))
        .filter(|r| KCM_INFORMERS.contains(&r.as_str()))
        .collect()
}

/// When kube-controller-manager watched every resource of [`KCM_INFORMERS`] again, by the
/// request audit log read from byte `from` on (its position before the restart); `None` when
/// not within `bound` (or without an audit log).
async fn controller_manager_watching(
    c: &TestCluster,
    from: u64,
    bound: Duration,
) -> Option<std::time::SystemTime> {
    let audit = c.request_audit.as_ref()?;
    let t = Instant::now();
    while t.elapsed() < bound {
        let text = std::fs::read(audit)
            .map(|b| String::from_utf8_lossy(&b[(from as usize).min(b.len())..]).into_owned())
            .unwrap_or_default();
        if informers_watching(&text).len() == KCM_INFORMERS.len() {
            return Some(std::time::SystemTime::now());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// Runs the `plan` against the control plane and the replicas; returns how many faults were
/// injected. Each fault finishes (the killed replica restarted, kube-apiserver answering and
/// kube-controller-manager watching again, etcd resumed, the roll done) before the next pause
/// starts.
pub async fn inject(
    c: &'static TestCluster,
    replicas: Arc<tokio::sync::Mutex<Replicas>>,
    plan: Vec<Planned>,
    old: Option<Arc<OldBuild>>,
    timeline: Timeline,
    stop: Arc<std::sync::atomic::AtomicBool>,
    agents: Arc<tokio::sync::Mutex<agents::NodeAgents>>,
) -> anyhow::Result<usize> {
    let mut injected = 0;
    for (i, p) in plan.iter().enumerate() {
        tokio::time::sleep(p.after).await;
        if stop.load(std::sync::atomic::Ordering::Acquire) {
            break;
        }
        let n = i + 1;
        match p.fault {
            Fault::KillLeader { restart_after } | Fault::KillStandby { restart_after } => {
                let leader = matches!(p.fault, Fault::KillLeader { .. });
                let mut r = replicas.lock().await;
                // After a kill the Lease names the dead replica until it expires: wait (bounded)
                // for a live holder.
                let mut target = None;
                for _ in 0..60 {
                    target = if leader {
                        r.leader().await
                    } else {
                        r.standby().await
                    };
                    if target.is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                let Some(target) = target else {
                    timeline.note(format!(
                        "fault {n}: {} skipped: no {} known",
                        p.fault,
                        if leader { "Lease holder" } else { "standby" }
                    ));
                    continue;
                };
                r.remove(&target, true);
                timeline.note(format!("fault {n}: {} ({target})", p.fault));
                tokio::time::sleep(restart_after).await;
                let old_now = r.running_old();
                r.add(old_now).await?;
                timeline.note(format!(
                    "fault {n}: replacement started and ready ({})",
                    r.live.last().map(|x| x.identity.as_str()).unwrap_or("?")
                ));
            }
            Fault::RestartApiserver { kill_after } => {
                timeline.note(format!("fault {n}: {}", p.fault));
                let audit_from = c
                    .request_audit
                    .as_ref()
                    .and_then(|a| std::fs::metadata(a).ok())
                    .map_or(0, |m| m.len());
                let restart = c.restart_apiserver_within(kill_after).await;
                timeline.note(format!(
                    "fault {n}: kube-apiserver answering again ({:.1} s without an answer{})",
                    restart
                        .answering
                        .duration_since(restart.stopping)
                        .unwrap_or_default()
                        .as_secs_f64(),
                    if restart.killed { ", SIGKILLed" } else { "" }
                ));
                // kube-controller-manager's informers come back at their own backoff (client-go's
                // reflector: up to 30 s, with as much again of jitter), and until they do it
                // neither creates replacement pods nor updates PodDisruptionBudgets: the fault
                // is finished once they watch again.
                let watching = controller_manager_watching(c, audit_from, KCM_RECOVERY_BOUND).await;
                timeline.note(match watching {
                    Some(after) => format!(
                        "fault {n}: kube-controller-manager watching again {:.1} s after kube-apiserver answered",
                        after
                            .duration_since(restart.answering)
                            .unwrap_or_default()
                            .as_secs_f64()
                    ),
                    None => format!(
                        "fault {n}: kube-controller-manager not watching again within {KCM_RECOVERY_BOUND:?}"
                    ),
                });
            }
            Fault::KillNodeAgent {
                pick,
                restart_after,
            } => {
                let mut a = agents.lock().await;
                let node = a.node(pick);
                a.kill(pick);
                timeline.note(format!("fault {n}: {} (node {node})", p.fault));
                tokio::time::sleep(restart_after).await;
                a.restart(pick).await?;
                timeline.note(format!("fault {n}: node agent of {node} started and ready"));
            }
            Fault::PauseEtcd { for_ } => {
                timeline.note(format!("fault {n}: {}", p.fault));
                let paused = c.pause_etcd();
                tokio::time::sleep(for_).await;
                paused.resume();
                timeline.note(format!("fault {n}: etcd resumed"));
            }
            Fault::Downgrade | Fault::Upgrade => {
                let down = p.fault == Fault::Downgrade;
                let Some(old) = old.as_ref() else {
                    timeline.note(format!("fault {n}: {} skipped: no earlier build", p.fault));
                    continue;
                };
                let crds = if down {
                    old.crds.clone()
                } else {
                    current_crds()
                };
                timeline.note(format!(
                    "fault {n}: {}: CRDs of {} applied first",
                    p.fault,
                    if down {
                        "the earlier build"
                    } else {
                        "this build"
                    }
                ));
                apply_crds(c, &crds)?;
                // An upgrade stops the earlier build's replicas.
                let suspended = old.goal_suspended.as_ref().filter(|_| !down);
                if let Some(flag) = suspended {
                    flag.store(true, Ordering::Release);
                }
                let mut r = replicas.lock().await;
                r.roll(down).await?;
                if let Some(flag) = suspended.cloned() {
                    tokio::spawn(async move {
                        tokio::time::sleep(GOAL_SUSPENDED_AFTER_ROLL).await;
                        flag.store(false, Ordering::Release);
                    });
                }
                timeline.note(format!(
                    "fault {n}: roll done, replicas {:?}{}",
                    r.live
                        .iter()
                        .map(|x| x.identity.as_str())
                        .collect::<Vec<_>>(),
                    match (down, suspended.is_some()) {
                        (true, _) => {
                            "; invariants suspended while it runs: none (the earlier commit has \
                             every feature the invariants check)"
                        }
                        (false, true) => {
                            "; the zero-downtime goal suspended from the roll's start to 10 s \
                             after it: the earlier build closes its webhook's connections at \
                             once on SIGTERM (no --shutdown-delay), and a bridge call cut then \
                             fails open"
                        }
                        (false, false) => "",
                    }
                ));
            }
        }
        injected += 1;
    }
    Ok(injected)
}

/// One drain round's figures.
#[derive(Debug, Default)]
pub struct Round {
    /// Pods (not the DaemonSet's) on the drained nodes when the round started.
    pub targeted: usize,
    /// `kubectl drain` runs (a run that exits non-zero, e.g. cut by a kube-apiserver restart,
    /// is run again, as an administrator would).
    pub kubectl_runs: usize,
    pub seconds: f64,
}

/// What is wrong at the end of a round, or `Ok` with its figures.
pub type RoundResult = Result<Round, String>;

/// One round: a NodeMaintenance in stage Drain for each node labelled [`MAINTAINED_LABEL`]
/// (the budget admits them a few at a time; each goes to Complete once Drained), and at the
/// same time `kubectl drain` of `kubectl_nodes` (then `kubectl uncordon`); waits, at most
/// `bound`, until every maintenance gave its nodes back and kubectl is done, deletes the
/// maintenances, and checks that every pod targeted at the start is gone and the pool is
/// restored.
pub async fn round(
    c: &'static TestCluster,
    pool: &Pool,
    number: usize,
    maintained: &[String],
    kubectl_nodes: &[String],
    timeline: &Timeline,
    bound: Duration,
) -> RoundResult {
    let t = Instant::now();
    let client = &pool.client;
    let drained: BTreeSet<&String> = maintained.iter().chain(kubectl_nodes).collect();
    let daemonset: BTreeSet<String> = pool
        .workloads
        .iter()
        .filter(|w| w.row.kind == Kind::DaemonSet)
        .map(|w| w.name.clone())
        .collect();
    let targeted: Vec<(String, String)> = pool
        .played
        .pods()
        .state()
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| drained.contains(n))
                && !p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(super::pool::workloads::WORKLOAD_LABEL))
                    .is_some_and(|w| daemonset.contains(w))
        })
        .map(|p| {
            (
                p.metadata.uid.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    timeline.note(format!(
        "round {number}: {} pods on the drained nodes; NodeMaintenances for {maintained:?}, kubectl drain of {kubectl_nodes:?}",
        targeted.len()
    ));
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    for node in maintained {
        let nm: NodeMaintenance = serde_json::from_value(json!({
            "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": format!("soak-{number}-{node}"), "labels": {ROUND_LABEL: number.to_string()}},
            "spec": {"nodeSelector": super::budget::by_name(&[node.as_str()]), "stage": "Drain",
                     "reason": format!("soak round {number}")},
        }))
        .map_err(|e| e.to_string())?;
        let pp = PostParams::default();
        retry(|| nms.create(&pp, &nm))
            .await
            .map_err(|e| format!("creating NodeMaintenance for {node}: {e}"))?;
    }
    let kubectl = tokio::spawn(kubectl_drain(c, kubectl_nodes.to_vec(), bound, number));
    let mine = ListParams::default().labels(&format!("{ROUND_LABEL}={number}"));
    let deadline = Instant::now() + bound;
    let mut completed = BTreeSet::new();
    loop {
        if let Ok(Ok(list)) = tokio::time::timeout(Duration::from_secs(10), nms.list(&mine)).await {
            for nm in &list.items {
                let name = nm.metadata.name.clone().unwrap_or_default();
                let drained = nm
                    .status
                    .as_ref()
                    .is_some_and(|s| s.is_true(evictord::api::CONDITION_DRAINED));
                if drained && nm.spec.stage == Some(Stage::Drain) {
                    let patch = Patch::Merge(json!({"spec": {"stage": "Complete"}}));
                    if nms
                        .patch(&name, &PatchParams::default(), &patch)
                        .await
                        .is_ok()
                        && completed.insert(name.clone())
                    {
                        timeline.note(format!("round {number}: {name} Drained, set to Complete"));
                    }
                }
            }
            let released = list.items.iter().all(|nm| {
                nm.spec.stage == Some(Stage::Complete)
                    && nm
                        .status
                        .as_ref()
                        .and_then(|s| s.admission.as_ref())
                        .is_some_and(|a| a.released_time.is_some())
            });
            if released && list.items.len() == maintained.len() && kubectl.is_finished() {
                break;
            }
        }
        if Instant::now() > deadline {
            let state = nms
                .list(&mine)
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .map(|nm| {
                            format!(
                                "{}: stage {:?}, status {}",
                                nm.metadata.name.clone().unwrap_or_default(),
                                nm.spec.stage,
                                serde_json::to_string(&nm.status).unwrap_or_default()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_else(|e| e.to_string());
            kubectl.abort();
            return Err(format!(
                "round {number} not done within {bound:?} (kubectl drain done: {}); its maintenances:\n{state}\n{}",
                kubectl.is_finished(),
                stalled(pool, &drained).await
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let kubectl_runs = kubectl
        .await
        .map_err(|e| format!("kubectl drain task: {e}"))??;
    // Every targeted pod gone (a UID never comes back).
    let present: BTreeSet<String> = pool
        .played
        .pods()
        .state()
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let left: Vec<&String> = targeted
        .iter()
        .filter(|(uid, _)| present.contains(uid))
        .map(|(_, name)| name)
        .collect();
    if !left.is_empty() {
        return Err(format!(
            "round {number}: targeted pods still present after every maintenance was Complete and kubectl drain succeeded: {left:?}"
        ));
    }
    for nm in retry(|| nms.list(&mine))
        .await
        .map_err(|e| e.to_string())?
        .items
    {
        let name = nm.metadata.name.unwrap_or_default();
        let dp = DeleteParams::default();
        let _ = retry(|| nms.delete(&name, &dp)).await;
    }
    // Its reads fail while kube-apiserver restarts: asked again until the bound.
    let restoring = Instant::now();
    loop {
        let left = bound.saturating_sub(restoring.elapsed());
        match pool.wait_restored(left).await {
            Ok(_) => break,
            Err(e) if left.is_zero() || e.to_string().contains("not restored") => {
                return Err(format!("round {number}: pool not restored: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    let r = Round {
        targeted: targeted.len(),
        kubectl_runs,
        seconds: t.elapsed().as_secs_f64(),
    };
    timeline.note(format!(
        "round {number} done in {:.1} s: {} pods drained, kubectl drain run {} times",
        r.seconds, r.targeted, r.kubectl_runs
    ));
    Ok(r)
}

/// What a stalled round holds: the pods still on the drained nodes (phase, readiness, deletion,
/// annotations, owner) and the EvictionRequests not ended, so that a stall explains itself.
async fn stalled(pool: &Pool, drained: &BTreeSet<&String>) -> String {
    let pods: Vec<String> = pool
        .played
        .pods()
        .state()
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| drained.contains(n))
        })
        .map(|p| {
            let m = &p.metadata;
            format!(
                "{} (UID {}) on {:?}: phase {:?}, ready {}, deleting since {:?}, owner {:?}, annotations {:?}",
                m.name.clone().unwrap_or_default(),
                m.uid.clone().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone()),
                super::pool::schedule::is_ready(p),
                m.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
                m.owner_references
                    .as_ref()
                    .and_then(|o| o.first())
                    .map(|o| format!("{} {}", o.kind, o.name)),
                m.annotations,
            )
        })
        .collect();
    let requests: Api<evictord::api::EvictionRequest> =
        Api::namespaced(pool.client.clone(), &pool.ns);
    let lp = ListParams::default();
    let open: Vec<String> = match retry(|| requests.list(&lp)).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter(|r| {
                !r.status.as_ref().is_some_and(|s| {
                    s.is_true(evictord::api::CONDITION_EVICTED)
                        || s.is_true(evictord::api::CONDITION_CANCELED)
                })
            })
            .map(|mut r| {
                r.metadata.managed_fields = None;
                let text = serde_json::to_string(&r).unwrap_or_default();
                text.chars().take(3000).collect()
            })
            .collect(),
        Err(e) => vec![format!("listing EvictionRequests: {e}")],
    };
    format!(
        "pods on the drained nodes ({}):\n  {}\nEvictionRequests not ended ({}):\n  {}\n{}",
        pods.len(),
        pods.join("\n  "),
        open.len(),
        open.join("\n  "),
        workloads_state(pool).await
    )
}

/// The pool's pods not available (pending, unready or terminating), its Deployments, autoscalers
/// and PodDisruptionBudgets as kube-apiserver has them: what a stalled eviction waits on.
async fn workloads_state(pool: &Pool) -> String {
    let mut out = Vec::new();
    let unavailable: Vec<String> = pool
        .played
        .pods()
        .state()
        .iter()
        .filter(|p| !super::pool::schedule::is_ready(p) || p.metadata.deletion_timestamp.is_some())
        .map(|p| {
            format!(
                "{} on {:?}: phase {:?}, ready {}, deleting since {:?}",
                p.metadata.name.clone().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone()),
                super::pool::schedule::is_ready(p),
                p.metadata
                    .deletion_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string()),
            )
        })
        .collect();
    out.push(format!(
        "pods not available ({}):\n  {}",
        unavailable.len(),
        unavailable.join("\n  ")
    ));
    let lp = ListParams::default();
    let deployments: Api<Deployment> = Api::namespaced(pool.client.clone(), &pool.ns);
    match retry(|| deployments.list(&lp)).await {
        Ok(list) => {
            for d in list.items {
                let s = d.status.clone().unwrap_or_default();
                let replicas = d.spec.replicas;
                let surge = d
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("evictord.dev/surge").cloned());
                if replicas == s.available_replicas && surge.is_none() {
                    continue;
                }
                out.push(format!(
                    "Deployment {}: generation {:?} observed {:?}, spec.replicas {replicas:?}, status replicas {:?} updated {:?} ready {:?} available {:?}, surge record {surge:?}",
                    d.metadata.name.clone().unwrap_or_default(),
                    d.metadata.generation,
                    s.observed_generation,
                    s.replicas,
                    s.updated_replicas,
                    s.ready_replicas,
                    s.available_replicas,
                ));
            }
        }
        Err(e) => out.push(format!("listing Deployments: {e}")),
    }
    let autoscalers: Api<HorizontalPodAutoscaler> = Api::namespaced(pool.client.clone(), &pool.ns);
    match retry(|| autoscalers.list(&lp)).await {
        Ok(list) => {
            for h in list.items {
                let spec = h.spec.clone();
                let s = h.status.clone().unwrap_or_default();
                out.push(format!(
                    "HorizontalPodAutoscaler {}: minReplicas {:?} maxReplicas {}, current {} desired {}, record {:?}",
                    h.metadata.name.clone().unwrap_or_default(),
                    spec.min_replicas,
                    spec.max_replicas,
                    s.current_replicas,
                    s.desired_replicas,
                    h.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(evictord::interceptor::hpa::RECORD_ANNOTATION)),
                ));
            }
        }
        Err(e) => out.push(format!("listing HorizontalPodAutoscalers: {e}")),
    }
    // policy/v1beta1 on the v1.20 control plane: read untyped.
    let gvk = kube::api::GroupVersionKind::gvk("policy", "v1beta1", "PodDisruptionBudget");
    let resource = kube::api::ApiResource::from_gvk(&gvk);
    let budgets: Api<kube::api::DynamicObject> =
        Api::namespaced_with(pool.client.clone(), &pool.ns, &resource);
    match retry(|| budgets.list(&lp)).await {
        Ok(list) => {
            for b in list.items {
                let status = b.data.get("status").cloned().unwrap_or_default();
                if status.get("disruptionsAllowed").and_then(|v| v.as_i64()) != Some(0) {
                    continue;
                }
                out.push(format!(
                    "PodDisruptionBudget {} (generation {:?}): status {status}",
                    b.metadata.name.clone().unwrap_or_default(),
                    b.metadata.generation,
                ));
            }
        }
        Err(e) => out.push(format!("listing PodDisruptionBudgets: {e}")),
    }
    out.join("\n")
}

/// `kubectl drain` of `nodes` with the pool's flags, run again 3 s after it exits non-zero (as
/// an administrator would after kube-apiserver went away under it) until `bound` has passed,
/// then `kubectl uncordon`; returns the runs.
async fn kubectl_drain(
    c: &'static TestCluster,
    nodes: Vec<String>,
    bound: Duration,
    round: usize,
) -> Result<usize, String> {
    let mut args: Vec<String> = vec!["drain".into()];
    args.extend(nodes.iter().cloned());
    args.extend(
        super::pool::KUBECTL_DRAIN_FLAGS
            .iter()
            .map(|s| s.to_string()),
    );
    args.push(format!("--timeout={}s", bound.as_secs()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut outputs = Vec::new();
    let until = Instant::now() + bound;
    for run in 1..=1000 {
        if Instant::now() > until {
            break;
        }
        let log = c.dir.join(format!("soak-kubectl-drain-{round}-{run}.log"));
        let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut child = super::tools::kubectl_command(c, &args)
            .stdout(file.try_clone().map_err(|e| e.to_string())?)
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("kubectl drain: {e}"))?;
        let deadline = Instant::now() + bound + Duration::from_secs(10);
        let code = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        if code == Some(0) {
            let mut uncordon = vec!["uncordon"];
            uncordon.extend(nodes.iter().map(String::as_str));
            for _ in 0..20 {
                if super::tools::kubectl(c, &uncordon, None).status.success() {
                    return Ok(run);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            return Err(format!("kubectl uncordon {nodes:?} failed 20 times"));
        }
        outputs.push(format!(
            "run {run}: exit {code:?}\n{}",
            super::control_plane::tail(&output, 15)
        ));
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    Err(format!(
        "kubectl drain of {nodes:?} did not succeed within {bound:?} ({} runs); the last:\n{}",
        outputs.len(),
        outputs[outputs.len().saturating_sub(3)..].join("\n")
    ))
}

/// An API call retried (at most 10 times, 2 s apart) while the control plane is down.
async fn retry<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut last = None;
    for _ in 0..10 {
        match tokio::time::timeout(Duration::from_secs(10), call()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(kube::Error::Api(e))) if e.code < 500 && e.code != 429 => {
                return Err(kube::Error::Api(e));
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Err(last.unwrap_or_else(|| {
        kube::Error::Service(Box::new(std::io::Error::other("timed out 10 times")))
    }))
}

/// What evictord left behind on the pool's nodes, Deployments and autoscalers (empty: nothing):
/// a node cordoned or carrying the maintenance taint, the exclusion label or one of the
/// annotations that remember a node's state; a Deployment's surge record; an autoscaler's raised
/// floor (its record, or `minReplicas` above the workload's).
pub async fn leftovers(client: &Client, pool: &Pool) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{}={}", super::pool::POOL_LABEL, pool.id)))
        .await?;
    for n in nodes.items {
        let name = n.metadata.name.clone().unwrap_or_default();
        let spec = n.spec.clone().unwrap_or_default();
        if spec.unschedulable == Some(true) {
            found.push(format!("node {name} cordoned"));
        }
        if spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == MAINTENANCE_TAINT)
        {
            found.push(format!("node {name} tainted {MAINTENANCE_TAINT}"));
        }
        if n.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(EXCLUDE_FROM_EXTERNAL_LB_LABEL))
        {
            found.push(format!(
                "node {name} labelled {EXCLUDE_FROM_EXTERNAL_LB_LABEL}"
            ));
        }
        for a in [
            UNSCHEDULABLE_BEFORE_ANNOTATION,
            MAINTENANCE_TAINT_BEFORE_ANNOTATION,
            EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION,
        ] {
            if n.metadata
                .annotations
                .as_ref()
                .is_some_and(|m| m.contains_key(a))
            {
                found.push(format!("node {name} annotated {a}"));
            }
        }
    }
    for d in Api::<Deployment>::namespaced(client.clone(), &pool.ns)
        .list(&ListParams::default())
        .await?
    {
        if d.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(evictord::interceptor::deployment::SURGE_ANNOTATION))
        {
            found.push(format!(
                "Deployment {:?} keeps its surge record",
                d.metadata.name
            ));
        }
    }
    for h in Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &pool.ns)
        .list(&ListParams::default())
        .await?
    {
        let row = pool
            .workloads
            .iter()
            .find(|w| w.name == h.spec.scale_target_ref.name);
        if h.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(evictord::interceptor::hpa::RECORD_ANNOTATION))
        {
            found.push(format!(
                "HorizontalPodAutoscaler {:?} keeps its raised-floor record",
                h.metadata.name
            ));
        }
        if row.is_some_and(|w| h.spec.min_replicas != Some(w.row.replicas)) {
            found.push(format!(
                "HorizontalPodAutoscaler {:?} minReplicas {:?}",
                h.metadata.name, h.spec.min_replicas
            ));
        }
    }
    let nms = Api::<NodeMaintenance>::all(client.clone())
        .list(&ListParams::default().labels(ROUND_LABEL))
        .await?;
    for nm in nms.items {
        found.push(format!(
            "NodeMaintenance {:?} still present (stage {:?})",
            nm.metadata.name, nm.spec.stage
        ));
    }
    Ok(found)
}

/// Labels `nodes` with [`MAINTAINED_LABEL`]` = id` and creates a MaintenanceBudget `name` over
/// them allowing `max_unavailable` at once.
pub async fn rolling_budget(
    client: &Client,
    name: &str,
    id: &str,
    nodes: &[String],
    max_unavailable: i32,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    for n in nodes {
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {MAINTAINED_LABEL: id}}})),
        )
        .await?;
    }
    let b: evictord::api::MaintenanceBudget = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "MaintenanceBudget",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": MAINTAINED_LABEL, "operator": "In", "values": [id]}
            ]}]},
            "maxUnavailable": max_unavailable,
        }
    }))?;
    Api::<evictord::api::MaintenanceBudget>::all(client.clone())
        .create(&PostParams::default(), &b)
        .await?;
    Ok(())
}
