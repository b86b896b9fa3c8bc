//! Property tests of the drain plan: the canonical order is a total order (a total preorder on
//! entries that the canonical plan is sorted by, whatever order the user wrote), a plan's
//! prefixes target a chain of ever larger sets, and [`plan_drain`](super::plan_drain) run pass
//! after pass on random clusters (one to three maintenances sharing nodes, random plans with
//! label selectors, random pods, random evictions) never targets beyond the plans' limits,
//! never moves backwards, requests only pods its targets match, and drains every maintenance once
//! the evictable pods are gone.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::admission::node_maintenance::{canonical_drain_plan, drain_plan_order};
use crate::api::{DrainPlanEntry, PodType};

use super::Stay;
use super::fixtures::{MAX, WithSelector, World, nm, pod};
use super::targets::{TargetSet, target_set_at};

const PRIORITIES: [i32; 6] = [0, 100, 5000, 1_000_000_000, 2_000_000_000, MAX];
const NODES: [&str; 3] = ["n0", "n1", "n2"];

fn pod_type() -> impl Strategy<Value = PodType> {
    prop_oneof![
        4 => Just(PodType::Default),
        1 => Just(PodType::DaemonSet),
        1 => Just(PodType::Static),
    ]
}

/// `None`, `app=web` or `tier=db`.
fn labels() -> impl Strategy<Value = Option<(&'static str, &'static str)>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(("app", "web"))),
        1 => Just(Some(("tier", "db"))),
    ]
}

fn entry() -> impl Strategy<Value = DrainPlanEntry> {
    (
        pod_type(),
        proptest::sample::select(&PRIORITIES[..]),
        labels(),
    )
        .prop_map(|(pod_type, pod_priority, selector)| {
            let e = DrainPlanEntry {
                pod_priority,
                pod_type,
                pod_selector: None,
            };
            match selector {
                Some(label) => e.sel(&[label]),
                None => e,
            }
        })
}

/// A plan as admission stores it: the user's entries completed and sorted (rule M2), without
/// duplicates (rule N3).
fn stored_plan(user: Vec<DrainPlanEntry>) -> Vec<DrainPlanEntry> {
    let mut plan = canonical_drain_plan(&user);
    let mut seen = Vec::new();
    plan.retain(|e| {
        let new = !seen.contains(e);
        seen.push(e.clone());
        new
    });
    plan
}

#[test]
fn the_drain_plan_order_is_total_and_the_canonical_plan_is_sorted_whatever_the_input_order() {
    let strategy = (
        proptest::collection::vec(entry(), 0..10),
        any::<proptest::sample::Index>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 1000,
        // Failures are reported with their minimal input; nothing is written to the tree.
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(user, rotation)| {
            // A total preorder: antisymmetric comparisons and transitive on every triple.
            for a in &user {
                for b in &user {
                    prop_assert_eq!(drain_plan_order(a, b), drain_plan_order(b, a).reverse());
                    for c in &user {
                        if drain_plan_order(a, b) != Ordering::Greater
                            && drain_plan_order(b, c) != Ordering::Greater
                        {
                            prop_assert_ne!(drain_plan_order(a, c), Ordering::Greater);
                        }
                    }
                }
            }
            let plan = canonical_drain_plan(&user);
            prop_assert!(
                plan.windows(2)
                    .all(|w| drain_plan_order(&w[0], &w[1]) != Ordering::Greater)
            );
            prop_assert_eq!(canonical_drain_plan(&plan), plan.clone(), "idempotent");
            // Another input order gives a plan equal up to the order among entries the order
            // ties (same type and priority, both with a selector).
            let mut rotated = user.clone();
            if !rotated.is_empty() {
                let by = rotation.index(rotated.len());
                rotated.rotate_left(by);
            }
            let other = canonical_drain_plan(&rotated);
            prop_assert_eq!(other.len(), plan.len());
            for (a, b) in plan.iter().zip(&other) {
                prop_assert_eq!(drain_plan_order(a, b), Ordering::Equal);
            }
            // Each plan prefix targets at least what the shorter one did: a chain.
            for k in 1..plan.len() {
                prop_assert!(
                    target_set_at(&plan, k).covers(&target_set_at(&plan, k - 1)),
                    "prefix {k} does not cover prefix {}",
                    k - 1
                );
            }
            Ok(())
        })
        .unwrap();
}

/// A pod: node (index into [`NODES`]), type, priority, label, terminal, can leave (DaemonSet and
/// static pods only: an interceptor removes it; Default pods always can).
type RandomPod = (
    usize,
    PodType,
    i32,
    Option<(&'static str, &'static str)>,
    bool,
    bool,
);

/// A random cluster in stage Drain.
#[derive(Clone, Debug)]
struct Cluster {
    /// Per maintenance: user plan entries and selected nodes (indices into [`NODES`]).
    maintenances: Vec<(Vec<DrainPlanEntry>, Vec<usize>)>,
    pods: Vec<RandomPod>,
    /// Per pass, which requested pods get evicted (bit i: the i-th requested pod).
    evictions: Vec<u64>,
}

fn cluster() -> impl Strategy<Value = Cluster> {
    let maintenance = (
        proptest::collection::vec(entry(), 0..5),
        proptest::sample::subsequence(vec![0usize, 1, 2], 0..=3),
    );
    let pod = (
        0usize..NODES.len(),
        pod_type(),
        proptest::sample::select(&PRIORITIES[..]),
        labels(),
        proptest::bool::weighted(0.1),
        proptest::bool::weighted(0.3),
    );
    (
        proptest::collection::vec(maintenance, 1..4),
        proptest::collection::vec(pod, 0..16),
        proptest::collection::vec(any::<u64>(), 0..12),
    )
        .prop_map(|(maintenances, pods, evictions)| Cluster {
            maintenances,
            pods,
            evictions,
        })
}

fn world(c: &Cluster) -> (World, Vec<Vec<DrainPlanEntry>>) {
    let plans: Vec<Vec<DrainPlanEntry>> = c
        .maintenances
        .iter()
        .map(|(user, _)| stored_plan(user.clone()))
        .collect();
    let mut w = World::new(
        c.maintenances
            .iter()
            .zip(&plans)
            .enumerate()
            .map(|(i, ((_, nodes), plan))| {
                let names: Vec<&str> = nodes.iter().map(|&n| NODES[n]).collect();
                nm(&format!("m{i}"), i as i64 * 60, plan.clone(), &names)
            })
            .collect(),
    );
    w.add(c.pods.iter().enumerate().map(
        |(i, &(node, pod_type, priority, label, terminal, leaves))| {
            let mut p = pod(&format!("p{i}")).on(NODES[node]).priority(priority);
            p = match pod_type {
                PodType::Default => p,
                PodType::DaemonSet => p.ds(),
                PodType::Static => p.static_pod(),
            };
            if !leaves && pod_type != PodType::Default {
                p = p.stays(Stay::NoNodeAgent);
            }
            if let Some(l) = label {
                p = p.labels(&[l]);
            }
            if terminal { p.terminal() } else { p }
        },
    ));
    (w, plans)
}

/// What the plans of the maintenances selecting `node` could ever target there.
fn plan_limit(w: &World, plans: &[Vec<DrainPlanEntry>], node: &str) -> TargetSet {
    w.input
        .maintenances
        .iter()
        .zip(plans)
        .filter(|(m, _)| m.nodes.iter().any(|n| n == node))
        .map(|(_, plan)| target_set_at(plan, plan.len()))
        .fold(TargetSet::default(), |a, b| a.join(&b))
}

/// One pass of the controller and the checks on its output, against the previous pass.
fn pass(
    w: &mut World,
    plans: &[Vec<DrainPlanEntry>],
    before: &BTreeMap<(String, String), TargetSet>,
) -> Result<BTreeMap<(String, String), TargetSet>, TestCaseError> {
    let positions: Vec<Option<i32>> = w
        .input
        .maintenances
        .iter()
        .map(|m| m.drain_plan_position)
        .collect();
    let out = w.step().clone();
    let mut reached = BTreeMap::new();
    let outputs = w
        .input
        .maintenances
        .iter()
        .zip(&out.maintenances)
        .zip(plans);
    for (((m, o), plan), previous) in outputs.zip(positions) {
        let k = usize::try_from(o.drain_plan_position).unwrap_or(usize::MAX);
        prop_assert!(k < plan.len(), "{}: position {k} beyond the plan", m.name);
        prop_assert!(
            previous.is_none_or(|p| p <= o.drain_plan_position),
            "{}: position moved back",
            m.name
        );
        for status in &o.node_statuses {
            let node = status.node_ref.name.clone();
            let eff = TargetSet::from_entries(&status.drain_targets);
            prop_assert!(
                plan_limit(w, plans, &node).covers(&eff),
                "{} on {node}: targets {:?} exceed the plans",
                m.name,
                status.drain_targets
            );
            if let Some(prev) = before.get(&(m.name.clone(), node.clone())) {
                prop_assert!(eff.covers(prev), "{} on {node}: targets moved back", m.name);
            }
            let selecting = w
                .input
                .maintenances
                .iter()
                .filter(|x| x.nodes.contains(&node))
                .count();
            if selecting == 1 {
                prop_assert!(
                    target_set_at(plan, k).covers(&eff),
                    "{} alone on {node}: targets beyond its position {k}",
                    m.name
                );
            }
            reached.insert((m.name.clone(), node), eff);
        }
        for r in &o.pods_to_request {
            let (node, p) = w
                .input
                .pods
                .iter()
                .find_map(|(n, ps)| ps.iter().find(|p| p.uid == r.uid).map(|p| (n, p)))
                .expect("a requested pod exists");
            prop_assert!(
                m.nodes.contains(node),
                "{}: requested {} off its nodes",
                m.name,
                p.name
            );
            prop_assert!(!p.terminal, "{}: requested terminal {}", m.name, p.name);
            let eff = &reached[&(m.name.clone(), node.clone())];
            prop_assert!(eff.matches(p.pod_type, p.priority, &p.labels));
        }
    }
    Ok(reached)
}

#[test]
fn drain_targets_stay_within_the_plans_never_move_back_and_every_drain_ends() {
    let mut runner = TestRunner::new(Config {
        cases: 500,
        // Failures are reported with their minimal input; nothing is written to the tree.
        failure_persistence: None,
        ..Config::default()
    });
    // `run` takes a `Fn`: the count is kept in a cell.
    let requested = std::cell::Cell::new(0usize);
    runner
        .run(&cluster(), |c| {
            let (mut w, plans) = world(&c);
            let mut reached = BTreeMap::new();
            // Random evictions of requested pods, pass after pass.
            for mask in &c.evictions {
                reached = pass(&mut w, &plans, &reached)?;
                let asked: Vec<String> = w
                    .last
                    .maintenances
                    .iter()
                    .flat_map(|o| o.pods_to_request.iter().map(|r| r.uid.clone()))
                    .collect();
                requested.set(requested.get() + asked.len());
                for pods in w.input.pods.values_mut() {
                    for p in pods.iter_mut() {
                        p.has_request |= asked.contains(&p.uid);
                    }
                    pods.retain(|p| {
                        let i = asked.iter().position(|u| *u == p.uid);
                        !(p.leaves() && i.is_some_and(|i| mask & (1 << (i % 64)) != 0))
                    });
                }
            }
            // Then every evictable pod goes: each maintenance must end drained.
            for _ in 0..4 {
                reached = pass(&mut w, &plans, &reached)?;
                for pods in w.input.pods.values_mut() {
                    pods.retain(|p| !p.leaves() || p.terminal);
                }
            }
            reached = pass(&mut w, &plans, &reached)?;
            let _ = reached;
            for o in &w.last.maintenances {
                prop_assert!(o.drained, "{} not drained: {:#?}", o.name, o.node_statuses);
            }
            Ok(())
        })
        .unwrap();
    let requested = requested.get();
    assert!(
        requested >= 500,
        "only {requested} pod requests over all cases"
    );
}
