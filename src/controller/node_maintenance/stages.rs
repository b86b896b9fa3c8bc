//! Pure decisions about the NodeMaintenance object itself (SPEC 3.3): what its stage and
//! deletion state call for, the finalizer, `stageStatuses`, and the `Drained` condition.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::{CONDITION_DRAINED, MAINTENANCE_FINALIZER, NodeMaintenance, Stage, StageStatus};

/// What a maintenance calls for, before any node or pod is looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Idle, or being deleted without our finalizer: touch nothing.
    Nothing,
    /// Being deleted with the finalizer but not yet in Complete: set `spec.stage: Complete`
    /// first, so that the Complete work runs (and shows) before the object goes.
    MoveToComplete,
    /// Run the work of `stage`.
    Run {
        /// The stage whose work to run (never Idle).
        stage: Stage,
        /// The finalizer is missing and must be added (never while deleting).
        add_finalizer: bool,
        /// Being deleted: remove the finalizer once the Complete work is done.
        remove_finalizer_when_done: bool,
    },
}

/// True when the maintenance carries the completion finalizer.
pub fn has_finalizer(nm: &NodeMaintenance) -> bool {
    nm.metadata
        .finalizers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|f| f == MAINTENANCE_FINALIZER)
}

pub use crate::drain::holds::is_deleting;

/// SPEC 3.3: Idle touches nothing; other stages ensure the finalizer; deletion goes at once
/// without the finalizer, otherwise through Complete before the finalizer is removed.
pub fn lifecycle(nm: &NodeMaintenance) -> Lifecycle {
    let stage = nm.spec.stage();
    match (is_deleting(nm), has_finalizer(nm)) {
        (true, false) => Lifecycle::Nothing,
        (true, true) if stage != Stage::Complete => Lifecycle::MoveToComplete,
        (true, true) => Lifecycle::Run {
            stage,
            add_finalizer: false,
            remove_finalizer_when_done: true,
        },
        (false, _) if stage == Stage::Idle => Lifecycle::Nothing,
        (false, present) => Lifecycle::Run {
            stage,
            add_finalizer: !present,
            remove_finalizer_when_done: false,
        },
    }
}

/// The finalizer list without ours.
pub fn finalizers_without_ours(nm: &NodeMaintenance) -> Vec<String> {
    nm.metadata
        .finalizers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|f| *f != MAINTENANCE_FINALIZER)
        .cloned()
        .collect()
}

/// `stageStatuses` with `stage` appended, when this is the first time the stage is seen (never
/// for Idle). `None` when nothing changes.
pub fn stage_statuses_with(
    current: &[StageStatus],
    stage: Stage,
    now: Time,
) -> Option<Vec<StageStatus>> {
    if stage == Stage::Idle || current.iter().any(|s| s.name == stage) {
        return None;
    }
    let mut next = current.to_vec();
    next.push(StageStatus {
        name: stage,
        start_timestamp: Some(now),
    });
    Some(next)
}

/// The conditions with `Drained` set to `drained`. `lastTransitionTime` changes only when the
/// status does, so that rewriting an unchanged condition is a no-op.
pub fn with_drained_condition(
    current: &[Condition],
    drained: bool,
    generation: Option<i64>,
    now: Time,
) -> Vec<Condition> {
    let (status, reason, message) = if drained {
        (
            "True",
            "Drained",
            "The whole drain plan is reached and no evictable targeted pod remains on the selected nodes.",
        )
    } else {
        (
            "False",
            "Draining",
            "Targeted pods remain on the selected nodes, or the drain plan is not finished.",
        )
    };
    let mut next: Vec<Condition> = current
        .iter()
        .filter(|c| c.type_ != CONDITION_DRAINED)
        .cloned()
        .collect();
    let previous = current.iter().find(|c| c.type_ == CONDITION_DRAINED);
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now,
    };
    next.push(Condition {
        type_: CONDITION_DRAINED.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time,
    });
    next
}

/// When the Drain stage started, from `stageStatuses`.
pub fn drain_started(stages: &[StageStatus]) -> Option<&Time> {
    stages
        .iter()
        .find(|s| s.name == Stage::Drain)
        .and_then(|s| s.start_timestamp.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeMaintenanceSpec;

    fn nm(stage: Stage, deleting: bool, finalizer: bool) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            "m",
            NodeMaintenanceSpec {
                stage: Some(stage),
                ..Default::default()
            },
        );
        if deleting {
            nm.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        }
        if finalizer {
            nm.metadata.finalizers =
                Some(vec!["other.example/x".into(), MAINTENANCE_FINALIZER.into()]);
        }
        nm
    }

    fn run(stage: Stage, add: bool, remove: bool) -> Lifecycle {
        Lifecycle::Run {
            stage,
            add_finalizer: add,
            remove_finalizer_when_done: remove,
        }
    }

    #[test]
    fn lifecycle_rows() {
        let rows = [
            (
                "idle touches nothing",
                nm(Stage::Idle, false, false),
                Lifecycle::Nothing,
            ),
            (
                "idle with finalizer still touches nothing",
                nm(Stage::Idle, false, true),
                Lifecycle::Nothing,
            ),
            (
                "cordon adds the finalizer",
                nm(Stage::Cordon, false, false),
                run(Stage::Cordon, true, false),
            ),
            (
                "drain keeps the finalizer",
                nm(Stage::Drain, false, true),
                run(Stage::Drain, false, false),
            ),
            (
                "complete adds the finalizer",
                nm(Stage::Complete, false, false),
                run(Stage::Complete, true, false),
            ),
            (
                "idle deleted without finalizer goes at once",
                nm(Stage::Idle, true, false),
                Lifecycle::Nothing,
            ),
            (
                "drain deleted without finalizer is left to the apiserver",
                nm(Stage::Drain, true, false),
                Lifecycle::Nothing,
            ),
            (
                "drain deleted moves to complete",
                nm(Stage::Drain, true, true),
                Lifecycle::MoveToComplete,
            ),
            (
                "cordon deleted moves to complete",
                nm(Stage::Cordon, true, true),
                Lifecycle::MoveToComplete,
            ),
            (
                "complete deleted runs then removes the finalizer",
                nm(Stage::Complete, true, true),
                run(Stage::Complete, false, true),
            ),
        ];
        for (name, obj, want) in rows {
            assert_eq!(lifecycle(&obj), want, "{name}");
        }
    }

    #[test]
    fn finalizer_removal_keeps_others() {
        assert_eq!(
            finalizers_without_ours(&nm(Stage::Complete, true, true)),
            vec!["other.example/x"]
        );
        assert!(has_finalizer(&nm(Stage::Drain, false, true)));
        assert!(!has_finalizer(&nm(Stage::Drain, false, false)));
    }

    #[test]
    fn stage_statuses_rows() {
        let t0 = Time(jiff::Timestamp::UNIX_EPOCH);
        let t1 = Time(jiff::Timestamp::from_second(60).unwrap());
        let cordon = StageStatus {
            name: Stage::Cordon,
            start_timestamp: Some(t0.clone()),
        };
        // First sight of a stage appends it.
        let appended =
            stage_statuses_with(std::slice::from_ref(&cordon), Stage::Drain, t1.clone()).unwrap();
        assert_eq!(appended.len(), 2);
        assert_eq!(appended[1].name, Stage::Drain);
        assert_eq!(appended[1].start_timestamp, Some(t1.clone()));
        // A stage already recorded keeps its first timestamp.
        assert_eq!(
            stage_statuses_with(std::slice::from_ref(&cordon), Stage::Cordon, t1.clone()),
            None
        );
        // Idle is never recorded.
        assert_eq!(stage_statuses_with(&[], Stage::Idle, t1), None);
        assert_eq!(
            drain_started(&appended),
            appended[1].start_timestamp.as_ref()
        );
    }

    #[test]
    fn drained_condition_rows() {
        let t0 = Time(jiff::Timestamp::UNIX_EPOCH);
        let t1 = Time(jiff::Timestamp::from_second(60).unwrap());
        // Absent → False at now.
        let c = with_drained_condition(&[], false, Some(2), t0.clone());
        assert_eq!(
            (c[0].status.as_str(), c[0].reason.as_str()),
            ("False", "Draining")
        );
        assert_eq!(c[0].last_transition_time, t0);
        // Same status again keeps the transition time.
        let same = with_drained_condition(&c, false, Some(2), t1.clone());
        assert_eq!(same, c);
        // False → True moves the transition time.
        let done = with_drained_condition(&c, true, Some(2), t1.clone());
        assert_eq!(
            (done[0].status.as_str(), done[0].reason.as_str()),
            ("True", "Drained")
        );
        assert_eq!(done[0].last_transition_time, t1);
        // Other conditions are kept.
        let mut other = done[0].clone();
        other.type_ = "Other".into();
        let both = with_drained_condition(&[other.clone()], true, None, t1);
        assert_eq!(both.len(), 2);
        assert_eq!(both[0], other);
    }
}
