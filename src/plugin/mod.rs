//! The pure core of the kubectl plugin `kubectl evictord`: what it shows, decided from objects
//! it has read, with no client and no terminal. The binary (`src/bin/kubectl-evictord`) reads the
//! cluster, calls these functions and draws their result.
//!
//! - [`autoscalers`]: the HorizontalPodAutoscaler whose floor is raised before a planned pod
//!   leaves, found with the HPA interceptor's own functions;
//! - [`maintenance`]: the NodeMaintenance `drain` creates, its name, and the drain deadline
//!   `drain` and `rollout` write (`--drain-deadline`, `--deadline-policy`);
//! - [`preview`]: the drain preview of `plan` (and the pods `drain` expects to evict), computed
//!   with the controller's own gathering, pod rules and
//!   [`plan_drain`](crate::drain::plan_drain), so the order shown is the order in which the
//!   controller asks pods to leave, and the pods skipped or waited for are the ones it skips or
//!   waits for;
//! - [`planned`]: one pod of the preview (its step, behaviour, what `kubectl drain` checks) and
//!   what a drain has to remove;
//! - [`drain_rules`]: which pod label or pod rule decides a pod's behaviour, and the namespaces'
//!   labels rules read;
//! - [`safety`]: `kubectl drain`'s checks `drain` and `rollout` make (`--force`,
//!   `--delete-emptydir-data`);
//! - [`deadline`]: drain deadlines in words (time left, then exceeded);
//! - [`blockers`]: the words for what holds a drain or a request up, per pod and per node;
//! - [`progress`]: one frame of a drain's progress (bar counts and blocker lines) and the plain
//!   lines printed when there is no terminal;
//! - [`report`]: what `plan` prints (pods, blocking budgets, covering maintenances);
//! - [`requesting`]: the request `evict` creates and the requester lists it writes;
//! - [`rollout`]: `rollout`'s objects, step records, resume rules and per-node phases, the batches
//!   `plan` previews with the controller's admission, and the drain `drain` refuses;
//! - [`status`]: the rows of the `status` tables;
//! - [`errors`]: the plugin's errors, and how API failures read to a person.

pub mod autoscalers;
pub mod blockers;
pub mod deadline;
pub mod drain_rules;
pub mod errors;
pub mod maintenance;
pub mod planned;
pub mod preview;
pub mod progress;
pub mod report;
pub mod requesting;
pub mod rollout;
pub mod safety;
pub mod status;

#[cfg(test)]
mod fixtures;

pub use errors::{Error, Result};

/// The requester name `kubectl evictord evict` uses unless told otherwise.
pub const PLUGIN_REQUESTER: &str = "kubectl.evictord.dev";
