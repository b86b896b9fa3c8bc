//! Test support: a real control plane (etcd + kube-apiserver, envtest-style) shared by the
//! tests of one test binary, the `evictord` binary running against it, and fixtures.
#![allow(dead_code)]

pub mod control_plane;
pub mod evictord;
pub mod fixtures;
pub mod tools;
pub mod wait;

#[allow(unused_imports)]
pub use control_plane::{TestCluster, cluster};
#[allow(unused_imports)]
pub use evictord::Evictord;
