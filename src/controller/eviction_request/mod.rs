//! The eviction request controller (SPEC 2.3), pure part: what to write, which pod to evict and
//! when to look again, as a function of the request, the cached pod and the time.
//!
//! - [`decide`] walks SPEC 2.3 steps 1–8 in order and returns a [`Decision`];
//! - [`after_eviction`] folds the result of an Eviction API call back into the status;
//! - [`backoff`] derives the retry schedule of failed evictions from the status, so that it
//!   survives restarts;
//! - [`deadline`] says when an interceptor's heartbeat expires and when the controller, acting
//!   as `imperative-eviction.k8s.io`, must heartbeat again.
//!
//! The shell applies a decision in this order: labels (metadata patch), status (one patch of
//! the complete status, with the request's `resourceVersion` so that a concurrent interceptor
//! write makes it fail and the request is reconciled again), then the action, then events, then
//! the requeue. It performs the action only when the status patch succeeded, and calls
//! [`after_eviction`] with the request as the status patch returned it, applying that decision
//! the same way. Requeues are "at the latest": when two decisions are applied in one
//! reconciliation, the earliest requeue wins.

pub mod backoff;
pub mod bridged;
pub mod deadline;
pub mod decide;
pub mod decision;
pub mod imperative;
pub mod reconciler;
pub mod retention;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod walk;

pub use backoff::{ALLOWED_RETRY, backoff, next_attempt_at, retry_at, retry_wait};
pub use bridged::{BridgedRequester, bridged_requester};
pub use deadline::heartbeat_deadline_at;
pub use decide::{
    Surroundings, decide, decide_on_node, decide_with, implicit_interceptors, target_interceptors,
};
pub use decision::{
    Action, DecideSettings, Decision, EventSpec, EventType, EvictionOutcome, ProcessedReason,
};
pub use imperative::{
    COLLECTION_GRACE, after_eviction, drop_told_evicted, hold_imperative_selection,
    leave_to_collector, tell_selection_with_outcome,
};
pub use retention::{Retention, retention};
