//! The I/O shell of the HPA interceptor on active requests: find the pod's controllers and the
//! autoscaler of one of them, read the autoscaler's target ([`Reads`]: from the watch caches for
//! a Deployment, through its scale subresource and status for other kinds), take
//! [`on_activation`]'s step, and write the autoscaler with one guarded JSON patch
//! ([`patch_autoscaler`], shared with the settler).
//!
//! A request waiting on a Deployment target is woken by the Deployment's changes, by the
//! readiness of its pods and by the settler freeing room in its surge; every other request that
//! waits (another kind of target, a look to take again after the interceptor's own write) is
//! registered to be polled ([`HpaInterceptor::polled_by`]).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::Value;
use tracing::{debug, info, warn};

use super::decide::{Step, Write, covered_wait, no_room, on_activation, scale_to_floor};
use super::reads::{Caches, PodsOf, Reads};
use super::record::{AutoscalerFacts, autoscaler_patch};
use super::target::{Autoscaler, Scaled, Workload, autoscaler_for, chain_text};
use super::{Error, NAME, discovery, is_conflict};
use crate::api::EvictionRequest;
use crate::interceptor::autoscalers::Autoscalers;
use crate::interceptor::deployment::decide::{confirmed_over, waiting_to_join};
use crate::interceptor::deployment::surge::SurgedPod;
use crate::interceptor::deployment::unobserved::Unobserved;
use crate::interceptor::deployments::DeploymentKey;
use crate::interceptor::replicasets::ReplicaSets;
use crate::interceptor::workload_pods::WorkloadPods;
use crate::interceptor::{BoxError, Interceptor, Progress, Waiters};
use crate::metrics::{ResultLabel, metrics};
use crate::recorder::{Event, EventType, Recorder, reporter};

/// How often one look at a request retries after a concurrent autoscaler write.
const CONFLICT_RETRIES: usize = 5;

/// The `horizontalpodautoscaler.autoscaling.k8s.io` interceptor.
pub struct HpaInterceptor {
    client: Client,
    recorder: Recorder,
    /// HorizontalPodAutoscalers in the version discovery chose; `None`: the server has none.
    autoscalers: Option<ApiResource>,
    /// The reads of pods' controllers and of autoscalers' targets.
    reads: Reads,
    /// The shared autoscaler cache (a LIST while it has not synced).
    cache: Autoscalers,
    /// Since when each target Deployment's latest generation has been seen unobserved.
    unobserved: Unobserved,
    /// The requests waiting on their target Deployment, when something wakes them on its
    /// changes.
    waiters: Option<Waiters<DeploymentKey>>,
    /// The requests waiting for the readiness of their target Deployment's pods.
    readiness_waiters: Option<Waiters<DeploymentKey>>,
    /// The requests that wait with no watch to wake them, for a poll to wake.
    polled: Option<Waiters<()>>,
}

pub(super) fn recorder(client: &Client) -> Recorder {
    Recorder::new(client.clone(), reporter("evictord"))
}

pub(super) fn count(result: &'static str) {
    metrics()
        .hpa_surges
        .get_or_create(&ResultLabel { result })
        .inc();
}

/// Records an event on the autoscaler (failures are logged only).
pub(super) async fn event(
    recorder: &Recorder,
    hpa: &DynamicObject,
    resource: &ApiResource,
    reason: &str,
    note: String,
) {
    let e = Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Surge".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&e, &hpa.object_ref(resource)).await {
        warn!(error = %err, reason, "could not record event");
    }
}

/// One JSON patch of autoscaler `hpa` ([`autoscaler_patch`]): it fails unless `hpa` is unchanged
/// and its limits are still `write.from`.
pub(super) async fn patch_autoscaler(
    client: &Client,
    resource: &ApiResource,
    hpa: &DynamicObject,
    write: &Write,
) -> Result<DynamicObject, Error> {
    let name = hpa.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &hpa.namespace().unwrap_or_default(),
        resource,
    );
    let ops = autoscaler_patch(
        &hpa.resource_version().unwrap_or_default(),
        hpa.metadata.annotations.as_ref(),
        write.from,
        write.to,
        write.record.as_ref(),
    );
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
        .map_err(|e| Error::Patch(name.clone(), kube::Error::SerdeError(e)))?;
    api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .map_err(|e| Error::Patch(name, e))
}

impl HpaInterceptor {
    /// The interceptor, writing with `client`, reading autoscalers in `autoscaling/{version}`
    /// (`None`: the server serves none), first from `cache`.
    pub fn new(client: Client, version: Option<&str>, cache: Autoscalers) -> Self {
        Self {
            recorder: recorder(&client),
            autoscalers: version.map(discovery::autoscaler_resource),
            reads: Reads::new(client.clone()),
            cache,
            unobserved: Unobserved::default(),
            waiters: None,
            readiness_waiters: None,
            polled: None,
            client,
        }
    }

    /// Reads Deployment targets from `deployments` (the shared watch's store), the pods'
    /// ReplicaSets from `replicasets` and the readiness of a Deployment target's pods from
    /// `pods`, instead of a GET of each (and of the Deployment's scale) and a LIST of the pods
    /// at every look; registers a request that waits for that readiness with
    /// `readiness_waiters`, for whoever feeds `pods`' changes to them.
    pub fn reading(
        mut self,
        deployments: Store<Deployment>,
        replicasets: ReplicaSets,
        pods: WorkloadPods,
        readiness_waiters: Waiters<DeploymentKey>,
    ) -> Self {
        self.reads = Reads::new(self.client.clone()).with_caches(Caches {
            replicasets,
            deployments,
            pods,
        });
        self.readiness_waiters = Some(readiness_waiters);
        self
    }

    /// Registers each request that waits for a Deployment to scale with `waiters`, under that
    /// Deployment, for whoever feeds the Deployments' changes to [`Waiters::woken_by`] (without,
    /// and for other kinds of workload, a request is looked at again at the poll interval only).
    pub fn woken_by(mut self, waiters: Waiters<DeploymentKey>) -> Self {
        self.waiters = Some(waiters);
        self
    }

    /// Registers each request that waits with nothing to wake it (no watch of its target, or
    /// a look to take again soon) with `polled`, for whoever wakes them at a short interval.
    pub fn polled_by(mut self, polled: Waiters<()>) -> Self {
        self.polled = Some(polled);
        self
    }

    async fn step(
        &self,
        request: &EvictionRequest,
        pod: &Pod,
        resource: &ApiResource,
    ) -> Result<(Progress, Woken), Error> {
        let ns = pod.namespace().unwrap_or_default();
        let skip = |message: String| {
            count("skipped");
            Ok((Progress::complete(message), Woken::Polled))
        };
        let chain = self.reads.chain(&ns, pod).await?;
        if chain.is_empty() {
            return skip(format!(
                "no surge: pod {} has no controller",
                pod.name_any()
            ));
        }
        let target = SurgedPod {
            name: pod.name_any(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, resource);
        for attempt in 0..CONFLICT_RETRIES {
            // The shared cache first; after a conflict (a cached copy behind a write) the API.
            let items: Vec<DynamicObject> = match self.cache.in_namespace(&ns) {
                Some(cached) if attempt == 0 => cached.iter().map(|h| (**h).clone()).collect(),
                _ => {
                    api.list(&ListParams::default())
                        .await
                        .map_err(|e| Error::Read("HorizontalPodAutoscalers".into(), e))?
                        .items
                }
            };
            let facts: Vec<AutoscalerFacts> = items.iter().map(AutoscalerFacts::read).collect();
            let refs: Vec<Autoscaler> = facts.iter().map(|f| f.autoscaler.clone()).collect();
            let index = match autoscaler_for(&chain, &refs) {
                Scaled::No => {
                    return skip(format!(
                        "no surge: no HorizontalPodAutoscaler scales {}",
                        chain_text(&chain)
                    ));
                }
                Scaled::Ambiguous {
                    autoscalers,
                    workload,
                } => {
                    return skip(format!(
                        "no surge: HorizontalPodAutoscalers {} all scale {workload}: they fight each other",
                        autoscalers.join(", ")
                    ));
                }
                // Names are unique in a namespace.
                Scaled::By { autoscaler, .. } => refs
                    .iter()
                    .position(|r| r.name == autoscaler.name)
                    .unwrap_or_default(),
            };
            let (h, hpa) = (&facts[index], &items[index]);
            let name = &h.autoscaler.name;
            let scaled = &h.autoscaler.target;
            // A Deployment target's changes wake the request, when something feeds them.
            let woken = match &self.waiters {
                Some(w) if scaled.is_deployment() => {
                    // Before the workload's read: a change after it wakes the request.
                    w.wait((ns.clone(), scaled.name.clone()), request);
                    Woken::Watched
                }
                _ => Woken::Polled,
            };
            // From the caches. A conflict is the autoscaler's (read live above): the workload
            // is read live only from the third attempt on, as the Deployment interceptor does.
            let (workload, pods) = match self.reads.workload(&ns, scaled, attempt >= 2).await? {
                Ok(w) => w,
                Err(why) => {
                    return skip(format!(
                        "no surge: HorizontalPodAutoscaler {name} scales {scaled}, which cannot be read: {why}"
                    ));
                }
            };
            let unobserved_for = workload.deployment.as_ref().map_or(Duration::ZERO, |d| {
                self.unobserved.seen_for(
                    &format!("{ns}/{}", scaled.name),
                    d.facts.generation,
                    d.facts.observed_generation,
                )
            });
            let step = on_activation(h, &workload, &target, unobserved_for);
            // A wait to join keeps the message of a wait for room ([`waiting_to_join`]).
            let covered = matches!(&h.record, Ok(Some(r)) if r.covers(&target.uid));
            let shown = request
                .status
                .as_ref()
                .and_then(|s| s.interceptor(NAME))
                .and_then(|e| e.message.as_deref());
            let scale_up = match &step {
                Step::Join(write) => scale_to_floor(workload.replicas, write.to.min),
                _ => None,
            };
            // A request that surges or waits for a surge will want the readiness of the
            // Deployment's pods: their watch lists now, and wakes the request when it changes.
            if let Some(pods) = &pods
                && matches!(step, Step::Join(_) | Step::Wait(_) | Step::Ready(_))
            {
                self.reads.watch(pods);
            }
            let (reason, write, note, progress) = match step {
                Step::Skip(message) => return skip(message),
                Step::Wait(message) if covered => {
                    return Ok((Progress::in_progress(message), woken));
                }
                Step::Wait(wait) => {
                    debug!(autoscaler = %name, "waiting to join the surge: {wait}");
                    let room = no_room(&workload.workload, name);
                    let message = waiting_to_join(shown, room, wait);
                    return Ok((Progress::in_progress(message), woken));
                }
                Step::Ready(message) => {
                    if let (Ok(Some(record)), Some(pods)) = (&h.record, &pods) {
                        // Before the read: a change of the pods' readiness after it wakes the
                        // request.
                        if let (Some(w), PodsOf::Deployment(key, _)) =
                            (&self.readiness_waiters, pods)
                        {
                            w.wait(key.clone(), request);
                        }
                        if let Err(why) = confirmed_over(
                            record.base,
                            |uid| record.covers(uid),
                            &self.reads.readiness(&ns, pods).await?,
                        ) {
                            // The surge's message, the same while it is not available yet.
                            debug!(autoscaler = %name, "surged, not ready yet: {why}");
                            let message = covered_wait(name, &workload.workload, record);
                            return Ok((Progress::in_progress(message), woken));
                        }
                    }
                    observe_time_to_available(request);
                    return Ok((Progress::complete(message), woken));
                }
                Step::Join(write) => {
                    let (from, to) = (write.from, write.to);
                    let ceiling = if to.max == from.max {
                        String::new()
                    } else {
                        format!(" and maxReplicas from {} to {}", from.max, to.max)
                    };
                    let raised = format!(
                        "raised minReplicas from {} to {}{ceiling}",
                        from.min, to.min
                    );
                    // The message of the looks that follow ([`covered_wait`]): no second write.
                    let surged = write.record.as_ref().map_or_else(
                        || format!("{raised} of HorizontalPodAutoscaler {name}"),
                        |r| covered_wait(name, &workload.workload, r),
                    );
                    (
                        Some("SurgeStarted"),
                        write,
                        format!(
                            "{} for the eviction of pod {}",
                            capitalized(&raised),
                            target.name
                        ),
                        // The workload scales to the raised floor: its changes wake the request.
                        (Progress::in_progress(surged), woken),
                    )
                }
                Step::Abandon { write, message } => (
                    Some("SurgeAbandoned"),
                    write,
                    message.clone(),
                    (Progress::complete(message), woken),
                ),
                // Nothing the workload does follows: the next look is polled.
                Step::Adopt { write, message } => (
                    None,
                    write,
                    message.clone(),
                    (Progress::in_progress(message), Woken::Polled),
                ),
            };
            match patch_autoscaler(&self.client, resource, hpa, &write).await {
                Ok(_) => {
                    info!(autoscaler = %format!("{ns}/{name}"), "{note}");
                    if let Some(reason) = reason {
                        count(if reason == "SurgeStarted" {
                            "started"
                        } else {
                            "abandoned"
                        });
                        event(&self.recorder, hpa, resource, reason, note).await;
                    }
                    if let Some(replicas) = scale_up {
                        self.scale(&ns, scaled, workload.replicas, replicas).await;
                    }
                    return Ok(progress);
                }
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok((
            Progress::in_progress("the HorizontalPodAutoscaler keeps changing; trying again"),
            Woken::Polled,
        ))
    }
}

impl HpaInterceptor {
    /// Scales `target` from `from` to `to` replicas through its scale subresource, as its
    /// autoscaler will at its next sync ([`scale_to_floor`]): one JSON patch that tests the
    /// replicas read, so that a scaling by anyone else in between (the autoscaler's own) wins.
    /// A failure is only logged: the autoscaler scales the workload all the same, later.
    async fn scale(&self, ns: &str, target: &Workload, from: i32, to: i32) {
        let resource = if target.is_deployment() {
            ApiResource::erase::<Deployment>(&())
        } else {
            match self.reads.resource_of(target).await {
                Ok(Ok(r)) => r,
                _ => return,
            }
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &resource);
        let ops = serde_json::json!([
            {"op": "test", "path": "/spec/replicas", "value": from},
            {"op": "replace", "path": "/spec/replicas", "value": to},
        ]);
        let Ok(patch) = serde_json::from_value::<json_patch::Patch>(ops) else {
            return;
        };
        match api
            .patch_scale(
                &target.name,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Ok(_) => info!(
                namespace = ns,
                "scaled {target} from {from} to {to} replicas, the autoscaler's raised floor"
            ),
            // Scaled by someone else meanwhile (the autoscaler), or not ours to scale.
            Err(kube::Error::Api(e)) if matches!(e.code, 403 | 404 | 409 | 422) => debug!(
                namespace = ns,
                code = e.code,
                "left the scaling of {target} to its autoscaler: {}",
                e.message
            ),
            Err(e) => warn!(
                namespace = ns,
                error = %e,
                "could not scale {target} to the autoscaler's raised floor; the autoscaler will"
            ),
        }
    }
}

/// What wakes the next look at a request still in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Woken {
    /// The watches of its target Deployment and of its pods.
    Watched,
    /// Only a poll.
    Polled,
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn observe_time_to_available(request: &EvictionRequest) {
    let entry = request.status.as_ref().and_then(|s| s.interceptor(NAME));
    if let Some(start) = entry
        .filter(|e| e.completion_time.is_none())
        .and_then(|e| e.start_time.as_ref())
    {
        let secs = Timestamp::now().duration_since(start.0).as_secs_f64();
        metrics().hpa_time_to_available.observe(secs.max(0.0));
    }
}

impl Interceptor for HpaInterceptor {
    fn name(&self) -> &str {
        NAME
    }

    async fn progress(
        &self,
        request: &EvictionRequest,
        pod: Option<&Pod>,
    ) -> Result<Progress, BoxError> {
        let Some(pod) = pod else {
            return Ok(Progress::complete("no surge: the pod is gone"));
        };
        let Some(resource) = &self.autoscalers else {
            count("skipped");
            return Ok(Progress::complete(
                "no surge: the server serves no autoscaling API (no HorizontalPodAutoscalers)",
            ));
        };
        let progress = self.step(request, pod, resource).await;
        match &progress {
            Ok((Progress::InProgress { .. }, Woken::Watched)) => {}
            Ok((Progress::InProgress { .. }, Woken::Polled)) => {
                if let Some(p) = &self.polled {
                    p.wait((), request);
                }
            }
            _ => {
                for w in [&self.waiters, &self.readiness_waiters]
                    .into_iter()
                    .flatten()
                {
                    w.forget(request);
                }
                if let Some(p) = &self.polled {
                    p.forget(request);
                }
            }
        }
        Ok(progress?.0)
    }
}
