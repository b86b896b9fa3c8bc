//! The retry schedule of failed Eviction API calls: exponential, from `base` doubling to `cap`
//! (SPEC 2.3 step 8). It is derived from `podEvictionStatus` (the failure counter and the time
//! of the last failure), not from memory, so a restarted controller resumes it where it was.
//! [`retry_wait`] bends it to what the watched PodDisruptionBudgets selecting the pod say: cut
//! short while they allow a disruption, held while one still refuses (the controller is woken
//! when one changes to allow).

use std::time::Duration;

use jiff::Timestamp;

use super::deadline::add;
use crate::api::EvictionRequestStatus;
use crate::cluster::Allowance;

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

/// When the next Eviction API call may be made by the backoff alone:
/// `lastFailureTime + backoff(counter)`. `None` when no failure is recorded (or its time is
/// unknown), i.e. an attempt may be made now.
pub fn next_attempt_at(
    status: &EvictionRequestStatus,
    base: Duration,
    cap: Duration,
) -> Option<Timestamp> {
    retry_at(status, base, cap, Allowance::Unknown)
}

/// How long a refused eviction waits at most while every PodDisruptionBudget selecting the pod
/// allows a disruption (`kubectl drain` retries every 5 s whatever the budgets say).
pub const ALLOWED_RETRY: Duration = Duration::from_secs(2);

/// How long a refused eviction waits at least while a PodDisruptionBudget selecting the pod
/// still allows no disruption, as evictord's watch of the budgets shows it. The budget's own
/// change to allow one wakes the request at once ([`ALLOWED_RETRY`]), so this is only the
/// fallback for a watch behind the server; the early steps of the backoff (1, 2, 4, 8 s) would
/// otherwise spend a refused call, a status write and an event each on an answer already known.
/// kube-apiserver suggests the same 10 s to clients it refuses while a budget is being processed.
pub const REFUSED_HOLD: Duration = Duration::from_secs(10);

/// The wait after the `counter`-th consecutive failure, knowing what the PodDisruptionBudgets
/// selecting the pod say:
/// - all allow a disruption (and one selects the pod): at most [`ALLOWED_RETRY`] (at least
///   `base`) instead of the whole backoff, which after a few refusals grows to minutes: the pod
///   goes as soon as its budget lets it, as a drain expects;
/// - one refuses: at least [`REFUSED_HOLD`];
/// - no budget or an unknown answer: the backoff;
///
/// and never more than `cap`, unless the backoff itself is (`base` above `cap`).
pub fn retry_wait(counter: i32, base: Duration, cap: Duration, budgets: Allowance) -> Duration {
    let wait = backoff(counter, base, cap);
    if counter <= 0 {
        return wait;
    }
    match budgets {
        Allowance::Allows => wait.min(ALLOWED_RETRY.max(base).min(cap)),
        Allowance::Refuses => wait.max(REFUSED_HOLD.min(cap)),
        Allowance::NoBudget | Allowance::Unknown => wait,
    }
}

/// When the next Eviction API call may be made: `lastFailureTime + retry_wait(counter, ...)`.
/// `None` when no failure is recorded (or its time is unknown), i.e. an attempt may be made now.
pub fn retry_at(
    status: &EvictionRequestStatus,
    base: Duration,
    cap: Duration,
    budgets: Allowance,
) -> Option<Timestamp> {
    let eviction = status.pod_eviction_status.as_ref()?;
    let counter = eviction.failed_api_eviction_counter;
    if counter <= 0 {
        return None;
    }
    let last = eviction.last_failure_time.as_ref()?;
    Some(add(last.0, retry_wait(counter, base, cap, budgets)))
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
        for budgets in [Allowance::Unknown, Allowance::NoBudget] {
            assert_eq!(
                retry_at(&status, BASE, CAP, budgets),
                expected,
                "{budgets:?}"
            );
        }
    }
}

#[cfg(test)]
mod allowed_tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use rstest::rstest;

    use super::*;
    use crate::api::PodEvictionStatus;
    use crate::controller::eviction_request::fixtures::t;

    fn failed(counter: i32, at: i64) -> EvictionRequestStatus {
        EvictionRequestStatus {
            pod_eviction_status: Some(PodEvictionStatus {
                failed_api_eviction_counter: counter,
                last_failure_time: Some(Time(t(at))),
            }),
            ..Default::default()
        }
    }

    #[rstest]
    // The eighth refusal: 128 s of backoff, 2 s once the budgets allow.
    #[case::long_backoff_cut(8, 1, 1000, Allowance::Allows, Some(102))]
    #[case::long_backoff_kept_when_refusing(8, 1, 1000, Allowance::Refuses, Some(228))]
    // A short backoff while a budget refuses: held to 10 s (woken when the budget allows).
    #[case::first_refusal_held(1, 1, 1000, Allowance::Refuses, Some(110))]
    #[case::fourth_refusal_held(4, 1, 1000, Allowance::Refuses, Some(110))]
    #[case::fifth_refusal_backoff_longer(5, 1, 1000, Allowance::Refuses, Some(116))]
    #[case::hold_at_most_the_cap(1, 1, 4, Allowance::Refuses, Some(104))]
    #[case::base_above_hold(1, 30, 1000, Allowance::Refuses, Some(130))]
    #[case::short_backoff_kept_without_budget(1, 1, 1000, Allowance::NoBudget, Some(101))]
    #[case::short_backoff_kept_when_unknown(1, 1, 1000, Allowance::Unknown, Some(101))]
    #[case::long_backoff_kept_without_budget(8, 1, 1000, Allowance::NoBudget, Some(228))]
    #[case::long_backoff_kept_when_unknown(8, 1, 1000, Allowance::Unknown, Some(228))]
    // The backoff is already shorter: it stands.
    #[case::first_failure(1, 1, 1000, Allowance::Allows, Some(101))]
    // A base above the allowed retry: at least the base.
    #[case::base_above(8, 5, 1000, Allowance::Allows, Some(105))]
    // A cap below it: at most the cap.
    #[case::cap_below(8, 1, 1, Allowance::Allows, Some(101))]
    fn retry_rows(
        #[case] counter: i32,
        #[case] base: u64,
        #[case] cap: u64,
        #[case] budgets: Allowance,
        #[case] expected: Option<i64>,
    ) {
        let status = failed(counter, 100);
        assert_eq!(
            retry_at(
                &status,
                Duration::from_secs(base),
                Duration::from_secs(cap),
                budgets
            ),
            expected.map(t)
        );
    }

    #[test]
    fn never_failed_is_due_now() {
        // The first call is made whatever the watched budgets say: the server decides.
        let status = EvictionRequestStatus::default();
        for budgets in [
            Allowance::Allows,
            Allowance::Refuses,
            Allowance::NoBudget,
            Allowance::Unknown,
        ] {
            assert_eq!(
                retry_at(
                    &status,
                    Duration::from_secs(1),
                    Duration::from_secs(1000),
                    budgets
                ),
                None,
                "{budgets:?}"
            );
        }
    }
}
