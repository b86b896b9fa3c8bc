//! Test fixtures: an injected clock ([`t`]) and builders for requests and cached pods.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};

use crate::api::{
    CancellationPolicy, EvictionRequest, EvictionRequestSpec, EvictionRequestStatus,
    EvictionTarget, IMPERATIVE_INTERCEPTOR, INTERCEPTORS_ANNOTATION, InterceptorReference,
    InterceptorStatus, MIRROR_POD_ANNOTATION, PodEvictionStatus, PodReference, Requester,
};
use crate::cluster::CachedPod;

/// The imperative interceptor, short.
pub const IMP: &str = IMPERATIVE_INTERCEPTOR;

/// `secs` seconds after the fixtures' epoch (2025-01-01T00:00:00Z), when requests are created.
pub fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).unwrap()
}

/// A request named `uid` for pod `ns/p` with that UID, one requester, created at `t(0)`,
/// generation 1, no status.
pub fn request(uid: &str) -> RequestBuilder {
    let mut r = EvictionRequest::new(
        uid,
        EvictionRequestSpec {
            target: EvictionTarget {
                pod: PodReference {
                    name: "p".into(),
                    uid: uid.into(),
                },
            },
            requesters: vec![Requester {
                name: "req.example.com".into(),
            }],
            heartbeat_deadline_seconds: None,
        },
    );
    r.metadata.namespace = Some("ns".into());
    r.metadata.creation_timestamp = Some(Time(t(0)));
    r.metadata.generation = Some(1);
    RequestBuilder(r)
}

pub struct RequestBuilder(EvictionRequest);

impl RequestBuilder {
    fn status(&mut self) -> &mut EvictionRequestStatus {
        self.0.status.get_or_insert_with(Default::default)
    }

    fn entry(&mut self, name: &str) -> &mut InterceptorStatus {
        self.status()
            .interceptors
            .iter_mut()
            .find(|i| i.name == name)
            .expect("interceptor in targets")
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

    pub fn forbid(mut self) -> Self {
        self.status().eviction_request_cancellation_policy = Some(CancellationPolicy::Forbid);
        self
    }

    pub fn deadline_seconds(mut self, s: i32) -> Self {
        self.0.spec.heartbeat_deadline_seconds = Some(s);
        self
    }

    pub fn generation(mut self, g: i64) -> Self {
        self.0.metadata.generation = Some(g);
        self
    }

    pub fn observed(mut self, g: i64) -> Self {
        self.status().observed_generation = Some(g);
        self
    }

    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.0.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        self
    }

    /// `targetInterceptors` = `names` + the imperative one, with empty entries.
    pub fn targets(mut self, names: &[&str]) -> Self {
        let all: Vec<String> = names
            .iter()
            .map(|n| n.to_string())
            .chain([IMP.to_string()])
            .collect();
        let s = self.status();
        s.target_interceptors = all
            .iter()
            .map(|n| InterceptorReference { name: n.clone() })
            .collect();
        s.interceptors = all
            .into_iter()
            .map(|name| InterceptorStatus {
                name,
                ..Default::default()
            })
            .collect();
        s.observed_generation = Some(1);
        self
    }

    /// Makes `name` active, every target before it processed.
    pub fn active(mut self, name: &str) -> Self {
        let s = self.status();
        let k = s
            .target_interceptors
            .iter()
            .position(|t| t.name == name)
            .expect("name in targets");
        s.processed_interceptors = s.target_interceptors[..k]
            .iter()
            .map(|t| t.name.clone())
            .collect();
        s.active_interceptors = vec![name.to_string()];
        self
    }

    /// Every target processed, none active.
    pub fn all_processed(mut self) -> Self {
        let s = self.status();
        s.processed_interceptors = s
            .target_interceptors
            .iter()
            .map(|t| t.name.clone())
            .collect();
        s.active_interceptors.clear();
        self
    }

    pub fn raw_active(mut self, names: &[&str], processed: &[&str]) -> Self {
        let s = self.status();
        s.active_interceptors = names.iter().map(|n| n.to_string()).collect();
        s.processed_interceptors = processed.iter().map(|n| n.to_string()).collect();
        self
    }

    pub fn activated(mut self, name: &str, at: Timestamp) -> Self {
        self.entry(name).activation_time = Some(Time(at));
        self
    }

    /// `startTime` and `heartbeatTime` at `at`.
    pub fn started(mut self, name: &str, at: Timestamp) -> Self {
        let e = self.entry(name);
        e.start_time = Some(Time(at));
        e.heartbeat_time = Some(Time(at));
        self
    }

    pub fn heartbeat(mut self, name: &str, at: Timestamp) -> Self {
        self.entry(name).heartbeat_time = Some(Time(at));
        self
    }

    pub fn completed(mut self, name: &str, at: Timestamp) -> Self {
        self.entry(name).completion_time = Some(Time(at));
        self
    }

    pub fn message(mut self, name: &str, m: &str) -> Self {
        self.entry(name).message = Some(m.to_string());
        self
    }

    pub fn condition(mut self, type_: &str, reason: &str) -> Self {
        self.status().conditions.push(Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(t(0)),
            observed_generation: Some(1),
        });
        self
    }

    /// `n` failed evictions, the last at `at`.
    pub fn failures(mut self, n: i32, at: Option<Timestamp>) -> Self {
        self.status().pod_eviction_status = Some(PodEvictionStatus {
            failed_api_eviction_counter: n,
            last_failure_time: at.map(Time),
        });
        self
    }

    /// Owned by the pod of UID `uid` (requests evictord creates are owned by their pod).
    pub fn owned_by(mut self, uid: &str) -> Self {
        self.0.metadata.owner_references = Some(vec![crate::api::pod_owner_reference("p", uid)]);
        self
    }

    pub fn build(self) -> EvictionRequest {
        self.0
    }
}

/// A running pod `ns/<name>` with UID `uid`.
pub fn pod(name: &str) -> PodBuilder {
    let mut p = CachedPod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some("uid".into());
    p.status.phase = Some("Running".into());
    PodBuilder(p)
}

pub struct PodBuilder(CachedPod);

impl PodBuilder {
    fn annotate(&mut self, k: &str, v: &str) {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.0.metadata.uid = Some(uid.into());
        self
    }

    pub fn interceptors(mut self, names: &[&str]) -> Self {
        self.annotate(INTERCEPTORS_ANNOTATION, &names.join(","));
        self
    }

    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.0.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        self
    }

    pub fn daemonset(mut self) -> Self {
        self.0.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: "ds".into(),
            uid: "ds-uid".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        self
    }

    pub fn mirror(mut self) -> Self {
        self.annotate(MIRROR_POD_ANNOTATION, "hash");
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(t(0)));
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0.status.phase = Some(phase.into());
        self
    }

    pub fn workload(mut self) -> Self {
        self.0.spec.workload_ref = true;
        self
    }

    pub fn build(self) -> CachedPod {
        self.0
    }
}
