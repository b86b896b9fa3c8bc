//! When things fall due: the heartbeat deadline of an interceptor (SPEC 2.2), the next heartbeat
//! of the controller acting as `imperative-eviction.k8s.io`, and the small amount of time
//! arithmetic the decisions share.

use std::time::Duration;

use jiff::Timestamp;

use crate::api::{EvictionRequest, InterceptorStatus};

/// The moment the interceptor's heartbeat expires (see
/// [`EvictionRequest::heartbeat_deadline_at`], the one definition admission shares). The
/// heartbeat has expired when `now` is at or past it.
pub fn heartbeat_deadline_at(
    request: &EvictionRequest,
    entry: &InterceptorStatus,
    default_deadline: Duration,
) -> Option<Timestamp> {
    request.heartbeat_deadline_at(entry, default_deadline)
}

/// An interceptor's heartbeat deadline `deadline` (of `duration` after its last heartbeat)
/// pushed past an outage: when the controller's watch of the requests last failed for want of
/// kube-apiserver at `unreachable_until` (down, restarting, overloaded: `cluster::unreachable`),
/// the deadline is at the earliest `duration` after that. No interceptor can write a heartbeat
/// while kube-apiserver does not answer, and the controller cannot see one while its watch is
/// down; nor can the controller tell when the outage began (a kube-apiserver shutting down
/// keeps its watches open and answers nothing new), so every deadline gets a whole `duration`
/// after it. Counting the outage against the interceptor would hand its pod to the next
/// interceptor, in the end to the Eviction API, for an outage that was nobody's doing (the soak
/// saw it: a Deployment's pod evicted without its surge after a kube-apiserver restart longer
/// than the deadline). An interceptor that is gone gets that once per outage.
pub fn past_outage(
    deadline: Timestamp,
    unreachable_until: Option<Timestamp>,
    duration: Duration,
) -> Timestamp {
    unreachable_until.map_or(deadline, |u| deadline.max(add(u, duration)))
}

/// When the controller, as the imperative interceptor, should heartbeat again after a heartbeat
/// at `last`: half-way to its deadline, so that one missed reconcile does not expire it, but
/// never sooner than the minimum step admission allows.
pub fn imperative_heartbeat_due(
    last: Timestamp,
    deadline: Duration,
    min_interval: Duration,
) -> Timestamp {
    add(last, (deadline / 2).max(min_interval))
}

/// `at + d`, saturating at the end of time.
pub(crate) fn add(at: Timestamp, d: Duration) -> Timestamp {
    at.saturating_add(d).unwrap_or(Timestamp::MAX)
}

/// How long from `now` until `at`; zero when `at` has passed.
pub(crate) fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// `now` without its fraction of a second (see `Draft::now`).
pub(crate) fn whole_seconds(now: Timestamp) -> Timestamp {
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::controller::eviction_request::fixtures::{request, t};

    const MIN: Duration = Duration::from_secs(60);
    const DEFAULT: Duration = Duration::from_secs(1200);

    /// One row per case of [`past_outage`]: a deadline of 60 s at t(600).
    #[rstest]
    // No outage seen.
    #[case::no_outage(None, t(600))]
    // The watch failed before the deadline: the interceptor gets 60 s after it.
    #[case::outage_before(Some(580), t(640))]
    // It failed after the deadline: the deadline passed while nobody could see a heartbeat.
    #[case::outage_after(Some(650), t(710))]
    #[case::outage_long_after(Some(900), t(960))]
    // Long before: the deadline stays.
    #[case::outage_long_before(Some(100), t(600))]
    fn past_outage_rows(#[case] failed_at: Option<i64>, #[case] expected: Timestamp) {
        assert_eq!(
            past_outage(t(600), failed_at.map(t), Duration::from_secs(60)),
            expected
        );
    }

    #[rstest]
    // Anchored on creationTimestamp (t(0)) when the interceptor has no times yet.
    #[case::creation_only(None, None, None, Some(t(1200)))]
    #[case::activation_later(None, Some(100), None, Some(t(1300)))]
    #[case::heartbeat_latest(Some(500), Some(100), None, Some(t(1700)))]
    // An activation after the last heartbeat (impossible in practice) still anchors: the latest wins.
    #[case::activation_latest(Some(50), Some(100), None, Some(t(1300)))]
    #[case::spec_deadline(Some(0), None, Some(600), Some(t(600)))]
    fn deadline_rows(
        #[case] heartbeat: Option<i64>,
        #[case] activation: Option<i64>,
        #[case] spec_seconds: Option<i32>,
        #[case] expected: Option<Timestamp>,
    ) {
        let mut r = request("u").targets(&["x.y"]);
        if let Some(h) = heartbeat {
            r = r.started("x.y", t(h));
        }
        if let Some(a) = activation {
            r = r.activated("x.y", t(a));
        }
        if let Some(s) = spec_seconds {
            r = r.deadline_seconds(s);
        }
        let r = r.build();
        let entry = r.status.as_ref().unwrap().interceptor("x.y").unwrap();
        assert_eq!(heartbeat_deadline_at(&r, entry, DEFAULT), expected);
    }

    #[test]
    fn no_anchor_no_deadline() {
        let mut r = request("u").targets(&["x.y"]).build();
        r.metadata.creation_timestamp = None;
        let entry = r.status.as_ref().unwrap().interceptor("x.y").unwrap();
        assert_eq!(heartbeat_deadline_at(&r, entry, DEFAULT), None);
    }

    #[rstest]
    #[case::half_way(DEFAULT, t(600))]
    #[case::never_below_minimum(Duration::from_secs(90), t(60))]
    fn imperative_heartbeat_rows(#[case] deadline: Duration, #[case] expected: Timestamp) {
        assert_eq!(imperative_heartbeat_due(t(0), deadline, MIN), expected);
    }

    #[test]
    fn arithmetic() {
        assert_eq!(until(t(10), t(5)), Duration::ZERO);
        assert_eq!(until(t(5), t(10)), Duration::from_secs(5));
        assert_eq!(add(Timestamp::MAX, DEFAULT), Timestamp::MAX);
        let fractional = t(7).checked_add(Duration::from_millis(900)).unwrap();
        assert_eq!(whole_seconds(fractional), t(7));
    }
}
