//! One pod of the drain preview and the preview itself: what `plan` shows of a pod (its step and
//! plan entry, owner, interceptors, whether it leaves or stays and why, its drain behaviour and
//! what decides it, the facts `kubectl drain` checks) and what a drain has to remove. The
//! preview's order is [`preview`](super::preview)'s.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::api::{DrainBehavior, DrainPlanEntry, EvictionRequest, PodType, Registration};
use crate::cluster::CachedPod;
use crate::controller::eviction_request::{implicit_interceptors, target_interceptors};
use crate::drain::{DrainPod, Leaving};

/// One pod of the preview.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedPod {
    /// The plan position at which the controller asks for the pod, or starts waiting for it to
    /// complete (`None`: never, because the rules skip it or another maintenance holds the node
    /// back).
    pub step: Option<usize>,
    /// `Type ≤ priority` of that plan entry, for people.
    pub entry: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Node.
    pub node: String,
    /// Priority.
    pub priority: i32,
    /// Default, DaemonSet or Static.
    pub pod_type: PodType,
    /// `Kind/name` of the controller owner, if any.
    pub owner: Option<String>,
    /// The interceptors its EvictionRequest takes turns with, in order: the pod's own, then the
    /// implicit `daemonset.apps.k8s.io` or `kubelet.k8s.io` (the default one, last for every pod,
    /// is not listed).
    pub interceptors: Vec<String>,
    /// True when the pod leaves the node; false for DaemonSet and static pods that nothing will
    /// remove: they get a request but stay, and do not hold the drain up.
    pub leaves: bool,
    /// Why the pod stays, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stays: Option<String>,
    /// The HorizontalPodAutoscaler whose floor is raised before the pod leaves, with its target
    /// (`web-hpa (Deployment web)`; [`name_autoscalers`](super::autoscalers::name_autoscalers)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<String>,
    /// Its interceptors that no `EvictionInterceptor` registers (SPEC 5.5): each may hold the
    /// pod up to its heartbeat deadline (or the grace, under `enforce`). See
    /// [`Preview::mark_unregistered`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unregistered: Vec<String>,
    /// How the maintenances drain it (SPEC 6.2): `Drain` (asked to leave), `Skip` (never asked,
    /// stays, holds nothing) or `WaitCompleted` (never asked; the node is drained once it
    /// finished).
    pub behavior: DrainBehavior,
    /// The pod label or pod rule that decides its behaviour, when one does
    /// ([`decided_by`](super::drain_rules::decided_by)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// No controller recreates it once it is gone (no controller owner, not a mirror pod):
    /// `kubectl drain` refuses it without `--force`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unmanaged: bool,
    /// It has an `emptyDir` volume, whose data is lost when it leaves: `kubectl drain` refuses it
    /// without `--delete-emptydir-data`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local_data: bool,
    /// Its deletion has started.
    #[serde(skip)]
    pub terminating: bool,
}

/// The plugin cannot read evictord's flags: it assumes `daemonset.apps.k8s.io` runs, as it does
/// by default (`--daemonset-interceptor`, chart value `controller.daemonsetInterceptor`).
pub const ASSUMED_DAEMONSET_INTERCEPTOR: bool = true;

/// The drain preview.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// The drain plan as admission completes it.
    pub plan: Vec<DrainPlanEntry>,
    /// Every pod on the nodes, in the order the controller asks for them.
    pub pods: Vec<PlannedPod>,
}

impl Preview {
    /// Names, on each pod, the interceptors `registration` says no EvictionInterceptor registers.
    pub fn mark_unregistered(&mut self, registration: impl Fn(&str) -> Registration) {
        for p in &mut self.pods {
            p.unregistered = p
                .interceptors
                .iter()
                .filter(|n| registration(n) == Registration::NotRegistered)
                .cloned()
                .collect();
        }
    }

    /// The pods of each node that leave: what a drain has to remove (not those it waits to
    /// complete, nor those it skips).
    pub fn to_evict(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for p in self
            .pods
            .iter()
            .filter(|p| p.leaves && p.behavior == DrainBehavior::Drain)
        {
            out.entry(p.node.clone())
                .or_default()
                .insert(format!("{}/{}", p.namespace, p.name));
        }
        out
    }
}

/// `Default ≤ 1000000000`, with ` (podSelector)` when the entry has one.
pub fn entry_label(e: &DrainPlanEntry) -> String {
    let selector = if e.pod_selector.is_some() {
        " (podSelector)"
    } else {
        ""
    };
    format!("{} ≤ {}{selector}", e.pod_type, e.pod_priority)
}

/// `Kind/name` of the pod's controller owner.
pub fn owner_of(pod: &CachedPod) -> Option<String> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{}/{}", o.kind, o.name))
}

/// The preview's row of `pod`, asked for at plan position `step` of `plan` (`None`: never),
/// with its request (if any) and whether its node runs a node agent. Its behaviour is the
/// default (`Drain`): the preview sets the controller's.
pub fn planned_pod(
    pod: &CachedPod,
    step: Option<usize>,
    plan: &[DrainPlanEntry],
    request: Option<&EvictionRequest>,
    node_agent: bool,
) -> PlannedPod {
    let leaving = Leaving {
        daemonset_interceptor: ASSUMED_DAEMONSET_INTERCEPTOR,
        node_agent,
    };
    let drain = DrainPod::from_cached(pod, request, leaving);
    let implicit = implicit_interceptors(pod, node_agent, ASSUMED_DAEMONSET_INTERCEPTOR);
    let (mut interceptors, _) = target_interceptors(pod.interceptors(), &implicit, &[]);
    interceptors.pop(); // the default one, last for every pod
    let leaves = drain.leaves();
    PlannedPod {
        step,
        entry: step
            .and_then(|k| plan.get(k))
            .map(entry_label)
            .unwrap_or_else(|| "held by another maintenance".to_string()),
        namespace: drain.namespace,
        name: drain.name,
        node: pod.spec.node_name.clone().unwrap_or_default(),
        priority: drain.priority,
        pod_type: drain.pod_type,
        owner: owner_of(pod),
        interceptors,
        leaves,
        stays: drain.stays.map(|s| s.reason().to_string()),
        autoscaler: None,
        unregistered: Vec::new(),
        behavior: drain.behavior,
        decided_by: None,
        unmanaged: drain.unmanaged,
        local_data: drain.local_data,
        terminating: drain.terminating,
    }
}
