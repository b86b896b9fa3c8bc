//! Admission: one pure `review` function per resource (EvictionRequest, Pod, NodeMaintenance,
//! EvictionInterceptor, MaintenanceBudget)
//! and one thin generic HTTP handler that decodes an AdmissionReview, calls the review and
//! encodes the answer.
//!
//! A review is a synchronous function of the request, a read-only
//! [`ClusterView`](crate::cluster::ClusterView), the time and the [`Settings`]: no client, no
//! I/O. Lookups the view cannot answer (`Lookup::Unknown`, `Authorization::Skipped`) never deny
//! on their own; they add a warning.

pub mod answer;
pub mod body;
pub mod envelope;
pub mod eviction_interceptor;
pub mod eviction_request;
pub mod http;
pub mod maintenance_budget;
pub mod names;
pub mod node_maintenance;
pub mod offline;
pub mod partial;
pub mod pod;
pub mod pod_eviction;
pub mod pod_serving;
pub mod registration;
pub mod verdict;
pub mod webhooks;

pub use crate::cluster::Lookups;
pub use verdict::{ReviewRequest, Settings, Verdict};
