//! The cluster as the webhook and the controllers see it: trimmed watch caches (kube-rs
//! reflectors) shared by both, and the read-only [`ClusterView`] that the pure admission rules
//! and decisions consult.

mod authz;
pub mod budget;
mod cache;
pub mod identity;
mod labels;
mod live;
mod pod;
mod tombstones;
mod view;

pub use authz::Authorizer;
pub use budget::{
    Allowance, Budget, Budgets, HeldName, allowance, blocking_budgets, held_names_note,
};
pub use cache::{Caches, RESYNC, Watched, announced};
pub use labels::{CompactLabels, PodLabels};
pub use live::{LiveContext, LiveView, RegistrationView, prepare};
pub(crate) use pod::pod_resource;
pub use pod::{CachedPod, CachedPodSpec, CachedPodStatus, pod_type};
pub use tombstones::{TOMBSTONE_TTL, Tombstone, Tombstones, miss_is_final};
pub use view::{
    AccessCheck, Authorization, ClusterView, Lookup, Lookups, PodLookup, StaticView, registration,
};
