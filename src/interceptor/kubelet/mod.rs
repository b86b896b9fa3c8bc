//! `kubelet.k8s.io`: the interceptor for the static pods of one node, served by `evictord
//! node-agent` ([`crate::node_agent`])
//! (SPEC 5.3; seed 001, "kubelet: Static Pods", NodeMaintenanceAwareKubelet).
//!
//! Run as a DaemonSet with the kubelet's static pod directory mounted, the agent announces
//! itself on its Node (annotation [`crate::api::NODE_AGENT_ANNOTATION`], so the eviction request
//! controller gives the node's mirror pods this interceptor) and:
//!
//! - serves `kubelet.k8s.io` with the SDK's [`crate::interceptor::Runner`] for the mirror pods of
//!   its node ([`interceptor`]): a pod that a NodeMaintenance in Drain targets has its manifest
//!   moved out of the kubelet's directory into the held directory, which records the
//!   maintenance ([`held`], [`store`]); the kubelet then stops the pod and deletes its mirror pod,
//!   and a restarted kubelet does not start it (the manifest is not in its directory);
//! - puts every held manifest back once no maintenance holds the node
//!   (`drain::holds::holders`: Complete, or the maintenance deleted), on a watch of
//!   NodeMaintenances and a periodic check ([`keeper`]); reports, and never overwrites, a
//!   manifest someone else changed or removed meanwhile.
//!
//! The held directory is the only state: a restarted agent reads it and carries on. The
//! decisions are pure ([`decide`], [`held`], [`manifest`]); the filesystem steps ([`store`])
//! and the API calls ([`interceptor`], [`keeper`], [`crate::node_agent`]) are thin shells. Built on the SDK,
//! the shared pure modules and the Kubernetes API only (convention 16).

pub mod decide;
pub mod held;
pub mod interceptor;
pub mod keeper;
pub mod manifest;
pub mod report;
pub mod store;

use std::time::Duration;

/// How often an active request is looked at again while its manifest is held (the kubelet
/// removing the mirror pod is what ends it).
pub const POLL: Duration = Duration::from_secs(2);

/// Errors of the node agent's API calls and filesystem steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{0}: {1}")]
    Api(String, #[source] kube::Error),
    /// A filesystem step failed.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// A blocking filesystem task did not finish.
    #[error("filesystem task: {0}")]
    Task(#[from] tokio::task::JoinError),
}
