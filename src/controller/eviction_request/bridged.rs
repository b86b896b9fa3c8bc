//! The lifetime of the Eviction API bridge's requester (SPEC 5.1): it stays while drainers keep
//! calling, and goes a TTL after the last call, so an aborted `kubectl drain` does not leave its
//! pods being evacuated forever. The request is canceled when it was the only requester (step 3
//! of [`super::decide`]).

use std::time::Duration;

use jiff::Timestamp;

use crate::api::{CancellationPolicy, EVICTION_API_REQUESTER, EvictionRequest};

/// What to do about the bridged requester of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BridgedRequester {
    /// Nothing: not a requester, or the request can no longer change its requesters (ended, or
    /// `Forbid` keeps them, rule U3).
    Untouched,
    /// Keep it; look again after this long.
    ExpiresIn(Duration),
    /// Remove it (entry `index` of `spec.requesters`).
    Expired {
        /// Index in `spec.requesters`.
        index: usize,
    },
}

/// Decides from the last recorded call (else the request's creation) and the TTL.
pub fn bridged_requester(req: &EvictionRequest, now: Timestamp, ttl: Duration) -> BridgedRequester {
    let Some(index) = req
        .spec
        .requesters
        .iter()
        .position(|q| q.name == EVICTION_API_REQUESTER)
    else {
        return BridgedRequester::Untouched;
    };
    let forbid = req
        .status
        .as_ref()
        .is_some_and(|s| s.cancellation_policy() == CancellationPolicy::Forbid);
    if req.is_terminal() || forbid {
        return BridgedRequester::Untouched;
    }
    let last = req
        .eviction_api_last_call()
        .or_else(|| req.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let Some(last) = last else {
        return BridgedRequester::ExpiresIn(ttl);
    };
    let elapsed = now.duration_since(last);
    let elapsed = Duration::try_from(elapsed).unwrap_or_default();
    match ttl.checked_sub(elapsed) {
        Some(left) if !left.is_zero() => BridgedRequester::ExpiresIn(left),
        _ => BridgedRequester::Expired { index },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::admission::pod_eviction::{IN_TREE_RESPONDER_BACKOFF_CAP, refresh_interval};
    use crate::api::EVICTION_API_LAST_CALL_ANNOTATION;
    use crate::controller::eviction_request::DecideSettings;
    use crate::controller::eviction_request::fixtures::{RequestBuilder, request, t};

    const TTL: Duration = Duration::from_secs(600);

    fn bridged() -> RequestBuilder {
        request("u").requesters(&["nodemaintenance.evictord.dev", EVICTION_API_REQUESTER])
    }

    fn called(b: RequestBuilder, secs: i64) -> EvictionRequest {
        let mut r = b.build();
        r.metadata.annotations = Some(BTreeMap::from([(
            EVICTION_API_LAST_CALL_ANNOTATION.to_string(),
            t(secs).to_string(),
        )]));
        r
    }

    #[test]
    fn rows() {
        let now = t(1000);
        let secs = Duration::from_secs;
        let cases: Vec<(&str, EvictionRequest, BridgedRequester)> = vec![
            (
                "not a requester",
                request("u").build(),
                BridgedRequester::Untouched,
            ),
            (
                "called 100 s ago",
                called(bridged(), 900),
                BridgedRequester::ExpiresIn(secs(500)),
            ),
            (
                "called a TTL ago",
                called(bridged(), 400),
                BridgedRequester::Expired { index: 1 },
            ),
            (
                "called long ago",
                called(bridged(), -5000),
                BridgedRequester::Expired { index: 1 },
            ),
            (
                "clock ahead: the whole TTL",
                called(bridged(), 1100),
                BridgedRequester::ExpiresIn(TTL),
            ),
            (
                "no record: from creation",
                bridged().build(),
                BridgedRequester::Expired { index: 1 },
            ),
            (
                "canceled",
                called(bridged().condition("Canceled", "NoRequesters"), -5000),
                BridgedRequester::Untouched,
            ),
            (
                "evicted",
                called(bridged().condition("Evicted", "PodDeleted"), -5000),
                BridgedRequester::Untouched,
            ),
            (
                "forbid keeps requesters (U3)",
                called(bridged().forbid(), -5000),
                BridgedRequester::Untouched,
            ),
        ];
        for (name, req, expected) in cases {
            assert_eq!(bridged_requester(&req, now, TTL), expected, "{name}");
        }
    }

    /// Replays Kubernetes' in-tree `imperative-eviction.k8s.io/evictor` calling `pods/eviction`
    /// through the bridge for `until` seconds: it waits 5 s after its first refused call, doubles
    /// the wait per attempt up to its cap, and each call reaches the bridge `lag` seconds after
    /// the wait (its work queue, its own call's round trip). The bridge records a call when the
    /// record is a refresh interval old, as it does. Returns the time of the first call that came
    /// after the controller had already removed the requester.
    fn first_call_after_expiry(ttl: Duration, lag: i64, until: i64) -> Option<i64> {
        let secs = |d: Duration| i64::try_from(d.as_secs()).expect("small");
        let cap = secs(IN_TREE_RESPONDER_BACKOFF_CAP);
        let refresh = secs(refresh_interval(ttl));
        let (mut recorded, mut call, mut wait) = (0, 0, 5);
        loop {
            call += wait + lag;
            if call > until {
                return None;
            }
            let state = bridged_requester(&called(bridged(), recorded), t(call), ttl);
            if matches!(state, BridgedRequester::Expired { .. }) {
                return Some(call);
            }
            if call - recorded >= refresh {
                recorded = call;
            }
            wait = (wait * 2).min(cap);
        }
    }

    #[test]
    fn the_in_tree_responder_keeps_its_requester_with_the_default_ttl() {
        let ttl = DecideSettings::default().eviction_api_requester_ttl;
        let three_hours = 3 * 3600;
        // Up to two minutes of queue delay per retry, more than a busy controller-manager adds.
        for lag in [0, 1, 30, 120] {
            assert_eq!(
                first_call_after_expiry(ttl, lag, three_hours),
                None,
                "lag {lag} s"
            );
        }
        // A TTL equal to the responder's cap (the former default) loses the requester just
        // before the first retry at the cap, even without any delay.
        let expired = first_call_after_expiry(IN_TREE_RESPONDER_BACKOFF_CAP, 0, three_hours);
        assert!(expired.is_some(), "{expired:?}");
    }
}
