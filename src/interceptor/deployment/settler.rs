//! The settler: a kube-runtime `Controller` on Deployments that carry a surge record. For each
//! covered pod it finds the [`Fate`] (pod terminating or gone; request canceled or deleted; pending) and writes
//! [`settle`]'s result, so `spec.replicas` returns to its base once the pods leave, also after
//! a restart or on a newly elected evictord; the place of a pod that left goes to a pod of the
//! Deployment waiting for room in the surge, when there is one ([`hand_over`]), and is kept, for
//! a while, when another pod of the Deployment is on a cordoned node ([`hold`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::recorder::Recorder;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::decide::{
    Fate, HOLD_MAX, Settle, active_in, counted_out, hand_over, has_left, hold, may_hand_over,
    settle,
};
use super::interceptor::{count, event, is_conflict, patch_deployment, recorder};
use super::surge::{DeploymentFacts, SurgedPod};
use super::{CordonedPods, Error, SETTLE_POLL};
use crate::api::{CONDITION_CANCELED, EvictionRequest};
use crate::interceptor::PodCache;
use crate::interceptor::autoscalers::{Autoscalers, scaling};

struct Context {
    client: Client,
    pods: PodCache,
    requests: Store<EvictionRequest>,
    autoscalers: Autoscalers,
    recorder: Recorder,
    cordoned: CordonedPods,
    /// The Deployments whose finished places are being kept ([`hold`]), by namespace and name.
    held: Mutex<HashMap<(String, String), Held>>,
}

/// A Deployment's places kept for its pods still to leave.
struct Held {
    /// The first look that kept them.
    since: Instant,
    /// Its pods on cordoned nodes, as last counted, and when.
    due: usize,
    counted: Instant,
}

/// How often the pods on cordoned nodes are counted again while places are kept (a count reads
/// every pod of the process's cluster cache).
const HOLD_RECOUNT: Duration = Duration::from_secs(10);

impl Context {
    /// How long the places of Deployment `key` have been kept, and its pods still on cordoned
    /// nodes (`count`, counted again every [`HOLD_RECOUNT`]).
    fn held(&self, key: &(String, String), count: impl FnOnce() -> usize) -> (Duration, usize) {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        // Deployments deleted while kept are forgotten.
        held.retain(|_, h| now.saturating_duration_since(h.since) < HOLD_MAX * 4);
        match held.get_mut(key) {
            Some(h) => {
                if now.saturating_duration_since(h.counted) >= HOLD_RECOUNT {
                    (h.due, h.counted) = (count(), now);
                }
                (now.saturating_duration_since(h.since), h.due)
            }
            None => {
                let due = count();
                held.insert(
                    key.clone(),
                    Held {
                        since: now,
                        due,
                        counted: now,
                    },
                );
                (Duration::ZERO, due)
            }
        }
    }

    /// Deployment `key`'s places are no longer kept.
    fn release(&self, key: &(String, String)) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// Runs the settler until `shutdown`, on the shared watch's `changes` and `store`, reading the
/// covered pods from `pods` and their requests from `requests` (the runner's caches), and the
/// autoscalers from `autoscalers` (a surge's places are handed over only on a Deployment no
/// autoscaler scales, [`may_hand_over`]); `cordoned` counts a Deployment's pods on cordoned
/// nodes (the places of pods that left are kept for them, [`hold`]).
#[allow(clippy::too_many_arguments)]
pub(super) async fn run(
    client: Client,
    pods: PodCache,
    requests: Store<EvictionRequest>,
    autoscalers: Autoscalers,
    cordoned: CordonedPods,
    changes: ReflectHandle<Deployment>,
    store: Store<Deployment>,
    shutdown: CancellationToken,
) {
    let ctx = Arc::new(Context {
        recorder: recorder(&client),
        client,
        pods,
        requests,
        autoscalers,
        cordoned,
        held: Mutex::default(),
    });
    Controller::for_shared_stream(changes, store)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "settler reconcile did not complete");
            }
        })
        .await;
}

fn error_policy(_d: Arc<Deployment>, error: &Error, _ctx: Arc<Context>) -> Action {
    if is_conflict(error) {
        Action::requeue(std::time::Duration::from_millis(200))
    } else {
        warn!(%error, "settling a surged Deployment failed; retrying");
        Action::requeue(std::time::Duration::from_secs(2))
    }
}

/// What became of pod `p` of namespace `ns` a surge covers (shared with the HPA interceptor's
/// settler), from caches that can only be behind, so that a cache never makes a settler restore
/// too early. The pod comes from `pods`, the interceptors' watch cache, which reads it live when
/// it lacks it: "gone" is always kube-apiserver's word, and "terminating" (a deletionTimestamp,
/// never unset) is true once a cache has seen it. The request comes from `requests`, the
/// runner's watch cache: "canceled" (never unset) is true once seen, "pending" at worst delays
/// the settling to the next look, and "gone" is confirmed live. Besides the fate: whether the
/// pod is still there, terminating (its fate is then [`Fate::Gone`]).
pub(crate) async fn fate(
    client: &Client,
    pods: &PodCache,
    requests: &Store<EvictionRequest>,
    ns: &str,
    p: &SurgedPod,
) -> Result<(Fate, bool), Error> {
    let pod = pods
        .get(ns, &p.name, &p.uid)
        .await
        .map_err(|e| Error::Read(format!("pod {}", p.name), e))?;
    let read = pod.as_ref().map(|pod| {
        (
            pod.metadata.uid.as_deref().unwrap_or_default(),
            pod.metadata.deletion_timestamp.is_some(),
        )
    });
    if has_left(read, &p.uid) {
        let terminating = read.is_some_and(|(uid, terminating)| uid == p.uid && terminating);
        return Ok((Fate::Gone, terminating));
    }
    let synced = requests.wait_until_ready().now_or_never().is_some();
    let cached = synced
        .then(|| requests.get(&ObjectRef::new(&p.uid).within(ns)))
        .flatten();
    let request = match cached {
        Some(r) => Some((*r).clone()),
        None => Api::<EvictionRequest>::namespaced(client.clone(), ns)
            .get_opt(&p.uid)
            .await
            .map_err(|e| Error::Read(format!("EvictionRequest {}", p.uid), e))?,
    };
    let fate = match request {
        None => Fate::Kept,
        Some(r)
            if r.status
                .as_ref()
                .is_some_and(|s| s.is_true(CONDITION_CANCELED)) =>
        {
            Fate::Kept
        }
        Some(_) => Fate::Pending,
    };
    Ok((fate, false))
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let facts = DeploymentFacts::read(&d, None);
    let Ok(Some(record)) = &facts.record else {
        return Ok(Action::await_change());
    };
    let ns = d.namespace().unwrap_or_default();
    let mut fates = Vec::with_capacity(record.pods.len() + record.abandoned.len());
    let mut terminating = Vec::new();
    for p in record.pods.iter().chain(&record.abandoned) {
        let (f, t) = fate(&ctx.client, &ctx.pods, &ctx.requests, &ns, p).await?;
        if t {
            terminating.push(p.uid.clone());
        }
        fates.push((p.clone(), f));
    }
    // A terminating pod counts as gone only once the ReplicaSets counted it out.
    if !terminating.is_empty() && !counted_out(&facts, terminating.len() as i32) {
        for (p, f) in &mut fates {
            if terminating.contains(&p.uid) {
                *f = Fate::Pending;
            }
        }
        debug!(
            deployment = %d.name_any(),
            terminating = terminating.len(),
            status_replicas = facts.status_replicas,
            "covered pods terminating, not yet counted out by their ReplicaSets: settling later"
        );
    }
    let Some(s) = settle(&facts, &fates) else {
        return Ok(Action::requeue(SETTLE_POLL));
    };
    let name = d.name_any();
    let key = (ns.clone(), name.clone());
    // The places of pods that left go on (handed over or kept) only on a Deployment they may
    // go on with its autoscaler known: unknown while the autoscalers' cache has not synced,
    // they are given back.
    let eligible = (s.finished > 0 && !s.abandoned)
        .then(|| with_autoscaler(&ctx, &ns, &name, &facts))
        .flatten()
        .filter(|f| may_hand_over(f, &name));
    let handed = match &eligible {
        Some(f) => handed_over(&ctx, &ns, &name, f, &s).await?,
        None => None,
    };
    let (s, taken) = match handed {
        Some(handed) => handed,
        None if eligible.as_ref().is_some_and(|f| keeps(&ctx, &key, f, &s)) => {
            debug!(
                deployment = %format!("{ns}/{name}"),
                finished = s.finished,
                "keeping the places of pods that left for the Deployment's pods on cordoned nodes"
            );
            return Ok(Action::requeue(SETTLE_POLL));
        }
        None => (s, Vec::new()),
    };
    patch_deployment(&ctx.client, &d, s.replicas, s.record.as_ref()).await?;
    ctx.release(&key);
    let (reason, note) = match s.replicas {
        _ if !taken.is_empty() => {
            count_settled(count, s.finished, s.undone);
            // Each pod taken in starts its surge here, as one that joined.
            count_times(count, "started", taken.len());
            ("SurgeHandedOver", handed_over_note(&s, &taken))
        }
        _ if s.abandoned => {
            count("abandoned");
            (
                "SurgeAbandoned",
                format!(
                    "spec.replicas was changed to {} by someone else during a surge; their value stays",
                    facts.replicas
                ),
            )
        }
        // Only abandoned pods forgotten: nothing to tell.
        None => return Ok(requeue(&s)),
        Some((from, to)) => {
            count_settled(count, s.finished, s.undone);
            let reason = if s.undone > 0 {
                "SurgeUndone"
            } else {
                "SurgeFinished"
            };
            (
                reason,
                format!(
                    "Returned from {from} to {to} replicas: {} evicted pod(s) terminating or gone, {} eviction(s) canceled",
                    s.finished, s.undone
                ),
            )
        }
    };
    info!(deployment = %format!("{ns}/{name}"), reason, "{note}");
    event(&ctx.recorder, &d, reason, note).await;
    Ok(requeue(&s))
}

/// Whether the places of the pods whose surge finished (`s`) are kept for the Deployment's pods
/// still on cordoned nodes ([`hold`]), none waiting for them yet; `facts` with the autoscaler.
/// The first look that keeps them says so in the log.
fn keeps(ctx: &Context, key: &(String, String), facts: &DeploymentFacts, s: &Settle) -> bool {
    let Ok(Some(record)) = &facts.record else {
        return false;
    };
    // Not even with a pod due: no count (it reads every pod of the cluster cache).
    if !hold(facts, &key.1, s, 1, Duration::ZERO) {
        return false;
    }
    let covered: Vec<&str> = record.pods.iter().map(|p| p.uid.as_str()).collect();
    let (held_for, due) = ctx.held(key, || (ctx.cordoned)(&key.0, &key.1, &covered));
    let kept = hold(facts, &key.1, s, due, held_for);
    if kept && held_for.is_zero() {
        info!(
            deployment = %format!("{}/{}", key.0, key.1),
            due,
            "keeping the surge's place of {} pod(s) that left for the Deployment's {due} pod(s) on cordoned nodes, \
             for {} s at most",
            s.finished,
            HOLD_MAX.as_secs()
        );
    }
    // Given back: the clock stays until the write is done ([`Context::release`]), so that a
    // write that fails does not start another 2 minutes.
    kept
}

/// `facts` with the autoscaler scaling Deployment `name` of namespace `ns`; `None` while the
/// autoscalers' cache has not synced.
fn with_autoscaler(
    ctx: &Context,
    ns: &str,
    name: &str,
    facts: &DeploymentFacts,
) -> Option<DeploymentFacts> {
    let autoscalers = ctx.autoscalers.in_namespace(ns)?;
    Some(DeploymentFacts {
        hpa: scaling(autoscalers.iter().map(AsRef::as_ref), "Deployment", name),
        ..facts.clone()
    })
}

/// [`settle`]'s write `s` with the finished pods' places handed to the pods waiting to join the
/// surge of Deployment `name` in namespace `ns` ([`hand_over`]: [`waiting_to_join`] through
/// this interceptor, and neither covered nor abandoned by the surge), and those pods; `None` to
/// give the places back. `facts` with the autoscaler, of a Deployment [`may_hand_over`] allows.
async fn handed_over(
    ctx: &Context,
    ns: &str,
    name: &str,
    facts: &DeploymentFacts,
    s: &Settle,
) -> Result<Option<(Settle, Vec<SurgedPod>)>, Error> {
    let waiting = waiting_to_join(&ctx.requests, &ctx.pods, ns, name, super::NAME).await?;
    Ok(hand_over(facts, s, &waiting))
}

/// The pods of Deployment `name` in namespace `ns` waiting for a place in a surge through
/// `interceptor` (shared with the HorizontalPodAutoscaler interceptor's settler), oldest request
/// first: an EvictionRequest, not ended, whose active interceptor is `interceptor`, for an
/// active pod of the Deployment ([`active_in`]), from the caches (the runner's `requests`, the
/// interceptors' `pods`). Whether a surge already covers them is the caller's to decide.
pub(crate) async fn waiting_to_join(
    requests: &Store<EvictionRequest>,
    pods: &PodCache,
    ns: &str,
    name: &str,
    interceptor: &str,
) -> Result<Vec<SurgedPod>, Error> {
    let mut candidates: Vec<Arc<EvictionRequest>> = requests
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns))
        // A pod of the Deployment is named `<name>-<pod-template-hash>-<suffix>`: no read of
        // the pods of other Deployments (`active_in` decides on those that pass).
        .filter(|r| r.spec.target.pod.name.starts_with(&format!("{name}-")))
        .filter(|r| {
            r.status.as_ref().is_some_and(|st| {
                !st.is_terminal()
                    && !st.is_true(CONDITION_CANCELED)
                    && st.active_interceptors.first().map(String::as_str) == Some(interceptor)
            })
        })
        .collect();
    candidates.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    let mut waiting = Vec::new();
    for r in candidates {
        let p = SurgedPod {
            name: r.spec.target.pod.name.clone(),
            uid: r.name_any(),
        };
        let pod = pods
            .get(ns, &p.name, &p.uid)
            .await
            .map_err(|e| Error::Read(format!("pod {}", p.name), e))?;
        if pod
            .is_some_and(|pod| pod.metadata.uid.as_deref() == Some(&p.uid) && active_in(&pod, name))
        {
            waiting.push(p);
        }
    }
    Ok(waiting)
}

/// The event's note of a settling that handed places over ([`handed_over`]).
fn handed_over_note(s: &Settle, taken: &[SurgedPod]) -> String {
    let names: Vec<&str> = taken.iter().map(|p| p.name.as_str()).collect();
    let replicas = match s.replicas {
        Some((from, to)) => format!("Returned from {from} to {to} replicas"),
        None => "Kept the replicas".to_string(),
    };
    format!(
        "{replicas}: {} evicted pod(s) terminating or gone, their place in the surge handed to pod(s) {} waiting for it",
        s.finished,
        names.join(", ")
    )
}

/// Counts `n` surges with `result` in a settler's metric (`count`: the Deployment
/// interceptor's or, shared, the HorizontalPodAutoscaler interceptor's).
pub(crate) fn count_times(count: fn(&'static str), result: &'static str, n: usize) {
    for _ in 0..n {
        count(result);
    }
}

/// Counts the surges a settling write ended: `finished` (pods gone), `undone` (kept).
pub(crate) fn count_settled(count: fn(&'static str), finished: usize, undone: usize) {
    count_times(count, "finished", finished);
    count_times(count, "undone", undone);
}

fn requeue(s: &super::decide::Settle) -> Action {
    if s.record.is_some() {
        Action::requeue(SETTLE_POLL)
    } else {
        Action::await_change()
    }
}
