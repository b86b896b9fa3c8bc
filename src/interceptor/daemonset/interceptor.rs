//! The I/O shell of the DaemonSet interceptor: read the facts ([`Facts`]: the maintenances, the
//! DaemonSet's template, the node's taints) from its watch caches ([`Caches`]; live what they
//! miss, as a recent write may not have reached them), take [`on_activation`]'s step, delete the pod when it says so, and
//! record an event on the DaemonSet.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};

use super::caches::Caches;
use super::decide::{Facts, Step, on_activation, on_gone};
use super::{Error, NAME};
use crate::api::taint::{has_maintenance_taint, tolerates_maintenance_taint};
use crate::api::{EvictionRequest, NodeMaintenance, PodType};
use crate::drain::holds::targeting;
use crate::interceptor::{BoxError, Interceptor, Progress};
use crate::metrics::{ResultLabel, metrics};
use crate::recorder::{Event, EventType, Recorder, reporter};

/// The `daemonset.apps.k8s.io` interceptor.
pub struct DaemonSetInterceptor {
    client: Client,
    caches: Caches,
    recorder: Recorder,
    /// Where a request to look at again at once is sent (once its reason is recorded), for
    /// whoever feeds the runner's wakes; without, it is looked at again at the poll interval.
    again: Option<UnboundedSender<ObjectRef<EvictionRequest>>>,
}

fn count(result: &'static str) {
    metrics()
        .daemonset_pods
        .get_or_create(&ResultLabel { result })
        .inc();
}

/// The message of this interceptor's entry in the request, if any.
fn recorded(request: &EvictionRequest) -> Option<String> {
    request
        .status
        .as_ref()
        .and_then(|s| s.interceptor(NAME))
        .and_then(|e| e.message.clone())
}

/// The name of the DaemonSet that controls `pod`, if one does.
fn daemonset_of(pod: &Pod) -> Option<String> {
    pod.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        .map(|o| o.name.clone())
}

impl DaemonSetInterceptor {
    /// The interceptor, reading from `caches` and writing with `client`.
    pub fn new(client: Client, caches: Caches) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter("evictord")),
            client,
            caches,
            again: None,
        }
    }

    /// Sends each request whose pod's deletion waits only for its reason to be recorded to
    /// `again`, for the runner's wakes: the next look, right after the runner's write, deletes
    /// the pod (without, it waits for the poll interval).
    pub fn looking_again_with(
        mut self,
        again: UnboundedSender<ObjectRef<EvictionRequest>>,
    ) -> Self {
        self.again = Some(again);
        self
    }

    /// The facts of a look, read from the watch caches. A cache can only lag behind: what it
    /// misses that a recent write may have put there (a maintenance targeting the pod, the
    /// DaemonSet, the taint on the node) is read live before the step is decided on its absence.
    async fn facts(
        &self,
        request: &EvictionRequest,
        pod: &Pod,
    ) -> Result<(Facts, Option<Arc<DaemonSet>>), Error> {
        let ns = pod.namespace().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let node = spec.node_name.clone().unwrap_or_default();
        let daemonset = daemonset_of(pod);
        let mut facts = Facts {
            pod: format!("{ns}/{}", pod.name_any()),
            node: node.clone(),
            daemonset: daemonset.clone(),
            deleting_since: pod.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            grace_seconds: spec.termination_grace_period_seconds.unwrap_or(30),
            maintenance: None,
            tolerates_taint: None,
            node_tainted: false,
            recorded: recorded(request),
        };
        let Some(ds_name) = daemonset else {
            return Ok((facts, None));
        };
        if facts.deleting_since.is_some() {
            return Ok((facts, None));
        }
        let labels = pod.labels().clone();
        let target = |all: &[Arc<NodeMaintenance>]| {
            targeting(
                all.iter().map(|m| &**m),
                &node,
                PodType::DaemonSet,
                spec.priority.unwrap_or(0),
                &labels,
            )
            .map(|m| (m.name_any(), m.spec.reason.clone()))
        };
        facts.maintenance = self.caches.maintenances().and_then(|all| target(&all));
        if facts.maintenance.is_none() {
            facts.maintenance = target(&self.live_maintenances().await?);
        }
        if facts.maintenance.is_none() {
            return Ok((facts, None));
        }
        let ds = match self.caches.daemonset(&ns, &ds_name).flatten() {
            Some(cached) => Some(cached),
            None => self.live_daemonset(&ns, &ds_name).await?,
        };
        facts.tolerates_taint = ds.as_ref().map(|d| {
            tolerates_maintenance_taint(
                d.spec
                    .template
                    .spec
                    .as_ref()
                    .and_then(|s| s.tolerations.as_deref())
                    .unwrap_or_default(),
            )
        });
        let tainted = |n: Option<Arc<Node>>| {
            n.and_then(|n| n.spec.as_ref().and_then(|s| s.taints.clone()))
                .is_some_and(|t| has_maintenance_taint(&t))
        };
        facts.node_tainted = tainted(self.caches.node(&node).flatten());
        if !facts.node_tainted {
            facts.node_tainted = tainted(self.live_node(&node).await?);
        }
        Ok((facts, ds))
    }

    async fn live_maintenances(&self) -> Result<Vec<Arc<NodeMaintenance>>, Error> {
        let api: Api<NodeMaintenance> = Api::all(self.client.clone());
        let all = api
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::Read("NodeMaintenances".into(), e))?;
        Ok(all.items.into_iter().map(Arc::new).collect())
    }

    async fn live_daemonset(&self, ns: &str, name: &str) -> Result<Option<Arc<DaemonSet>>, Error> {
        let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), ns);
        let ds = api
            .get_opt(name)
            .await
            .map_err(|e| Error::Read(format!("DaemonSet {name}"), e))?;
        Ok(ds.map(Arc::new))
    }

    async fn live_node(&self, name: &str) -> Result<Option<Arc<Node>>, Error> {
        let api: Api<Node> = Api::all(self.client.clone());
        let n = api
            .get_opt(name)
            .await
            .map_err(|e| Error::Read(format!("Node {name}"), e))?;
        Ok(n.map(Arc::new))
    }

    async fn step(&self, request: &EvictionRequest, pod: &Pod) -> Result<Progress, Error> {
        let (facts, ds) = self.facts(request, pod).await?;
        match on_activation(&facts, Timestamp::now()) {
            Step::Complete { message, result } => {
                count(result);
                if result == "kept"
                    && let Some(ds) = &ds
                {
                    self.event(ds, "DaemonSetPodKept", &message).await;
                }
                Ok(Progress::complete(message))
            }
            Step::Wait {
                message,
                expected_finish,
            } => Ok(Progress::InProgress {
                message,
                expected_finish,
            }),
            Step::Record {
                message,
                expected_finish,
            } => {
                // Looked at again once this look's write is done (the runner holds a wake of a
                // request it is looking at until the look ends).
                if let Some(again) = &self.again {
                    let _ = again.send(ObjectRef::from_obj(request));
                }
                Ok(Progress::InProgress {
                    message,
                    expected_finish: Some(expected_finish),
                })
            }
            Step::Delete {
                message,
                expected_finish,
            } => {
                self.delete(pod).await?;
                count("removed");
                info!(pod = %facts.pod, node = %facts.node, "{message}");
                if let Some(ds) = &ds {
                    self.event(ds, "DaemonSetPodRemoved", &message).await;
                }
                Ok(Progress::InProgress {
                    message,
                    expected_finish: Some(expected_finish),
                })
            }
        }
    }

    /// Deletes the pod with its own grace period, only if it is still the pod of that UID.
    async fn delete(&self, pod: &Pod) -> Result<(), Error> {
        let name = pod.name_any();
        let pods: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(&name, &params).await {
            Ok(_) => Ok(()),
            // Gone already, or a successor of the same name: nothing of ours to delete.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(Error::Delete(name, e)),
        }
    }

    /// Records an event on the DaemonSet (failures are logged only).
    async fn event(&self, ds: &DaemonSet, reason: &str, note: &str) {
        let e = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Drain".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&e, &ds.object_ref(&())).await {
            warn!(error = %err, reason, "could not record event");
        }
    }
}

impl Interceptor for DaemonSetInterceptor {
    fn name(&self) -> &str {
        NAME
    }

    async fn progress(
        &self,
        request: &EvictionRequest,
        pod: Option<&Pod>,
    ) -> Result<Progress, BoxError> {
        let Some(pod) = pod else {
            return Ok(Progress::complete(on_gone(recorded(request).as_deref())));
        };
        Ok(self.step(request, pod).await?)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    #[test]
    fn the_controlling_daemonset_is_found() {
        let mut pod = Pod::default();
        assert_eq!(daemonset_of(&pod), None);
        pod.metadata.owner_references = Some(vec![
            OwnerReference {
                kind: "DaemonSet".into(),
                name: "not-controller".into(),
                ..Default::default()
            },
            OwnerReference {
                kind: "DaemonSet".into(),
                name: "logs".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        assert_eq!(daemonset_of(&pod).as_deref(), Some("logs"));
    }
}
