//! The interceptor SDK (SPEC 5.2): write an EvictionRequest interceptor as a small program.
//!
//! An interceptor implements [`Interceptor`]: given the EvictionRequest and its pod, it says how
//! far it got ([`Progress`]). The [`Runner`] does the protocol around it:
//!
//! - it watches EvictionRequests in every namespace (or one) and calls the interceptor only for
//!   requests whose `status.activeInterceptors` names it and that are neither `Evicted` nor
//!   `Canceled` (so work stops when a request is canceled or the pod is evicted);
//! - it writes the interceptor's own `status.interceptors[]` entry ([`next_write`], pure): the
//!   `startTime` with the first heartbeat, heartbeats no faster than the minimum interval and well
//!   before the deadline ([`heartbeat_due`]), the progress message, `expectedFinishTime` and,
//!   once, `completionTime`;
//! - each write is one JSON patch of the `status` subresource that tests the resourceVersion and
//!   the active interceptor and replaces only the interceptor's own entry, so it passes the
//!   webhook's rules S2–S4 and never clobbers a concurrent write (a conflict is retried);
//! - it keeps no state in memory: everything is read back from the request's status, so a
//!   restarted process carries on where the last one stopped.
//!
//! The shipped interceptors — `deployment.apps.k8s.io` ([`deployment`]) and
//! `daemonset.apps.k8s.io` ([`daemonset`]) — are built on this SDK and on the Kubernetes API only.

pub mod daemonset;
pub mod deployment;
mod progress;
mod runner;

pub use progress::{
    EntryPatch, Progress, Settings, heartbeat_due, next_wakeup, next_write, whole_seconds,
};
pub use runner::{BoxError, Error, Interceptor, Runner};
