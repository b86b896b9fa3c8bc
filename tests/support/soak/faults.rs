//! The soak's faults carried out ([`inject`]): each [`Planned`] fault of the schedule done to
//! evictord's replicas or the control plane, and the wait for kube-controller-manager's
//! informers after one that restarts it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::replicas::Replicas;
use super::schedule::{Fault, Planned};
use super::{GOAL_SUSPENDED_AFTER_ROLL, OldBuild, Timeline, agents, apply_crds, current_crds};
use crate::support::TestCluster;

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
