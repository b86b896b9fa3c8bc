//! How long an ended EvictionRequest is kept (like a Job's `ttlSecondsAfterFinished`): requests
//! that are `Evicted` or `Canceled` are deleted `--ended-request-retention` after they ended, so
//! that daily drains of a large cluster do not pile them up in etcd. Requests evictord creates
//! also carry an ownerReference to their pod, so the garbage collector removes them as soon as the
//! pod is deleted.

use std::time::Duration;

use jiff::Timestamp;

use crate::api::{CONDITION_CANCELED, CONDITION_EVICTED, CancellationPolicy, EvictionRequest};

/// What to do with an ended request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Not ended (or kept by `Forbid`, rule D2): nothing to do.
    Open,
    /// Ended; delete it after this long.
    DeleteIn(Duration),
    /// Ended longer ago than the retention: delete it now.
    Delete,
}

/// Decides from the time the request ended (the `lastTransitionTime` of its `Evicted` or
/// `Canceled` condition).
pub fn retention(req: &EvictionRequest, now: Timestamp, keep: Duration) -> Retention {
    let Some(status) = &req.status else {
        return Retention::Open;
    };
    let ended = [CONDITION_EVICTED, CONDITION_CANCELED]
        .iter()
        .filter_map(|c| status.condition(c).filter(|c| c.status == "True"))
        .map(|c| c.last_transition_time.0)
        .min();
    let Some(ended) = ended else {
        return Retention::Open;
    };
    // D2: a Forbid request may not be deleted while the pod exists and it is not Evicted.
    let forbid = status.cancellation_policy() == CancellationPolicy::Forbid;
    if forbid && !status.is_true(CONDITION_EVICTED) {
        return Retention::Open;
    }
    let elapsed = Duration::try_from(now.duration_since(ended)).unwrap_or_default();
    match keep.checked_sub(elapsed) {
        Some(left) if !left.is_zero() => Retention::DeleteIn(left),
        _ => Retention::Delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::eviction_request::fixtures::{request, t};

    #[test]
    fn rows() {
        let keep = Duration::from_secs(3600);
        let secs = Duration::from_secs;
        let now = t(1000);
        // `condition` marks the request at t(0).
        for (name, req, expected) in [
            ("open", request("u").build(), Retention::Open),
            (
                "started, not ended",
                request("u").targets(&["a.example.com"]).build(),
                Retention::Open,
            ),
            (
                "evicted 1000 s ago",
                request("u").condition("Evicted", "PodDeleted").build(),
                Retention::DeleteIn(secs(2600)),
            ),
            (
                "canceled 1000 s ago",
                request("u").condition("Canceled", "NoRequesters").build(),
                Retention::DeleteIn(secs(2600)),
            ),
            (
                "forbid and canceled: D2 keeps it",
                request("u")
                    .forbid()
                    .condition("Canceled", "NoRequesters")
                    .build(),
                Retention::Open,
            ),
            (
                "forbid and evicted",
                request("u")
                    .forbid()
                    .condition("Evicted", "PodDeleted")
                    .build(),
                Retention::DeleteIn(secs(2600)),
            ),
        ] {
            assert_eq!(retention(&req, now, keep), expected, "{name}");
        }
        let ended = request("u").condition("Evicted", "PodDeleted").build();
        assert_eq!(
            retention(&ended, t(3600), keep),
            Retention::Delete,
            "exactly the retention"
        );
        assert_eq!(retention(&ended, t(99_999), keep), Retention::Delete);
        assert_eq!(
            retention(&ended, t(5), Duration::ZERO),
            Retention::Delete,
            "zero: at once"
        );
    }
}
