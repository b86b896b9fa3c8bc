//! The heartbeat deadline of an interceptor (SPEC 2.2): `spec.heartbeatDeadlineSeconds` (default
//! from the process flag) measured from the latest of its `heartbeatTime`, its `activationTime`
//! and the request's `creationTimestamp`. One definition, shared by admission rule S2 and the
//! eviction request controller, so that the controller never writes a hand-off the webhook
//! refuses.

use std::time::Duration;

use jiff::Timestamp;

use crate::api::{EvictionRequest, InterceptorStatus};

/// The moment the interceptor's heartbeat expires.
///
/// # Guarantees
/// Without any anchor (no heartbeat, no activation and no creation timestamp, which the API
/// server always sets) the deadline is [`Timestamp::MAX`]: an interceptor is never skipped
/// without evidence. Overflow saturates to [`Timestamp::MAX`] as well.
pub fn heartbeat_deadline_at(
    request: &EvictionRequest,
    interceptor: &InterceptorStatus,
    default_deadline: Duration,
) -> Timestamp {
    request
        .heartbeat_deadline_at(interceptor, default_deadline)
        .unwrap_or(Timestamp::MAX)
}

/// True when `now` has reached the interceptor's heartbeat deadline
/// ([`heartbeat_deadline_at`]).
pub fn heartbeat_expired(
    request: &EvictionRequest,
    interceptor: &InterceptorStatus,
    now: Timestamp,
    default_deadline: Duration,
) -> bool {
    now >= heartbeat_deadline_at(request, interceptor, default_deadline)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::super::fixtures::*;
    use super::*;

    const DEFAULT: Duration = Duration::from_secs(1200);

    /// (created, activated, heartbeat, spec deadline, now) → expired; times in seconds from NOW.
    #[rstest]
    #[case::from_creation_not_yet(Some(-1199), None, None, None, false)]
    #[case::from_creation_expired(Some(-1200), None, None, None, true)]
    #[case::activation_is_later_than_creation(Some(-5000), Some(-600), None, None, false)]
    #[case::heartbeat_is_latest(Some(-5000), Some(-3000), Some(-100), None, false)]
    #[case::heartbeat_old_activation_latest(Some(-5000), Some(-1300), Some(-2000), None, true)]
    #[case::spec_deadline_longer(Some(-1300), None, None, Some(3600), false)]
    #[case::spec_deadline_reached(Some(-3600), None, None, Some(3600), true)]
    #[case::no_anchor_never_expires(None, None, None, None, false)]
    fn expiry(
        #[case] created: Option<i64>,
        #[case] activated: Option<i64>,
        #[case] heartbeat: Option<i64>,
        #[case] spec_deadline: Option<i32>,
        #[case] expired: bool,
    ) {
        let mut er = request(UID).build();
        er.metadata.creation_timestamp = created.map(at);
        er.spec.heartbeat_deadline_seconds = spec_deadline;
        let entry = InterceptorStatus {
            name: "a.example.com".into(),
            activation_time: activated.map(at),
            heartbeat_time: heartbeat.map(at),
            ..InterceptorStatus::default()
        };
        assert_eq!(heartbeat_expired(&er, &entry, now(), DEFAULT), expired);
    }

    #[test]
    fn deadline_is_anchor_plus_deadline() {
        let mut er = request(UID).build();
        er.metadata.creation_timestamp = Some(at(-10));
        let entry = InterceptorStatus {
            heartbeat_time: Some(at(5)),
            ..InterceptorStatus::default()
        };
        assert_eq!(heartbeat_deadline_at(&er, &entry, DEFAULT), at(5 + 1200).0);
    }
}
