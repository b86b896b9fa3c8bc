//! What of a rollout's maintenances and nodes a phase turns on ([`super::phase`]), as keys the
//! plugin's watches compare: a change that turns one is looked at at once.

use k8s_openapi::api::core::v1::Node;

use crate::api::NodeMaintenance;
use crate::controller::node_maintenance::gather::is_ready;
use crate::drain::holds::is_deleting;

use super::phase::boot_id;

/// What of a rollout's maintenance its phase turns on — its stage, deletion, admission and
/// conditions (`Admitted`, `Drained`) — as one comparable key: a change of it (a node drained, a
/// maintenance admitted) is looked at at once, any other change (a drain's counts and
/// messages) at most once a second.
pub fn maintenance_turn(nm: &NodeMaintenance) -> String {
    let status = nm.status.as_ref();
    let conditions: Vec<String> = status
        .iter()
        .flat_map(|s| &s.conditions)
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    let admitted: Vec<&str> = status
        .and_then(|s| s.admission.as_ref())
        .iter()
        .flat_map(|a| &a.nodes)
        .map(|n| n.name.as_str())
        .collect();
    let released = nm.admitted().released();
    format!(
        "{:?} deleting={} admitted={admitted:?} released={released} {conditions:?}",
        nm.spec.stage(),
        is_deleting(nm),
    )
}

/// What of a rolled node its phase turns on — Ready, schedulable, `bootID` — as one key
/// ([`maintenance_turn`]).
pub fn node_turn(node: &Node) -> String {
    format!(
        "ready={} unschedulable={} boot={:?}",
        is_ready(node),
        node.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        boot_id(node)
    )
}

#[cfg(test)]
mod turn_tests {
    use k8s_openapi::api::core::v1::NodeSpec;
    use rstest::rstest;

    use super::super::phase::tests::{M, maintenance, node};
    use super::*;

    /// A maintenance's turn changes with what its phase turns on, not with a drain's progress.
    #[rstest]
    #[case::queued_to_admitted(M::Queued, M::Draining, true)]
    #[case::drained(M::Draining, M::Drained, true)]
    #[case::completed(M::Drained, M::Complete, true)]
    #[case::released(M::Complete, M::Released, true)]
    #[case::deleting(M::Drained, M::Deleting, true)]
    #[case::same(M::Draining, M::Draining, false)]
    fn a_maintenance_turns_on_its_phase(#[case] from: M, #[case] to: M, #[case] turned: bool) {
        assert_eq!(
            maintenance_turn(&maintenance(from)) != maintenance_turn(&maintenance(to)),
            turned
        );
    }

    #[test]
    fn a_drains_progress_is_no_turn() {
        let before = maintenance(M::Draining);
        let mut after = before.clone();
        let s = &mut after.status.as_mut().unwrap().node_statuses[0];
        s.pods_evacuating = 0;
        s.pods_pending_evacuation = 0;
        s.drain_message = "Evacuating: 1 pod left".into();
        assert_eq!(maintenance_turn(&before), maintenance_turn(&after));
    }

    /// A node's turn: Ready, schedulable, boot.
    #[rstest]
    #[case::not_ready(node(false, "boot-1", false), true)]
    #[case::rebooted(node(true, "boot-2", false), true)]
    #[case::cordoned({
        let mut n = node(true, "boot-1", false);
        n.spec = Some(NodeSpec { unschedulable: Some(true), ..Default::default() });
        n
    }, true)]
    #[case::annotated_only(node(true, "boot-1", true), false)]
    fn a_node_turns_on_its_readiness_cordon_and_boot(#[case] after: Node, #[case] turned: bool) {
        let before = node(true, "boot-1", false);
        assert_eq!(node_turn(&before) != node_turn(&after), turned);
    }
}
