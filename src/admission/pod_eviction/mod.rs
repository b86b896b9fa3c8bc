//! The Eviction API bridge (SPEC 5.1): the pure decision on a call of a pod's `eviction`
//! subresource, which is how every drainer that exists today (`kubectl drain`, autoscalers, the
//! descheduler) asks a pod to leave.
//!
//! A pod without interceptors is left to the Eviction API as if evictord were not installed. A
//! pod with interceptors is handed to its EvictionRequest (created, or joined as requester
//! [`EVICTION_API_REQUESTER`]) and the call is answered 429 with a message that begins with
//! "Eviction triggered", which drainers read as "accepted, in progress" and retry (kubectl every
//! 5 s) until the pod is gone. evictord's own call as `imperative-eviction.k8s.io` goes through,
//! and the PodDisruptionBudget decides, as always.
//!
//! [`review_pod_eviction`] decides; the I/O shell ([`shell`]) writes what it decided.

mod caller;
pub mod deadline;
mod message;
pub mod shell;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::api::ObjectMeta;

pub use caller::caller_name;
use message::{in_progress, would_handle};

use crate::admission::Settings;
use crate::api::{
    CONDITION_CANCELED, CONDITION_EVICTED, EVICTION_API_CALLER_ANNOTATION,
    EVICTION_API_LAST_CALL_ANNOTATION, EVICTION_API_REQUESTER, EvictionRequest,
    EvictionRequestSpec, EvictionTarget, IMPERATIVE_INTERCEPTOR, PodReference, Requester,
    pod_owner_reference,
};
use crate::cluster::{CachedPod, Lookup};

/// One call of `POST pods/NAME/eviction`, as the bridge sees it.
#[derive(Clone, Debug)]
pub struct EvictionCall<'a> {
    /// Namespace of the pod.
    pub namespace: &'a str,
    /// Name of the pod.
    pub pod_name: &'a str,
    /// Who called.
    pub user: &'a UserInfo,
    /// The call will not be persisted (`?dryRun=All`, or `deleteOptions.dryRun` in the Eviction
    /// body, which is how `kubectl drain --dry-run=server` asks).
    pub dry_run: bool,
    /// The value of [`crate::api::IMPERATIVE_EVICTION_ANNOTATION`] on the Eviction object:
    /// evictord's own call names the EvictionRequest it acts for.
    pub acting_for: Option<&'a str>,
    /// The time of the call.
    pub now: Timestamp,
}

/// The longest pause between two Eviction API calls of Kubernetes' in-tree default responder
/// `imperative-eviction.k8s.io/evictor`: after each refused call it waits 5 s, doubled per
/// attempt up to this cap, 10 min (`maxImperativeEvictionBackoff` in kubernetes/kubernetes PR
/// #137396, not configurable there). The responder calls `pods/eviction` for every pod target, so
/// on a pod with interceptors it is one more drainer retrying through the bridge.
pub const IN_TREE_RESPONDER_BACKOFF_CAP: Duration = Duration::from_secs(10 * 60);

/// The default `--eviction-api-requester-ttl`: 15 min, half again the in-tree responder's
/// backoff cap ([`IN_TREE_RESPONDER_BACKOFF_CAP`]). A TTL equal to the cap would let the bridged
/// requester expire a moment before each of the responder's retries (it waits the cap after its
/// last call *returned*, and its work queue adds delay), canceling the request and restarting
/// the pod's interceptors every 10 minutes. The price of the margin: an abandoned drain's
/// requests, and the surge their interceptors hold, last 15 minutes after its last call instead
/// of 10.
pub const DEFAULT_REQUESTER_TTL: Duration = Duration::from_secs(15 * 60);

/// How stale the recorded last call may get before a call writes it again: a tenth of the
/// requester TTL, between 1 s and 60 s. kubectl retries every 5 s; recording each retry would
/// cost one API write per pod every 5 s for nothing.
pub fn refresh_interval(requester_ttl: Duration) -> Duration {
    (requester_ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// Why the bridge answered as it did (the metric label `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The pod declares no interceptors: the Eviction API decides alone.
    NoInterceptors,
    /// The pod does not exist: the Eviction API answers 404 itself.
    PodNotFound,
    /// evictord cannot see the pod (offline): never worse than without evictord.
    Unknown,
    /// The pod is already being deleted.
    Terminating,
    /// The pod's EvictionRequest says it is evicted.
    AlreadyEvicted,
    /// evictord's own call as the imperative interceptor.
    OwnEviction,
    /// A dry run: allowed, with a warning that says what a real call would do.
    DryRun,
    /// Handed to the EvictionRequest and answered 429 "Eviction triggered".
    Intercepted,
}

impl Outcome {
    /// The metric label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::NoInterceptors => "allowed_no_interceptors",
            Outcome::PodNotFound => "allowed_pod_not_found",
            Outcome::Unknown => "allowed_unknown",
            Outcome::Terminating => "allowed_terminating",
            Outcome::AlreadyEvicted => "allowed_evicted",
            Outcome::OwnEviction => "allowed_own_eviction",
            Outcome::DryRun => "allowed_dry_run",
            Outcome::Intercepted => "intercepted",
        }
    }
}

/// A write the bridge asks for before it answers.
#[derive(Clone, Debug)]
pub enum BridgeWrite {
    /// Server-side apply of `request` as field manager [`EVICTION_API_REQUESTER`]: creates the
    /// request, or joins it (the requesters are a list-map keyed by name) and records the call.
    Apply(Box<EvictionRequest>),
    /// The pod's request was canceled (frozen by U4): delete it, if it still has `old_uid`, and
    /// apply `request` in its place.
    Replace {
        /// UID of the canceled request (delete precondition).
        old_uid: String,
        /// The new request.
        request: Box<EvictionRequest>,
    },
}

/// An event to record on the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    /// PascalCase reason.
    pub reason: &'static str,
    /// What happened, for `kubectl describe pod`.
    pub message: String,
}

/// Event reason: an Eviction API call was handed to the pod's EvictionRequest.
pub const REASON_EVICTION_INTERCEPTED: &str = "EvictionIntercepted";

/// What the bridge decided.
#[derive(Clone, Debug)]
pub struct BridgeDecision {
    /// Why.
    pub outcome: Outcome,
    /// `Some(message)`: deny with 429 TooManyRequests; `None`: allow.
    pub too_many_requests: Option<String>,
    /// Warnings for the caller.
    pub warnings: Vec<String>,
    /// What to write first.
    pub write: Option<BridgeWrite>,
    /// What to record on the pod.
    pub event: Option<PodEvent>,
}

impl BridgeDecision {
    fn allow(outcome: Outcome) -> Self {
        Self {
            outcome,
            too_many_requests: None,
            warnings: Vec::new(),
            write: None,
            event: None,
        }
    }
}

/// Decides one Eviction API call from the pod, its EvictionRequest (named after the pod UID, in
/// the pod's namespace; `Missing` when there is none) and the settings.
///
/// # Guarantees
/// Allows whenever the pod declares no interceptors, is unknown, missing or terminating, or its
/// request is already `Evicted`; never writes on a dry run.
pub fn review_pod_eviction(
    call: &EvictionCall<'_>,
    pod: &Lookup<Arc<CachedPod>>,
    request: &Lookup<Arc<EvictionRequest>>,
    settings: &Settings,
) -> BridgeDecision {
    let pod = match pod {
        Lookup::Found(p) => p,
        Lookup::Missing => return BridgeDecision::allow(Outcome::PodNotFound),
        Lookup::Unknown => return BridgeDecision::allow(Outcome::Unknown),
    };
    if pod.interceptors().iter().all(|i| i.is_empty()) {
        return BridgeDecision::allow(Outcome::NoInterceptors);
    }
    if pod.is_terminating() {
        return BridgeDecision::allow(Outcome::Terminating);
    }
    let existing = request
        .found()
        .filter(|r| r.spec.target.pod.uid == pod.uid());
    if let Some(r) = existing {
        if is_true(r, CONDITION_EVICTED) {
            return BridgeDecision::allow(Outcome::AlreadyEvicted);
        }
        if is_own_eviction(call, r) {
            return BridgeDecision::allow(Outcome::OwnEviction);
        }
    }
    let caller = caller_name(call.user);
    if call.dry_run {
        let mut d = BridgeDecision::allow(Outcome::DryRun);
        d.warnings.push(would_handle(pod, existing.map(|r| &**r)));
        return d;
    }
    let canceled = existing.filter(|r| is_true(r, CONDITION_CANCELED));
    let live = existing.filter(|r| !is_true(r, CONDITION_CANCELED));
    let joined = live.is_some_and(|r| r.has_requester(EVICTION_API_REQUESTER));
    let write = match (live, canceled) {
        (Some(r), _) if joined && !needs_refresh(r, &caller, call.now, settings) => None,
        (_, Some(old)) => Some(BridgeWrite::Replace {
            old_uid: old.metadata.uid.clone().unwrap_or_default(),
            request: Box::new(intent(pod, &caller, call.now)),
        }),
        _ => Some(BridgeWrite::Apply(Box::new(intent(pod, &caller, call.now)))),
    };
    let name = format!("{}/{}", pod.namespace(), pod.uid());
    let event = (!joined).then(|| PodEvent {
        reason: REASON_EVICTION_INTERCEPTED,
        message: format!(
            "Eviction API call by {caller} handed to EvictionRequest {name}: the pod's interceptors run first"
        ),
    });
    BridgeDecision {
        outcome: Outcome::Intercepted,
        too_many_requests: Some(in_progress(pod, live.map(|r| &**r), call.now)),
        warnings: Vec::new(),
        write,
        event,
    }
}

/// Whether the shell must read the pod's request live and decide again (rule B5): `decision`
/// hands to the request a call that names that very request as evictord's own. The controller
/// writes the imperative interceptor's activation just before it calls, and the webhook's watch
/// cache of requests can be a few milliseconds behind that write; deciding on the cache would
/// answer evictord's own call 429, join its request as the bridged requester, record an
/// `EvictionIntercepted` event and make the controller retry (about six requests, on a quarter
/// of the intercepted pods of the pool benchmark). One live GET, and only on such a call,
/// settles it. A forged marker costs the same GET and is then handed over as before.
pub fn confirm_live(
    call: &EvictionCall<'_>,
    pod: &Lookup<Arc<CachedPod>>,
    decision: &BridgeDecision,
) -> bool {
    let Lookup::Found(pod) = pod else {
        return false;
    };
    decision.outcome == Outcome::Intercepted && call.acting_for == Some(pod.uid())
}

fn is_true(r: &EvictionRequest, condition: &str) -> bool {
    r.status.as_ref().is_some_and(|s| s.is_true(condition))
}

/// evictord's own call: it names this request and the imperative interceptor is active.
fn is_own_eviction(call: &EvictionCall<'_>, r: &EvictionRequest) -> bool {
    let active = r.status.as_ref().is_some_and(|s| {
        s.active_interceptors
            .iter()
            .any(|a| a == IMPERATIVE_INTERCEPTOR)
    });
    active && call.acting_for.is_some() && call.acting_for == r.metadata.name.as_deref()
}

fn needs_refresh(r: &EvictionRequest, caller: &str, now: Timestamp, s: &Settings) -> bool {
    let recorded_caller = r
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EVICTION_API_CALLER_ANNOTATION));
    let stale = match r.eviction_api_last_call() {
        Some(t) => {
            now.duration_since(t).unsigned_abs() >= refresh_interval(s.eviction_api_requester_ttl)
        }
        None => true,
    };
    stale || recorded_caller.map(String::as_str) != Some(caller)
}

/// The request as the bridge applies it: target, its requester, the record of the call and the
/// pod's labels (SPEC 2.3 step 4), so that the controller has none to patch onto a request the
/// bridge created.
fn intent(pod: &CachedPod, caller: &str, now: Timestamp) -> EvictionRequest {
    let mut r = EvictionRequest::new(
        pod.uid(),
        EvictionRequestSpec {
            target: EvictionTarget {
                pod: PodReference {
                    name: pod.name().to_string(),
                    uid: pod.uid().to_string(),
                },
            },
            requesters: vec![Requester {
                name: EVICTION_API_REQUESTER.to_string(),
            }],
            heartbeat_deadline_seconds: None,
        },
    );
    r.metadata = ObjectMeta {
        name: Some(pod.uid().to_string()),
        namespace: Some(pod.namespace().to_string()),
        labels: (!pod.labels().is_empty()).then(|| pod.labels().to_map()),
        annotations: Some(BTreeMap::from([
            (
                EVICTION_API_LAST_CALL_ANNOTATION.to_string(),
                now.to_string(),
            ),
            (
                EVICTION_API_CALLER_ANNOTATION.to_string(),
                caller.to_string(),
            ),
        ])),
        owner_references: Some(vec![pod_owner_reference(pod.name(), pod.uid())]),
        ..ObjectMeta::default()
    };
    r
}

#[cfg(test)]
mod tests;
