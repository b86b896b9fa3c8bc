//! The I/O shell of the HPA interceptor on active requests: find the pod's controllers and the
//! autoscaler of one of them, read the autoscaler's target through its scale subresource and
//! status, take [`on_activation`]'s step, and write the autoscaler with one guarded JSON patch
//! ([`patch_autoscaler`], shared with the settler).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::core::gvk::GroupVersion;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::Value;
use tracing::{info, warn};

use super::decide::{Step, Write, on_activation};
use super::record::{AutoscalerFacts, autoscaler_patch};
use super::target::{
    Autoscaler, Scaled, Workload, autoscaler_for, chain_text, controller_chain, controller_of,
};
use super::workload::WorkloadFacts;
use super::{Error, NAME, discovery, is_conflict};
use crate::api::EvictionRequest;
use crate::interceptor::autoscalers::Autoscalers;
use crate::interceptor::deployment::decide::{PodReadiness, confirmed_over};
use crate::interceptor::deployment::surge::SurgedPod;
use crate::interceptor::deployment::unobserved::Unobserved;
use crate::interceptor::deployments::DeploymentKey;
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
    /// The resources of scale targets found by discovery (`apiVersion/kind` → resource).
    targets: Mutex<HashMap<String, ApiResource>>,
    /// The shared autoscaler cache (a LIST while it has not synced).
    cache: Autoscalers,
    /// Since when each target Deployment's latest generation has been seen unobserved.
    unobserved: Unobserved,
    /// The requests waiting on their target Deployment, when something wakes them on its
    /// changes.
    waiters: Option<Waiters<DeploymentKey>>,
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

/// Why the object cannot be read at all, when the API error says so (missing, not served, no
/// scale subresource, not allowed); `None` when the server is only unavailable for now.
fn unreadable(e: &kube::Error) -> Option<String> {
    match e {
        // 403 Forbidden, 404 Not Found, 405 Method Not Allowed (no such subresource).
        kube::Error::Api(s) if (403..=405).contains(&s.code) => Some(s.message.clone()),
        kube::Error::Discovery(d) => Some(d.to_string()),
        _ => None,
    }
}

impl HpaInterceptor {
    /// The interceptor, writing with `client`, reading autoscalers in `autoscaling/{version}`
    /// (`None`: the server serves none), first from `cache`.
    pub fn new(client: Client, version: Option<&str>, cache: Autoscalers) -> Self {
        Self {
            recorder: recorder(&client),
            autoscalers: version.map(discovery::autoscaler_resource),
            targets: Mutex::new(HashMap::new()),
            cache,
            unobserved: Unobserved::default(),
            waiters: None,
            client,
        }
    }

    /// Registers each request that waits for a Deployment to scale with `waiters`, under that
    /// Deployment, for whoever feeds the Deployments' changes to [`Waiters::woken_by`] (without,
    /// and for other kinds of workload, a request is looked at again at the poll interval only).
    pub fn woken_by(mut self, waiters: Waiters<DeploymentKey>) -> Self {
        self.waiters = Some(waiters);
        self
    }

    /// The pod's controllers (its own, and a ReplicaSet's).
    async fn chain(&self, ns: &str, pod: &Pod) -> Result<Vec<Workload>, Error> {
        let owner = controller_of(pod.metadata.owner_references.as_ref());
        let above = match owner.map(Workload::owner) {
            Some(w) if w.is_replicaset() => {
                let sets: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
                let rs = sets
                    .get_opt(&w.name)
                    .await
                    .map_err(|e| Error::Read(format!("ReplicaSet {}", w.name), e))?;
                rs.and_then(|rs| controller_of(rs.metadata.owner_references.as_ref()).cloned())
            }
            _ => None,
        };
        Ok(controller_chain(owner, above.as_ref()))
    }

    /// The resource of a scale target, from discovery (remembered); `Err` says why there is none.
    async fn resource_of(&self, target: &Workload) -> Result<Result<ApiResource, String>, Error> {
        let Some(api_version) = target.api_version.as_deref() else {
            return Ok(Err("its scaleTargetRef has no apiVersion".into()));
        };
        let key = format!("{api_version}/{}", target.kind);
        if let Some(r) = self.targets.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(Ok(r));
        }
        let gvk = match api_version.parse::<GroupVersion>() {
            Ok(gv) => GroupVersionKind::gvk(&gv.group, &gv.version, &target.kind),
            Err(e) => return Ok(Err(format!("apiVersion {api_version:?}: {e}"))),
        };
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, _)) => {
                if let Ok(mut m) = self.targets.lock() {
                    m.insert(key, resource.clone());
                }
                Ok(Ok(resource))
            }
            Err(e) => match unreadable(&e) {
                Some(why) => Ok(Err(format!(
                    "{api_version} {} is not served ({why})",
                    target.kind
                ))),
                None => Err(Error::Read(format!("the {api_version} API"), e)),
            },
        }
    }

    /// The readiness of the pods of label selector `selector` (a scale subresource's
    /// `status.selector`), read from the API.
    async fn readiness(&self, ns: &str, selector: &str) -> Result<Vec<PodReadiness>, Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| Error::Read(format!("pods of selector {selector}"), e))?;
        Ok(list.items.iter().map(PodReadiness::of).collect())
    }

    /// The facts of an autoscaler's target, and the label selector of its pods from its scale
    /// subresource (when it says); `Err` says why they cannot be read.
    async fn workload(
        &self,
        ns: &str,
        target: &Workload,
    ) -> Result<Result<(WorkloadFacts, Option<String>), String>, Error> {
        let resource = match self.resource_of(target).await? {
            Ok(r) => r,
            Err(why) => return Ok(Err(why)),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &resource);
        let scale = match api.get_scale(&target.name).await {
            Ok(s) => s,
            Err(e) => {
                return match unreadable(&e) {
                    Some(why) => Ok(Err(format!("its scale subresource cannot be read ({why})"))),
                    None => Err(Error::Read(format!("the scale of {target}"), e)),
                };
            }
        };
        let object = match api.get_opt(&target.name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(Err("it is gone".into())),
            Err(e) => {
                return match unreadable(&e) {
                    Some(why) => Ok(Err(format!("it cannot be read ({why})"))),
                    None => Err(Error::Read(target.to_string(), e)),
                };
            }
        };
        let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
        let selector = scale
            .status
            .and_then(|s| s.selector)
            .filter(|s| !s.is_empty());
        let value = serde_json::to_value(&object).unwrap_or(Value::Null);
        Ok(WorkloadFacts::read(target, replicas, &value).map(|w| (w, selector)))
    }

    async fn step(
        &self,
        request: &EvictionRequest,
        pod: &Pod,
        resource: &ApiResource,
    ) -> Result<Progress, Error> {
        let ns = pod.namespace().unwrap_or_default();
        let skip = |message: String| {
            count("skipped");
            Ok(Progress::complete(message))
        };
        let chain = self.chain(&ns, pod).await?;
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
            // Before the workload's read: a change after it wakes the request.
            if let Some(w) = &self.waiters
                && h.autoscaler.target.kind == "Deployment"
                && (h.autoscaler.target.api_version.as_deref())
                    .is_none_or(|v| v.starts_with("apps/"))
            {
                w.wait((ns.clone(), h.autoscaler.target.name.clone()), request);
            }
            let (workload, selector) = match self.workload(&ns, &h.autoscaler.target).await? {
                Ok(w) => w,
                Err(why) => {
                    return skip(format!(
                        "no surge: HorizontalPodAutoscaler {name} scales {}, which cannot be read: {why}",
                        h.autoscaler.target
                    ));
                }
            };
            let unobserved_for = workload.deployment.as_ref().map_or(Duration::ZERO, |d| {
                self.unobserved.seen_for(
                    &format!("{ns}/{}", h.autoscaler.target.name),
                    d.facts.generation,
                    d.facts.observed_generation,
                )
            });
            let (reason, write, note, progress) = match on_activation(
                h,
                &workload,
                &target,
                unobserved_for,
            ) {
                Step::Skip(message) => return skip(message),
                Step::Wait(message) => return Ok(Progress::in_progress(message)),
                Step::Ready(message) => {
                    if let (Ok(Some(record)), Some(selector)) = (&h.record, &selector)
                        && let Err(why) = confirmed_over(
                            record.base,
                            |uid| record.covers(uid),
                            &self.readiness(&ns, selector).await?,
                        )
                    {
                        return Ok(Progress::in_progress(format!(
                            "raised HorizontalPodAutoscaler {name}; waiting: {why}"
                        )));
                    }
                    observe_time_to_available(request);
                    return Ok(Progress::complete(message));
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
                    (
                        Some("SurgeStarted"),
                        write,
                        format!(
                            "{} for the eviction of pod {}",
                            capitalized(&raised),
                            target.name
                        ),
                        Progress::in_progress(format!(
                            "{raised} of HorizontalPodAutoscaler {name}; waiting until {} has {} available replicas",
                            workload.workload, to.min
                        )),
                    )
                }
                Step::Abandon { write, message } => (
                    Some("SurgeAbandoned"),
                    write,
                    message.clone(),
                    Progress::complete(message),
                ),
                Step::Adopt { write, message } => {
                    (None, write, message.clone(), Progress::in_progress(message))
                }
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
                    return Ok(progress);
                }
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(Progress::in_progress(
            "the HorizontalPodAutoscaler keeps changing; trying again",
        ))
    }
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
        if let Some(w) = &self.waiters
            && !matches!(progress, Ok(Progress::InProgress { .. }))
        {
            w.forget(request);
        }
        Ok(progress?)
    }
}
