//! Test support: a real control plane (etcd + kube-apiserver, envtest-style) shared by the
//! tests of one test binary, the `evictord` binary running against it, and fixtures.
#![allow(dead_code)]

pub mod control_plane;
pub mod evictord;
pub mod fixtures;
pub mod tools;

pub use control_plane::{TestCluster, cluster};
pub use evictord::Evictord;
