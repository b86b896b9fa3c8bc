//! Resolution of intersecting maintenances (SPEC 3.4): plan positions, each node's effective
//! targets, the per-node messages, and the deadlock breaker.
//!
//! One call sees the whole cluster and iterates to a fixed point: compute every maintenance's own
//! targets and every node's effective targets, advance each maintenance all of whose nodes are
//! satisfied, and repeat, so that entries with nothing to evict are passed in one call. Positions
//! and effective targets only grow, so the loop ends; a bound guards it anyway.
//!
//! Deadlocks: with label selectors two maintenances can have incomparable targets on a shared
//! node. Their meet is then below both, so neither would ever see its own targets reached there
//! and both would wait forever. The node then follows the oldest of them (the newer ones are
//! fast-forwarded there, as SPEC 3.4 already does for maintenances created late), reported with a
//! `DrainDeadlockResolved` event. The same happens to a longer cycle of maintenances waiting on
//! each other through different nodes.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{DrainBehavior, NodeMaintenanceNodeStatus, NodeReference, PodType};

use super::messages::{listed, with_rules, with_staying, with_unregistered};
use super::targets::{TargetSet, target_set_at};
use super::{DrainEvent, DrainInput, DrainOutput, DrainPod, MaintenanceOutput, PodRef};

/// Decides plan positions, node statuses, requests and events for every maintenance in stage
/// Drain. See the module docs and SPEC 3.4.
///
/// # Guarantees
/// - A node's targets never move below what any recorded status shows for it.
/// - A maintenance only advances when each of its nodes has effective targets covering its own
///   and no non-terminal pod that can leave matching them remains.
/// - Output maintenances are in input order; node statuses in the order of their `nodes`.
pub fn plan_drain(input: &DrainInput) -> DrainOutput {
    let mut state = State::new(input);
    let start_k = state.k.clone();
    let mut extra_events: Vec<Vec<DrainEvent>> = vec![Vec::new(); input.maintenances.len()];
    let bound = state.iteration_bound();
    for _ in 0..bound {
        state.evaluate();
        if state.advance() {
            continue;
        }
        if let Some((node, winner)) = state.local_deadlock().or_else(|| state.cycle_deadlock()) {
            state.follow(&node, winner);
            for &m in state.selecting(&node) {
                extra_events[m].push(DrainEvent::DeadlockResolved {
                    node: node.clone(),
                    winner: input.maintenances[winner].name.clone(),
                });
            }
            continue;
        }
        break;
    }
    state.evaluate();
    let maintenances = (0..input.maintenances.len())
        .map(|m| {
            let mut out = state.output(m);
            if start_k[m] != state.k[m] {
                out.events.insert(
                    0,
                    DrainEvent::PlanAdvanced {
                        from: start_k[m],
                        to: state.k[m],
                    },
                );
            }
            out.events.append(&mut extra_events[m]);
            out
        })
        .collect();
    DrainOutput { maintenances }
}

/// Why a maintenance cannot advance.
enum Blocker {
    /// This node of `owner` still has pods to evict.
    Node { node: String, owner: usize },
    /// This maintenance is at the end of its plan and holds the node back.
    Done(usize),
    /// These maintenances wait on each other.
    Cycle(Vec<usize>),
}

struct State<'a> {
    input: &'a DrainInput,
    /// Input indices, oldest first (creation time, then name).
    by_age: Vec<usize>,
    /// Position in `by_age` of each maintenance.
    age: Vec<usize>,
    /// Selected nodes of each maintenance, deduplicated, in input order.
    nodes: Vec<Vec<&'a str>>,
    /// Maintenances selecting each node, oldest first.
    selecting: BTreeMap<&'a str, Vec<usize>>,
    /// Plan position of each maintenance.
    k: Vec<usize>,
    /// What each node reached so far (recorded statuses, then this call's progress).
    reached: BTreeMap<&'a str, TargetSet>,
    /// Own targets of each maintenance at its position (filled by `evaluate`).
    own: Vec<TargetSet>,
    /// Effective targets of each node (filled by `evaluate`).
    eff: BTreeMap<&'a str, TargetSet>,
    /// Nodes with no non-terminal pod that can leave matching their effective targets.
    finished: BTreeSet<&'a str>,
}

impl<'a> State<'a> {
    fn new(input: &'a DrainInput) -> Self {
        let ms = &input.maintenances;
        let mut by_age: Vec<usize> = (0..ms.len()).collect();
        by_age.sort_by(|&a, &b| (ms[a].created, &ms[a].name).cmp(&(ms[b].created, &ms[b].name)));
        let mut age = vec![0; ms.len()];
        for (rank, &m) in by_age.iter().enumerate() {
            age[m] = rank;
        }
        let nodes: Vec<Vec<&str>> = ms
            .iter()
            .map(|m| {
                let mut seen = BTreeSet::new();
                m.nodes
                    .iter()
                    .map(String::as_str)
                    .filter(|n| seen.insert(*n))
                    .collect()
            })
            .collect();
        let mut selecting: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &m in &by_age {
            for &n in &nodes[m] {
                selecting.entry(n).or_default().push(m);
            }
        }
        let mut reached: BTreeMap<&str, TargetSet> = BTreeMap::new();
        for (m, mi) in ms.iter().enumerate() {
            for status in &mi.node_statuses {
                // Only nodes still selected count: a status of another node says nothing here.
                if let Some(&n) = nodes[m].iter().find(|n| **n == status.node_ref.name) {
                    let r = reached.entry(n).or_default();
                    *r = r.join(&TargetSet::from_entries(&status.drain_targets));
                }
            }
        }
        let k = ms
            .iter()
            .map(|m| {
                usize::try_from(m.drain_plan_position.unwrap_or(0))
                    .unwrap_or(0)
                    .min(last_index(m.plan.len()))
            })
            .collect();
        State {
            input,
            by_age,
            age,
            nodes,
            selecting,
            k,
            reached,
            own: Vec::new(),
            eff: BTreeMap::new(),
            finished: BTreeSet::new(),
        }
    }

    /// Each iteration advances a position or strictly raises a node's targets towards some
    /// maintenance's own targets; this bounds how often that can happen.
    fn iteration_bound(&self) -> usize {
        let entries: usize = self
            .input
            .maintenances
            .iter()
            .map(|m| m.plan.len() + 1)
            .sum();
        entries
            .saturating_mul(self.selecting.len() + 1)
            .saturating_add(2)
    }

    fn selecting(&self, node: &str) -> &[usize] {
        self.selecting.get(node).map_or(&[], Vec::as_slice)
    }

    fn pods(&self, node: &str) -> &'a [DrainPod] {
        self.input.pods.get(node).map_or(&[], Vec::as_slice)
    }

    fn evaluate(&mut self) {
        self.own = (0..self.input.maintenances.len())
            .map(|m| target_set_at(&self.input.maintenances[m].plan, self.k[m]))
            .collect();
        self.eff.clear();
        self.finished.clear();
        for (&n, ms) in &self.selecting {
            let meet = ms
                .iter()
                .map(|&m| self.own[m].clone())
                .reduce(|a, b| a.meet(&b))
                .unwrap_or_default();
            let eff = match self.reached.get(n) {
                Some(r) => r.join(&meet),
                None => meet,
            };
            if !self.pods(n).iter().any(|p| blocks(p, &eff)) {
                self.finished.insert(n);
            }
            self.eff.insert(n, eff);
        }
    }

    fn eff(&self, node: &str) -> TargetSet {
        self.eff.get(node).cloned().unwrap_or_default()
    }

    /// The node has effective targets at least `m`'s own and has finished them.
    fn satisfied_on(&self, m: usize, node: &str) -> bool {
        self.finished.contains(node) && self.eff(node).covers(&self.own[m])
    }

    fn satisfied(&self, m: usize) -> bool {
        self.nodes[m].iter().all(|n| self.satisfied_on(m, n))
    }

    fn at_end(&self, m: usize) -> bool {
        self.k[m] >= last_index(self.input.maintenances[m].plan.len())
    }

    /// Advances every maintenance whose nodes are all satisfied; true when any did. Each decision
    /// rests on its own nodes only, so advancing them together is the same as one by one.
    fn advance(&mut self) -> bool {
        let ready: Vec<usize> = (0..self.k.len())
            .filter(|&m| !self.at_end(m) && self.satisfied(m))
            .collect();
        for &m in &ready {
            self.k[m] += 1;
        }
        if !ready.is_empty() {
            for (n, eff) in &self.eff {
                self.reached.insert(n, eff.clone());
            }
        }
        !ready.is_empty()
    }

    /// A finished node none of whose maintenances is covered by its effective targets: their
    /// targets are incomparable, so none of them can ever advance through it.
    fn local_deadlock(&self) -> Option<(String, usize)> {
        self.selecting.iter().find_map(|(&n, ms)| {
            let eff = self.eff(n);
            let stuck = ms.len() > 1
                && self.finished.contains(n)
                && ms.iter().all(|&m| !eff.covers(&self.own[m]));
            stuck.then(|| (n.to_string(), ms[0]))
        })
    }

    /// Maintenances waiting on each other through different nodes: the oldest of them wins on its
    /// first node where it is held back.
    fn cycle_deadlock(&self) -> Option<(String, usize)> {
        self.by_age.iter().find_map(|&m| {
            if self.satisfied(m) {
                return None;
            }
            let Blocker::Cycle(ms) = self.blocker(m) else {
                return None;
            };
            let winner = ms.into_iter().min_by_key(|&x| self.age[x])?;
            let node = self.nodes[winner]
                .iter()
                .find(|n| !self.eff(n).covers(&self.own[winner]))?;
            Some((node.to_string(), winner))
        })
    }

    /// Raises the node to the targets of `winner` (which never lowers anything).
    fn follow(&mut self, node: &str, winner: usize) {
        if let Some(&n) = self.selecting.keys().find(|n| **n == node) {
            let raised = self.eff(n).join(&self.own[winner]);
            self.reached.insert(n, raised);
        }
    }

    /// Why `m` cannot advance: first a node of its own that still evacuates, else a maintenance
    /// holding one of its nodes back, followed to whatever that one waits for.
    fn blocker(&self, m: usize) -> Blocker {
        let mut chain = vec![m];
        let mut current = m;
        loop {
            if let Some(n) = self.nodes[current]
                .iter()
                .find(|n| !self.finished.contains(**n))
            {
                return Blocker::Node {
                    node: n.to_string(),
                    owner: current,
                };
            }
            let held = self.nodes[current]
                .iter()
                .find(|n| !self.eff(n).covers(&self.own[current]));
            let Some(limiter) = held.and_then(|n| self.limiter(current, n)) else {
                return Blocker::Done(current);
            };
            if chain.contains(&limiter) {
                return Blocker::Cycle(chain);
            }
            chain.push(limiter);
            current = limiter;
        }
    }

    /// The maintenance holding `node` below `m`'s own targets: one whose own targets do not cover
    /// `m`'s but do cover the node's (a fast-forwarded maintenance holds nothing back), the least
    /// powerful such, oldest first.
    fn limiter(&self, m: usize, node: &str) -> Option<usize> {
        let eff = self.eff(node);
        let others: Vec<usize> = self
            .selecting(node)
            .iter()
            .copied()
            .filter(|&x| x != m && !self.own[x].covers(&self.own[m]))
            .collect();
        let binding: Vec<usize> = others
            .iter()
            .copied()
            .filter(|&x| self.own[x].covers(&eff))
            .collect();
        least(&binding, &self.own).or_else(|| least(&others, &self.own))
    }

    /// The maintenance whose targets carried `node` beyond `m`'s own: the least powerful other
    /// maintenance covering the node's targets, older ones first.
    fn fast_forwarder(&self, m: usize, node: &str) -> Option<usize> {
        let eff = self.eff(node);
        let candidates: Vec<usize> = self
            .selecting(node)
            .iter()
            .copied()
            .filter(|&x| x != m && self.own[x].covers(&eff))
            .collect();
        let older: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&x| self.age[x] < self.age[m])
            .collect();
        least(&older, &self.own).or_else(|| least(&candidates, &self.own))
    }

    fn name(&self, m: usize) -> &'a str {
        &self.input.maintenances[m].name
    }

    fn output(&self, m: usize) -> MaintenanceOutput {
        let mi = &self.input.maintenances[m];
        let all_satisfied = self.satisfied(m);
        let mut events = Vec::new();
        let mut pods_to_request = Vec::new();
        let mut node_statuses = Vec::new();
        for &n in &self.nodes[m] {
            let eff = self.eff(n);
            let matched: Vec<&DrainPod> = self
                .pods(n)
                .iter()
                .filter(|p| !p.terminal && eff.matches(p.pod_type, p.priority, &p.labels))
                .collect();
            // SPEC 6.2: only `Drain` pods are requested; the drain waits for `WaitCompleted` ones
            // and leaves `Skip` ones.
            let with = |b: DrainBehavior| -> Vec<&DrainPod> {
                matched
                    .iter()
                    .copied()
                    .filter(|p| p.behavior == b)
                    .collect()
            };
            let (targeted, waiting_rule, skipped) = (
                with(DrainBehavior::Drain),
                with(DrainBehavior::WaitCompleted),
                with(DrainBehavior::Skip),
            );
            pods_to_request.extend(targeted.iter().map(|p| PodRef {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: p.uid.clone(),
            }));
            let fast_forwarded = !self.own[m].covers(&eff);
            if fast_forwarded && !self.was_fast_forwarded(m, n) {
                let by = self.fast_forwarder(m, n);
                events.push(DrainEvent::FastForwarded {
                    node: n.to_string(),
                    by: by.map(|x| self.name(x).to_string()),
                    older: by.is_some_and(|x| self.age[x] < self.age[m]),
                });
            }
            let message = if !self.finished.contains(n) {
                self.evacuating_message(m, n, &eff)
            } else if all_satisfied {
                "Drained".to_string()
            } else {
                self.waiting_message(m)
            };
            let staying: Vec<&&DrainPod> = targeted.iter().filter(|p| !p.leaves()).collect();
            let waiting: Vec<&&DrainPod> = targeted
                .iter()
                .filter(|p| p.leaves() && !p.unregistered.is_empty())
                .collect();
            let message = with_unregistered(with_staying(message, &staying), &waiting);
            node_statuses.push(NodeMaintenanceNodeStatus {
                node_ref: NodeReference {
                    name: n.to_string(),
                },
                drain_targets: eff.to_entries(),
                drain_message: with_rules(message, &waiting_rule, &skipped),
                pods_pending_evacuation: count(targeted.iter().filter(|p| !p.has_request)),
                pods_evacuating: count(targeted.iter().filter(|p| p.has_request)),
                skipped_pods: listed(skipped.iter().copied()),
                waiting_pods: listed(waiting_rule.iter().copied()),
                unmanaged_pods: listed(
                    targeted
                        .iter()
                        .copied()
                        .filter(|p| p.unmanaged && p.pod_type == PodType::Default),
                ),
                local_data_pods: listed(
                    targeted
                        .iter()
                        .copied()
                        .filter(|p| p.local_data && p.pod_type == PodType::Default),
                ),
                ..Default::default()
            });
        }
        MaintenanceOutput {
            name: mi.name.clone(),
            drain_plan_position: i32::try_from(self.k[m]).unwrap_or(i32::MAX),
            node_statuses,
            drained: self.at_end(m) && all_satisfied,
            events,
            pods_to_request,
        }
    }

    /// The recorded status already showed `node` beyond this maintenance's own targets (at its
    /// recorded position), so the fast-forward event was emitted before.
    fn was_fast_forwarded(&self, m: usize, node: &str) -> bool {
        let mi = &self.input.maintenances[m];
        let Some(status) = mi.node_statuses.iter().find(|s| s.node_ref.name == node) else {
            return false;
        };
        let recorded_k = usize::try_from(mi.drain_plan_position.unwrap_or(0)).unwrap_or(0);
        !target_set_at(&mi.plan, recorded_k).covers(&TargetSet::from_entries(&status.drain_targets))
    }

    fn evacuating_message(&self, m: usize, node: &str, eff: &TargetSet) -> String {
        if !eff.covers(&self.own[m]) {
            if let Some(x) = self.limiter(m, node) {
                return format!("Evacuating (limited by {})", self.name(x));
            }
        } else if !self.own[m].covers(eff) {
            return match self.fast_forwarder(m, node) {
                Some(x) if self.age[x] < self.age[m] => {
                    format!("Evacuating (fast-forwarded by older {})", self.name(x))
                }
                Some(x) => format!("Evacuating (fast-forwarded by {})", self.name(x)),
                None => "Evacuating (fast-forwarded)".to_string(),
            };
        }
        "Evacuating".to_string()
    }

    fn waiting_message(&self, m: usize) -> String {
        match self.blocker(m) {
            Blocker::Node { node, owner } if owner == m => format!("Waiting for node {node}."),
            Blocker::Node { node, owner } => {
                format!("Waiting for node {node} ({}).", self.name(owner))
            }
            Blocker::Done(x) if x == m => "Waiting.".to_string(),
            Blocker::Done(x) => format!("Waiting for {}.", self.name(x)),
            Blocker::Cycle(chain) => match chain.get(1) {
                Some(&x) => format!("Waiting for {}.", self.name(x)),
                None => "Waiting.".to_string(),
            },
        }
    }
}

/// A non-terminal pod the targets match that can leave, or that the drain waits to complete
/// (SPEC 6.2): the node has not finished. A skipped pod holds nothing.
fn blocks(pod: &DrainPod, targets: &TargetSet) -> bool {
    let holds = match pod.behavior {
        DrainBehavior::Drain => pod.leaves(),
        DrainBehavior::WaitCompleted => true,
        DrainBehavior::Skip => false,
    };
    holds && !pod.terminal && targets.matches(pod.pod_type, pod.priority, &pod.labels)
}

/// The first (in the given order) maintenance whose own targets are not strictly above another's.
fn least(candidates: &[usize], own: &[TargetSet]) -> Option<usize> {
    candidates.iter().copied().find(|&x| {
        !candidates
            .iter()
            .any(|&y| own[x].covers(&own[y]) && !own[y].covers(&own[x]))
    })
}

fn last_index(len: usize) -> usize {
    len.saturating_sub(1)
}

fn count<T>(items: impl Iterator<Item = T>) -> i32 {
    i32::try_from(items.count()).unwrap_or(i32::MAX)
}
