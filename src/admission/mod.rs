//! Admission: one pure `review` function per resource (EvictionRequest, Pod, NodeMaintenance)
//! and one thin generic HTTP handler that decodes an AdmissionReview, calls the review and
//! encodes the answer.
//!
//! A review is a synchronous function of the request, a read-only [`ClusterView`], the time and
//! the [`Settings`]: no client, no I/O. Lookups the view cannot answer (`Lookup::Unknown`,
//! `Authorization::Skipped`) never deny on their own; they add a warning.

pub mod eviction_request;
pub mod names;
pub mod verdict;

pub use verdict::{ReviewRequest, Settings, Verdict};

#[allow(unused_imports)]
use crate::cluster::ClusterView;
