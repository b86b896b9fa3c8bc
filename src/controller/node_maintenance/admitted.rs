//! Pure decisions about a maintenance's admission record and `Admitted` condition (SPEC 6.1):
//! the status an admission writes, the condition of a queued maintenance, the status lines of the
//! nodes that wait, and the release once the Complete work gave the nodes back.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::{
    AdmittedNode, CONDITION_ADMITTED, NodeMaintenance, NodeMaintenanceAdmission,
    NodeMaintenanceNodeStatus, NodeMaintenanceStatus, NodeReference, REASON_ADMITTED,
    REASON_NO_BUDGET, with_condition,
};
use crate::drain::admission::Queued;

/// `Admitted=False` before the first decision (SPEC 6.1): the maintenance waits for it.
pub const REASON_PENDING: &str = "Pending";
const PENDING_MESSAGE: &str = "Waiting for the first admission decision";

/// The maintenance's `Admitted` condition, if any.
pub fn admitted_condition(nm: &NodeMaintenance) -> Option<&Condition> {
    nm.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_ADMITTED)
}

fn condition(
    status: &str,
    reason: &str,
    message: String,
    nm: &NodeMaintenance,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: CONDITION_ADMITTED.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: nm.metadata.generation,
        last_transition_time: Time(now),
    }
}

/// The status after admitting `new` nodes (SPEC 6.1): the record grows by them, each with its
/// time (a maintenance that acted before records were kept gets its `admitted` nodes recorded
/// first), and `Admitted=True` names the budgets (reason `NoBudget` when none selects them).
pub fn admitted_status(
    nm: &NodeMaintenance,
    admitted: &[String],
    new: &[String],
    budgets: &[String],
    now: Timestamp,
) -> NodeMaintenanceStatus {
    let mut status = nm.status.clone().unwrap_or_default();
    let mut record = status.admission.take().unwrap_or_default();
    for name in admitted.iter().chain(new) {
        if !record.nodes.iter().any(|n| &n.name == name) {
            record.nodes.push(AdmittedNode {
                name: name.clone(),
                admitted_time: Some(Time(now)),
            });
        }
    }
    status.admission = Some(record);
    let (reason, message) = if budgets.is_empty() {
        (
            REASON_NO_BUDGET,
            "No MaintenanceBudget selects its nodes".to_string(),
        )
    } else {
        (
            REASON_ADMITTED,
            format!("Admitted by MaintenanceBudget {}", budgets.join(", ")),
        )
    };
    // A node admitted later keeps the condition True; the message says what was admitted last.
    status.conditions = with_condition(
        &status.conditions,
        condition("True", reason, message, nm, now),
    );
    status
}

/// The `Admitted` condition a queued maintenance should carry, when it differs from what it
/// carries: `False` with the queue's reason and message, or — for a maintenance already admitted
/// on some nodes whose other nodes wait — `True` with the queue's message.
pub fn queued_condition(
    nm: &NodeMaintenance,
    queued: &Queued,
    now: Timestamp,
) -> Option<Condition> {
    let current = admitted_condition(nm);
    let admitted_somewhere = nm
        .status
        .as_ref()
        .and_then(|s| s.admission.as_ref())
        .is_some();
    let want = if admitted_somewhere {
        let reason = current.map_or(REASON_ADMITTED, |c| c.reason.as_str());
        let reason = if reason == REASON_NO_BUDGET {
            REASON_ADMITTED
        } else {
            reason
        };
        condition(
            "True",
            reason,
            format!(
                "Admitted on some nodes; {} wait: {}",
                queued.waiting.join(", "),
                queued.message()
            ),
            nm,
            now,
        )
    } else {
        condition("False", queued.reason(), queued.message(), nm, now)
    };
    let same = current.is_some_and(|c| {
        c.status == want.status && c.reason == want.reason && c.message == want.message
    });
    (!same).then_some(want)
}

/// The conditions with `Admitted=False` (`Pending`) added when the maintenance has neither an
/// admission nor the condition: whatever the controller writes before the first decision marks
/// the maintenance as one that waits for admission (not as one that acted before admissions were
/// recorded, see [`NodeMaintenance::admitted`]).
pub fn with_pending(nm: &NodeMaintenance, status: &mut NodeMaintenanceStatus, now: Timestamp) {
    if status.admission.is_none() && admitted_condition(nm).is_none() {
        status.conditions = with_condition(
            &status.conditions,
            condition("False", REASON_PENDING, PENDING_MESSAGE.into(), nm, now),
        );
    }
}

/// The status lines of the selected nodes that wait for their admission: no targets, no pods,
/// and the `Admitted` condition's message (which budget holds them, and why).
pub fn waiting_statuses(
    nm: &NodeMaintenance,
    waiting: &[String],
) -> Vec<NodeMaintenanceNodeStatus> {
    let message = admitted_condition(nm)
        .map(|c| c.message.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| PENDING_MESSAGE.to_string());
    waiting
        .iter()
        .map(|n| NodeMaintenanceNodeStatus {
            node_ref: NodeReference { name: n.clone() },
            drain_targets: Vec::new(),
            drain_message: message.clone(),
            ..Default::default()
        })
        .collect()
}

/// The status lines of the `waiting` nodes carry `message`, the `Admitted` condition's new
/// message, as [`waiting_statuses`] would make them: the admission writes them with the
/// condition, so that the maintenance's reconcile that follows finds its lines right and writes
/// nothing. (A queued maintenance's message names the nodes that use its budget up, and changes
/// whenever one is admitted or given back: written twice each time, it cost a rollout of 20
/// nodes two status writes per queued maintenance at every turn.)
pub fn with_waiting_messages(
    status: &mut NodeMaintenanceStatus,
    waiting: &[String],
    message: &str,
) {
    for line in status
        .node_statuses
        .iter_mut()
        .filter(|l| waiting.contains(&l.node_ref.name))
    {
        *line = NodeMaintenanceNodeStatus {
            node_ref: line.node_ref.clone(),
            drain_targets: Vec::new(),
            drain_message: message.to_string(),
            ..Default::default()
        };
    }
}

/// The record after the Complete work restored the `admitted` nodes: released now, so that no
/// budget counts them any more. `None` when there is nothing to release (never admitted, or
/// released already).
pub fn released(
    nm: &NodeMaintenance,
    admitted: &[String],
    now: Timestamp,
) -> Option<NodeMaintenanceAdmission> {
    match nm.admitted() {
        crate::api::Admitted::Nothing => None,
        crate::api::Admitted::Nodes(a) if a.released_time.is_some() => None,
        crate::api::Admitted::Nodes(a) => Some(NodeMaintenanceAdmission {
            nodes: a.nodes.clone(),
            released_time: Some(Time(now)),
        }),
        crate::api::Admitted::Every => Some(NodeMaintenanceAdmission {
            nodes: admitted
                .iter()
                .map(|n| AdmittedNode {
                    name: n.clone(),
                    admitted_time: None,
                })
                .collect(),
            released_time: Some(Time(now)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeMaintenanceSpec, REASON_BUDGET_EXHAUSTED, Stage, StageStatus};
    use crate::drain::admission::QueueReason;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn nm() -> NodeMaintenance {
        NodeMaintenance::new(
            "m",
            NodeMaintenanceSpec {
                stage: Some(Stage::Drain),
                ..Default::default()
            },
        )
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn queued() -> Queued {
        Queued {
            waiting: names(&["n3"]),
            budget: "pool".into(),
            reason: QueueReason::BudgetExhausted {
                unavailable: vec![("n1".into(), "maintenance a".into())],
                allowed: 1,
                adds: 1,
            },
        }
    }

    #[test]
    fn admission_records_nodes_with_their_time_and_names_the_budgets() {
        let s = admitted_status(&nm(), &[], &names(&["n1", "n2"]), &names(&["pool"]), t(5));
        let record = s.admission.clone().unwrap();
        assert_eq!(record.nodes.len(), 2);
        assert_eq!(record.nodes[0].admitted_time, Some(Time(t(5))));
        let c = &s.conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Admitted"));
        assert_eq!(c.message, "Admitted by MaintenanceBudget pool");
        // A later node is added, the earlier ones keep their time.
        let mut later = nm();
        later.status = Some(s);
        let s = admitted_status(&later, &[], &names(&["n3"]), &[], t(9));
        let record = s.admission.unwrap();
        assert_eq!(record.nodes.len(), 3);
        assert_eq!(record.nodes[0].admitted_time, Some(Time(t(5))));
        assert_eq!(s.conditions[0].reason, "NoBudget");
        // The transition time of True stays.
        assert_eq!(s.conditions[0].last_transition_time, Time(t(5)));
    }

    #[test]
    fn a_maintenance_that_acted_before_records_were_kept_records_its_nodes_first() {
        let s = admitted_status(&nm(), &names(&["n1"]), &[], &[], t(5));
        assert_eq!(s.admission.unwrap().nodes[0].name, "n1");
    }

    #[test]
    fn queued_condition_rows() {
        // Not admitted: False with the queue's reason; unchanged: nothing to write.
        let c = queued_condition(&nm(), &queued(), t(1)).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", REASON_BUDGET_EXHAUSTED)
        );
        let mut carrying = nm();
        carrying.status = Some(NodeMaintenanceStatus {
            conditions: vec![c],
            ..Default::default()
        });
        assert_eq!(queued_condition(&carrying, &queued(), t(2)), None);
        // Admitted on some nodes: stays True and says which nodes wait.
        let mut partly = nm();
        partly.status = Some(admitted_status(
            &nm(),
            &[],
            &names(&["n1"]),
            &names(&["pool"]),
            t(1),
        ));
        let c = queued_condition(&partly, &queued(), t(3)).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Admitted"));
        assert!(
            c.message
                .starts_with("Admitted on some nodes; n3 wait: Queued: MaintenanceBudget pool"),
            "{}",
            c.message
        );
    }

    #[test]
    fn pending_is_marked_once_and_only_before_any_decision() {
        let mut status = NodeMaintenanceStatus::default();
        with_pending(&nm(), &mut status, t(1));
        assert_eq!(status.conditions[0].reason, REASON_PENDING);
        // The marked maintenance is not mistaken for one that acted before records were kept.
        let mut m = nm();
        status.stage_statuses = vec![StageStatus {
            name: Stage::Drain,
            start_timestamp: None,
        }];
        m.status = Some(status.clone());
        assert_eq!(m.admitted(), crate::api::Admitted::Nothing);
        let mut again = status.clone();
        with_pending(&m, &mut again, t(2));
        assert_eq!(again, status);
    }

    /// The admission's write of a queued maintenance's condition carries its waiting nodes'
    /// lines as the reconcile would make them from the new condition: nothing left to write.
    #[test]
    fn the_admission_writes_the_waiting_lines_the_reconcile_would() {
        let mut nm = nm();
        let mut status = nm.status.clone().unwrap_or_default();
        status.node_statuses = waiting_statuses(&nm, &names(&["n3"]));
        let c = queued_condition(&nm, &queued(), t(5)).unwrap();
        let message = c.message.clone();
        status.conditions = with_condition(&status.conditions, c);
        with_waiting_messages(&mut status, &names(&["n3"]), &message);
        nm.status = Some(status.clone());
        assert_eq!(status.node_statuses, waiting_statuses(&nm, &names(&["n3"])));
    }

    #[test]
    fn waiting_nodes_carry_the_condition_message() {
        let mut m = nm();
        m.status = Some(NodeMaintenanceStatus {
            conditions: vec![queued_condition(&nm(), &queued(), t(1)).unwrap()],
            ..Default::default()
        });
        let lines = waiting_statuses(&m, &names(&["n3"]));
        assert_eq!(lines[0].node_ref.name, "n3");
        assert!(
            lines[0]
                .drain_message
                .starts_with("Queued: MaintenanceBudget pool allows 1"),
            "{}",
            lines[0].drain_message
        );
        assert!(lines[0].drain_targets.is_empty());
        assert_eq!(
            waiting_statuses(&nm(), &names(&["n3"]))[0].drain_message,
            PENDING_MESSAGE
        );
    }

    #[test]
    fn release_rows() {
        assert_eq!(released(&nm(), &[], t(1)), None);
        let mut admitted = nm();
        admitted.status = Some(admitted_status(&nm(), &[], &names(&["n1"]), &[], t(1)));
        let r = released(&admitted, &names(&["n1"]), t(2)).unwrap();
        assert_eq!(r.released_time, Some(Time(t(2))));
        assert_eq!(r.nodes[0].admitted_time, Some(Time(t(1))));
        admitted.status.as_mut().unwrap().admission = Some(r);
        assert_eq!(released(&admitted, &names(&["n1"]), t(3)), None);
        // One that acted before records were kept: every node it held, released.
        let mut legacy = nm();
        legacy.status = Some(NodeMaintenanceStatus {
            stage_statuses: vec![StageStatus {
                name: Stage::Drain,
                start_timestamp: None,
            }],
            ..Default::default()
        });
        let r = released(&legacy, &names(&["n1", "n2"]), t(4)).unwrap();
        assert_eq!(r.nodes.len(), 2);
    }
}
