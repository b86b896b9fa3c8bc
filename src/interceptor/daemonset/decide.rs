//! The DaemonSet interceptor's decision, pure: what to do for a DaemonSet pod whose
//! EvictionRequest has made `daemonset.apps.k8s.io` active ([`on_activation`]).

use jiff::{SignedDuration, Timestamp};

use crate::api::MAINTENANCE_TAINT;

/// What the interceptor knows when it decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The pod's node.
    pub node: String,
    /// The DaemonSet owning the pod (controller owner reference), if it is a DaemonSet pod.
    pub daemonset: Option<String>,
    /// When the pod's deletion started, if it did (`deletionTimestamp`: the end of its grace).
    pub deleting_since: Option<Timestamp>,
    /// The pod's `terminationGracePeriodSeconds` (Kubernetes' default 30 when unset).
    pub grace_seconds: i64,
    /// The maintenance in Drain whose recorded targets cover the pod, with its reason, if any.
    pub maintenance: Option<(String, Option<String>)>,
    /// What the DaemonSet's pod template says about the maintenance taint; `None` when the
    /// DaemonSet is gone (nothing would start the pod again).
    pub tolerates_taint: Option<bool>,
    /// The node carries the maintenance taint.
    pub node_tainted: bool,
}

/// What to do for the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Complete now, saying why (the next interceptor decides; for a DaemonSet pod, the
    /// Eviction API declines it and it stays).
    Complete {
        /// The message.
        message: String,
        /// The metric `result`.
        result: &'static str,
    },
    /// In progress: nothing to do but wait.
    Wait {
        /// The message.
        message: String,
        /// When it should be over, if known.
        expected_finish: Option<Timestamp>,
    },
    /// Delete the pod (UID precondition, its own grace period), then wait for it to go.
    Delete {
        /// The progress message.
        message: String,
        /// Now plus the pod's grace period.
        expected_finish: Timestamp,
    },
}

fn complete(message: String, result: &'static str) -> Step {
    Step::Complete { message, result }
}

/// The step for a DaemonSet pod (SPEC 5.3), in order: only DaemonSet pods; a pod already
/// terminating is waited for; only pods a maintenance in Drain targets; a DaemonSet that
/// tolerates the taint keeps its pod (deleting it would only restart it); the taint must be on
/// the node before the pod is removed; then the pod is deleted.
pub fn on_activation(f: &Facts, now: Timestamp) -> Step {
    let Some(ds) = &f.daemonset else {
        return complete(
            format!(
                "{} is not a DaemonSet pod: daemonset.apps.k8s.io only removes DaemonSet pods",
                f.pod
            ),
            "not_daemonset",
        );
    };
    if let Some(since) = f.deleting_since {
        return Step::Wait {
            message: format!("waiting for pod {} to terminate", f.pod),
            expected_finish: Some(since),
        };
    }
    let Some((maintenance, reason)) = &f.maintenance else {
        return complete(
            format!(
                "no NodeMaintenance in Drain targets pod {} on node {}: daemonset.apps.k8s.io removes \
                 DaemonSet pods only for a node maintenance whose drain targets include them",
                f.pod, f.node
            ),
            "not_targeted",
        );
    };
    if f.tolerates_taint == Some(true) {
        return complete(
            format!(
                "left running: DaemonSet {ds} tolerates the {MAINTENANCE_TAINT} taint, so the DaemonSet \
                 controller would start pod {} on node {} again at once",
                f.pod, f.node
            ),
            "kept",
        );
    }
    if !f.node_tainted {
        return Step::Wait {
            message: format!(
                "waiting for the {MAINTENANCE_TAINT} taint on node {} (placed by the node maintenance \
                 controller), which keeps DaemonSet {ds} from starting the pod there again",
                f.node
            ),
            expected_finish: None,
        };
    }
    let why = reason
        .as_deref()
        .filter(|r| !r.is_empty())
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    Step::Delete {
        message: format!(
            "{ds} is terminating pod {} due to node maintenance {maintenance}{why}; it is not started on node {} \
             again until the maintenance completes",
            f.pod, f.node
        ),
        expected_finish: now
            .checked_add(SignedDuration::from_secs(f.grace_seconds.max(0)))
            .unwrap_or(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_900_000_000 + s).unwrap()
    }

    /// A targeted pod of DaemonSet `logs` on a tainted node: to be deleted.
    fn facts() -> Facts {
        Facts {
            pod: "ns/logs-x".into(),
            node: "one".into(),
            daemonset: Some("logs".into()),
            deleting_since: None,
            grace_seconds: 30,
            maintenance: Some(("os-upgrade".into(), Some("OS upgrade".into()))),
            tolerates_taint: Some(false),
            node_tainted: true,
        }
    }

    fn result(step: &Step) -> &'static str {
        match step {
            Step::Complete { result, .. } => result,
            Step::Wait { .. } => "wait",
            Step::Delete { .. } => "delete",
        }
    }

    #[rstest::rstest]
    #[case::targeted_pod_is_deleted(facts(), "delete")]
    #[case::not_a_daemonset_pod(Facts { daemonset: None, ..facts() }, "not_daemonset")]
    #[case::terminating_pod_is_waited_for(Facts { deleting_since: Some(t(20)), ..facts() }, "wait")]
    #[case::not_targeted_by_a_maintenance(Facts { maintenance: None, ..facts() }, "not_targeted")]
    #[case::tolerating_daemonset_keeps_its_pod(Facts { tolerates_taint: Some(true), ..facts() }, "kept")]
    #[case::taint_first(Facts { node_tainted: false, ..facts() }, "wait")]
    #[case::daemonset_gone_nothing_restarts_it(Facts { tolerates_taint: None, ..facts() }, "delete")]
    #[case::terminating_wins_over_untargeted(Facts { deleting_since: Some(t(5)), maintenance: None, ..facts() }, "wait")]
    fn on_activation_rows(#[case] f: Facts, #[case] want: &str) {
        let step = on_activation(&f, t(0));
        assert_eq!(result(&step), want);
        if let Step::Complete { result, .. } = step {
            assert!(crate::metrics::DAEMONSET_RESULTS.contains(&result));
        }
    }

    #[test]
    fn messages_say_what_and_why() {
        match on_activation(&facts(), t(0)) {
            Step::Delete {
                message,
                expected_finish,
            } => {
                assert_eq!(
                    message,
                    "logs is terminating pod ns/logs-x due to node maintenance os-upgrade (OS upgrade); it is not \
                     started on node one again until the maintenance completes"
                );
                assert_eq!(expected_finish, t(30));
            }
            other => panic!("{other:?}"),
        }
        let kept = on_activation(
            &Facts {
                tolerates_taint: Some(true),
                ..facts()
            },
            t(0),
        );
        assert!(
            matches!(&kept, Step::Complete { message, .. } if message.contains("tolerates the evictord.dev/maintenance taint")),
            "{kept:?}"
        );
        let untargeted = on_activation(
            &Facts {
                maintenance: None,
                ..facts()
            },
            t(0),
        );
        assert!(
            matches!(&untargeted, Step::Complete { message, .. } if message.starts_with("no NodeMaintenance in Drain targets pod ns/logs-x on node one")),
            "{untargeted:?}"
        );
    }
}
