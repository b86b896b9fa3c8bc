//! `EvictionRequest` (KEP-4563, latest revision, with the extensions SPEC 2.1 names): a request
//! that a pod leave, handled by the pod's interceptors in turn and finally by the Eviction API.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default heartbeat deadline of an interceptor, in seconds (20 minutes).
pub const DEFAULT_HEARTBEAT_DEADLINE_SECONDS: i32 = 1200;
/// Bounds of `spec.heartbeatDeadlineSeconds`.
pub const MIN_HEARTBEAT_DEADLINE_SECONDS: i32 = 600;
/// Bounds of `spec.heartbeatDeadlineSeconds`.
pub const MAX_HEARTBEAT_DEADLINE_SECONDS: i32 = 86400;
/// At most this many requesters.
pub const MAX_REQUESTERS: usize = 100;
/// At most this many target interceptors (15 from the pod and the default one).
pub const MAX_INTERCEPTORS: usize = 16;
/// At most this many interceptors in the pod annotation.
pub const MAX_POD_INTERCEPTORS: usize = 15;
/// Maximal length of an interceptor message, in bytes.
pub const MAX_INTERCEPTOR_MESSAGE_BYTES: usize = 32768;

/// Spec of an EvictionRequest. The object is named after the target pod's UID.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "evictord.dev",
    version = "v1alpha1",
    kind = "EvictionRequest",
    plural = "evictionrequests",
    shortname = "evr",
    namespaced,
    status = "EvictionRequestStatus",
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".spec.target.pod.name"}"#,
    printcolumn = r#"{"name":"Active interceptor","type":"string","jsonPath":".status.activeInterceptors[0]"}"#,
    printcolumn = r#"{"name":"Evicted","type":"string","jsonPath":".status.conditions[?(@.type==\"Evicted\")].status"}"#,
    printcolumn = r#"{"name":"Canceled","type":"string","jsonPath":".status.conditions[?(@.type==\"Canceled\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EvictionRequestSpec {
    /// The pod to evict. Immutable.
    pub target: EvictionTarget,
    /// Who asks for the eviction. An empty list cancels the request (unless the cancellation
    /// policy is Forbid).
    #[serde(default)]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub requesters: Vec<Requester>,
    /// How long an active interceptor may stay silent before the next one takes over
    /// (default 1200). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 600, max = 86400))]
    pub heartbeat_deadline_seconds: Option<i32>,
}

/// The target of an EvictionRequest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct EvictionTarget {
    /// The target pod, in the namespace of the request.
    pub pod: PodReference,
}

/// A pod, by name and UID.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PodReference {
    /// Name of the pod.
    #[schemars(length(max = 253))]
    pub name: String,
    /// UID of the pod; the request is named after it.
    #[schemars(length(max = 128))]
    pub uid: String,
}

/// One requester of an eviction.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Requester {
    /// Fully qualified domain name of the requester, e.g. `nodemaintenance.evictord.dev`.
    #[schemars(length(max = 253))]
    pub name: String,
}

/// Status of an EvictionRequest, written by the controller and the interceptors.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvictionRequestStatus {
    /// The generation of the spec the controller last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Evicted` and `Canceled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The interceptors, in the order they are selected; set once by the controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub target_interceptors: Vec<InterceptorReference>,
    /// The interceptor now handling the request (at most one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub active_interceptors: Vec<String>,
    /// The interceptors that have had their turn, in order. Append-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub processed_interceptors: Vec<String>,
    /// Progress reported by each interceptor, in the order of `targetInterceptors`. A list-map
    /// keyed by name (seed 000), so that an interceptor can server-side apply just its own entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub interceptors: Vec<InterceptorStatus>,
    /// Allow (default) or Forbid the cancellation of the request by removing its requesters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_request_cancellation_policy: Option<CancellationPolicy>,
    /// Progress of the API-initiated eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_eviction_status: Option<PodEvictionStatus>,
}

/// A reference to an interceptor by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct InterceptorReference {
    /// Fully qualified domain name of the interceptor.
    #[schemars(length(max = 253))]
    pub name: String,
}

/// Progress of one interceptor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterceptorStatus {
    /// Name of the interceptor.
    #[schemars(length(max = 253))]
    pub name: String,
    /// When the controller made this interceptor active.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub activation_time: Option<Time>,
    /// When the interceptor started handling the request.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub start_time: Option<Time>,
    /// The interceptor's latest proof of progress.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub heartbeat_time: Option<Time>,
    /// When the interceptor expects to finish.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub expected_finish_time: Option<Time>,
    /// When the interceptor finished; the next one is selected.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub completion_time: Option<Time>,
    /// Human-readable progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32768))]
    pub message: Option<String>,
}

/// Whether an EvictionRequest may be canceled by removing its requesters.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CancellationPolicy {
    /// The request is canceled when it has no requesters left.
    #[default]
    Allow,
    /// Requesters cannot be removed and the request cannot be deleted while the pod exists.
    Forbid,
}

/// Progress of the API-initiated eviction of the pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodEvictionStatus {
    /// How many Eviction API calls have failed. Only ever increases.
    #[serde(default, rename = "failedAPIEvictionCounter")]
    #[schemars(range(min = 0))]
    pub failed_api_eviction_counter: i32,
    /// When the last Eviction API call failed (EXTENSION: anchors the retry backoff, which is
    /// derived from the counter, so that it survives restarts).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub last_failure_time: Option<Time>,
}

impl EvictionRequestStatus {
    /// The condition of the given type, if any.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// True when the condition of the given type is `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }

    /// True when the request is `Evicted` or `Canceled`.
    pub fn is_terminal(&self) -> bool {
        self.is_true(crate::CONDITION_EVICTED) || self.is_true(crate::CONDITION_CANCELED)
    }

    /// The cancellation policy, `Allow` when unset.
    pub fn cancellation_policy(&self) -> CancellationPolicy {
        self.eviction_request_cancellation_policy
            .unwrap_or_default()
    }

    /// Failed Eviction API calls so far.
    pub fn failed_evictions(&self) -> i32 {
        self.pod_eviction_status
            .as_ref()
            .map_or(0, |p| p.failed_api_eviction_counter)
    }

    /// The interceptor status entry of the given name.
    pub fn interceptor(&self, name: &str) -> Option<&InterceptorStatus> {
        self.interceptors.iter().find(|i| i.name == name)
    }
}

/// The ownerReference evictord puts on the EvictionRequests it creates: the target pod, so that
/// the garbage collector removes the request once the pod is deleted (by then the request is
/// `Evicted`, reason `PodDeleted`, and nothing reads it any more). Not a controller reference and
/// without `blockOwnerDeletion`: the request never holds the pod's deletion up.
pub fn pod_owner_reference(
    pod_name: &str,
    pod_uid: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod_name.into(),
        uid: pod_uid.into(),
        controller: None,
        block_owner_deletion: None,
    }
}

impl EvictionRequest {
    /// True when `name` is one of the requesters.
    pub fn has_requester(&self, name: &str) -> bool {
        self.spec.requesters.iter().any(|q| q.name == name)
    }

    /// The last Eviction API call the bridge recorded on the request
    /// ([`crate::EVICTION_API_LAST_CALL_ANNOTATION`]), if readable.
    pub fn eviction_api_last_call(&self) -> Option<jiff::Timestamp> {
        self.metadata
            .annotations
            .as_ref()?
            .get(crate::EVICTION_API_LAST_CALL_ANNOTATION)?
            .parse()
            .ok()
    }

    /// True when the status says `Evicted=True` or `Canceled=True`.
    pub fn is_terminal(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(EvictionRequestStatus::is_terminal)
    }

    /// The moment an interceptor's heartbeat expires (SPEC 2.2): `spec.heartbeatDeadlineSeconds`
    /// (else `default_deadline`) after the latest of its `heartbeatTime`, its `activationTime`
    /// and the request's `creationTimestamp`. `entry` is passed separately so that a status
    /// being drafted can be read. `None` only when none of the three times is known (never for
    /// a stored object); overflow saturates to [`jiff::Timestamp::MAX`].
    ///
    /// The one definition shared by admission rule S2 and the eviction request controller, so
    /// that the controller never writes a hand-off the webhook refuses.
    pub fn heartbeat_deadline_at(
        &self,
        entry: &InterceptorStatus,
        default_deadline: std::time::Duration,
    ) -> Option<jiff::Timestamp> {
        let anchor = [
            entry.heartbeat_time.as_ref(),
            entry.activation_time.as_ref(),
            self.metadata.creation_timestamp.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|t| t.0)
        .max()?;
        Some(
            anchor
                .saturating_add(self.spec.heartbeat_deadline(default_deadline))
                .unwrap_or(jiff::Timestamp::MAX),
        )
    }
}

impl EvictionRequestSpec {
    /// The heartbeat deadline in seconds, or `default` when unset.
    pub fn heartbeat_deadline(&self, default: std::time::Duration) -> std::time::Duration {
        self.heartbeat_deadline_seconds
            .map_or(default, |s| std::time::Duration::from_secs(s.max(0) as u64))
    }
}
