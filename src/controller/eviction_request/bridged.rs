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
    use crate::api::EVICTION_API_LAST_CALL_ANNOTATION;
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
}
