//! The inputs and output of a pure review: [`ReviewRequest`], [`Settings`], [`Verdict`].

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::Operation;

use crate::api::RegistrationMode;

/// One admission request, typed, as a review function sees it.
#[derive(Clone, Debug)]
pub struct ReviewRequest<'a, T> {
    /// CREATE, UPDATE or DELETE (CONNECT is never registered).
    pub operation: Operation,
    /// The sub-resource written, e.g. `status`.
    pub sub_resource: Option<&'a str>,
    /// Namespace of the object (namespaced resources).
    pub namespace: Option<&'a str>,
    /// Name of the object as presented (empty on CREATE with generateName).
    pub name: &'a str,
    /// The new object (CREATE, UPDATE).
    pub object: Option<&'a T>,
    /// The existing object (UPDATE, DELETE).
    pub old_object: Option<&'a T>,
    /// The requesting user.
    pub user: &'a UserInfo,
    /// The request will not be persisted.
    pub dry_run: bool,
    /// The time of the review.
    pub now: Timestamp,
}

impl<'a, T> ReviewRequest<'a, T> {
    /// True when the request writes the `status` sub-resource.
    pub fn is_status(&self) -> bool {
        self.sub_resource == Some("status")
    }

    /// The same request with its objects seen through `view` (a partial object's full type).
    pub fn map_objects<U>(&self, view: impl Fn(&'a T) -> &'a U) -> ReviewRequest<'a, U> {
        ReviewRequest {
            operation: self.operation.clone(),
            sub_resource: self.sub_resource,
            namespace: self.namespace,
            name: self.name,
            object: self.object.map(&view),
            old_object: self.old_object.map(&view),
            user: self.user,
            dry_run: self.dry_run,
            now: self.now,
        }
    }
}

/// Settings of the rules, from flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `*.k8s.io` interceptor names accepted besides the built-in allowlist.
    pub extra_k8s_io_interceptors: Vec<String>,
    /// Minimum step of an interceptor's `heartbeatTime` (default 60 s).
    pub min_heartbeat_interval: Duration,
    /// Heartbeat deadline when `spec.heartbeatDeadlineSeconds` is unset (default 20 min).
    pub interceptor_deadline: Duration,
    /// Clock skew tolerated for times written by interceptors (10 s).
    pub clock_skew: Duration,
    /// How long the Eviction API bridge's requester stays on a request without a new call
    /// (default [`super::pod_eviction::DEFAULT_REQUESTER_TTL`], 15 min).
    pub eviction_api_requester_ttl: Duration,
    /// `--interceptor-registration` (SPEC 5.5): rule P8 warns unless `off`; under `enforce`, S2
    /// accepts the hand-over of an unregistered interceptor after the grace and S7 guards the
    /// entries of registered ones.
    pub interceptor_registration: RegistrationMode,
    /// `--unregistered-interceptor-grace` (default 1 min): how long after its activation an
    /// unregistered interceptor keeps its turn under `enforce`.
    pub unregistered_interceptor_grace: Duration,
    /// The user name evictord's own API calls arrive under (rule S7 lets it write every entry);
    /// `None` when unknown (then no request counts as evictord's).
    pub own_user: Option<String>,
    /// Whether the `endpoints.evictord.dev` interceptor runs (`--endpoints-interceptor`, and a
    /// cluster to keep the gate in): rule P9 adds the `evictord.dev/serving` readiness gate only
    /// then.
    pub serving_gate: bool,
    /// `--deregistration-delay` (default 30 s): the delay of a pod without a valid
    /// `evictord.dev/deregistration-delay` (rule P10 names it).
    pub deregistration_delay: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            extra_k8s_io_interceptors: Vec::new(),
            min_heartbeat_interval: Duration::from_secs(60),
            interceptor_deadline: Duration::from_secs(1200),
            clock_skew: Duration::from_secs(10),
            eviction_api_requester_ttl: super::pod_eviction::DEFAULT_REQUESTER_TTL,
            interceptor_registration: RegistrationMode::default(),
            unregistered_interceptor_grace: Duration::from_secs(60),
            own_user: None,
            serving_gate: true,
            deregistration_delay: crate::serving::DEFAULT_DEREGISTRATION_DELAY,
        }
    }
}

/// The outcome of a review.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// `Some(message)` when the request is denied; the message names the field and the rule.
    pub denied: Option<String>,
    /// Non-blocking warnings returned to the client.
    pub warnings: Vec<String>,
    /// JSON patch operations (mutating reviews only).
    pub patch: Vec<json_patch::PatchOperation>,
}

impl Verdict {
    /// An allowing verdict without warnings.
    pub fn allow() -> Self {
        Self::default()
    }

    /// A denying verdict.
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            denied: Some(message.into()),
            ..Self::default()
        }
    }

    /// True when the request is allowed.
    pub fn allowed(&self) -> bool {
        self.denied.is_none()
    }

    /// Adds a warning.
    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }

    /// Denies with this message unless already denied (the first violation wins, so the user
    /// sees the earliest rule in SPEC order).
    pub fn deny_if_allowed(&mut self, message: impl Into<String>) {
        if self.denied.is_none() {
            self.denied = Some(message.into());
        }
    }
}
