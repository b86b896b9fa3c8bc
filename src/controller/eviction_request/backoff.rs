//! The retry schedule of failed Eviction API calls: exponential, from `base` doubling to `cap`
//! (SPEC 2.3 step 8). It is derived from `podEvictionStatus` (the failure counter and the time
//! of the last failure), not from memory, so a restarted controller resumes it where it was.

use std::time::Duration;

use jiff::Timestamp;

use super::deadline::add;
use crate::api::EvictionRequestStatus;

/// The wait after the `counter`-th consecutive failure: 0 before any failure, then `base`,
/// `2·base`, `4·base`... never more than `cap`.
pub fn backoff(counter: i32, base: Duration, cap: Duration) -> Duration {
    if counter <= 0 {
        return Duration::ZERO;
    }
    // 2^31 · base already exceeds any sensible cap; saturate instead of overflowing.
    let exponent = u32::try_from(counter - 1).unwrap_or(u32::MAX).min(31);
    base.saturating_mul(1u32 << exponent).min(cap)
}

/// When the next Eviction API call may be made: `lastFailureTime + backoff(counter)`. `None`
/// when no failure is recorded (or its time is unknown), i.e. an attempt may be made now.
pub fn next_attempt_at(
    status: &EvictionRequestStatus,
    base: Duration,
    cap: Duration,
) -> Option<Timestamp> {
    let eviction = status.pod_eviction_status.as_ref()?;
    if eviction.failed_api_eviction_counter <= 0 {
        return None;
    }
    let last = eviction.last_failure_time.as_ref()?;
    Some(add(
        last.0,
        backoff(eviction.failed_api_eviction_counter, base, cap),
    ))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use rstest::rstest;

    use super::*;
    use crate::api::PodEvictionStatus;
    use crate::controller::eviction_request::fixtures::t;

    const BASE: Duration = Duration::from_secs(1);
    const CAP: Duration = Duration::from_secs(1000);

    #[rstest]
    #[case::never_failed(0, 0)]
    #[case::negative_is_none(-3, 0)]
    #[case::first(1, 1)]
    #[case::second(2, 2)]
    #[case::third(3, 4)]
    #[case::tenth(10, 512)]
    #[case::capped(11, 1000)]
    #[case::far_past_cap(40, 1000)]
    #[case::max(i32::MAX, 1000)]
    fn backoff_rows(#[case] counter: i32, #[case] seconds: u64) {
        assert_eq!(backoff(counter, BASE, CAP), Duration::from_secs(seconds));
    }

    #[test]
    fn base_above_cap_is_capped() {
        assert_eq!(
            backoff(1, Duration::from_secs(5), Duration::from_secs(2)),
            Duration::from_secs(2)
        );
    }

    #[rstest]
    #[case::no_eviction_status(None, None)]
    #[case::counter_zero(Some((0, Some(100))), None)]
    #[case::time_unknown(Some((3, None)), None)]
    #[case::first_failure(Some((1, Some(100))), Some(t(101)))]
    #[case::resumes_after_restart(Some((4, Some(100))), Some(t(108)))]
    #[case::capped(Some((20, Some(100))), Some(t(1100)))]
    fn next_attempt_rows(
        #[case] eviction: Option<(i32, Option<i64>)>,
        #[case] expected: Option<Timestamp>,
    ) {
        let status = EvictionRequestStatus {
            pod_eviction_status: eviction.map(|(counter, at)| PodEvictionStatus {
                failed_api_eviction_counter: counter,
                last_failure_time: at.map(|s| Time(t(s))),
            }),
            ..Default::default()
        };
        assert_eq!(next_attempt_at(&status, BASE, CAP), expected);
    }
}
