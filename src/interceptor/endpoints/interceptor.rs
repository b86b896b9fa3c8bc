//! The I/O shell of the `endpoints.evictord.dev` interceptor: read the pod's facts, take
//! [`on_activation`]'s step, read what it asks for (the PodDisruptionBudgets, the Services and
//! their Endpoints and EndpointSlices), write the pod's `evictord.dev/serving` condition with one
//! strategic merge patch of its status guarded by its resourceVersion, and record events on the
//! pod.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::decide::{
    BudgetStep, EndpointsStep, Facts, Step, on_activation, on_budgets, on_endpoints,
};
use super::discovery::slice_resource;
use super::services::{PodAddress, ServiceView, services_of};
use super::{EndpointsSettings, Error, NAME, Versions};
use crate::api::EvictionRequest;
use crate::disruption::{Budget, budget_resource};
use crate::interceptor::{BoxError, Interceptor, Progress};
use crate::metrics::{ResultLabel, metrics};
use crate::recorder::{Event, EventType, Recorder, reporter};
use crate::serving::{
    ConditionWrite, DEREGISTRATION_DELAY_ANNOTATION, REASON_DEREGISTERING, REASON_LEAVING,
    condition_patch, deregistration_delay, has_gate, serving_of,
};

/// How often one look at a request retries after a concurrent write of the pod.
const CONFLICT_RETRIES: usize = 5;

/// The `endpoints.evictord.dev` interceptor.
pub struct EndpointsInterceptor {
    client: Client,
    recorder: Recorder,
    versions: Versions,
    settings: EndpointsSettings,
}

fn count(result: &'static str) {
    metrics()
        .endpoints_pods
        .get_or_create(&ResultLabel { result })
        .inc();
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.saturating_add(d).unwrap_or(Timestamp::MAX)
}

/// The addresses the pod may appear under in its Services' endpoints.
fn address_of(pod: &Pod) -> PodAddress {
    let status = pod.status.clone().unwrap_or_default();
    let mut ips: Vec<String> = status
        .pod_ips
        .into_iter()
        .flatten()
        .map(|ip| ip.ip)
        .collect();
    ips.extend(status.pod_ip.filter(|ip| !ips.contains(ip)));
    PodAddress {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        name: pod.name_any(),
        ips,
    }
}

impl EndpointsInterceptor {
    /// The interceptor, reading and writing with `client`, in `versions`.
    pub fn new(client: Client, versions: Versions, settings: EndpointsSettings) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter("evictord")),
            client,
            versions,
            settings,
        }
    }

    fn facts(&self, request: &EvictionRequest, pod: &Pod, now: Timestamp) -> Facts {
        let entry = request.status.as_ref().and_then(|s| s.interceptor(NAME));
        let turn_started = entry
            .and_then(|e| e.activation_time.as_ref().or(e.start_time.as_ref()))
            .map_or(now, |t| t.0);
        let annotation = pod
            .annotations()
            .get(DEREGISTRATION_DELAY_ANNOTATION)
            .map(String::as_str);
        Facts {
            pod: format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
            gated: has_gate(pod),
            serving: serving_of(pod, turn_started),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            delay: deregistration_delay(annotation, self.settings.default_delay),
            turn_started,
        }
    }

    /// The PodDisruptionBudgets of namespace `ns` (none when the server serves none).
    async fn budgets(&self, ns: &str) -> Result<Vec<Budget>, Error> {
        let Some(version) = self.versions.budgets else {
            return Ok(Vec::new());
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &budget_resource(version));
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::Read("PodDisruptionBudgets".into(), e))?;
        Ok(list
            .items
            .iter()
            .map(|o| {
                let v = serde_json::to_value(o).unwrap_or_default();
                Budget::from_json(ns, version, &v)
            })
            .collect())
    }

    /// The Services of the pod's namespace that concern it, with where they list it.
    async fn services(&self, pod: &Pod) -> Result<Vec<ServiceView>, Error> {
        let ns = pod.namespace().unwrap_or_default();
        let lp = ListParams::default();
        let services: Api<Service> = Api::namespaced(self.client.clone(), &ns);
        let services = services
            .list(&lp)
            .await
            .map_err(|e| Error::Read("Services".into(), e))?
            .items;
        let endpoints: Api<Endpoints> = Api::namespaced(self.client.clone(), &ns);
        let endpoints = endpoints
            .list(&lp)
            .await
            .map_err(|e| Error::Read("Endpoints".into(), e))?
            .items;
        let slices = match self.versions.slices {
            Some(version) => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &ns, &slice_resource(version));
                api.list(&lp)
                    .await
                    .map_err(|e| Error::Read("EndpointSlices".into(), e))?
                    .items
                    .iter()
                    .map(|o| serde_json::to_value(o).unwrap_or_default())
                    .collect()
            }
            None => Vec::new(),
        };
        Ok(services_of(
            pod.labels(),
            &address_of(pod),
            &services,
            &endpoints,
            &slices,
        ))
    }

    /// Writes the condition on the version of the pod read; `Ok(false)` when the pod changed
    /// meanwhile (read it again and decide again).
    async fn write(&self, pod: &Pod, write: &ConditionWrite) -> Result<bool, Error> {
        let name = pod.name_any();
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let patch = condition_patch(&pod.resource_version().unwrap_or_default(), write);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(Error::Condition(name, e)),
        }
    }

    /// The pod as it is now, if it is still the same pod.
    async fn reread(&self, pod: &Pod) -> Result<Option<Pod>, Error> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let fresh = api
            .get_opt(&pod.name_any())
            .await
            .map_err(|e| Error::Read(format!("pod {}", pod.name_any()), e))?;
        Ok(fresh.filter(|p| p.metadata.uid == pod.metadata.uid))
    }

    /// Records an event on the pod (failures are logged only).
    async fn event(&self, pod: &Pod, type_: EventType, reason: &str, note: &str) {
        let e = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Drain".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&e, &pod.object_ref(&())).await {
            warn!(error = %err, reason, "could not record event");
        }
    }

    async fn step(&self, request: &EvictionRequest, pod: &Pod) -> Result<Progress, Error> {
        let mut pod = pod.clone();
        for _ in 0..CONFLICT_RETRIES {
            let now = Timestamp::now();
            let facts = self.facts(request, &pod, now);
            let write = match on_activation(&facts, now) {
                Step::Complete { message, result } => {
                    if let Some(result) = result {
                        count(result);
                    }
                    return Ok(Progress::complete(message));
                }
                Step::Wait { message, until } => {
                    return Ok(Progress::InProgress {
                        message,
                        expected_finish: until,
                    });
                }
                Step::CheckBudgets => {
                    let ns = pod.namespace().unwrap_or_default();
                    match on_budgets(&pod, &facts.pod, &self.budgets(&ns).await?) {
                        BudgetStep::Wait(message) => return Ok(Progress::in_progress(message)),
                        BudgetStep::Leave => Written::Leaving(ConditionWrite {
                            status: false,
                            reason: REASON_LEAVING,
                            message: format!(
                                "taken out of its Services' ready endpoints by {NAME} for \
                                 EvictionRequest {ns}/{}",
                                request.name_any()
                            ),
                            transition: now,
                            probe: Some(now),
                        }),
                    }
                }
                Step::CheckEndpoints { since } => {
                    let services = self.services(&pod).await?;
                    let (bound, delay) = (self.settings.wait_timeout, facts.delay.value);
                    match on_endpoints(&facts.pod, &services, since, now, bound, delay) {
                        EndpointsStep::Wait(message) => return Ok(Progress::in_progress(message)),
                        EndpointsStep::Out { message, timed_out } => Written::Out {
                            timed_out,
                            since,
                            write: ConditionWrite {
                                status: false,
                                reason: REASON_DEREGISTERING,
                                message,
                                transition: since,
                                probe: Some(now),
                            },
                        },
                    }
                }
            };
            if self.write(&pod, write.condition()).await? {
                return Ok(self.written(&pod, write, facts.delay.value).await);
            }
            match self.reread(&pod).await? {
                Some(fresh) => pod = fresh,
                None => return Ok(Progress::complete("the pod is gone")),
            }
        }
        Ok(Progress::in_progress(
            "the pod keeps changing; trying again".to_string(),
        ))
    }

    /// What follows a written condition: the log, the event, the metrics and the progress.
    async fn written(&self, pod: &Pod, write: Written, delay: Duration) -> Progress {
        let name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        match write {
            Written::Leaving(w) => {
                info!(pod = %name, "{}", w.message);
                self.event(pod, EventType::Normal, "LeavingEndpoints", &w.message)
                    .await;
                Progress::in_progress(format!(
                    "pod {name} is unready (evictord.dev/serving False); waiting until its \
                     Services drop it from their ready addresses"
                ))
            }
            Written::Out {
                timed_out,
                since,
                write,
            } => {
                let now = Timestamp::now();
                let took = now.duration_since(since).as_secs_f64().max(0.0);
                metrics().endpoints_time_to_leave.observe(took);
                let (type_, reason, result) = if timed_out {
                    (EventType::Warning, "EndpointsWaitTimedOut", "timed_out")
                } else {
                    (EventType::Normal, "OutOfEndpoints", "left")
                };
                count(result);
                info!(pod = %name, "{}", write.message);
                self.event(pod, type_, reason, &write.message).await;
                Progress::InProgress {
                    message: write.message,
                    expected_finish: Some(add(now, delay)),
                }
            }
        }
    }
}

/// A condition write and what it stands for.
enum Written {
    /// The pod leaves its endpoints.
    Leaving(ConditionWrite),
    /// The pod is out of them (or the wait was given up): the delay starts.
    Out {
        timed_out: bool,
        since: Timestamp,
        write: ConditionWrite,
    },
}

impl Written {
    fn condition(&self) -> &ConditionWrite {
        match self {
            Written::Leaving(w) | Written::Out { write: w, .. } => w,
        }
    }
}

impl Interceptor for EndpointsInterceptor {
    fn name(&self) -> &str {
        NAME
    }

    async fn progress(
        &self,
        request: &EvictionRequest,
        pod: Option<&Pod>,
    ) -> Result<Progress, BoxError> {
        let Some(pod) = pod else {
            count("pod_gone");
            return Ok(Progress::complete("the pod is gone"));
        };
        Ok(self.step(request, pod).await?)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_address_takes_every_pod_ip_once() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]},
        }))
        .unwrap();
        let a = address_of(&pod);
        assert_eq!((a.uid.as_str(), a.name.as_str()), ("u", "p"));
        assert_eq!(a.ips, ["10.0.0.1", "fd00::1"]);
        assert!(address_of(&Pod::default()).ips.is_empty());
    }
}
