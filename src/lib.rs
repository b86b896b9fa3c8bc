//! evictord: the EvictionRequest and NodeMaintenance APIs for Kubernetes, out of tree.
#![forbid(unsafe_code)]

pub mod api;
pub mod cluster;
pub mod selector;
pub mod admission;
pub mod tls;
pub mod metrics;
pub mod telemetry;
pub mod cli;
pub mod certs;
pub mod serve;
