//! The keeper's decision, pure: from a cached pod's gate and condition and the state of its
//! EvictionRequest, whether to set `evictord.dev/serving` to `True` ([`keep`]).

use std::time::Duration;

use jiff::Timestamp;

use crate::api::{EvictionRequest, IMPERATIVE_INTERCEPTOR};
use crate::cluster::CachedPod;
use crate::serving::{ENDPOINTS_INTERCEPTOR, REASON_CANCELED, REASON_REFUSED, REASON_SERVING};

/// What the pod's EvictionRequest (named after its UID) says, as far as the gate goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestState {
    /// There is none.
    Missing,
    /// It was canceled.
    Canceled,
    /// The pod was evicted (it is going).
    Evicted,
    /// `endpoints.evictord.dev` has not had its turn yet.
    Pending,
    /// `endpoints.evictord.dev` is active.
    Active,
    /// `endpoints.evictord.dev` had its turn and the pod is not evicted yet; `evicting_since`:
    /// when `imperative-eviction.k8s.io` became active, while it is (the Eviction API is being
    /// called: refused so far); `None` while an interceptor declared after this one works.
    Done {
        /// The activation of the active `imperative-eviction.k8s.io`.
        evicting_since: Option<Timestamp>,
    },
}

/// The [`RequestState`] of `request`.
pub fn request_state(request: Option<&EvictionRequest>) -> RequestState {
    let Some(status) = request.map(|r| r.status.clone().unwrap_or_default()) else {
        return RequestState::Missing;
    };
    if status.is_true(crate::api::CONDITION_CANCELED) {
        return RequestState::Canceled;
    }
    if status.is_true(crate::api::CONDITION_EVICTED) {
        return RequestState::Evicted;
    }
    if status
        .active_interceptors
        .iter()
        .any(|a| a == ENDPOINTS_INTERCEPTOR)
    {
        return RequestState::Active;
    }
    if !status
        .processed_interceptors
        .iter()
        .any(|p| p == ENDPOINTS_INTERCEPTOR)
    {
        return RequestState::Pending;
    }
    let evicting_since = status
        .active_interceptors
        .iter()
        .any(|a| a == IMPERATIVE_INTERCEPTOR)
        .then(|| {
            status
                .interceptor(IMPERATIVE_INTERCEPTOR)?
                .activation_time
                .as_ref()
        })
        .flatten()
        .map(|t| t.0);
    RequestState::Done { evicting_since }
}

/// What the keeper does for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Nothing (until the pod or its request changes).
    Nothing,
    /// Set the condition `True`.
    Serve {
        /// The metric `result`: `serving`, `canceled` or `refused`.
        result: &'static str,
        /// The condition's reason.
        reason: &'static str,
        /// The condition's message (and the event's note, when given back).
        message: String,
    },
    /// Look again at that time.
    RecheckAt(Timestamp),
}

fn serve(result: &'static str, reason: &'static str, message: String) -> Keep {
    Keep::Serve {
        result,
        reason,
        message,
    }
}

/// The keeper's rules, in order: only gated pods that are not going; a pod not seen yet gets
/// `True`; a pod made unready gets it back when its eviction was canceled (the request is
/// canceled or gone, or a new request has not reached the interceptor yet), or when the Eviction
/// API still refused it `restore_after` after `imperative-eviction.k8s.io` became active; it
/// stays out while the interceptor, and any interceptor declared after it, works, and once the
/// eviction succeeded.
pub fn keep(
    pod: &CachedPod,
    request: RequestState,
    now: Timestamp,
    restore_after: Duration,
) -> Keep {
    if !pod.spec.serving_gate || pod.is_terminating() || pod.is_terminal() {
        return Keep::Nothing;
    }
    match pod.status.serving {
        None => {
            return serve(
                "serving",
                REASON_SERVING,
                format!(
                    "the pod serves as soon as its containers are ready; {ENDPOINTS_INTERCEPTOR} \
                     takes it out of its Services' endpoints before an eviction"
                ),
            );
        }
        Some(true) => return Keep::Nothing,
        Some(false) => {}
    }
    let canceled = |why: &str| {
        serve(
            "canceled",
            REASON_CANCELED,
            format!("back in its Services' endpoints: {why}"),
        )
    };
    match request {
        RequestState::Missing => canceled("the pod has no EvictionRequest any more"),
        RequestState::Canceled => canceled("its EvictionRequest was canceled"),
        RequestState::Pending => canceled(&format!(
            "its EvictionRequest has not reached {ENDPOINTS_INTERCEPTOR} (again) yet"
        )),
        RequestState::Evicted
        | RequestState::Active
        | RequestState::Done {
            evicting_since: None,
        } => Keep::Nothing,
        RequestState::Done {
            evicting_since: Some(since),
        } => {
            let at = since
                .saturating_add(restore_after)
                .unwrap_or(Timestamp::MAX);
            if now < at {
                return Keep::RecheckAt(at);
            }
            serve(
                "refused",
                REASON_REFUSED,
                format!(
                    "back in its Services' endpoints: the Eviction API still refused the pod {} \
                     after {IMPERATIVE_INTERCEPTOR} began (at {since}); an eviction that succeeds \
                     later takes it while it serves",
                    humantime::format_duration(restore_after)
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use rstest::rstest;
    use serde_json::json;

    use super::*;
    use crate::api::{EvictionRequestSpec, EvictionRequestStatus, InterceptorStatus};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn pod(gate: bool, serving: Option<bool>, terminating: bool, phase: &str) -> CachedPod {
        let mut conditions = vec![json!({"type": "Ready", "status": "True"})];
        if let Some(s) = serving {
            conditions.push(
                json!({"type": "evictord.dev/serving", "status": if s { "True" } else { "False" }}),
            );
        }
        let gates = if gate {
            json!([{"conditionType": "evictord.dev/serving"}])
        } else {
            json!([])
        };
        let mut meta = json!({"name": "p", "namespace": "ns", "uid": "u"});
        if terminating {
            meta["deletionTimestamp"] = json!("2027-01-15T08:00:00Z");
        }
        let p: CachedPod = serde_json::from_value(json!({
            "metadata": meta, "spec": {"readinessGates": gates},
            "status": {"phase": phase, "conditions": conditions},
        }))
        .unwrap();
        p.trim()
    }

    const AFTER: Duration = Duration::from_secs(300);

    fn kind(k: &Keep) -> &'static str {
        match k {
            Keep::Nothing => "nothing",
            Keep::Serve { result, .. } => result,
            Keep::RecheckAt(_) => "recheck",
        }
    }

    /// One row per rule of [`keep`].
    #[rstest]
    #[case::no_gate(pod(false, None, false, "Running"), RequestState::Missing, "nothing")]
    #[case::terminating(pod(true, None, true, "Running"), RequestState::Missing, "nothing")]
    #[case::terminal(
        pod(true, Some(false), false, "Succeeded"),
        RequestState::Missing,
        "nothing"
    )]
    #[case::first_sight(pod(true, None, false, "Pending"), RequestState::Missing, "serving")]
    #[case::first_sight_during_a_request(
        pod(true, None, false, "Running"),
        RequestState::Active,
        "serving"
    )]
    #[case::serving(
        pod(true, Some(true), false, "Running"),
        RequestState::Active,
        "nothing"
    )]
    #[case::out_request_gone(
        pod(true, Some(false), false, "Running"),
        RequestState::Missing,
        "canceled"
    )]
    #[case::out_request_canceled(
        pod(true, Some(false), false, "Running"),
        RequestState::Canceled,
        "canceled"
    )]
    #[case::out_new_request_pending(
        pod(true, Some(false), false, "Running"),
        RequestState::Pending,
        "canceled"
    )]
    #[case::out_interceptor_active(
        pod(true, Some(false), false, "Running"),
        RequestState::Active,
        "nothing"
    )]
    #[case::out_evicted(
        pod(true, Some(false), false, "Running"),
        RequestState::Evicted,
        "nothing"
    )]
    #[case::out_evicting_within_the_bound(pod(true, Some(false), false, "Running"), RequestState::Done { evicting_since: Some(t(0)) }, "recheck")]
    #[case::out_refused_past_the_bound(pod(true, Some(false), false, "Running"), RequestState::Done { evicting_since: Some(t(-300)) }, "refused")]
    #[case::out_a_later_interceptor_works(pod(true, Some(false), false, "Running"), RequestState::Done { evicting_since: None }, "nothing")]
    fn keep_rows(#[case] p: CachedPod, #[case] request: RequestState, #[case] expected: &str) {
        assert_eq!(kind(&keep(&p, request, t(0), AFTER)), expected);
    }

    #[test]
    fn the_recheck_is_at_the_bound() {
        let p = pod(true, Some(false), false, "Running");
        let k = keep(
            &p,
            RequestState::Done {
                evicting_since: Some(t(10)),
            },
            t(20),
            AFTER,
        );
        assert_eq!(k, Keep::RecheckAt(t(310)));
    }

    fn entry(name: &str, activated: Option<i64>, completed: Option<i64>) -> InterceptorStatus {
        InterceptorStatus {
            name: name.into(),
            activation_time: activated.map(|s| Time(t(s))),
            completion_time: completed.map(|s| Time(t(s))),
            ..Default::default()
        }
    }

    fn request(
        active: &[&str],
        processed: &[&str],
        entries: Vec<InterceptorStatus>,
        condition: Option<&str>,
    ) -> EvictionRequest {
        let mut r = EvictionRequest::new("u", EvictionRequestSpec::default());
        r.status = Some(EvictionRequestStatus {
            active_interceptors: active.iter().map(|s| s.to_string()).collect(),
            processed_interceptors: processed.iter().map(|s| s.to_string()).collect(),
            interceptors: entries,
            conditions: condition
                .map(|c| Condition {
                    type_: c.into(),
                    status: "True".into(),
                    reason: "R".into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: Time(t(0)),
                })
                .into_iter()
                .collect(),
            ..Default::default()
        });
        r
    }

    const E: &str = ENDPOINTS_INTERCEPTOR;
    const D: &str = "deployment.apps.k8s.io";
    const I: &str = "imperative-eviction.k8s.io";
    const L: &str = "later.example.com";

    /// One row per state of [`request_state`].
    #[rstest]
    #[case::missing(None, RequestState::Missing)]
    #[case::canceled(Some(request(&[], &[D], vec![], Some("Canceled"))), RequestState::Canceled)]
    #[case::evicted(Some(request(&[], &[D, E, I], vec![], Some("Evicted"))), RequestState::Evicted)]
    #[case::not_started(Some(request(&[], &[], vec![], None)), RequestState::Pending)]
    #[case::surge_first(Some(request(&[D], &[], vec![entry(D, Some(0), None), entry(E, None, None)], None)), RequestState::Pending)]
    #[case::active(Some(request(&[E], &[D], vec![entry(D, Some(0), Some(1)), entry(E, Some(1), None)], None)), RequestState::Active)]
    #[case::evicting(Some(request(&[I], &[D, E], vec![entry(D, Some(0), Some(1)), entry(E, Some(1), Some(40)), entry(I, Some(41), None)], None)), RequestState::Done { evicting_since: Some(t(41)) })]
    #[case::timed_out_then_evicting(Some(request(&[I], &[D, E], vec![entry(D, Some(0), Some(1)), entry(E, Some(1), None), entry(I, Some(1300), None)], None)), RequestState::Done { evicting_since: Some(t(1300)) })]
    #[case::a_later_interceptor(Some(request(&[L], &[E], vec![entry(E, Some(0), Some(40)), entry(L, Some(41), None), entry(I, None, None)], None)), RequestState::Done { evicting_since: None })]
    fn request_rows(#[case] r: Option<EvictionRequest>, #[case] expected: RequestState) {
        assert_eq!(request_state(r.as_ref()), expected);
    }
}
