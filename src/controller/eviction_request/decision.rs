//! What a decision of the eviction request controller says ([`Decision`]), the settings it is
//! taken with ([`DecideSettings`]), and the [`Draft`] the steps fill in before it is sealed.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::deadline::{until, whole_seconds};
use crate::api::{
    EvictionRequest, EvictionRequestStatus, InterceptorStatus, Registration, RegistrationMode,
};
use crate::cluster::Allowance;

/// Condition reason: the target pod was deleted (set by `decide` when the pod is gone, and by
/// `after_eviction` when the Eviction API says so).
pub const REASON_POD_DELETED: &str = "PodDeleted";

/// The message of `Evicted=True` with reason [`REASON_POD_DELETED`].
pub(crate) fn pod_deleted_message(pod_ref: &str) -> String {
    format!("Target Pod {pod_ref} was deleted.")
}

/// Tunables of the decisions, from process flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecideSettings {
    /// Heartbeat deadline when `spec.heartbeatDeadlineSeconds` is unset (default 20 min).
    pub interceptor_deadline: Duration,
    /// Minimum step between two heartbeats of one interceptor (default 60 s, admission rule S4).
    pub min_heartbeat_interval: Duration,
    /// First retry delay of a failed Eviction API call (default 1 s).
    pub backoff_base: Duration,
    /// Longest retry delay of a failed Eviction API call (default 1000 s, about 15 min).
    pub backoff_cap: Duration,
    /// How long a request may name a pod the cache has never shown before it is canceled as
    /// "not found" (default 10 s). The requester usually saw the pod just before creating the
    /// request, so a missing pod in a young request is more likely cache lag than absence, and a
    /// cancellation cannot be undone (S5).
    pub pod_not_found_grace: Duration,
    /// `*.k8s.io` interceptor names accepted besides the built-in allowlist (the same list the
    /// webhook is given): names in a pod annotation that the webhook would reject in
    /// `status.targetInterceptors` are skipped, or the controller's own status write would be
    /// denied forever.
    pub extra_k8s_io_interceptors: Vec<String>,
    /// How long the Eviction API bridge's requester stays without a new call (default
    /// [`crate::admission::pod_eviction::DEFAULT_REQUESTER_TTL`], 15 min).
    pub eviction_api_requester_ttl: Duration,
    /// How long an `Evicted` or `Canceled` request is kept before it is deleted (default 4 h).
    pub ended_request_retention: Duration,
    /// `daemonset.apps.k8s.io` runs (`--daemonset-interceptor`, default on): DaemonSet pods get it
    /// as an implicit interceptor (step 5, SPEC 5.3).
    pub daemonset_interceptor: bool,
    /// `--interceptor-registration` (SPEC 5.5): a warning event when an unregistered interceptor
    /// becomes active (unless `off`); under `enforce` it is passed over after the grace.
    pub interceptor_registration: RegistrationMode,
    /// `--unregistered-interceptor-grace` (default 1 min).
    pub unregistered_interceptor_grace: Duration,
}

impl Default for DecideSettings {
    fn default() -> Self {
        Self {
            interceptor_deadline: Duration::from_secs(20 * 60),
            min_heartbeat_interval: Duration::from_secs(60),
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(1000),
            pod_not_found_grace: Duration::from_secs(10),
            extra_k8s_io_interceptors: Vec::new(),
            eviction_api_requester_ttl: crate::admission::pod_eviction::DEFAULT_REQUESTER_TTL,
            ended_request_retention: Duration::from_secs(4 * 3600),
            daemonset_interceptor: true,
            interceptor_registration: RegistrationMode::default(),
            unregistered_interceptor_grace: Duration::from_secs(60),
        }
    }
}

/// Everything one reconciliation should do. Empty ([`Decision::is_noop`]) when the request is
/// settled and nothing falls due.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// The complete new status, when it differs from the current one. Written as one patch; it
    /// satisfies the status admission rules S1–S6 against the current status.
    pub status: Option<EvictionRequestStatus>,
    /// The complete desired label map of the request, when it differs from the current one.
    pub labels: Option<BTreeMap<String, String>>,
    /// Events to record on the request.
    pub events: Vec<EventSpec>,
    /// The call to make after the status patch succeeded.
    pub action: Option<Action>,
    /// Reconcile again after this long: the earliest of the active interceptor's heartbeat
    /// deadline, the next eviction retry and the controller's own next heartbeat. `None` when
    /// nothing is pending (the watches will wake the request).
    pub requeue_after: Option<Duration>,
    /// The interceptors moved to `processedInterceptors` by this decision, and why (metric
    /// `evictionrequest_controller_processed_interceptor`).
    pub processed: Vec<(String, ProcessedReason)>,
    /// On first sight (step 5), the number of the pod's interceptors that were targeted, the
    /// imperative one not counted (metric `evictionrequest_controller_pod_interceptors`).
    pub pod_interceptors: Option<usize>,
}

impl Decision {
    /// True when the decision changes nothing, does nothing and schedules nothing.
    pub fn is_noop(&self) -> bool {
        *self == Decision::default()
    }
}

/// Why an interceptor left the active slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessedReason {
    /// It set `completionTime`.
    Completed,
    /// Its heartbeat deadline passed.
    TimedOut,
    /// No EvictionInterceptor registers it and the grace after its activation passed
    /// (`--interceptor-registration=enforce`).
    NotRegistered,
    /// It was active when the request ended Evicted (the imperative interceptor's eviction, or
    /// the pod went away during another interceptor's turn).
    Evicted,
}

impl ProcessedReason {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessedReason::Completed => "completed",
            ProcessedReason::TimedOut => "timed_out",
            ProcessedReason::NotRegistered => "not_registered",
            ProcessedReason::Evicted => "evicted",
        }
    }
}

/// Two event notes told as one: "Interceptor a completed; interceptor b selected (2 of 3)."
pub(crate) fn joined_notes(first: &str, then: &str) -> String {
    let mut note = first.strip_suffix('.').unwrap_or(first).to_string();
    note.push_str("; ");
    let mut chars = then.chars();
    if let Some(c) = chars.next() {
        note.extend(c.to_lowercase());
        note.push_str(chars.as_str());
    }
    note
}

/// An event to record on the EvictionRequest (`involvedObject` = the request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// PascalCase reason: `InterceptorSelected`, `InterceptorCompleted`, `InterceptorTimedOut`,
    /// `InterceptorNotRegistered`, `UnregisteredInterceptor`, `InterceptorSkipped`,
    /// `EvictionFailed`, `Evicted`, `Canceled`.
    pub reason: &'static str,
    /// Normal or Warning.
    pub type_: EventType,
    /// Human-readable note.
    pub note: String,
}

/// Type of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Expected progress.
    Normal,
    /// Something an operator may want to look at.
    Warning,
}

impl EventType {
    /// The `type` field of the Event.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A call the shell makes on the controller's behalf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// POST the pod's `eviction` subresource with `preconditions.uid = uid`, so that a
    /// same-named successor pod is never evicted by mistake. Report the result through
    /// [`super::after_eviction`].
    Evict {
        /// Namespace of the pod.
        namespace: String,
        /// Name of the pod.
        name: String,
        /// UID precondition.
        uid: String,
    },
}

/// The result of an Eviction API call, as the shell classifies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// 200/201: the API server accepted the eviction; the pod is being deleted.
    Evicted,
    /// Any other failure (429 from a PodDisruptionBudget, 500 from a misconfigured budget, a
    /// webhook denial, a transport error...).
    Failed {
        /// HTTP status code (0 when there was no answer).
        status_code: u16,
        /// The server's message.
        message: String,
        /// The server's `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// 404, or 409 on the UID precondition: the target pod no longer exists.
    PodGone,
}

/// A decision in the making: the steps edit a copy of the status and collect the rest.
pub(crate) struct Draft<'a> {
    pub request: &'a EvictionRequest,
    pub settings: &'a DecideSettings,
    /// The clock, truncated to whole seconds: `metav1.Time` is serialized with second
    /// precision, so every time written and compared is what reads back after a round trip.
    pub now: Timestamp,
    pub status: EvictionRequestStatus,
    pub labels: Option<BTreeMap<String, String>>,
    pub events: Vec<EventSpec>,
    pub action: Option<Action>,
    pub requeue_at: Option<Timestamp>,
    pub processed: Vec<(String, ProcessedReason)>,
    pub pod_interceptors: Option<usize>,
    /// The target pod's node announces an `evictord node-agent` (step 5).
    pub node_agent: bool,
    /// What is known of each interceptor's registration (SPEC 5.5).
    pub registration: &'a dyn Fn(&str) -> Registration,
    /// What the PodDisruptionBudgets selecting the pod say now (step 8's retry).
    pub budgets: Allowance,
    /// When the controller's watch of the requests last failed (heartbeat deadlines count past
    /// it).
    pub unreachable_until: Option<Timestamp>,
}

impl<'a> Draft<'a> {
    pub fn new(request: &'a EvictionRequest, now: Timestamp, settings: &'a DecideSettings) -> Self {
        Self {
            request,
            settings,
            now: whole_seconds(now),
            status: request.status.clone().unwrap_or_default(),
            labels: None,
            events: Vec::new(),
            action: None,
            requeue_at: None,
            processed: Vec::new(),
            pod_interceptors: None,
            node_agent: false,
            registration: &|_| Registration::Unknown,
            budgets: Allowance::Unknown,
            unreachable_until: None,
        }
    }

    /// `namespace/name` of the target pod, for messages.
    pub fn pod_ref(&self) -> String {
        let ns = self
            .request
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default();
        format!("{ns}/{}", self.request.spec.target.pod.name)
    }

    /// Reconcile again at `at` at the latest.
    pub fn requeue_at(&mut self, at: Timestamp) {
        self.requeue_at = Some(self.requeue_at.map_or(at, |t| t.min(at)));
    }

    pub fn event(&mut self, reason: &'static str, type_: EventType, note: String) {
        self.events.push(EventSpec {
            reason,
            type_,
            note,
        });
    }

    /// The status entry of the named interceptor, for editing.
    pub fn entry_mut(&mut self, name: &str) -> Option<&mut InterceptorStatus> {
        self.status.interceptors.iter_mut().find(|i| i.name == name)
    }

    /// Sets the terminal condition `type_` to True, clears the active interceptor (allowed by S2
    /// in the same update) and records the matching event (`Evicted` or `Canceled`).
    pub fn conclude(
        &mut self,
        type_: &'static str,
        reason: &str,
        message: String,
        event: EventType,
    ) {
        let condition = Condition {
            type_: type_.to_string(),
            status: "True".to_string(),
            reason: reason.to_string(),
            message: message.clone(),
            last_transition_time: Time(self.now),
            observed_generation: self.request.metadata.generation,
        };
        match self.status.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => *c = condition,
            None => self.status.conditions.push(condition),
        }
        // The interceptor active when the pod went away had its turn: it is recorded as
        // processed (S2/S3 allow it with Evicted in the same update). The imperative
        // interceptor is the controller itself, so it also records its own completion.
        if type_ == crate::api::CONDITION_EVICTED {
            for active in std::mem::take(&mut self.status.active_interceptors) {
                if active == crate::api::IMPERATIVE_INTERCEPTOR
                    && let Some(entry) = self
                        .status
                        .interceptors
                        .iter_mut()
                        .find(|i| i.name == active)
                    && entry.completion_time.is_none()
                {
                    entry.completion_time = Some(Time(self.now));
                }
                if !self.status.processed_interceptors.contains(&active) {
                    self.status.processed_interceptors.push(active.clone());
                    self.processed.push((active, ProcessedReason::Evicted));
                }
            }
        }
        self.status.active_interceptors.clear();
        self.event(type_, event, message);
    }

    /// Whether the status as drafted so far differs from the request's (a write will be made).
    pub fn writes_status(&self) -> bool {
        match &self.request.status {
            Some(current) => *current != self.status,
            None => self.status != EvictionRequestStatus::default(),
        }
    }

    /// Seals the draft: the status only when it changed, the requeue relative to the clock.
    pub fn finish(self) -> Decision {
        Decision {
            status: self.writes_status().then_some(self.status),
            labels: self.labels,
            events: self.events,
            action: self.action,
            requeue_after: self.requeue_at.map(|at| until(self.now, at)),
            processed: self.processed,
            pod_interceptors: self.pod_interceptors,
        }
    }
}
