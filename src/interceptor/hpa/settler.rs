//! The settler: a kube-runtime `Controller` on HorizontalPodAutoscalers that carry a surge record.
//! For each covered pod it finds the [`Fate`](crate::interceptor::deployment::decide::Fate) (pod gone; request canceled or deleted; pending,
//! with the Deployment interceptor's own [`fate`]) and writes [`settle`]'s result, so the limits
//! return to what they were once the pods are terminating or gone, also after a restart or on a newly elected
//! evictord.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::decide::{Settle, Taken, settle};
use super::interceptor::{count, event, patch_autoscaler, recorder};
use super::record::AutoscalerFacts;
use super::{Error, SETTLE_POLL, discovery, is_conflict};
use crate::api::EvictionRequest;
use crate::interceptor::PodCache;
use crate::interceptor::deployment::fate;
use crate::interceptor::deployments::DeploymentKey;
use crate::recorder::Recorder;

struct Context {
    client: Client,
    pods: PodCache,
    requests: Store<EvictionRequest>,
    recorder: Recorder,
    resource: ApiResource,
    /// Where the Deployments whose surge a write gave room back go (their requests waiting for
    /// room look again).
    room_freed: UnboundedSender<DeploymentKey>,
}

/// Runs the settler on the autoscalers of `autoscaling/{version}` until `shutdown`, reading the
/// covered pods from `pods` and their requests from `requests` (the runner's caches); sends the
/// target of each autoscaler it writes to `room_freed`, when that is a Deployment.
pub(super) async fn run(
    client: Client,
    pods: PodCache,
    requests: Store<EvictionRequest>,
    version: &str,
    room_freed: UnboundedSender<DeploymentKey>,
    shutdown: CancellationToken,
) {
    let resource = discovery::autoscaler_resource(version);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let ctx = Arc::new(Context {
        recorder: recorder(&client),
        client,
        pods,
        requests,
        resource: resource.clone(),
        room_freed,
    });
    Controller::new_with(api, watcher::Config::default().any_semantic(), resource)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "HPA settler reconcile did not complete");
            }
        })
        .await;
}

fn error_policy(_h: Arc<DynamicObject>, error: &Error, _ctx: Arc<Context>) -> Action {
    if is_conflict(error) {
        Action::requeue(Duration::from_millis(200))
    } else {
        warn!(%error, "settling a raised HorizontalPodAutoscaler failed; retrying");
        Action::requeue(Duration::from_secs(2))
    }
}

async fn reconcile(hpa: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let facts = AutoscalerFacts::read(&hpa);
    let Ok(Some(record)) = &facts.record else {
        return Ok(Action::await_change());
    };
    let ns = hpa.namespace().unwrap_or_default();
    let mut fates = Vec::with_capacity(record.pods.len() + record.abandoned.len());
    for p in record.pods.iter().chain(&record.abandoned) {
        fates.push((
            p.clone(),
            fate(&ctx.client, &ctx.pods, &ctx.requests, &ns, p).await?.0,
        ));
    }
    let Some(s) = settle(&facts, &fates) else {
        return Ok(Action::requeue(SETTLE_POLL));
    };
    patch_autoscaler(&ctx.client, &ctx.resource, &hpa, &s.write).await?;
    if facts.autoscaler.target.is_deployment() {
        // Nobody listening (shutting down) is no error.
        let _ = ctx
            .room_freed
            .send((ns.clone(), facts.autoscaler.target.name.clone()));
    }
    let name = format!("{ns}/{}", hpa.name_any());
    let (from, to) = (s.write.from, s.write.to);
    let (reason, note) = match s.taken {
        Some(Taken::Floor) if !record.pods.is_empty() => {
            count("abandoned");
            (
                "SurgeAbandoned",
                format!(
                    "minReplicas was changed to {} by someone else during a surge; their value stays",
                    from.min
                ),
            )
        }
        Some(taken) => {
            info!(autoscaler = %name, ?taken, "a limit changed by someone else is kept");
            return Ok(requeue(&s));
        }
        // Only abandoned pods forgotten: nothing to tell.
        None if s.finished + s.undone == 0 => return Ok(requeue(&s)),
        None => {
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
            let ceiling = if from.max == to.max {
                String::new()
            } else {
                format!(" and maxReplicas from {} to {}", from.max, to.max)
            };
            (
                reason,
                format!(
                    "Returned minReplicas from {} to {}{ceiling}: {} evicted pod(s) terminating or gone, {} eviction(s) canceled",
                    from.min, to.min, s.finished, s.undone
                ),
            )
        }
    };
    info!(autoscaler = %name, reason, "{note}");
    event(&ctx.recorder, &hpa, &ctx.resource, reason, note).await;
    Ok(requeue(&s))
}

fn requeue(s: &Settle) -> Action {
    if s.write.record.is_some() {
        Action::requeue(SETTLE_POLL)
    } else {
        Action::await_change()
    }
}
