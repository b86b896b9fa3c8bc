//! The I/O shell of the Deployment interceptor on active requests: find the pod's Deployment and
//! its autoscaler, take [`on_activation`]'s step, and write the Deployment with one guarded JSON
//! patch ([`patch_deployment`], shared with the settler).
//!
//! A look reads watch caches only, when it is given them ([`DeploymentInterceptor::reading`]):
//! the pod's ReplicaSet from the cache of ReplicaSet owners, the Deployment from the shared watch
//! of Deployments, the readiness of its pods from their watch. A cache can only be behind: a
//! Deployment or ReplicaSet it does not hold is read live, and a patch made against a stale
//! Deployment fails its resourceVersion test, after which the look decides again on the cache
//! once it has moved past that version, or on a live read if it does not within [`CATCH_UP`]
//! (the one live read a look may need). Looks at the pods of one Deployment decide one at a
//! time, each on the previous one's write ([`Writes`]).

use std::sync::Arc;

use futures::FutureExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::decide::{
    PodReadiness, Step, active_in, confirmed, no_room, on_activation, scaling_down, surged,
    waiting_to_join,
};
use super::surge::{DeploymentFacts, SurgeRecord, SurgedPod};
use super::unobserved::Unobserved;
use super::writes::Writes;
use super::{Error, NAME, SURGE_ANNOTATION};
use crate::api::EvictionRequest;
use crate::interceptor::autoscalers::{Autoscalers, scaling};
use crate::interceptor::deployments::DeploymentKey;
use crate::interceptor::replicasets::{ReplicaSets, owners_of};
use crate::interceptor::workload_pods::WorkloadPods;
use crate::interceptor::{BoxError, Interceptor, Progress, Waiters};
use crate::metrics::{ResultLabel, metrics};
use crate::recorder::{Event, EventType, Recorder, reporter};
use crate::selector::label_selector_matches;

/// How often one look at a request retries after a concurrent Deployment write.
const CONFLICT_RETRIES: usize = 5;
/// How long a look waits for the watch cache to move past a version whose patch conflicted
/// before it reads the Deployment live.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(1);

/// The `deployment.apps.k8s.io` interceptor.
pub struct DeploymentInterceptor {
    client: Client,
    recorder: Recorder,
    autoscalers: Autoscalers,
    unobserved: Unobserved,
    /// Its own writes, and one look at a time per Deployment.
    writes: Writes,
    /// The requests waiting on their Deployment, when something wakes them on its changes.
    waiters: Option<Waiters<DeploymentKey>>,
    /// The watch caches a look reads, when given ([`DeploymentInterceptor::reading`]).
    caches: Option<Caches>,
}

/// The watch caches of a look.
struct Caches {
    deployments: Store<Deployment>,
    replicasets: ReplicaSets,
    pods: WorkloadPods,
    /// The requests waiting for the readiness of their Deployment's pods, woken by its changes.
    readiness_waiters: Waiters<DeploymentKey>,
}

pub(super) fn recorder(client: &Client) -> Recorder {
    Recorder::new(client.clone(), reporter("evictord"))
}

pub(super) fn count(result: &'static str) {
    metrics()
        .deployment_surges
        .get_or_create(&ResultLabel { result })
        .inc();
}

/// Records an event on the Deployment (failures are logged only).
pub(super) async fn event(recorder: &Recorder, d: &Deployment, reason: &str, note: String) {
    let e = Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Surge".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&e, &d.object_ref(&())).await {
        warn!(error = %err, reason, "could not record event");
    }
}

/// True for 409 Conflict and for 422 from a failed `test` of a JSON patch.
pub(super) fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Patch(_, kube::Error::Api(s)) if s.code == 409 || s.code == 422)
}

/// One JSON patch of Deployment `d`: it fails unless `d` is unchanged (resourceVersion) and, when
/// `replicas` is `(from, to)`, `spec.replicas` is still `from`; it sets `spec.replicas` to `to`
/// and writes `record` into [`SURGE_ANNOTATION`] (removes it for `None`).
pub(super) async fn patch_deployment(
    client: &Client,
    d: &Deployment,
    replicas: Option<(i32, i32)>,
    record: Option<&SurgeRecord>,
) -> Result<Deployment, Error> {
    let name = d.name_any();
    let api: Api<Deployment> = Api::namespaced(client.clone(), &d.namespace().unwrap_or_default());
    let mut ops: Vec<Value> = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": d.resource_version()}),
    ];
    if let Some((from, to)) = replicas {
        ops.push(json!({"op": "test", "path": "/spec/replicas", "value": from}));
        ops.push(json!({"op": "replace", "path": "/spec/replicas", "value": to}));
    }
    let key = format!(
        "/metadata/annotations/{}",
        SURGE_ANNOTATION.replace('/', "~1")
    );
    let annotations = d.metadata.annotations.as_ref();
    match (record, annotations) {
        (Some(r), Some(_)) => {
            ops.push(json!({"op": "add", "path": key, "value": serde_json::to_string(r).unwrap_or_default()}))
        }
        (Some(r), None) => ops.push(json!({"op": "add", "path": "/metadata/annotations",
            "value": {SURGE_ANNOTATION: serde_json::to_string(r).unwrap_or_default()}})),
        (None, Some(a)) if a.contains_key(SURGE_ANNOTATION) => {
            ops.push(json!({"op": "remove", "path": key}))
        }
        (None, _) => {}
    }
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
        .map_err(|e| Error::Patch(name.clone(), kube::Error::SerdeError(e)))?;
    api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .map_err(|e| Error::Patch(name, e))
}

fn controller_of(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    owners?.iter().find(|o| o.controller == Some(true))
}

impl DeploymentInterceptor {
    /// The interceptor, writing with `client`, finding autoscalers in `autoscalers` (a LIST
    /// while that cache has not synced).
    pub fn new(client: Client, autoscalers: Autoscalers) -> Self {
        Self {
            recorder: recorder(&client),
            client,
            autoscalers,
            unobserved: Unobserved::default(),
            writes: Writes::default(),
            waiters: None,
            caches: None,
        }
    }

    /// Reads Deployments from `deployments` (the shared watch's store), the pods' ReplicaSets
    /// from `replicasets` and the readiness of a surged Deployment's pods from `pods`, instead
    /// of a GET of each and a LIST of the pods at every look; registers a request that waits for
    /// that readiness with `readiness_waiters`, for whoever feeds `pods`' changes to them.
    pub fn reading(
        mut self,
        deployments: Store<Deployment>,
        replicasets: ReplicaSets,
        pods: WorkloadPods,
        readiness_waiters: Waiters<DeploymentKey>,
    ) -> Self {
        self.caches = Some(Caches {
            deployments,
            replicasets,
            pods,
            readiness_waiters,
        });
        self
    }

    /// Registers each request that waits with `waiters`, under its Deployment, for whoever feeds
    /// the Deployments' changes to [`Waiters::woken_by`] (without, a request is looked at again
    /// at the poll interval only).
    pub fn woken_by(mut self, waiters: Waiters<DeploymentKey>) -> Self {
        self.waiters = Some(waiters);
        self
    }

    /// The name of the Deployment owning `pod` through its ReplicaSet, or why there is none.
    async fn deployment_of(&self, ns: &str, pod: &Pod) -> Result<Result<String, String>, Error> {
        let pod_name = pod.name_any();
        let Some(owner) = controller_of(pod.metadata.owner_references.as_ref()) else {
            return Ok(Err(format!("pod {pod_name} has no controller")));
        };
        if owner.kind != "ReplicaSet" {
            return Ok(Err(format!(
                "pod {pod_name} is owned by {} {}, not by a Deployment",
                owner.kind, owner.name
            )));
        }
        let owners = owners_of(
            self.caches.as_ref().map(|c| &c.replicasets),
            &self.client,
            ns,
            &owner.name,
        )
        .await
        .map_err(|e| Error::Read(format!("ReplicaSet {}", owner.name), e))?;
        let Some(owners) = owners else {
            return Ok(Err(format!("ReplicaSet {} is gone", owner.name)));
        };
        match controller_of(Some(&owners)) {
            Some(o) if o.kind == "Deployment" => Ok(Ok(o.name.clone())),
            _ => Ok(Err(format!(
                "ReplicaSet {} of pod {pod_name} is not owned by a Deployment",
                owner.name
            ))),
        }
    }

    /// The HorizontalPodAutoscaler targeting Deployment `name`, if any: from the shared cache,
    /// or a LIST of the namespace's autoscalers while it has not synced.
    async fn autoscaler_of(&self, ns: &str, name: &str) -> Result<Option<String>, Error> {
        if let Some(cached) = self.autoscalers.in_namespace(ns) {
            return Ok(scaling(
                cached.iter().map(AsRef::as_ref),
                "Deployment",
                name,
            ));
        }
        let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(self.client.clone(), ns);
        let list = hpas
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::Read("HorizontalPodAutoscalers".into(), e))?;
        Ok(list.items.into_iter().find_map(|h| {
            let target = &h.spec.scale_target_ref;
            (target.kind == "Deployment" && target.name == name).then(|| h.name_any())
        }))
    }

    /// The readiness of the Deployment's pods (its selector).
    async fn readiness(&self, d: &Deployment) -> Result<Vec<PodReadiness>, Error> {
        Ok(self
            .pods(d)
            .await?
            .iter()
            .map(|p| PodReadiness::of(p))
            .collect())
    }

    /// The Deployment's pods (its selector): from their watch when the interceptor has one, else
    /// a LIST.
    async fn pods(&self, d: &Deployment) -> Result<Vec<Arc<Pod>>, Error> {
        let ns = d.namespace().unwrap_or_default();
        let selector = &d.spec.selector;
        let read = |e| Error::Read(format!("pods of Deployment {}", d.name_any()), e);
        if let Some(c) = &self.caches {
            return c
                .pods
                .pods(&(ns, d.name_any()), selector)
                .await
                .map_err(read);
        }
        let by_labels = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let list = pods
            .list(&ListParams::default().labels(&by_labels))
            .await
            .map_err(read)?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| label_selector_matches(selector, p.labels()))
            .map(Arc::new)
            .collect())
    }

    /// Deployment `ns/name` for attempt `attempt` of a look: the cached one (or the interceptor's
    /// own last write, [`Writes::fresher`]) at first; after a patch made against version
    /// `conflicted` failed, the cached one once the cache has moved past it (the usual conflict:
    /// the Deployment controller wrote the status in between, and its watch event is a moment
    /// away); from the third attempt on, or when the cache has not listed, does not hold it or
    /// does not move within [`CATCH_UP`], read live.
    async fn deployment(
        &self,
        ns: &str,
        name: &str,
        attempt: usize,
        conflicted: Option<&str>,
    ) -> Result<Option<Arc<Deployment>>, Error> {
        let key: DeploymentKey = (ns.into(), name.into());
        let cache = self.caches.as_ref().filter(|_| attempt < 2).filter(|c| {
            matches!(
                c.deployments.wait_until_ready().now_or_never(),
                Some(Ok(()))
            )
        });
        if let Some(c) = cache {
            let get = || c.deployments.get(&ObjectRef::new(name).within(ns));
            let cached = match conflicted {
                None => get().map(|d| self.writes.fresher(&key, d)),
                Some(version) => {
                    // Neither the version that failed nor the one the interceptor's own write
                    // replaced (the cache may still hold that).
                    let replaced = self.writes.forget(&key);
                    let past = |d: &Deployment| {
                        let rv = d.resource_version();
                        rv.as_deref() != Some(version) && rv != replaced
                    };
                    let deadline = tokio::time::Instant::now() + CATCH_UP;
                    loop {
                        match get() {
                            Some(d) if past(&d) => break Some(d),
                            _ if tokio::time::Instant::now() >= deadline => break None,
                            _ => tokio::time::sleep(CATCH_UP / 50).await,
                        }
                    }
                }
            };
            if let Some(d) = cached {
                return Ok(Some(d));
            }
        }
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        Ok(api
            .get_opt(name)
            .await
            .map_err(|e| Error::Read(format!("Deployment {name}"), e))?
            .map(Arc::new))
    }

    async fn step(&self, request: &EvictionRequest, pod: &Pod) -> Result<Progress, Error> {
        let ns = pod.namespace().unwrap_or_default();
        let name = match self.deployment_of(&ns, pod).await? {
            Ok(name) => name,
            Err(why) => {
                count("skipped");
                return Ok(Progress::complete(format!("no surge: {why}")));
            }
        };
        let target = SurgedPod {
            name: pod.name_any(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        // Before the read: a change after it wakes the request.
        if let Some(w) = &self.waiters {
            w.wait((ns.clone(), name.clone()), request);
        }
        let key = (ns.clone(), name.clone());
        // One look at a time decides on the Deployment (and writes it), its retries included.
        let decides = self.writes.lock(&key).await;
        let mut conflicted: Option<String> = None;
        for attempt in 0..CONFLICT_RETRIES {
            let Some(d) = self
                .deployment(&ns, &name, attempt, conflicted.as_deref())
                .await?
            else {
                return Ok(Progress::complete(format!(
                    "no surge: Deployment {name} is gone"
                )));
            };
            let facts = DeploymentFacts::read(&d, self.autoscaler_of(&ns, &name).await?);
            let unobserved_for = self.unobserved.seen_for(
                &format!("{ns}/{name}"),
                facts.generation,
                facts.observed_generation,
            );
            let step = on_activation(&facts, &name, &target, unobserved_for);
            // A wait to join keeps the message of a wait for room ([`waiting_to_join`]).
            let covered = matches!(&facts.record, Ok(Some(r)) if r.covers(&target.uid));
            let shown = request
                .status
                .as_ref()
                .and_then(|s| s.interceptor(super::NAME))
                .and_then(|e| e.message.as_deref());
            let join_wait = |wait: String| {
                if covered {
                    return wait;
                }
                debug!(deployment = %name, "waiting to join the surge: {wait}");
                waiting_to_join(shown, no_room(&name, facts.max_surge), wait)
            };
            // A request that surges or waits for a surge will want the readiness of the
            // Deployment's pods: their watch lists now, and wakes the request when it changes.
            if let Some(c) = &self.caches
                && matches!(step, Step::Join { .. } | Step::Wait(_) | Step::Ready(_))
            {
                c.pods.watch(&(ns.clone(), name.clone()), &d.spec.selector);
            }
            // A surge waits while the Deployment comes down to its replicas ([`scaling_down`]).
            if matches!(step, Step::Join { .. }) {
                // Before the read: the extra pod terminating wakes the request.
                if let Some(c) = &self.caches {
                    c.readiness_waiters.wait(key.clone(), request);
                }
                let pods = self.pods(&d).await?;
                let active = pods.iter().filter(|p| active_in(p, &name)).count();
                if let Some(why) = scaling_down(&facts, &name, active) {
                    return Ok(Progress::in_progress(join_wait(why)));
                }
            }
            let written = match step {
                Step::Skip(message) => {
                    count("skipped");
                    return Ok(Progress::complete(message));
                }
                Step::Wait(message) => return Ok(Progress::in_progress(join_wait(message))),
                Step::Ready(message) => {
                    drop(decides);
                    // Before the read: a change of the pods' readiness after it wakes the request.
                    if let Some(c) = &self.caches {
                        c.readiness_waiters.wait(key.clone(), request);
                    }
                    if let Ok(Some(record)) = &facts.record
                        && let Err(why) = confirmed(record, &self.readiness(&d).await?)
                    {
                        // The surge's message, the same while it is not available yet.
                        debug!(deployment = %name, "surged, not ready yet: {why}");
                        return Ok(Progress::in_progress(surged(&name, record.base)));
                    }
                    observe_time_to_available(request);
                    return Ok(Progress::complete(message));
                }
                Step::Join {
                    record,
                    replicas,
                    from,
                } => patch_deployment(&self.client, &d, Some((from, replicas)), Some(&record))
                    .await
                    .map(|written| {
                        self.writes.wrote(&key, &d, written);
                        (
                            "SurgeStarted",
                            format!(
                                "Surged from {from} to {replicas} replicas for the eviction of pod {}",
                                target.name
                            ),
                            // The message of the looks that follow ([`surged`]): no second write.
                            Progress::in_progress(surged(&name, record.base)),
                        )
                    }),
                Step::Abandon { record, message } => {
                    // Only on the version read (resourceVersion test); replicas untouched.
                    patch_deployment(&self.client, &d, None, Some(&record))
                        .await
                        .map(|written| {
                            self.writes.wrote(&key, &d, written);
                            ("SurgeAbandoned", message.clone(), Progress::complete(message))
                        })
                }
            };
            match written {
                Ok((reason, note, progress)) => {
                    drop(decides);
                    info!(deployment = %name, reason, "{note}");
                    count(if reason == "SurgeStarted" {
                        "started"
                    } else {
                        "abandoned"
                    });
                    event(&self.recorder, &d, reason, note).await;
                    return Ok(progress);
                }
                Err(e) if is_conflict(&e) => conflicted = d.resource_version(),
                Err(e) => return Err(e),
            }
        }
        Ok(Progress::in_progress(format!(
            "Deployment {name} keeps changing; trying again"
        )))
    }
}

fn observe_time_to_available(request: &EvictionRequest) {
    let entry = request.status.as_ref().and_then(|s| s.interceptor(NAME));
    if let Some(start) = entry
        .filter(|e| e.completion_time.is_none())
        .and_then(|e| e.start_time.as_ref())
    {
        let secs = Timestamp::now().duration_since(start.0).as_secs_f64();
        metrics()
            .deployment_time_to_available
            .observe(secs.max(0.0));
    }
}

impl Interceptor for DeploymentInterceptor {
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
        let progress = self.step(request, pod).await;
        if !matches!(progress, Ok(Progress::InProgress { .. })) {
            if let Some(w) = &self.waiters {
                w.forget(request);
            }
            if let Some(c) = &self.caches {
                c.readiness_waiters.forget(request);
            }
        }
        Ok(progress?)
    }
}
