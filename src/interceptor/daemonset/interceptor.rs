//! The I/O shell of the DaemonSet interceptor: read the facts ([`Facts`]: the maintenances, the
//! DaemonSet's template, the node's taints), take [`on_activation`]'s step, delete the pod when
//! it says so, and record an event on the DaemonSet.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::decide::{Facts, Step, on_activation};
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
    recorder: Recorder,
}

fn count(result: &'static str) {
    metrics()
        .daemonset_pods
        .get_or_create(&ResultLabel { result })
        .inc();
}

/// The name of the DaemonSet that controls `pod`, if one does.
fn daemonset_of(pod: &Pod) -> Option<String> {
    pod.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        .map(|o| o.name.clone())
}

impl DaemonSetInterceptor {
    /// The interceptor, writing with `client`.
    pub fn new(client: Client) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter("evictord")),
            client,
        }
    }

    async fn facts(&self, pod: &Pod) -> Result<(Facts, Option<DaemonSet>), Error> {
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
        };
        let Some(ds_name) = daemonset else {
            return Ok((facts, None));
        };
        if facts.deleting_since.is_some() {
            return Ok((facts, None));
        }
        let maintenances: Api<NodeMaintenance> = Api::all(self.client.clone());
        let all = maintenances
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::Read("NodeMaintenances".into(), e))?;
        let labels = pod.labels().clone();
        facts.maintenance = targeting(
            &all.items,
            &node,
            PodType::DaemonSet,
            spec.priority.unwrap_or(0),
            &labels,
        )
        .map(|m| (m.name_any(), m.spec.reason.clone()));
        if facts.maintenance.is_none() {
            return Ok((facts, None));
        }
        let sets: Api<DaemonSet> = Api::namespaced(self.client.clone(), &ns);
        let ds = sets
            .get_opt(&ds_name)
            .await
            .map_err(|e| Error::Read(format!("DaemonSet {ds_name}"), e))?;
        facts.tolerates_taint = ds.as_ref().map(|d| {
            let template = d.spec.template.spec.as_ref();
            tolerates_maintenance_taint(
                template
                    .and_then(|s| s.tolerations.as_deref())
                    .unwrap_or_default(),
            )
        });
        let nodes: Api<Node> = Api::all(self.client.clone());
        let n = nodes
            .get_opt(&node)
            .await
            .map_err(|e| Error::Read(format!("Node {node}"), e))?;
        facts.node_tainted = n
            .and_then(|n| n.spec)
            .and_then(|s| s.taints)
            .is_some_and(|t| has_maintenance_taint(&t));
        Ok((facts, ds))
    }

    async fn step(&self, pod: &Pod) -> Result<Progress, Error> {
        let (facts, ds) = self.facts(pod).await?;
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
        _request: &EvictionRequest,
        pod: Option<&Pod>,
    ) -> Result<Progress, BoxError> {
        let Some(pod) = pod else {
            return Ok(Progress::complete("the pod is gone"));
        };
        Ok(self.step(pod).await?)
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
