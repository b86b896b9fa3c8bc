//! How often a maintenance's status is written (issue 44): a change of its progress alone — the
//! per-node counts of pods pending evacuation and evacuating, the drain messages that tell them,
//! and the pods each node's line lists (skipped, waited for, unmanaged, with local data: they
//! shrink as pods leave) — at most once per [`PROGRESS_INTERVAL`]; every other change (stages,
//! plan position, drain targets, admission, conditions, deadlines) at once, since requests,
//! budgets and users act on those.
//!
//! A drain moves a node's pods one by one, so without this a maintenance of one node wrote its
//! status about once per pod; each write also wakes every other draining maintenance.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::NodeMaintenanceStatus;

/// The shortest time between two writes of a maintenance's status that change its progress
/// alone.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// What to do with a newly computed status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// Nothing changed.
    Unchanged,
    /// Write it now.
    Now,
    /// Only the progress changed, and the last write was too recent: look again after this long.
    Later(Duration),
}

/// Whether `new` is written now, given the recorded `old` and the time since this controller last
/// wrote the maintenance's status (`None`: not since it started).
pub fn status_write(
    old: &NodeMaintenanceStatus,
    new: &NodeMaintenanceStatus,
    since_last_write: Option<Duration>,
) -> StatusWrite {
    if new == old {
        return StatusWrite::Unchanged;
    }
    match since_last_write {
        Some(since)
            if since < PROGRESS_INTERVAL && without_progress(old) == without_progress(new) =>
        {
            StatusWrite::Later(PROGRESS_INTERVAL - since)
        }
        _ => StatusWrite::Now,
    }
}

/// The status with the progress fields cleared.
fn without_progress(status: &NodeMaintenanceStatus) -> NodeMaintenanceStatus {
    let mut s = status.clone();
    for node in &mut s.node_statuses {
        node.pods_pending_evacuation = 0;
        node.pods_evacuating = 0;
        node.drain_message.clear();
        node.skipped_pods.clear();
        node.waiting_pods.clear();
        node.unmanaged_pods.clear();
        node.local_data_pods.clear();
    }
    s
}

/// When this controller last wrote each maintenance's status (in memory: a new leader writes the
/// first change at once). Entries older than the interval are dropped as others are added.
#[derive(Default)]
pub struct StatusWrites(Mutex<HashMap<String, Instant>>);

impl StatusWrites {
    /// The time since the last write of `name`'s status, while its entry is kept (entries older
    /// than the interval may be dropped by a later [`wrote`](Self::wrote)).
    pub fn since(&self, name: &str) -> Option<Duration> {
        let map = self.0.lock().ok()?;
        map.get(name).map(Instant::elapsed)
    }

    /// Records a write of `name`'s status now.
    pub fn wrote(&self, name: &str) {
        if let Ok(mut map) = self.0.lock() {
            map.retain(|_, at| at.elapsed() < PROGRESS_INTERVAL);
            map.insert(name.to_string(), Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::api::{NodeMaintenanceNodeStatus, NodeReference};

    fn status(
        pending: i32,
        evacuating: i32,
        message: &str,
        targets: usize,
    ) -> NodeMaintenanceStatus {
        NodeMaintenanceStatus {
            drain_plan_position: Some(0),
            node_statuses: vec![NodeMaintenanceNodeStatus {
                node_ref: NodeReference { name: "n1".into() },
                drain_targets: vec![Default::default(); targets],
                drain_message: message.into(),
                pods_pending_evacuation: pending,
                pods_evacuating: evacuating,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[rstest]
    #[case::unchanged(status(2, 1, "Evacuating", 1), Some(MS(10)), StatusWrite::Unchanged)]
    #[case::progress_after_the_interval(
        status(1, 2, "Evacuating: 3 pods", 1),
        Some(PROGRESS_INTERVAL),
        StatusWrite::Now
    )]
    #[case::progress_first_write_since_start(status(1, 2, "Evacuating", 1), None, StatusWrite::Now)]
    #[case::progress_too_soon_waits(
        status(1, 2, "Evacuating", 1),
        Some(MS(300)),
        StatusWrite::Later(PROGRESS_INTERVAL - MS(300))
    )]
    #[case::message_alone_too_soon_waits(
        status(2, 1, "Evacuating: 2 pods", 1),
        Some(MS(0)),
        StatusWrite::Later(PROGRESS_INTERVAL)
    )]
    #[case::targets_changed_at_once(status(2, 1, "Evacuating", 2), Some(MS(10)), StatusWrite::Now)]
    #[case::targets_and_counts_changed_at_once(
        status(3, 1, "Evacuating", 2),
        Some(MS(10)),
        StatusWrite::Now
    )]
    fn writes(
        #[case] new: NodeMaintenanceStatus,
        #[case] since: Option<Duration>,
        #[case] expect: StatusWrite,
    ) {
        let old = status(2, 1, "Evacuating", 1);
        assert_eq!(status_write(&old, &new, since), expect);
    }

    #[test]
    fn a_pod_list_alone_waits_too() {
        let old = status(2, 1, "Evacuating", 1);
        let mut new = status(1, 1, "Evacuating", 1);
        new.node_statuses[0].unmanaged_pods = vec!["ns/p1".into()];
        assert_eq!(
            status_write(&old, &new, Some(MS(200))),
            StatusWrite::Later(PROGRESS_INTERVAL - MS(200))
        );
    }

    #[test]
    fn a_plan_position_change_is_written_at_once() {
        let old = status(0, 0, "Drained", 1);
        let mut new = old.clone();
        new.drain_plan_position = Some(1);
        assert_eq!(status_write(&old, &new, Some(MS(1))), StatusWrite::Now);
    }

    #[test]
    fn writes_are_remembered_for_the_interval() {
        let writes = StatusWrites::default();
        assert_eq!(writes.since("a"), None);
        writes.wrote("a");
        assert!(writes.since("a").is_some_and(|d| d < PROGRESS_INTERVAL));
        assert_eq!(writes.since("b"), None);
    }
}
