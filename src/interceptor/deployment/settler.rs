//! The settler: a kube-runtime `Controller` on Deployments that carry a surge record. For each
//! covered pod it finds the [`Fate`] (pod terminating or gone; request canceled or deleted; pending) and writes
//! [`settle`]'s result, so `spec.replicas` returns to its base once the pods leave, also after
//! a restart or on a newly elected evictord.

use std::sync::Arc;

use crate::recorder::Recorder;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::decide::{Fate, counted_out, has_left, settle};
use super::interceptor::{count, event, is_conflict, patch_deployment, recorder};
use super::surge::{DeploymentFacts, SurgedPod};
use super::{Error, SETTLE_POLL};
use crate::api::{CONDITION_CANCELED, EvictionRequest};
use crate::interceptor::PodCache;

struct Context {
    client: Client,
    pods: PodCache,
    requests: Store<EvictionRequest>,
    recorder: Recorder,
}

/// Runs the settler until `shutdown`, on the shared watch's `changes` and `store`, reading the
/// covered pods from `pods` and their requests from `requests` (the runner's caches).
pub(super) async fn run(
    client: Client,
    pods: PodCache,
    requests: Store<EvictionRequest>,
    changes: ReflectHandle<Deployment>,
    store: Store<Deployment>,
    shutdown: CancellationToken,
) {
    let ctx = Arc::new(Context {
        recorder: recorder(&client),
        client,
        pods,
        requests,
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
    patch_deployment(&ctx.client, &d, s.replicas, s.record.as_ref()).await?;
    let name = d.name_any();
    let (reason, note) = match s.replicas {
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
            for _ in 0..s.finished {
                count("finished");
            }
            for _ in 0..s.undone {
                count("undone");
            }
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

fn requeue(s: &super::decide::Settle) -> Action {
    if s.record.is_some() {
        Action::requeue(SETTLE_POLL)
    } else {
        Action::await_change()
    }
}
