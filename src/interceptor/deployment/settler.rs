//! The settler: a kube-runtime `Controller` on Deployments that carry a surge record. For each
//! covered pod it finds the [`Fate`] (pod terminating or gone; request canceled or deleted; pending) and writes
//! [`settle`]'s result, so `spec.replicas` returns to its base once the pods leave, also after
//! a restart or on a newly elected evictord.

use std::sync::Arc;

use crate::recorder::Recorder;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ReflectHandle, Store};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::decide::{Fate, has_left, settle};
use super::interceptor::{count, event, is_conflict, patch_deployment, recorder};
use super::surge::{DeploymentFacts, SurgedPod};
use super::{Error, POLL};
use crate::api::{CONDITION_CANCELED, EvictionRequest};

struct Context {
    client: Client,
    recorder: Recorder,
}

/// Runs the settler until `shutdown`, on the shared watch's `changes` and `store`.
pub(super) async fn run(
    client: Client,
    changes: ReflectHandle<Deployment>,
    store: Store<Deployment>,
    shutdown: CancellationToken,
) {
    let ctx = Arc::new(Context {
        recorder: recorder(&client),
        client,
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
/// settler).
pub(crate) async fn fate(client: &Client, ns: &str, p: &SurgedPod) -> Result<Fate, Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pods
        .get_opt(&p.name)
        .await
        .map_err(|e| Error::Read(format!("pod {}", p.name), e))?;
    let read = pod.as_ref().map(|pod| {
        (
            pod.metadata.uid.as_deref().unwrap_or_default(),
            pod.metadata.deletion_timestamp.is_some(),
        )
    });
    if has_left(read, &p.uid) {
        return Ok(Fate::Gone);
    }
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let request = requests
        .get_opt(&p.uid)
        .await
        .map_err(|e| Error::Read(format!("EvictionRequest {}", p.uid), e))?;
    Ok(match request {
        None => Fate::Kept,
        Some(r)
            if r.status
                .as_ref()
                .is_some_and(|s| s.is_true(CONDITION_CANCELED)) =>
        {
            Fate::Kept
        }
        Some(_) => Fate::Pending,
    })
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let facts = DeploymentFacts::read(&d, None);
    let Ok(Some(record)) = &facts.record else {
        return Ok(Action::await_change());
    };
    let ns = d.namespace().unwrap_or_default();
    let mut fates = Vec::with_capacity(record.pods.len() + record.abandoned.len());
    for p in record.pods.iter().chain(&record.abandoned) {
        fates.push((p.clone(), fate(&ctx.client, &ns, p).await?));
    }
    let Some(s) = settle(&facts, &fates) else {
        return Ok(Action::requeue(POLL));
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
        Action::requeue(POLL)
    } else {
        Action::await_change()
    }
}
