//! Drain deadlines in the node maintenance controller (SPEC 6.2): the pure step that fills each
//! node's start, deadline and `deadlineExceeded`, sets `DeadlineExceeded` and picks the pods
//! `deadlinePolicy: Force` deletes; and the deletion itself (UID precondition, the pod's own grace
//! period, PodDisruptionBudgets not consulted), each with a `ForcedByDeadline` event on the pod.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client};
use tracing::{info, warn};

use super::stages::drain_started;
use crate::api::{DeadlinePolicy, NodeMaintenance, NodeMaintenanceStatus};
use crate::drain::deadline::{
    drain_start, exceeded, forced, newly_exceeded, next_deadline, with_deadline_condition,
    with_deadlines,
};
use crate::drain::{DrainPod, PodRef};
use crate::metrics::metrics;
use crate::recorder::{Event, EventType, Recorder};

/// What the deadlines call for in one reconciliation.
#[derive(Debug, Default, PartialEq)]
pub struct DeadlineStep {
    /// Nodes whose deadline passed since the recorded status (an event and the metric each).
    pub newly: Vec<String>,
    /// Pods to delete now (`Force`), in plan order.
    pub force: Vec<PodRef>,
    /// When the next deadline passes (to look again then).
    pub next: Option<Timestamp>,
}

/// Fills the deadlines of the admitted nodes in `status` (the one about to be written; `previous`
/// is the recorded one) and `DeadlineExceeded`, and says what else is due. `pods` are the pods of
/// the drained nodes, as the drain resolution saw them.
pub fn deadline_step(
    nm: &NodeMaintenance,
    status: &mut NodeMaintenanceStatus,
    previous: &NodeMaintenanceStatus,
    pods: &BTreeMap<String, Vec<DrainPod>>,
    now: Timestamp,
) -> DeadlineStep {
    let admitted = nm.admitted();
    let stage_start = drain_started(&status.stage_statuses).map(|t| t.0);
    let start = |node: &str| {
        admitted
            .admits(node)
            .then(|| drain_start(admitted.admitted_time(node).map(|t| t.0), stage_start))
            .flatten()
    };
    with_deadlines(
        &mut status.node_statuses,
        &previous.node_statuses,
        start,
        nm.spec.drain_deadline_seconds,
        now,
    );
    status.conditions = with_deadline_condition(
        &status.conditions,
        &exceeded(&status.node_statuses),
        nm.metadata.generation,
        now,
    );
    DeadlineStep {
        newly: newly_exceeded(&status.node_statuses, &previous.node_statuses),
        force: match nm.spec.deadline_policy() {
            DeadlinePolicy::Force => forced(&status.node_statuses, pods),
            DeadlinePolicy::Report => Vec::new(),
        },
        next: next_deadline(&status.node_statuses, now),
    }
}

/// Deletes the pods a passed deadline forces out, without waiting for any of them; a pod gone or
/// replaced meanwhile (404, or the UID precondition failing) is skipped.
pub async fn force(client: &Client, recorder: &Recorder, maintenance: &str, pods: &[PodRef]) {
    for p in pods {
        let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(p.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&p.name, &params).await {
            Ok(_) => {
                metrics().forced_pods.inc();
                info!(pod = %format!("{}/{}", p.namespace, p.name), maintenance, "deleted by the drain deadline");
                let event = Event {
                    type_: EventType::Warning,
                    reason: "ForcedByDeadline".into(),
                    note: Some(format!(
                        "Deleted by NodeMaintenance {maintenance}: its drain deadline passed (deadlinePolicy Force); PodDisruptionBudgets were not consulted"
                    )),
                    action: "Delete".into(),
                    secondary: None,
                };
                let reference = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    namespace: Some(p.namespace.clone()),
                    name: Some(p.name.clone()),
                    uid: Some(p.uid.clone()),
                    ..ObjectReference::default()
                };
                if let Err(e) = recorder.publish(&event, &reference).await {
                    warn!(error = %e, "could not record event");
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                warn!(pod = %p.name, error = %e, "could not delete a pod past its drain deadline")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::{
        AdmittedNode, DrainPlanEntry, NodeMaintenanceAdmission, NodeMaintenanceNodeStatus,
        NodeMaintenanceSpec, NodeReference, PodType, Stage, StageStatus,
    };
    use crate::drain::fixtures::pod;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn nm(policy: DeadlinePolicy, admitted_at: i64) -> NodeMaintenance {
        let mut m = NodeMaintenance::new(
            "m",
            NodeMaintenanceSpec {
                stage: Some(Stage::Drain),
                drain_deadline_seconds: Some(60),
                deadline_policy: Some(policy),
                ..Default::default()
            },
        );
        m.status = Some(NodeMaintenanceStatus {
            admission: Some(NodeMaintenanceAdmission {
                nodes: vec![AdmittedNode {
                    name: "a".into(),
                    admitted_time: Some(Time(t(admitted_at))),
                }],
                released_time: None,
            }),
            ..Default::default()
        });
        m
    }

    fn status(drain_started_at: i64) -> NodeMaintenanceStatus {
        NodeMaintenanceStatus {
            stage_statuses: vec![StageStatus {
                name: Stage::Drain,
                start_timestamp: Some(Time(t(drain_started_at))),
            }],
            node_statuses: ["a", "queued"]
                .iter()
                .map(|n| NodeMaintenanceNodeStatus {
                    node_ref: NodeReference {
                        name: n.to_string(),
                    },
                    drain_targets: vec![DrainPlanEntry {
                        pod_priority: 1000,
                        pod_type: PodType::Default,
                        pod_selector: None,
                    }],
                    pods_evacuating: 1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn pods() -> BTreeMap<String, Vec<DrainPod>> {
        [
            ("a".to_string(), vec![pod("held").pod]),
            ("queued".to_string(), vec![pod("elsewhere").pod]),
        ]
        .into()
    }

    /// The deadline counts from the later of the admission and the stage; a node not admitted
    /// has none.
    #[rstest::rstest]
    #[case::report_before(DeadlinePolicy::Report, 100, 100, 159, false, 0)]
    #[case::report_after(DeadlinePolicy::Report, 100, 100, 160, true, 0)]
    #[case::force_after(DeadlinePolicy::Force, 100, 100, 160, true, 1)]
    #[case::queued_longer_than_the_deadline(DeadlinePolicy::Force, 500, 100, 520, false, 0)]
    fn deadline_step_rows(
        #[case] policy: DeadlinePolicy,
        #[case] admitted_at: i64,
        #[case] drain_at: i64,
        #[case] now: i64,
        #[case] passed: bool,
        #[case] forced: usize,
    ) {
        let m = nm(policy, admitted_at);
        let previous = NodeMaintenanceStatus::default();
        let mut s = status(drain_at);
        let step = deadline_step(&m, &mut s, &previous, &pods(), t(now));
        assert_eq!(s.node_statuses[0].deadline_exceeded, passed);
        assert!(!s.node_statuses[1].deadline_exceeded);
        assert!(
            s.node_statuses[1].deadline_time.is_none(),
            "not admitted: no deadline"
        );
        assert_eq!(step.newly.len(), usize::from(passed));
        assert_eq!(step.force.len(), forced);
        assert_eq!(
            s.is_true(crate::api::CONDITION_DEADLINE_EXCEEDED),
            passed,
            "{:?}",
            s.conditions
        );
        if !passed {
            let deadline = admitted_at.max(drain_at) + 60;
            assert_eq!(step.next, Some(t(deadline)));
        }
    }
}
