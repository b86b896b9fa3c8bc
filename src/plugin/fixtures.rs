//! Builders for the plugin's unit tests.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

use crate::api::{
    EvictionRequest, INTERCEPTORS_ANNOTATION, InterceptorReference, InterceptorStatus,
    MIRROR_POD_ANNOTATION, PodEvictionStatus, Requester,
};
use crate::cluster::CachedPod;

/// A fixed "now" and offsets from it.
pub fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("timestamp")
}

/// A node by name.
pub fn node(name: &str) -> Arc<Node> {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    Arc::new(n)
}

pub struct PodBuilder(CachedPod);

/// A running pod `name` in namespace `ns`, uid `uid-<name>`, on node `n1`, priority 0.
pub fn pod(name: &str) -> PodBuilder {
    let mut p = CachedPod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec.node_name = Some("n1".into());
    p.status.phase = Some("Running".into());
    PodBuilder(p)
}

impl PodBuilder {
    pub fn on(mut self, node: &str) -> Self {
        self.0.spec.node_name = Some(node.into());
        self
    }
    pub fn priority(mut self, p: i32) -> Self {
        self.0.spec.priority = Some(p);
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_default()
            .insert(k.into(), v.into());
        self
    }
    pub fn interceptors(mut self, names: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(INTERCEPTORS_ANNOTATION.into(), names.into());
        self
    }
    pub fn daemonset(mut self) -> Self {
        self.0.metadata.owner_references = Some(vec![OwnerReference {
            kind: "DaemonSet".into(),
            name: "ds".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        self
    }
    /// Its tolerations tolerate the maintenance taint.
    pub fn tolerating_maintenance(mut self) -> Self {
        self.0.spec.tolerates_maintenance_taint = true;
        self
    }
    pub fn replicaset(mut self, name: &str) -> Self {
        self.0.metadata.owner_references = Some(vec![OwnerReference {
            kind: "ReplicaSet".into(),
            name: name.into(),
            controller: Some(true),
            ..Default::default()
        }]);
        self
    }
    pub fn mirror(mut self) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(MIRROR_POD_ANNOTATION.into(), "m".into());
        self
    }
    /// It has an `emptyDir` volume.
    pub fn empty_dir(mut self) -> Self {
        self.0.spec.empty_dir = true;
        self
    }
    pub fn namespace(mut self, ns: &str) -> Self {
        self.0.metadata.namespace = Some(ns.into());
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
    pub fn build(self) -> CachedPod {
        self.0
    }
}

pub struct RequestBuilder(EvictionRequest);

/// The request of pod `name` (uid `uid-<name>`, namespace `ns`), created at `t(-600)`.
pub fn request(name: &str, requesters: &[&str]) -> RequestBuilder {
    let uid = format!("uid-{name}");
    let mut r = EvictionRequest::new(&uid, Default::default());
    r.metadata.namespace = Some("ns".into());
    r.metadata.creation_timestamp = Some(Time(t(-600)));
    r.spec.target.pod.name = name.into();
    r.spec.target.pod.uid = uid;
    r.spec.requesters = requesters
        .iter()
        .map(|n| Requester {
            name: n.to_string(),
        })
        .collect();
    RequestBuilder(r)
}

impl RequestBuilder {
    /// `targetInterceptors` and their entries, with `active` active.
    pub fn active(mut self, targets: &[&str], active: &str) -> Self {
        let s = self.0.status.get_or_insert_default();
        s.target_interceptors = targets
            .iter()
            .map(|n| InterceptorReference {
                name: n.to_string(),
            })
            .collect();
        s.interceptors = targets
            .iter()
            .map(|n| InterceptorStatus {
                name: n.to_string(),
                ..Default::default()
            })
            .collect();
        s.active_interceptors = vec![active.to_string()];
        self
    }
    pub fn entry(mut self, name: &str, edit: impl Fn(&mut InterceptorStatus)) -> Self {
        let s = self.0.status.get_or_insert_default();
        if let Some(e) = s.interceptors.iter_mut().find(|e| e.name == name) {
            edit(e);
        }
        self
    }
    pub fn failures(mut self, n: i32, last: Timestamp) -> Self {
        self.0.status.get_or_insert_default().pod_eviction_status = Some(PodEvictionStatus {
            failed_api_eviction_counter: n,
            last_failure_time: Some(Time(last)),
        });
        self
    }
    pub fn condition(mut self, type_: &str, message: &str) -> Self {
        self.0.status.get_or_insert_default().conditions.push(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: type_.into(),
                status: "True".into(),
                reason: "Test".into(),
                message: message.into(),
                last_transition_time: Time(t(0)),
                observed_generation: None,
            },
        );
        self
    }
    pub fn build(self) -> EvictionRequest {
        self.0
    }
}
