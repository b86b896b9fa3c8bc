//! What a drain of the pool cost, sampled every 100 ms from the played kubelet's pod cache (a
//! watch, not lists): for each workload its available pods (Running, Ready, not terminating —
//! what a Service would send traffic to and what the disruption controller counts as healthy)
//! against its desired count, the replica-seconds below it, and whether its PodDisruptionBudget's
//! floor was broken; the pods on the drained nodes, and when each left; and the pool's nodes
//! ([`super::nodes`]: how many were unavailable at once, cordoned or not `Ready`, and how many a
//! maintenance held).
//!
//! Definitions (the report quotes them):
//! - *desired*: the workload's replica count before the drain (Deployments and StatefulSets
//!   `spec.replicas`, the DaemonSet its `desiredNumberScheduled`, a bare pod 1);
//! - *unavailability*: Σ over samples of max(0, desired − available) × the time to the next
//!   sample, in replica-seconds;
//! - *floor broken*: available < `minAvailable`, or desired − available > `maxUnavailable`;
//! - *pods to drain*: the pods (not the DaemonSet's) seen on a drained node before that node was
//!   given back (uncordoned after its cordon, as a rollout or a script's `kubectl uncordon` does):
//!   a pod that lands on a node once it is back is not one to drain. Each that disappears from
//!   its drained node is a *departure* (a pod moved twice, from one drained node to another not
//!   drained yet, departs twice).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use evictord::api::NodeMaintenance;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::Store;
use serde::Serialize;

use super::nodes::{NodeCounts, NodeFigures, NodeWatch, held_nodes};
use super::schedule::is_ready;
use super::workloads::{Budget, Kind, ROW_LABEL, WORKLOAD_LABEL};

/// True when the pod serves: Running, Ready and not terminating.
pub fn available(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && is_ready(pod)
}

/// True when `available` pods break the floor of `budget` for a workload of `desired`.
pub fn floor_broken(budget: Budget, desired: i32, available: i32) -> bool {
    match budget {
        Budget::None => false,
        Budget::MinAvailable(m) => available < m,
        Budget::MaxUnavailable(u) => desired - available > u,
    }
}

/// A workload followed by the sampler.
#[derive(Clone, Debug, Serialize)]
pub struct Tracked {
    pub name: String,
    pub row: String,
    pub kind: Kind,
    pub desired: i32,
    pub budget: Budget,
    /// Under the zero-downtime goal (see [`super::workloads::under_goal`]).
    pub goal: bool,
}

/// One workload's availability over the samples (a pure accumulator).
#[derive(Clone, Debug, Serialize)]
pub struct Availability {
    pub desired: i32,
    pub min_available: i32,
    pub unavailable_replica_seconds: f64,
    pub floor_broken_seconds: f64,
    pub floor_broken_samples: usize,
    /// (seconds since the start, available) at the first sample and at every change.
    pub changes: Vec<(f64, i32)>,
    #[serde(skip)]
    last: Option<(f64, i32)>,
}

impl Availability {
    pub fn new(desired: i32) -> Self {
        Self {
            desired,
            min_available: i32::MAX,
            unavailable_replica_seconds: 0.0,
            floor_broken_seconds: 0.0,
            floor_broken_samples: 0,
            changes: Vec::new(),
            last: None,
        }
    }

    /// Takes the sample at `t` seconds: the previous sample's state is held until `t`.
    pub fn observe(&mut self, t: f64, available: i32, budget: Budget) {
        if let Some((t0, a0)) = self.last {
            let dt = (t - t0).max(0.0);
            self.unavailable_replica_seconds += f64::from((self.desired - a0).max(0)) * dt;
            if floor_broken(budget, self.desired, a0) {
                self.floor_broken_seconds += dt;
            }
        }
        if floor_broken(budget, self.desired, available) {
            self.floor_broken_samples += 1;
        }
        if self.last.is_none_or(|(_, a0)| a0 != available) {
            self.changes.push((t, available));
        }
        self.min_available = self.min_available.min(available);
        self.last = Some((t, available));
    }

    /// The fewest available ÷ desired (1 when nothing was desired).
    pub fn min_ratio(&self) -> f64 {
        if self.desired <= 0 || self.min_available == i32::MAX {
            1.0
        } else {
            f64::from(self.min_available) / f64::from(self.desired)
        }
    }
}

/// One workload's figures.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadFigures {
    #[serde(flatten)]
    pub tracked: Tracked,
    pub min_ratio: f64,
    #[serde(flatten)]
    pub availability: Availability,
}

/// The totals of one sample.
#[derive(Clone, Debug, Serialize)]
pub struct TotalSample {
    pub t: f64,
    /// Pods (not the DaemonSet's) on the drained nodes.
    pub pods_on_drained: usize,
    pub daemonset_pods_on_drained: usize,
    /// Σ max(0, desired − available) over the workloads.
    pub replicas_below_desired: i64,
    /// Workloads whose PodDisruptionBudget floor is broken.
    pub floors_broken: usize,
    /// The pool's nodes.
    pub nodes: NodeCounts,
}

/// A pod that left a drained node.
#[derive(Clone, Debug, Serialize)]
pub struct Departure {
    pub t: f64,
    pub pod: String,
    pub workload: String,
    pub row: String,
    pub node: String,
}

/// What the sampler saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Samples {
    pub samples: usize,
    pub seconds: f64,
    pub workloads: Vec<WorkloadFigures>,
    #[serde(skip)]
    pub totals: Vec<TotalSample>,
    /// Pods that left the drained nodes (not the DaemonSet's), in order.
    #[serde(skip)]
    pub departures: Vec<Departure>,
    /// Pods (not the DaemonSet's) still on the drained nodes at the last sample.
    pub left_on_drained: Vec<String>,
    pub daemonset_pods_left_on_drained: usize,
    /// Pods (not the DaemonSet's) on the drained nodes at the first sample.
    pub pods_on_drained_at_start: usize,
    /// The pool's nodes.
    pub nodes: NodeFigures,
}

impl Samples {
    /// Workloads under the goal that lost availability.
    pub fn goal_misses(&self) -> Vec<&WorkloadFigures> {
        self.workloads
            .iter()
            .filter(|w| w.tracked.goal && w.availability.unavailable_replica_seconds > 0.0)
            .collect()
    }

    /// Workloads whose PodDisruptionBudget floor was broken at some sample.
    pub fn floors_broken(&self) -> Vec<&WorkloadFigures> {
        self.workloads
            .iter()
            .filter(|w| w.availability.floor_broken_samples > 0)
            .collect()
    }

    /// Departures ÷ the pods on the drained nodes at the start (`None` when there were none):
    /// 1.0 when every pod moved once.
    pub fn moves_per_pod(&self) -> Option<f64> {
        (self.pods_on_drained_at_start > 0)
            .then(|| self.departures.len() as f64 / self.pods_on_drained_at_start as f64)
    }
}

/// What the sampler reads: the pods of the pool's namespace, the pool's nodes, and the
/// NodeMaintenances when they are watched (`None`: no held count).
pub struct Sources {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub maintenances: Option<Store<NodeMaintenance>>,
}

/// A running sampler.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Samples>,
    /// Tasks that feed the sources (stopped with the sampler).
    feeding: Vec<tokio::task::JoinHandle<()>>,
}

/// Samples `sources` every `every` for at most `bound`, until [`Sampler::stop`]; `feeding` are
/// the tasks that feed sources of the sampler's own, stopped with it.
pub fn sample(
    sources: Sources,
    tracked: Vec<Tracked>,
    drained: BTreeSet<String>,
    every: Duration,
    bound: Duration,
    feeding: Vec<tokio::task::JoinHandle<()>>,
) -> Sampler {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let task = tokio::spawn(async move {
        let mut state = State::new(tracked, drained);
        let start = Instant::now();
        let rounds = (bound.as_secs_f64() / every.as_secs_f64()).ceil() as usize;
        for _ in 0..rounds.max(1) {
            let held = sources
                .maintenances
                .as_ref()
                .map(|m| held_nodes(&m.state()));
            state.take(
                start.elapsed().as_secs_f64(),
                &sources.pods.state(),
                &sources.nodes.state(),
                held.as_ref(),
            );
            if s.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(every).await;
        }
        state.finish()
    });
    Sampler {
        stop,
        task,
        feeding,
    }
}

impl Sampler {
    /// Takes a last sample and returns what was seen.
    pub async fn stop(self) -> Samples {
        self.stop.store(true, Ordering::Release);
        let samples = self.task.await.unwrap_or_default();
        for f in &self.feeding {
            f.abort();
        }
        samples
    }
}

struct State {
    tracked: Vec<Tracked>,
    index: HashMap<String, usize>,
    availability: Vec<Availability>,
    drained: BTreeSet<String>,
    /// Pods seen on drained nodes, by UID: (pod, workload, row, node); removed when departed.
    on_drained: HashMap<String, (String, String, String, String)>,
    nodes: NodeWatch,
    out: Samples,
}

impl State {
    fn new(tracked: Vec<Tracked>, drained: BTreeSet<String>) -> Self {
        let index = tracked
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let availability = tracked
            .iter()
            .map(|t| Availability::new(t.desired))
            .collect();
        Self {
            tracked,
            index,
            availability,
            nodes: NodeWatch::new(drained.clone()),
            drained,
            on_drained: HashMap::new(),
            out: Samples::default(),
        }
    }

    fn take(
        &mut self,
        t: f64,
        pods: &[Arc<Pod>],
        nodes: &[Arc<Node>],
        held: Option<&BTreeSet<String>>,
    ) {
        let node_counts = self.nodes.observe(t, nodes, held);
        let mut counts = vec![0i32; self.tracked.len()];
        let mut present = BTreeSet::new();
        let (mut on_drained, mut ds_on_drained) = (0, 0);
        for p in pods {
            let labels = p.metadata.labels.as_ref();
            let workload = labels.and_then(|l| l.get(WORKLOAD_LABEL));
            let i = workload.and_then(|w| self.index.get(w)).copied();
            if available(p)
                && let Some(i) = i
            {
                counts[i] += 1;
            }
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_ref());
            let Some(node) = node.filter(|n| self.drained.contains(*n)) else {
                continue;
            };
            if i.is_some_and(|i| self.tracked[i].kind == Kind::DaemonSet) {
                ds_on_drained += 1;
                continue;
            }
            let uid = p.metadata.uid.clone().unwrap_or_default();
            // A pod that landed on the node once it was back is not one to drain.
            if self.nodes.given_back(node) && !self.on_drained.contains_key(&uid) {
                continue;
            }
            on_drained += 1;
            present.insert(uid.clone());
            self.on_drained.entry(uid).or_insert_with(|| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    workload.cloned().unwrap_or_default(),
                    labels
                        .and_then(|l| l.get(ROW_LABEL))
                        .cloned()
                        .unwrap_or_default(),
                    node.clone(),
                )
            });
        }
        let gone: Vec<String> = self
            .on_drained
            .keys()
            .filter(|uid| !present.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            if let Some((pod, workload, row, node)) = self.on_drained.remove(&uid) {
                self.out.departures.push(Departure {
                    t,
                    pod,
                    workload,
                    row,
                    node,
                });
            }
        }
        let (mut below, mut broken) = (0i64, 0);
        for (i, w) in self.tracked.iter().enumerate() {
            self.availability[i].observe(t, counts[i], w.budget);
            below += i64::from((w.desired - counts[i]).max(0));
            if floor_broken(w.budget, w.desired, counts[i]) {
                broken += 1;
            }
        }
        self.out.totals.push(TotalSample {
            t,
            pods_on_drained: on_drained,
            daemonset_pods_on_drained: ds_on_drained,
            replicas_below_desired: below,
            floors_broken: broken,
            nodes: node_counts,
        });
        if self.out.samples == 0 {
            self.out.pods_on_drained_at_start = on_drained;
        }
        self.out.samples += 1;
        self.out.seconds = t;
        self.out.daemonset_pods_left_on_drained = ds_on_drained;
    }

    fn finish(mut self) -> Samples {
        let mut left: Vec<String> = self.on_drained.values().map(|v| v.0.clone()).collect();
        left.sort();
        self.out.left_on_drained = left;
        self.out.nodes = self.nodes.finish();
        self.out.workloads = self
            .tracked
            .into_iter()
            .zip(self.availability)
            .map(|(tracked, availability)| WorkloadFigures {
                tracked,
                min_ratio: availability.min_ratio(),
                availability,
            })
            .collect();
        self.out
    }
}
