//! evictord's own interceptors, built on the interceptor SDK (the `evictord-interceptor` crate,
//! re-exported here: [`Runner`], [`Interceptor`], [`Progress`], [`registration`], ...) and on the
//! Kubernetes API only: `deployment.apps.k8s.io` ([`deployment`]), `daemonset.apps.k8s.io`
//! ([`daemonset`]), `horizontalpodautoscaler.autoscaling.k8s.io` ([`hpa`]), `endpoints.evictord.dev`
//! ([`endpoints`]) and `kubelet.k8s.io` ([`kubelet`], served by the node agent).

pub mod autoscalers;
pub mod daemonset;
pub mod deployment;
pub mod deployments;
pub mod endpoints;
pub mod hpa;
pub mod kubelet;
pub mod replicasets;
mod watch;
pub mod workload_pods;

pub use evictord_interceptor::{
    BoxError, EntryPatch, Error, Interceptor, PodCache, Progress, Runner, Settings, Waiters,
    heartbeat_due, next_wakeup, next_write, registration, whole_seconds,
};
