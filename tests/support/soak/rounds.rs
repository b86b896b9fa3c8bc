//! The soak's drain rounds ([`round`]): NodeMaintenances under the rolling budget and the real
//! `kubectl drain` through the bridge at the same time, and what a round that does not end says
//! of the pool.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use evictord::api::{NodeMaintenance, Stage};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{ROUND_LABEL, Timeline};
use crate::support::TestCluster;
use crate::support::pool::Pool;
use crate::support::pool::workloads::Kind;

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
                    .and_then(|l| l.get(crate::support::pool::workloads::WORKLOAD_LABEL))
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
            "spec": {"nodeSelector": crate::support::budget::by_name(&[node.as_str()]), "stage": "Drain",
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
                crate::support::pool::schedule::is_ready(p),
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
        .filter(|p| {
            !crate::support::pool::schedule::is_ready(p) || p.metadata.deletion_timestamp.is_some()
        })
        .map(|p| {
            format!(
                "{} on {:?}: phase {:?}, ready {}, deleting since {:?}",
                p.metadata.name.clone().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone()),
                crate::support::pool::schedule::is_ready(p),
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
        crate::support::pool::KUBECTL_DRAIN_FLAGS
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
        let mut child = crate::support::tools::kubectl_command(c, &args)
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
                if crate::support::tools::kubectl(c, &uncordon, None)
                    .status
                    .success()
                {
                    return Ok(run);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            return Err(format!("kubectl uncordon {nodes:?} failed 20 times"));
        }
        outputs.push(format!(
            "run {run}: exit {code:?}\n{}",
            crate::support::control_plane::tail(&output, 15)
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
