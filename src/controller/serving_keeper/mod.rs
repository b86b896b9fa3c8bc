//! The keeper of the `evictord.dev/serving` readiness gate (SPEC 6.4). It runs on every replica,
//! not only on the leader, so that neither a leader change nor a slow election ever holds new
//! pods unready: a gated pod is Ready only once its condition is `True`.
//!
//! On the shared caches (pods, EvictionRequests) it sets the condition `True` on each gated pod as
//! soon as it sees it without one, and gives a pod the `endpoints.evictord.dev` interceptor made
//! unready back to its Services when its eviction was canceled or was still refused
//! `--serving-restore-after` after the interceptor's turn ([`decide::keep`]). Before giving a pod
//! back it reads the pod's EvictionRequest live (a lagging cache must not undo a drain), and every
//! write is one strategic merge patch of the pod's status guarded by the cached pod's
//! resourceVersion: several replicas may race, one write wins, and a pod that changed meanwhile
//! is looked at again when its new version arrives.

pub mod decide;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::decide::{Keep, keep, request_state};
use crate::api::EvictionRequest;
use crate::cluster::{CachedPod, Caches};
use crate::controller::{is_conflict, resync_ticks};
use crate::metrics::{ResultLabel, metrics};
use crate::recorder::{Event, EventType, Recorder};
use crate::serving::{ConditionWrite, condition_patch};

/// What the keeper needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// The shared caches.
    pub caches: Arc<Caches>,
    /// Events on the pods given back.
    pub recorder: Recorder,
    /// `--serving-restore-after`.
    pub restore_after: Duration,
}

/// Errors of one look at a pod (retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the pod's EvictionRequest failed.
    #[error("reading the EvictionRequest of pod {0}: {1}")]
    Request(String, #[source] kube::Error),
    /// Writing the condition failed (409 when the pod changed meanwhile).
    #[error("writing the evictord.dev/serving condition of pod {0}: {1}")]
    Condition(String, #[source] kube::Error),
}

fn key(pod: &CachedPod) -> String {
    format!("{}/{}", pod.namespace(), pod.name())
}

/// Runs the keeper until `shutdown`, once the caches have synced.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let caches = ctx.caches.clone();
    tokio::select! {
        () = caches.wait_synced() => {}
        () = shutdown.cancelled() => return,
    }
    info!("keeping the evictord.dev/serving readiness gate of pods");
    let gated = caches
        .pods
        .changes()
        .filter(|p| std::future::ready(p.spec.serving_gate));
    let by_request = caches.clone();
    let sweep = caches.clone();
    // Every gated pod at start and every resync (what a lagging change stream skipped).
    let resync = resync_ticks().flat_map(move |()| {
        let refs: Vec<ObjectRef<CachedPod>> = sweep
            .pods
            .all()
            .iter()
            .filter(|p| p.spec.serving_gate)
            .map(|p| ObjectRef::from_obj(p.as_ref()))
            .collect();
        futures::stream::iter(refs)
    });
    Controller::for_shared_stream(gated, caches.pods.store().clone())
        .watches_shared_stream(caches.eviction_requests.changes(), move |r| {
            let ns = r.metadata.namespace.clone().unwrap_or_default();
            let name = &r.spec.target.pod.name;
            by_request
                .pods
                .get(Some(&ns), name)
                .filter(|p| p.spec.serving_gate)
                .map(|p| ObjectRef::from_obj(p.as_ref()))
        })
        .reconcile_on(resync)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "serving gate reconcile did not complete");
            }
        })
        .await;
}

fn error_policy(_pod: Arc<CachedPod>, error: &Error, _ctx: Arc<Context>) -> Action {
    match error {
        // Another replica wrote first, or the pod changed: its next version says.
        Error::Condition(_, e) if is_conflict(e) => {
            debug!(%error, "concurrent write of the pod; looking again");
            Action::requeue(Duration::from_secs(1))
        }
        _ => {
            warn!(%error, "serving gate step failed; retrying");
            Action::requeue(Duration::from_secs(2))
        }
    }
}

async fn reconcile(pod: Arc<CachedPod>, ctx: Arc<Context>) -> Result<Action, Error> {
    // The latest cached copy: the trigger may be older than the store.
    let pod = ctx
        .caches
        .pods
        .get(Some(pod.namespace()), pod.name())
        .unwrap_or(pod);
    let cached = ctx
        .caches
        .eviction_requests
        .get(Some(pod.namespace()), pod.uid());
    let now = Timestamp::now();
    let mut decision = keep(
        &pod,
        request_state(cached.as_deref()),
        now,
        ctx.restore_after,
    );
    if matches!(&decision, Keep::Serve { result, .. } if *result != "serving") {
        // Giving a pod back undoes a drain's step: decide again on the request as it is now.
        let api: Api<EvictionRequest> = Api::namespaced(ctx.client.clone(), pod.namespace());
        let live = api
            .get_opt(pod.uid())
            .await
            .map_err(|e| Error::Request(key(&pod), e))?;
        decision = keep(&pod, request_state(live.as_ref()), now, ctx.restore_after);
    }
    match decision {
        Keep::Nothing => Ok(Action::await_change()),
        Keep::RecheckAt(at) => Ok(Action::requeue(
            Duration::try_from(at.duration_since(now))
                .unwrap_or_default()
                .max(Duration::from_secs(1)),
        )),
        Keep::Serve {
            result,
            reason,
            message,
        } => {
            let write = ConditionWrite {
                status: true,
                reason,
                message,
                transition: now,
                probe: None,
            };
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), pod.namespace());
            let patch = condition_patch(
                pod.metadata.resource_version.as_deref().unwrap_or_default(),
                &write,
            );
            api.patch_status(
                pod.name(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map_err(|e| Error::Condition(key(&pod), e))?;
            metrics()
                .serving_gate_writes
                .get_or_create(&ResultLabel { result })
                .inc();
            if result == "serving" {
                debug!(pod = %key(&pod), "evictord.dev/serving set True");
            } else {
                info!(pod = %key(&pod), "{}", write.message);
                given_back(&ctx, &pod, result, &write.message).await;
            }
            Ok(Action::await_change())
        }
    }
}

/// The event of a pod given back to its Services (failures are logged only).
async fn given_back(ctx: &Context, pod: &CachedPod, result: &str, note: &str) {
    let (type_, reason) = if result == "refused" {
        (EventType::Warning, "ServingRestoredEvictionRefused")
    } else {
        (EventType::Normal, "ServingRestored")
    };
    let e = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Restore".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&e, &pod.object_ref(&())).await {
        warn!(error = %err, reason, "could not record event");
    }
}
