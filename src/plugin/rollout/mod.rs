//! `kubectl evictord rollout` (SPEC 6.3): rolling a pool of nodes a few at a time through a
//! per-node step, with the state in the cluster. The pure part: the objects and their names
//! ([`naming`]), the record of the command's options and whether a run may resume a rollout
//! ([`record`]), the step record ([`step`]), who drives a rollout ([`driver`]), where each node
//! is and what to do next ([`phase`]), the batches `plan` previews and the drain `drain` refuses
//! ([`batches`]), and the words at the end ([`summary`]).
//!
//! A rollout is a MaintenanceBudget named after it over its nodes (`maxUnavailable` from the
//! command) and one NodeMaintenance per node in Drain, all labelled `evictord.dev/rollout`. The
//! controller admits the maintenances as the budget allows; the command runs each drained node's
//! step, waits for the node to be back and moves its maintenance to Complete, which frees room for
//! the next one. At the end it deletes its budget (it would keep limiting other maintenances of
//! these nodes) and its maintenances (so that the name can be used again).

pub mod batches;
pub mod driver;
pub mod naming;
pub mod phase;
pub mod record;
pub mod step;
pub mod summary;
pub mod turn;
