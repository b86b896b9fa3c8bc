//! The readiness gate `evictord.dev/serving` of the pods that declare the `endpoints.evictord.dev`
//! interceptor (SPEC 6.4), pure: its names, what its condition on a pod says ([`Serving`]), the
//! pod's deregistration delay ([`deregistration_delay`]) and the status patch that writes the
//! condition ([`condition_patch`]). Shared by the pod webhook (which adds the gate), the pod cache,
//! the keeper (which sets it `True`) and the interceptor (which takes it `False`).
//!
//! The condition is the record (convention 19): its status and reason say where the pod is,
//! `lastTransitionTime` when it left its endpoints, and, once every Service had it out of its
//! ready addresses, `lastProbeTime` the first whole second at or after it saw that: the start of
//! the delay (rounded up, so the delay is never shorter than asked). A
//! restarted or newly elected evictord reads them back.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use serde_json::{Value, json};

/// The interceptor that takes a pod out of its Services' ready endpoints before it is evicted.
pub const ENDPOINTS_INTERCEPTOR: &str = "endpoints.evictord.dev";
/// The readiness gate (`spec.readinessGates[].conditionType`) and pod condition type.
pub const SERVING_CONDITION: &str = "evictord.dev/serving";
/// Pod annotation: how long the pod stays out of every ready endpoint before it may be evicted
/// (a duration such as `30s`), for load balancers that deregister it late.
pub const DEREGISTRATION_DELAY_ANNOTATION: &str = "evictord.dev/deregistration-delay";
/// The deregistration delay of a pod without the annotation, unless `--deregistration-delay`
/// says otherwise.
pub const DEFAULT_DEREGISTRATION_DELAY: Duration = Duration::from_secs(30);
/// The longest deregistration delay a pod may ask for (AWS target groups allow at most an hour).
pub const MAX_DEREGISTRATION_DELAY: Duration = Duration::from_secs(3600);

/// Reason of `True` set when evictord first sees the pod.
pub const REASON_SERVING: &str = "Serving";
/// Reason of `False` while the pod leaves its Services' ready endpoints.
pub const REASON_LEAVING: &str = "LeavingEndpoints";
/// Reason of `False` once the pod is out of every ready endpoint, during the delay.
pub const REASON_DEREGISTERING: &str = "Deregistering";
/// Reason of `True` given back when the eviction was canceled.
pub const REASON_CANCELED: &str = "EvictionCanceled";
/// Reason of `True` given back when the eviction was still refused after the bound.
pub const REASON_REFUSED: &str = "EvictionRefused";

/// Where a pod's `evictord.dev/serving` condition says the pod is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serving {
    /// No condition yet (evictord has not seen the pod).
    Absent,
    /// `True`: the pod serves (when its containers are ready).
    True,
    /// `False` since `since`, not yet seen out of every ready endpoint.
    Leaving {
        /// `lastTransitionTime`.
        since: Timestamp,
    },
    /// `False` since `since`, and out of every ready endpoint since `out`.
    Deregistering {
        /// `lastTransitionTime`.
        since: Timestamp,
        /// `lastProbeTime`: when the pod was last seen in a ready endpoint's place, i.e. out.
        out: Timestamp,
    },
}

/// True when the pod's interceptor annotation names [`ENDPOINTS_INTERCEPTOR`].
pub fn declares_endpoints_interceptor(annotation: &str) -> bool {
    crate::api::parse_interceptor_list(annotation)
        .iter()
        .any(|n| n == ENDPOINTS_INTERCEPTOR)
}

/// True when `pod` has the readiness gate.
pub fn has_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.condition_type == SERVING_CONDITION))
}

/// The pod's `evictord.dev/serving` condition, if any.
pub fn condition_of(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == SERVING_CONDITION)
}

/// What the condition says ([`Serving`]). A `False` without times (written by hand) counts as
/// leaving since `fallback`; a reason other than [`REASON_DEREGISTERING`] as leaving.
pub fn serving_of(pod: &Pod, fallback: Timestamp) -> Serving {
    let Some(c) = condition_of(pod) else {
        return Serving::Absent;
    };
    if c.status != "False" {
        return Serving::True;
    }
    let since = c.last_transition_time.as_ref().map_or(fallback, |t| t.0);
    match (c.reason.as_deref(), &c.last_probe_time) {
        (Some(REASON_DEREGISTERING), Some(out)) => Serving::Deregistering { since, out: out.0 },
        _ => Serving::Leaving { since },
    }
}

/// The delay a pod asks for, and what was wrong with its annotation when the default was taken
/// instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delay {
    /// The delay to wait.
    pub value: Duration,
    /// Why the annotation was not used, if it was not.
    pub problem: Option<String>,
}

/// The deregistration delay of a pod whose [`DEREGISTRATION_DELAY_ANNOTATION`] is `annotation`:
/// its duration (at most [`MAX_DEREGISTRATION_DELAY`]), else `default`, saying why.
pub fn deregistration_delay(annotation: Option<&str>, default: Duration) -> Delay {
    let Some(text) = annotation else {
        return Delay {
            value: default,
            problem: None,
        };
    };
    let taken = |problem: String| Delay {
        value: default,
        problem: Some(format!(
            "{DEREGISTRATION_DELAY_ANNOTATION} {text:?} {problem}; using the default {}",
            humantime::format_duration(default)
        )),
    };
    match humantime::parse_duration(text.trim()) {
        Ok(d) if d <= MAX_DEREGISTRATION_DELAY => Delay {
            value: d,
            problem: None,
        },
        Ok(_) => taken(format!(
            "is longer than the {} allowed",
            humantime::format_duration(MAX_DEREGISTRATION_DELAY)
        )),
        Err(_) => taken("is not a duration like 30s or 2m".into()),
    }
}

/// One write of the condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionWrite {
    /// `True` or `False`.
    pub status: bool,
    /// One of the `REASON_*` constants.
    pub reason: &'static str,
    /// For humans.
    pub message: String,
    /// `lastTransitionTime`.
    pub transition: Timestamp,
    /// `lastProbeTime` (`None` removes it), written rounded up to a whole second.
    pub probe: Option<Timestamp>,
}

/// `t` as Kubernetes writes times: RFC 3339 in UTC, whole seconds (rounded down, as
/// kube-apiserver would).
fn time(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// The first whole second at or after `t`, as [`time`] writes it. The start of the deregistration
/// delay is written this way: rounded down, a delay counted from the written time would end up to
/// a second early, and the pod would leave less than its delay after it left its endpoints.
fn time_at_or_after(t: Timestamp) -> String {
    let whole = Timestamp::from_second(t.as_second()).unwrap_or(t);
    if whole == t {
        return time(t);
    }
    time(whole.saturating_add(Duration::from_secs(1)).unwrap_or(t))
}

/// The strategic merge patch of the `status` subresource that writes `write` as the pod's only
/// change: conditions merge by type, so every other condition (the kubelet's `Ready`) is kept.
/// The pod's `resource_version` rides along as a precondition: the write fails with a conflict
/// when the pod changed since it was read.
pub fn condition_patch(resource_version: &str, write: &ConditionWrite) -> Value {
    json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": [{
            "type": SERVING_CONDITION,
            "status": if write.status { "True" } else { "False" },
            "reason": write.reason,
            "message": write.message,
            "lastTransitionTime": time(write.transition),
            "lastProbeTime": write.probe.map(time_at_or_after),
        }]},
    })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn pod(condition: Option<Value>, gate: bool) -> Pod {
        let gates = if gate {
            json!([{"conditionType": "other.example.com/x"}, {"conditionType": SERVING_CONDITION}])
        } else {
            json!([{"conditionType": "other.example.com/x"}])
        };
        let mut conditions = vec![json!({"type": "Ready", "status": "True"})];
        conditions.extend(condition);
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "readinessGates": gates},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn cond(status: &str, reason: &str, transition: Option<i64>, probe: Option<i64>) -> Value {
        json!({"type": SERVING_CONDITION, "status": status, "reason": reason,
               "lastTransitionTime": transition.map(|s| time(t(s))),
               "lastProbeTime": probe.map(|s| time(t(s)))})
    }

    /// One row per state of the condition.
    #[rstest]
    #[case::absent(None, Serving::Absent)]
    #[case::serving(Some(cond("True", REASON_SERVING, Some(0), None)), Serving::True)]
    #[case::restored(Some(cond("True", REASON_CANCELED, Some(5), Some(3))), Serving::True)]
    #[case::leaving(Some(cond("False", REASON_LEAVING, Some(10), Some(10))), Serving::Leaving { since: t(10) })]
    #[case::deregistering(Some(cond("False", REASON_DEREGISTERING, Some(10), Some(14))), Serving::Deregistering { since: t(10), out: t(14) })]
    #[case::deregistering_without_probe_is_leaving(Some(cond("False", REASON_DEREGISTERING, Some(10), None)), Serving::Leaving { since: t(10) })]
    #[case::false_by_hand(Some(cond("False", "Manual", None, None)), Serving::Leaving { since: t(99) })]
    fn serving_rows(#[case] condition: Option<Value>, #[case] expected: Serving) {
        assert_eq!(serving_of(&pod(condition, true), t(99)), expected);
    }

    #[test]
    fn the_gate_is_found_among_others() {
        assert!(has_gate(&pod(None, true)));
        assert!(!has_gate(&pod(None, false)));
        assert!(!has_gate(&Pod::default()));
    }

    #[rstest]
    #[case::declared("deployment.apps.k8s.io, endpoints.evictord.dev", true)]
    #[case::alone("endpoints.evictord.dev", true)]
    #[case::not_declared("deployment.apps.k8s.io", false)]
    #[case::only_a_prefix("endpoints.evictord.dev.example.com", false)]
    fn declared_rows(#[case] annotation: &str, #[case] declared: bool) {
        assert_eq!(declares_endpoints_interceptor(annotation), declared);
    }

    /// The annotation wins when it is a duration within the bound; the default otherwise, with
    /// the reason.
    #[rstest]
    #[case::absent(None, 30, None)]
    #[case::seconds(Some("5s"), 5, None)]
    #[case::minutes(Some(" 2m "), 120, None)]
    #[case::zero(Some("0s"), 0, None)]
    #[case::the_bound(Some("1h"), 3600, None)]
    #[case::above_the_bound(
        Some("2h"),
        30,
        Some("is longer than the 1h allowed; using the default 30s")
    )]
    #[case::not_a_duration(Some("soon"), 30, Some("\"soon\" is not a duration like 30s or 2m"))]
    #[case::bare_number(Some("30"), 30, Some("is not a duration"))]
    fn delay_rows(
        #[case] annotation: Option<&str>,
        #[case] secs: u64,
        #[case] problem: Option<&str>,
    ) {
        let d = deregistration_delay(annotation, Duration::from_secs(30));
        assert_eq!(d.value, Duration::from_secs(secs));
        match (problem, &d.problem) {
            (None, None) => {}
            (Some(want), Some(got)) => assert!(got.contains(want), "{got}"),
            (want, got) => panic!("want {want:?}, got {got:?}"),
        }
    }

    #[test]
    fn the_patch_writes_one_condition_with_a_precondition() {
        let w = ConditionWrite {
            status: false,
            reason: REASON_DEREGISTERING,
            message: "m".into(),
            transition: t(10),
            probe: Some(t(14)),
        };
        let p = condition_patch("42", &w);
        assert_eq!(p["metadata"]["resourceVersion"], "42");
        let c = &p["status"]["conditions"][0];
        assert_eq!(c["type"], SERVING_CONDITION);
        assert_eq!(c["status"], "False");
        assert_eq!(c["lastTransitionTime"], time(t(10)));
        assert_eq!(c["lastProbeTime"], time(t(14)));
        // Read back, the written condition says what was written.
        let mut written = pod(Some(c.clone()), true);
        assert_eq!(
            serving_of(&written, t(0)),
            Serving::Deregistering {
                since: t(10),
                out: t(14)
            }
        );
        // True removes the probe time (null in a strategic merge patch).
        let back = condition_patch(
            "43",
            &ConditionWrite {
                status: true,
                reason: REASON_CANCELED,
                probe: None,
                ..w
            },
        );
        assert!(back["status"]["conditions"][0]["lastProbeTime"].is_null());
        written.status = None;
        assert_eq!(serving_of(&written, t(0)), Serving::Absent);
    }

    fn at(s: i64, millis: i64) -> Timestamp {
        t(s).saturating_add(Duration::from_millis(millis as u64))
            .unwrap()
    }

    /// The start of the delay is never written earlier than it was: a fraction of a second
    /// rounds up, a whole second stays. (Rounded down, a delay of 2 s read back from the record
    /// ended 1.15 s after the pod left its endpoints.)
    #[rstest]
    #[case::whole(at(14, 0), t(14))]
    #[case::just_after(at(14, 1), t(15))]
    #[case::late_in_the_second(at(14, 999), t(15))]
    fn the_delay_starts_at_or_after_the_pod_was_out(
        #[case] out: Timestamp,
        #[case] written: Timestamp,
    ) {
        let w = ConditionWrite {
            status: false,
            reason: REASON_DEREGISTERING,
            message: "out".into(),
            transition: at(10, 500),
            probe: Some(out),
        };
        let c = condition_patch("1", &w)["status"]["conditions"][0].clone();
        assert_eq!(c["lastProbeTime"], time(written));
        // The transition time is history, rounded down as Kubernetes writes it.
        assert_eq!(c["lastTransitionTime"], time(t(10)));
        let back = pod(Some(c), true);
        assert_eq!(
            serving_of(&back, t(0)),
            Serving::Deregistering {
                since: t(10),
                out: written
            }
        );
    }
}
