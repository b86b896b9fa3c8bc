//! Test fixtures: builders for EvictionRequests and their status, pods, views, and a runner that
//! reviews a write and checks the verdict.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::core::admission::Operation;

use super::review_eviction_request;
use crate::admission::{ReviewRequest, Settings, Verdict};
use crate::api::{
    CancellationPolicy, EvictionRequest, EvictionRequestSpec, EvictionRequestStatus,
    EvictionTarget, IMPERATIVE_INTERCEPTOR, InterceptorReference, InterceptorStatus,
    PodEvictionStatus, PodReference, Requester,
};
use crate::cluster::{Authorization, CachedPod, StaticView};

pub const NS: &str = "ns";
pub const UID: &str = "6f1c7c1e-0000-4000-8000-000000000001";
pub const OTHER_UID: &str = "0b2d9a7e-0000-4000-8000-000000000002";
pub const A: &str = "a.example.com";
pub const B: &str = "b.example.com";
pub const IMP: &str = IMPERATIVE_INTERCEPTOR;

/// The time of every review.
pub fn now() -> Timestamp {
    "2030-01-01T00:00:00Z".parse().unwrap()
}

/// `secs` seconds from [`now`].
pub fn at(secs: i64) -> Time {
    Time(now().checked_add(SignedDuration::from_secs(secs)).unwrap())
}

pub struct RequestBuilder(EvictionRequest);

/// A request named after `uid`, for pod `p1` with that UID, created an hour ago, requested by
/// `a.example.com`.
pub fn request(uid: &str) -> RequestBuilder {
    RequestBuilder(EvictionRequest {
        metadata: ObjectMeta {
            name: Some(uid.into()),
            namespace: Some(NS.into()),
            creation_timestamp: Some(at(-3600)),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec: EvictionRequestSpec {
            target: EvictionTarget {
                pod: PodReference {
                    name: "p1".into(),
                    uid: uid.into(),
                },
            },
            requesters: vec![Requester { name: A.into() }],
            heartbeat_deadline_seconds: None,
        },
        status: None,
    })
}

impl RequestBuilder {
    pub fn pod(mut self, name: &str) -> Self {
        self.0.spec.target.pod.name = name.into();
        self
    }
    pub fn target_uid(mut self, uid: &str) -> Self {
        self.0.spec.target.pod.uid = uid.into();
        self
    }
    pub fn name(mut self, name: &str) -> Self {
        self.0.metadata.name = Some(name.into());
        self
    }
    pub fn generate_name(mut self, prefix: &str) -> Self {
        self.0.metadata.generate_name = Some(prefix.into());
        self
    }
    pub fn requesters(mut self, names: &[&str]) -> Self {
        self.0.spec.requesters = names
            .iter()
            .map(|n| Requester {
                name: n.to_string(),
            })
            .collect();
        self
    }
    pub fn deadline(mut self, seconds: i32) -> Self {
        self.0.spec.heartbeat_deadline_seconds = Some(seconds);
        self
    }
    pub fn status(mut self, status: StatusBuilder) -> Self {
        self.0.status = Some(status.0);
        self
    }
    pub fn build(self) -> EvictionRequest {
        self.0
    }
}

#[derive(Clone)]
pub struct StatusBuilder(pub EvictionRequestStatus);

/// An empty status.
pub fn status() -> StatusBuilder {
    StatusBuilder(EvictionRequestStatus::default())
}

/// The status after first sight: targets `a`, `b`, imperative, with their (empty) entries.
pub fn initialized() -> StatusBuilder {
    status().target(&[A, B, IMP])
}

impl StatusBuilder {
    /// Sets `targetInterceptors` and initialises `interceptors[]` with the names.
    pub fn target(self, names: &[&str]) -> Self {
        self.targets_only(names).entries(names)
    }
    /// Sets `targetInterceptors` only.
    pub fn targets_only(mut self, names: &[&str]) -> Self {
        self.0.target_interceptors = names
            .iter()
            .map(|n| InterceptorReference {
                name: n.to_string(),
            })
            .collect();
        self
    }
    /// Sets `interceptors[]` to entries with these names only.
    pub fn entries(mut self, names: &[&str]) -> Self {
        self.0.interceptors = names
            .iter()
            .map(|n| InterceptorStatus {
                name: n.to_string(),
                ..InterceptorStatus::default()
            })
            .collect();
        self
    }
    pub fn active(mut self, names: &[&str]) -> Self {
        self.0.active_interceptors = names.iter().map(|n| n.to_string()).collect();
        self
    }
    pub fn processed(mut self, names: &[&str]) -> Self {
        self.0.processed_interceptors = names.iter().map(|n| n.to_string()).collect();
        self
    }
    fn entry(mut self, name: &str, edit: impl FnOnce(&mut InterceptorStatus)) -> Self {
        let entry = self
            .0
            .interceptors
            .iter_mut()
            .find(|i| i.name == name)
            .unwrap();
        edit(entry);
        self
    }
    pub fn activated(self, name: &str, secs: i64) -> Self {
        self.entry(name, |e| e.activation_time = Some(at(secs)))
    }
    pub fn started(self, name: &str, secs: i64) -> Self {
        self.entry(name, |e| e.start_time = Some(at(secs)))
    }
    pub fn heartbeat(self, name: &str, secs: i64) -> Self {
        self.entry(name, |e| e.heartbeat_time = Some(at(secs)))
    }
    pub fn no_heartbeat(self, name: &str) -> Self {
        self.entry(name, |e| e.heartbeat_time = None)
    }
    pub fn expected(self, name: &str, secs: i64) -> Self {
        self.entry(name, |e| e.expected_finish_time = Some(at(secs)))
    }
    pub fn completed(self, name: &str, secs: i64) -> Self {
        self.entry(name, |e| e.completion_time = Some(at(secs)))
    }
    pub fn message(self, name: &str, message: &str) -> Self {
        let message = message.to_string();
        self.entry(name, |e| e.message = Some(message))
    }
    /// `a` active since `secs`, started and heartbeating at that time.
    pub fn a_running(self, secs: i64) -> Self {
        self.active(&[A])
            .activated(A, secs)
            .started(A, secs)
            .heartbeat(A, secs)
    }
    pub fn condition(mut self, type_: &str, value: &str) -> Self {
        self.0.conditions.retain(|c| c.type_ != type_);
        self.0.conditions.push(Condition {
            type_: type_.into(),
            status: value.into(),
            reason: "Test".into(),
            message: String::new(),
            last_transition_time: at(-1),
            observed_generation: None,
        });
        self
    }
    pub fn policy_forbid(mut self) -> Self {
        self.0.eviction_request_cancellation_policy = Some(CancellationPolicy::Forbid);
        self
    }
    pub fn policy_allow(mut self) -> Self {
        self.0.eviction_request_cancellation_policy = Some(CancellationPolicy::Allow);
        self
    }
    pub fn counter(mut self, n: i32) -> Self {
        self.0.pod_eviction_status = Some(PodEvictionStatus {
            failed_api_eviction_counter: n,
            last_failure_time: None,
        });
        self
    }
    pub fn observed(mut self, generation: i64) -> Self {
        self.0.observed_generation = Some(generation);
        self
    }
}

/// A pod in [`NS`].
pub fn pod(name: &str, uid: &str) -> CachedPod {
    let mut pod = CachedPod::default();
    pod.metadata.name = Some(name.into());
    pod.metadata.namespace = Some(NS.into());
    pod.metadata.uid = Some(uid.into());
    pod
}

/// A complete view holding these pods; access checks answer `authorization` (Allowed if None).
pub fn view(pods: Vec<CachedPod>, authorization: Option<Authorization>) -> StaticView {
    let mut view = StaticView::with_objects(pods, [], [], []);
    view.authorization = Some(authorization.unwrap_or(Authorization::Allowed));
    view
}

/// A complete view with pod `p1` of [`UID`]; access allowed.
pub fn pod_present() -> StaticView {
    view(vec![pod("p1", UID)], None)
}

/// A view that knows nothing: lookups are Unknown, access checks Skipped.
pub fn offline() -> StaticView {
    StaticView::unknown()
}

pub fn user() -> UserInfo {
    UserInfo {
        username: Some("alice".into()),
        ..UserInfo::default()
    }
}

pub fn review_request<'a>(
    operation: Operation,
    sub_resource: Option<&'a str>,
    old: Option<&'a EvictionRequest>,
    new: Option<&'a EvictionRequest>,
    user: &'a UserInfo,
) -> ReviewRequest<'a, EvictionRequest> {
    ReviewRequest {
        operation,
        sub_resource,
        namespace: Some(NS),
        name: new
            .or(old)
            .and_then(|e| e.metadata.name.as_deref())
            .unwrap_or_default(),
        object: new,
        old_object: old,
        user,
        dry_run: false,
        now: now(),
    }
}

/// Reviews a write with the default settings.
pub fn run(
    operation: Operation,
    sub_resource: Option<&str>,
    old: Option<&EvictionRequest>,
    new: Option<&EvictionRequest>,
    view: &StaticView,
) -> Verdict {
    let user = user();
    let req = review_request(operation, sub_resource, old, new, &user);
    review_eviction_request(&req, view, &Settings::default())
}

/// Reviews a status update of the default request from `old` to `new`.
pub fn status_update(old: StatusBuilder, new: StatusBuilder) -> Verdict {
    let old = request(UID).status(old).build();
    let new = request(UID).status(new).build();
    run(
        Operation::Update,
        Some("status"),
        Some(&old),
        Some(&new),
        &view(vec![], None),
    )
}

/// What a row expects of the verdict.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// Allowed without warnings.
    Allow,
    /// Allowed with a warning containing this text.
    Warn(&'static str),
    /// Denied with a message containing this text.
    Deny(&'static str),
}

pub fn check(verdict: &Verdict, expect: Expect) {
    match expect {
        Expect::Allow => {
            assert_eq!(verdict.denied, None, "expected allowed");
            assert!(
                verdict.warnings.is_empty(),
                "unexpected warnings {:?}",
                verdict.warnings
            );
        }
        Expect::Warn(text) => {
            assert_eq!(verdict.denied, None, "expected allowed");
            assert!(
                verdict.warnings.iter().any(|w| w.contains(text)),
                "no warning with {text:?} in {:?}",
                verdict.warnings
            );
        }
        Expect::Deny(text) => {
            let message = verdict
                .denied
                .as_deref()
                .unwrap_or_else(|| panic!("expected a denial containing {text:?}"));
            assert!(
                message.contains(text),
                "denial {message:?} does not contain {text:?}"
            );
        }
    }
}
