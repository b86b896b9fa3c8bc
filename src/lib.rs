//! evictord: the EvictionRequest and NodeMaintenance APIs for Kubernetes, out of tree — an
//! admission webhook server and the controllers that make the APIs work, in one process.
#![forbid(unsafe_code)]

pub mod admission;
pub use evictord_api as api;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod disruption;
pub mod drain;
pub mod interceptor;
pub mod kube_client;
pub mod metrics;
pub mod node_agent;
pub mod plugin;
pub mod recorder;
pub mod reference;
pub mod selector;
pub mod serve;
pub mod serving;
pub mod telemetry;
pub mod tls;
pub mod webhook_server;
