//! The DaemonSet interceptor's decision, pure: what to do for a DaemonSet pod whose
//! EvictionRequest has made `daemonset.apps.k8s.io` active ([`on_activation`]).

use jiff::{SignedDuration, Timestamp};

use crate::api::{MAINTENANCE_TAINT, MAX_INTERCEPTOR_MESSAGE_BYTES};

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
    /// The message the interceptor's entry of the request carries now, if any.
    pub recorded: Option<String>,
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
    /// Record the reason in the request (the runner writes the message), then look again at
    /// once: the next look, finding it recorded, deletes the pod.
    Record {
        /// The message (the reason of the deletion).
        message: String,
        /// Now plus the pod's grace period.
        expected_finish: Timestamp,
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
/// the node before the pod is removed; the reason is recorded in the request before the pod is
/// deleted (the request may end the moment the pod is gone, and a reader must still learn why).
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
    let message = format!(
        "{ds} is terminating pod {} due to node maintenance {maintenance}{why}; it is not started on node {} \
         again until the maintenance completes",
        f.pod, f.node
    );
    let expected_finish = now
        .checked_add(SignedDuration::from_secs(f.grace_seconds.max(0)))
        .unwrap_or(now);
    if f.recorded.as_deref() != Some(message.as_str()) {
        return Step::Record {
            message,
            expected_finish,
        };
    }
    Step::Delete {
        message,
        expected_finish,
    }
}

/// The completion message once the target pod is gone: what the interceptor last recorded
/// (why the pod was removed) stays readable after it.
pub fn on_gone(recorded: Option<&str>) -> String {
    const GONE: &str = "the pod is gone";
    match recorded.filter(|m| !m.is_empty()) {
        Some(m) if m.starts_with(GONE) => m.to_string(),
        Some(m) if m.len() + GONE.len() + 2 <= MAX_INTERCEPTOR_MESSAGE_BYTES => {
            format!("{GONE}: {m}")
        }
        _ => GONE.to_string(),
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
            recorded: Some(DELETING.into()),
        }
    }

    const DELETING: &str = "logs is terminating pod ns/logs-x due to node maintenance os-upgrade (OS upgrade); it is \
                            not started on node one again until the maintenance completes";

    fn result(step: &Step) -> &'static str {
        match step {
            Step::Complete { result, .. } => result,
            Step::Wait { .. } => "wait",
            Step::Record { .. } => "record",
            Step::Delete { .. } => "delete",
        }
    }

    #[rstest::rstest]
    #[case::targeted_pod_is_deleted_once_the_reason_is_recorded(facts(), "delete")]
    #[case::reason_recorded_before_the_deletion(Facts { recorded: None, ..facts() }, "record")]
    #[case::another_reason_recorded(Facts { recorded: Some("waiting for the taint".into()), ..facts() }, "record")]
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
                assert_eq!(message, DELETING);
                assert_eq!(expected_finish, t(30));
            }
            other => panic!("{other:?}"),
        }
        let first = on_activation(
            &Facts {
                recorded: None,
                ..facts()
            },
            t(0),
        );
        assert_eq!(
            first,
            Step::Record {
                message: DELETING.into(),
                expected_finish: t(30)
            }
        );
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

    #[rstest::rstest]
    #[case::keeps_the_reason(Some(DELETING.into()), format!("the pod is gone: {DELETING}"))]
    #[case::nothing_recorded(None, "the pod is gone".into())]
    #[case::empty(Some(String::new()), "the pod is gone".into())]
    #[case::not_twice(Some("the pod is gone: x".into()), "the pod is gone: x".into())]
    #[case::within_the_limit(Some("x".repeat(MAX_INTERCEPTOR_MESSAGE_BYTES - 10)), "the pod is gone".into())]
    fn on_gone_rows(#[case] recorded: Option<String>, #[case] want: String) {
        assert_eq!(on_gone(recorded.as_deref()), want);
    }
}
