//! Test fixtures: builders for plan entries, pods and maintenances, and a [`World`] that runs
//! [`plan_drain`] pass after pass, recording each output as the next input's status the way the
//! controller's status patches would.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::{DrainPlanEntry, NodeMaintenanceNodeStatus, PodType};

use super::{
    DrainInput, DrainOutput, DrainPod, MaintenanceInput, MaintenanceOutput, Stay, plan_drain,
};

/// `i32::MAX`, the highest priority.
pub const MAX: i32 = i32::MAX;

fn entry(pod_priority: i32, pod_type: PodType) -> DrainPlanEntry {
    DrainPlanEntry {
        pod_priority,
        pod_type,
        pod_selector: None,
    }
}

/// A `Default` entry.
pub fn d(p: i32) -> DrainPlanEntry {
    entry(p, PodType::Default)
}

/// A `DaemonSet` entry.
pub fn ds(p: i32) -> DrainPlanEntry {
    entry(p, PodType::DaemonSet)
}

/// A `Static` entry.
pub fn st(p: i32) -> DrainPlanEntry {
    entry(p, PodType::Static)
}

/// Adds `matchLabels` to an entry.
pub trait WithSelector {
    fn sel(self, labels: &[(&str, &str)]) -> Self;
}

impl WithSelector for DrainPlanEntry {
    fn sel(mut self, labels: &[(&str, &str)]) -> Self {
        self.pod_selector = Some(LabelSelector {
            match_labels: Some(label_map(labels)),
            match_expressions: None,
        });
        self
    }
}

pub fn label_map(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A pod under construction: `pod("p").on("one").priority(5000).ds().labels(&[..])`.
#[derive(Clone, Debug)]
pub struct PodBuilder {
    pub node: String,
    pub pod: DrainPod,
}

/// A running Default pod of priority 0 in namespace `default`, uid `uid-<name>`.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder {
        node: String::new(),
        pod: DrainPod {
            name: name.to_string(),
            namespace: "default".to_string(),
            uid: format!("uid-{name}"),
            ..DrainPod::default()
        },
    }
}

impl PodBuilder {
    pub fn on(mut self, node: &str) -> Self {
        self.node = node.to_string();
        self
    }
    pub fn priority(mut self, p: i32) -> Self {
        self.pod.priority = p;
        self
    }
    /// A DaemonSet pod (it leaves through `daemonset.apps.k8s.io` unless it [`Self::stays`]).
    pub fn ds(mut self) -> Self {
        self.pod.pod_type = PodType::DaemonSet;
        self
    }
    /// A static pod (it leaves through the node agent unless it [`Self::stays`]).
    pub fn static_pod(mut self) -> Self {
        self.pod.pod_type = PodType::Static;
        self
    }
    /// Nothing will remove the pod, for this reason.
    pub fn stays(mut self, why: Stay) -> Self {
        self.pod.stays = Some(why);
        self
    }
    /// Interceptors to come that nothing registers (SPEC 5.5).
    pub fn unregistered(mut self, names: &[&str]) -> Self {
        self.pod.unregistered = names.iter().map(|n| n.to_string()).collect();
        self
    }
    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.pod.labels = label_map(labels);
        self
    }
    pub fn requested(mut self) -> Self {
        self.pod.has_request = true;
        self
    }
    pub fn terminal(mut self) -> Self {
        self.pod.terminal = true;
        self
    }
    /// Drained by this behaviour (SPEC 6.2).
    pub fn behavior(mut self, b: crate::api::DrainBehavior) -> Self {
        self.pod.behavior = b;
        self
    }
    /// No controller owns it.
    pub fn unmanaged(mut self) -> Self {
        self.pod.unmanaged = true;
        self
    }
    /// It has an emptyDir volume.
    pub fn local_data(mut self) -> Self {
        self.pod.local_data = true;
        self
    }
}

/// `count` pods named `<prefix>-<i>` on `node` at `priority`, the first `requested` of them with
/// an EvictionRequest.
pub fn pods(
    prefix: &str,
    count: usize,
    node: &str,
    priority: i32,
    requested: usize,
) -> Vec<PodBuilder> {
    (0..count)
        .map(|i| {
            let p = pod(&format!("{prefix}-{i}")).on(node).priority(priority);
            if i < requested { p.requested() } else { p }
        })
        .collect()
}

/// A maintenance in stage Drain, created `created_s` seconds after the epoch.
pub fn nm(
    name: &str,
    created_s: i64,
    plan: Vec<DrainPlanEntry>,
    nodes: &[&str],
) -> MaintenanceInput {
    MaintenanceInput {
        name: name.to_string(),
        created: Timestamp::from_second(created_s).unwrap_or_default(),
        plan,
        drain_plan_position: None,
        node_statuses: Vec::new(),
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
    }
}

/// A cluster that evolves between passes.
#[derive(Clone, Debug, Default)]
pub struct World {
    pub input: DrainInput,
    pub last: DrainOutput,
}

impl World {
    pub fn new(maintenances: Vec<MaintenanceInput>) -> Self {
        World {
            input: DrainInput {
                maintenances,
                pods: BTreeMap::new(),
            },
            last: DrainOutput::default(),
        }
    }

    pub fn add(&mut self, pods: impl IntoIterator<Item = PodBuilder>) -> &mut Self {
        for p in pods {
            self.input.pods.entry(p.node).or_default().push(p.pod);
        }
        self
    }

    /// Removes the pods (evicted) whose name starts with `prefix`.
    pub fn evict(&mut self, prefix: &str) -> &mut Self {
        for pods in self.input.pods.values_mut() {
            pods.retain(|p| !p.name.starts_with(prefix));
        }
        self
    }

    /// Removes the first `n` pods whose name starts with `prefix`.
    pub fn evict_n(&mut self, prefix: &str, n: usize) -> &mut Self {
        let mut left = n;
        for pods in self.input.pods.values_mut() {
            pods.retain(|p| {
                let hit = left > 0 && p.name.starts_with(prefix);
                if hit {
                    left -= 1;
                }
                !hit
            });
        }
        self
    }

    /// Marks the first `n` pods whose name starts with `prefix` as having an EvictionRequest.
    pub fn request_n(&mut self, prefix: &str, n: usize) -> &mut Self {
        let mut left = n;
        for p in self.input.pods.values_mut().flatten() {
            if left > 0 && p.name.starts_with(prefix) {
                p.has_request = true;
                left -= 1;
            }
        }
        self
    }

    pub fn add_maintenance(&mut self, m: MaintenanceInput) -> &mut Self {
        self.input.maintenances.push(m);
        self
    }

    /// One pass; its output becomes the recorded status of the next.
    pub fn step(&mut self) -> &DrainOutput {
        let out = plan_drain(&self.input);
        for (m, o) in self.input.maintenances.iter_mut().zip(&out.maintenances) {
            m.drain_plan_position = Some(o.drain_plan_position);
            m.node_statuses = o.node_statuses.clone();
        }
        self.last = out;
        &self.last
    }

    pub fn out(&self, maintenance: &str) -> &MaintenanceOutput {
        match self
            .last
            .maintenances
            .iter()
            .find(|m| m.name == maintenance)
        {
            Some(m) => m,
            None => panic!("no output for {maintenance}"),
        }
    }

    pub fn status(&self, maintenance: &str, node: &str) -> &NodeMaintenanceNodeStatus {
        match self
            .out(maintenance)
            .node_statuses
            .iter()
            .find(|s| s.node_ref.name == node)
        {
            Some(s) => s,
            None => panic!("no status for node {node} in {maintenance}"),
        }
    }

    /// Asserts one node status: targets and message exactly, counts when given.
    #[track_caller]
    pub fn expect(
        &self,
        maintenance: &str,
        node: &str,
        targets: &[DrainPlanEntry],
        message: &str,
        counts: Option<(i32, i32)>,
    ) {
        let s = self.status(maintenance, node);
        assert_eq!(
            s.drain_targets, targets,
            "{maintenance} node {node}: drainTargets"
        );
        assert_eq!(
            s.drain_message, message,
            "{maintenance} node {node}: drainMessage"
        );
        if let Some((pending, evacuating)) = counts {
            assert_eq!(
                (s.pods_pending_evacuation, s.pods_evacuating),
                (pending, evacuating),
                "{maintenance} node {node}: (podsPendingEvacuation, podsEvacuating)"
            );
        }
    }
}
