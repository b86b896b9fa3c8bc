//! The settler: a kube-runtime `Controller` on HorizontalPodAutoscalers that carry a surge record.
//! For each covered pod it finds the [`Fate`](crate::interceptor::deployment::decide::Fate) (pod gone; request canceled or deleted; pending,
//! with the Deployment interceptor's own [`fate`]) and writes [`settle`]'s result, so the limits
//! return to what they were once the pods are terminating or gone, also after a restart or on a newly elected
//! evictord.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::decide::{Settle, Taken, hand_over, settle};
use super::interceptor::{count, event, patch_autoscaler, recorder};
use super::record::AutoscalerFacts;
use super::workload::WorkloadFacts;
use super::{Error, SETTLE_POLL, discovery, is_conflict};
use crate::api::EvictionRequest;
use crate::interceptor::PodCache;
use crate::interceptor::deployment::surge::SurgedPod;
use crate::interceptor::deployment::{count_settled, count_times, fate, waiting_to_join};
use crate::interceptor::deployments::DeploymentKey;
use crate::recorder::Recorder;

struct Context {
    client: Client,
    pods: PodCache,
    requests: Store<EvictionRequest>,
    /// The shared watch's Deployments: a Deployment target's facts, for a hand-over.
    deployments: Store<Deployment>,
    recorder: Recorder,
    resource: ApiResource,
    /// Where the Deployments whose surge a write gave room back go (their requests waiting for
    /// room look again).
    room_freed: UnboundedSender<DeploymentKey>,
}

/// Runs the settler on the autoscalers of `autoscaling/{version}` until `shutdown`, reading the
/// covered pods from `pods` and their requests from `requests` (the runner's caches), a
/// Deployment target from `deployments` (the shared watch's store); sends the target of each
/// autoscaler it writes to `room_freed`, when that is a Deployment.
pub(super) async fn run(
    client: Client,
    pods: PodCache,
    requests: Store<EvictionRequest>,
    deployments: Store<Deployment>,
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
        deployments,
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
    let (s, taken) = match handed_over(&ctx, &ns, &facts, &s).await? {
        Some(handed) => handed,
        None => (s, Vec::new()),
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
        None if !taken.is_empty() => {
            count_settled(count, s.finished, s.undone);
            // Each pod taken in starts its surge here, as one that joined.
            count_times(count, "started", taken.len());
            ("SurgeHandedOver", handed_over_note(&s, &taken))
        }
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
            count_settled(count, s.finished, s.undone);
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

/// [`settle`]'s write `s` of the autoscaler with facts `facts` in namespace `ns`, with the
/// finished pods' places handed to the pods of its Deployment target waiting to join the surge
/// ([`hand_over`]: [`waiting_to_join`] through this interceptor), and those pods; `None` to give
/// the places back (also while the Deployment is not in the shared watch's store).
async fn handed_over(
    ctx: &Context,
    ns: &str,
    facts: &AutoscalerFacts,
    s: &Settle,
) -> Result<Option<(Settle, Vec<SurgedPod>)>, Error> {
    let target = &facts.autoscaler.target;
    if s.finished == 0 || s.taken.is_some() || !target.is_deployment() {
        return Ok(None);
    }
    let Some(d) = ctx
        .deployments
        .get(&ObjectRef::new(&target.name).within(ns))
    else {
        return Ok(None);
    };
    let w = WorkloadFacts::of_deployment(target, &d);
    let waiting = waiting_to_join(&ctx.requests, &ctx.pods, ns, &target.name, super::NAME).await?;
    Ok(hand_over(facts, &w, s, &waiting))
}

/// The event's note of a settling that handed places over ([`handed_over`]).
fn handed_over_note(s: &Settle, taken: &[SurgedPod]) -> String {
    let names: Vec<&str> = taken.iter().map(|p| p.name.as_str()).collect();
    let (from, to) = (s.write.from, s.write.to);
    let floor = if from.min == to.min {
        format!("Kept minReplicas at {}", to.min)
    } else {
        format!("Returned minReplicas from {} to {}", from.min, to.min)
    };
    format!(
        "{floor}: {} evicted pod(s) terminating or gone, their place in the surge handed to pod(s) {} waiting for it",
        s.finished,
        names.join(", ")
    )
}

fn requeue(s: &Settle) -> Action {
    if s.write.record.is_some() {
        Action::requeue(SETTLE_POLL)
    } else {
        Action::await_change()
    }
}
