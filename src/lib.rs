//! evictord: the EvictionRequest and NodeMaintenance APIs for Kubernetes, out of tree.
#![forbid(unsafe_code)]

pub mod api;
pub mod cluster;
pub mod drain;
pub mod selector;
pub mod admission;
