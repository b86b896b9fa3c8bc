//! The node maintenance controller (SPEC 3.3): stages, finalizer, cordon with restore, the drain
//! through EvictionRequests, per-node status and the `Drained` condition, and the Complete work.
//!
//! Pure decisions, table-tested beside their code:
//! - [`stages`]: what a maintenance's stage and deletion call for, `stageStatuses`, `Drained`;
//! - [`cordon`]: cordoning a node (remembering its previous flag) and restoring it;
//! - [`requests`]: which EvictionRequests to create or join while draining, and which to withdraw
//!   from or delete in Complete;
//! - [`pacing`]: when a maintenance's status is written (its progress at most every 5 s);
//! - [`admitted`]: the admission record and `Admitted` condition (SPEC 6.1), decided by
//!   [`admit`](crate::drain::admission::admit) in the [`admission`] loop;
//! - [`gather`]: the selected nodes and the whole-cluster input of
//!   [`plan_drain`](crate::drain::plan_drain) (drain targets, SPEC 3.4), from cache snapshots.
//!
//! The shell: [`reconciler`] (the kube-runtime controller, events, metrics) and [`writes`] (one
//! function per API write).

pub mod admission;
pub mod admitted;
pub mod context;
pub mod cordon;
pub mod deadlines;
pub mod exclusion;
pub mod gather;
pub mod gauges;
pub mod nodes;
pub mod pacing;
pub mod reconciler;
pub mod requests;
pub mod stages;
pub mod writes;
