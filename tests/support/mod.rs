//! Test support: a real control plane (etcd + kube-apiserver, envtest-style) shared by the
//! tests of one test binary, the `evictord` binary running against it, and fixtures.
#![allow(dead_code)]
// The control plane and watchdogs outlive the handles on purpose: the watchdog stops them when the
// test binary exits, and init reaps the orphans.
#![allow(clippy::zombie_processes)]

pub mod apiserver;
pub mod audit;
pub mod budget;
pub mod chaos;
pub mod control_plane;
pub mod daemonset;
pub mod endpoints;
pub mod evictord;
pub mod fixtures;
pub mod hpa;
pub mod interceptor;
pub mod kubelet;
pub mod node_agent;
pub mod plugin;
pub mod pool;
pub mod process;
pub mod soak;
pub mod static_kubelet;
pub mod surge;
pub mod tls_client;
pub mod tools;
pub mod wait;

#[allow(unused_imports)]
pub use control_plane::{TestCluster, cluster};
#[allow(unused_imports)]
pub use evictord::Evictord;
