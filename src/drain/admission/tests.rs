//! Table tests of [`admit`] (SPEC 6.1), one row per rule, and a property: admissions never take
//! a budget beyond what it allows.

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use proptest::prelude::*;

use super::status::{BudgetObject, budget_status};
use super::*;
use crate::api::MaintenanceWindow;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// Monday 2026-11-23, 12:00 UTC.
fn noon() -> Timestamp {
    at("2026-11-23T12:00:00Z")
}

fn pool_selector(pool: &str) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "pool".into(),
                operator: "In".into(),
                values: Some(vec![pool.into()]),
            }]),
            match_fields: None,
        }],
    }
}

/// A Ready, schedulable node of pool `a`.
fn node(name: &str) -> NodeState {
    NodeState {
        name: name.into(),
        labels: [("pool".to_string(), "a".to_string())].into(),
        ready: true,
        unschedulable: false,
    }
}

trait NodeBuilder {
    fn pool(self, pool: &str) -> Self;
    fn not_ready(self) -> Self;
    fn cordoned(self) -> Self;
}

impl NodeBuilder for NodeState {
    fn pool(mut self, pool: &str) -> Self {
        self.labels.insert("pool".into(), pool.into());
        self
    }
    fn not_ready(mut self) -> Self {
        self.ready = false;
        self
    }
    fn cordoned(mut self) -> Self {
        self.unschedulable = true;
        self
    }
}

/// Nodes `n1`..=`nN` of pool `a`.
fn nodes(n: usize) -> Vec<NodeState> {
    (1..=n).map(|i| node(&format!("n{i}"))).collect()
}

/// A valid budget over pool `a` allowing `max` nodes, always open.
fn budget(name: &str, max: MaxUnavailable) -> BudgetInput {
    BudgetInput {
        name: name.into(),
        selector: Some(pool_selector("a")),
        spec: Ok(BudgetRules {
            max_unavailable: max,
            windows: Vec::new(),
        }),
    }
}

trait BudgetBuilder {
    fn over(self, pool: &str) -> Self;
    fn window(self, schedule: &str, duration: &str) -> Self;
    fn invalid(self, problem: &str) -> Self;
}

impl BudgetBuilder for BudgetInput {
    fn over(mut self, pool: &str) -> Self {
        self.selector = Some(pool_selector(pool));
        self
    }
    fn window(mut self, schedule: &str, duration: &str) -> Self {
        let w = parse_windows(&[MaintenanceWindow {
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: None,
        }])
        .unwrap();
        if let Ok(rules) = &mut self.spec {
            rules.windows.extend(w);
        }
        self
    }
    fn invalid(mut self, problem: &str) -> Self {
        self.spec = Err(problem.into());
        self
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// A maintenance in Drain created `created` seconds after the epoch, selecting `selected`.
fn nm(name: &str, created: i64, selected: &[&str]) -> MaintenanceState {
    MaintenanceState {
        name: name.into(),
        created: Timestamp::from_second(created).unwrap(),
        wants: true,
        selected: set(selected),
        admitted: BTreeSet::new(),
        recorded: false,
        holding: false,
    }
}

trait MaintenanceBuilder {
    /// Admitted on these nodes, still holding them.
    fn admitted(self, nodes: &[&str]) -> Self;
    /// In Complete with its nodes given back.
    fn released(self) -> Self;
}

impl MaintenanceBuilder for MaintenanceState {
    fn admitted(mut self, nodes: &[&str]) -> Self {
        self.admitted = set(nodes);
        self.recorded = true;
        self.holding = true;
        self
    }
    fn released(mut self) -> Self {
        self.wants = false;
        self.holding = false;
        self
    }
}

fn input(
    nodes: Vec<NodeState>,
    budgets: Vec<BudgetInput>,
    maintenances: Vec<MaintenanceState>,
) -> AdmissionInput {
    AdmissionInput {
        nodes,
        budgets,
        maintenances,
    }
}

/// The names admitted by one pass.
fn admitted(out: &AdmissionOutput) -> Vec<&str> {
    out.verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Admit { .. }))
        .map(|(n, _)| n.as_str())
        .collect()
}

fn queued<'a>(out: &'a AdmissionOutput, name: &str) -> &'a Queued {
    match out.verdict(name) {
        Some(Verdict::Queue(q)) => q,
        other => panic!("{name} is not queued: {other:?}"),
    }
}

/// Applies a pass's admissions to the input, as the controller's writes would.
fn apply(input: &mut AdmissionInput, out: &AdmissionOutput) {
    for m in &mut input.maintenances {
        if let Some(Verdict::Admit { nodes, .. }) = out.verdict(&m.name) {
            m.admitted.extend(nodes.iter().cloned());
            m.recorded = true;
            m.holding = true;
        }
    }
}

/// Six one-node maintenances created one second apart.
fn six_one_node_maintenances() -> Vec<MaintenanceState> {
    (1..=6)
        .map(|i| nm(&format!("m{i}"), i, &[&format!("n{i}")]))
        .collect()
}

#[test]
fn without_a_budget_every_maintenance_is_admitted() {
    let out = admit(
        &input(nodes(6), vec![], six_one_node_maintenances()),
        noon(),
    );
    assert_eq!(admitted(&out), ["m1", "m2", "m3", "m4", "m5", "m6"]);
    assert!(
        matches!(out.verdict("m1"), Some(Verdict::Admit { budgets, .. }) if budgets.is_empty())
    );
}

#[test]
fn a_budget_of_two_admits_the_two_oldest_and_queues_the_rest_naming_the_nodes() {
    let out = admit(
        &input(
            nodes(6),
            vec![budget("pool-a", MaxUnavailable::Nodes(2))],
            six_one_node_maintenances(),
        ),
        noon(),
    );
    assert_eq!(admitted(&out), ["m1", "m2"]);
    let q = queued(&out, "m3");
    assert_eq!(q.reason(), "BudgetExhausted");
    assert_eq!(q.waiting, ["n3"]);
    assert_eq!(
        q.message(),
        "Queued: MaintenanceBudget pool-a allows 2 unavailable nodes, 2 are unavailable (n1: maintenance m1, n2: maintenance m2), and this maintenance would add 1"
    );
}

#[test]
fn completing_a_maintenance_admits_the_oldest_queued() {
    let mut world = input(
        nodes(6),
        vec![budget("pool-a", MaxUnavailable::Nodes(2))],
        six_one_node_maintenances(),
    );
    let out = admit(&world, noon());
    apply(&mut world, &out);
    // m2 completes and gives its node back.
    world.maintenances[1] = world.maintenances[1].clone().released();
    let out = admit(&world, noon());
    assert_eq!(admitted(&out), ["m3"]);
    assert_eq!(out.verdict("m1"), Some(&Verdict::Settled));
}

#[test]
fn a_percentage_is_of_the_selected_nodes() {
    let out = admit(
        &input(
            nodes(6),
            vec![budget("half", MaxUnavailable::Percent(50))],
            six_one_node_maintenances(),
        ),
        noon(),
    );
    assert_eq!(admitted(&out), ["m1", "m2", "m3"]);
}

#[test]
fn a_not_ready_node_uses_up_the_budget() {
    let mut ns = nodes(6);
    ns[5] = ns[5].clone().not_ready();
    let out = admit(
        &input(
            ns,
            vec![budget("pool-a", MaxUnavailable::Nodes(2))],
            six_one_node_maintenances()[..5].to_vec(),
        ),
        noon(),
    );
    assert_eq!(admitted(&out), ["m1"]);
    assert!(queued(&out, "m2").message().contains("n6: NotReady"));
}

#[test]
fn a_node_cordoned_by_hand_is_not_counted_but_listed() {
    let ns: Vec<NodeState> = nodes(6).into_iter().map(NodeBuilder::cordoned).collect();
    let world = input(
        ns,
        vec![budget("pool-a", MaxUnavailable::Nodes(2))],
        six_one_node_maintenances(),
    );
    let out = admit(&world, noon());
    assert_eq!(admitted(&out), ["m1", "m2"]);
    let status = budget_status(&world, &out, 0, &BudgetObject::default(), noon());
    assert_eq!(status.cordoned_nodes, ["n3", "n4", "n5", "n6"]);
    assert_eq!(status.current_unavailable, 2);
    assert_eq!(status.admitted, ["m1", "m2"]);
    assert_eq!(status.queued_count, 4);
}

#[test]
fn too_large_is_skipped_and_holds_nobody_back() {
    let mut ms = six_one_node_maintenances()[3..].to_vec();
    ms.insert(0, nm("big", 0, &["n1", "n2", "n3"]));
    let out = admit(
        &input(
            nodes(6),
            vec![budget("pool-a", MaxUnavailable::Nodes(2))],
            ms,
        ),
        noon(),
    );
    let q = queued(&out, "big");
    assert_eq!(q.reason(), "TooLarge");
    assert!(
        q.message().contains("selects 3 of its nodes"),
        "{}",
        q.message()
    );
    assert_eq!(admitted(&out), ["m4", "m5"]);
}

#[test]
fn a_closed_window_admits_nothing_and_an_admitted_maintenance_carries_on() {
    let ms = vec![nm("m1", 1, &["n1"]).admitted(&["n1"]), nm("m2", 2, &["n2"])];
    // 22:00-04:00 on weekdays; it is noon.
    let b = budget("night", MaxUnavailable::Nodes(2)).window("0 22 * * 1-5", "6h");
    let world = input(nodes(6), vec![b], ms);
    let out = admit(&world, noon());
    assert_eq!(out.verdict("m1"), Some(&Verdict::Settled));
    let q = queued(&out, "m2");
    assert_eq!(q.reason(), "OutsideWindow");
    assert_eq!(
        q.message(),
        "Queued: MaintenanceBudget night is outside its maintenance windows; the next opens at 2026-11-23T22:00:00Z"
    );
    let status = budget_status(&world, &out, 0, &BudgetObject::default(), noon());
    assert!(!status.open);
    assert_eq!(
        status.next_open.map(|t| t.0),
        Some(at("2026-11-23T22:00:00Z"))
    );
    // At 23:00 it opens.
    assert_eq!(admitted(&admit(&world, at("2026-11-23T23:00:00Z"))), ["m2"]);
}

#[test]
fn the_oldest_waiting_keeps_its_place_from_younger_ones() {
    // n1 is held; "big" (two nodes) needs 2 of 2 and waits; m5 alone would fit but is younger.
    let ms = vec![
        nm("m1", 1, &["n1"]).admitted(&["n1"]),
        nm("big", 2, &["n2", "n3"]),
        nm("m5", 3, &["n5"]),
    ];
    let out = admit(
        &input(
            nodes(6),
            vec![budget("pool-a", MaxUnavailable::Nodes(2))],
            ms,
        ),
        noon(),
    );
    assert_eq!(queued(&out, "big").reason(), "BudgetExhausted");
    let q = queued(&out, "m5");
    assert_eq!(q.reason(), "BudgetExhausted");
    assert_eq!(
        q.message(),
        "Queued: MaintenanceBudget pool-a is kept for the older maintenance big, which waits for room in it first"
    );
}

#[test]
fn a_maintenance_adding_no_unavailable_node_is_admitted_even_when_closed_and_full() {
    let ns = vec![
        node("n1"),
        node("n2"),
        node("n3").not_ready(),
        node("n4").not_ready(),
    ];
    let ms = vec![
        nm("m1", 1, &["n1"]).admitted(&["n1"]),
        nm("repair", 2, &["n3", "n4"]),
    ];
    let b = budget("night", MaxUnavailable::Nodes(1)).window("0 22 * * *", "1h");
    let out = admit(&input(ns, vec![b], ms), noon());
    assert_eq!(admitted(&out), ["repair"]);
}

#[test]
fn every_budget_selecting_its_nodes_must_have_room() {
    let ns = vec![node("a1"), node("a2"), node("b1").pool("b")];
    let ms = vec![
        nm("m1", 1, &["b1"]).admitted(&["b1"]),
        nm("m2", 2, &["a1", "b1"]),
        nm("m3", 3, &["a2"]),
    ];
    let budgets = vec![
        budget("pool-a", MaxUnavailable::Nodes(1)),
        budget("pool-b", MaxUnavailable::Nodes(1)).over("b"),
    ];
    let out = admit(&input(ns, budgets, ms), noon());
    // m2 adds a1 only (b1 is already unavailable): pool-b's limit is not touched again.
    assert_eq!(admitted(&out), ["m2"]);
    assert_eq!(queued(&out, "m3").reason(), "BudgetExhausted");
}

#[test]
fn a_node_matching_later_waits_for_its_own_admission() {
    let ms = vec![
        nm("m1", 1, &["n1", "n2"]).admitted(&["n1"]),
        nm("m2", 2, &["n3"]).admitted(&["n3"]),
    ];
    let world = input(
        nodes(3),
        vec![budget("pool-a", MaxUnavailable::Nodes(2))],
        ms,
    );
    let q = queued(&admit(&world, noon()), "m1").clone();
    assert_eq!(q.waiting, ["n2"]);
    let mut world = world;
    world.maintenances[1] = world.maintenances[1].clone().released();
    assert_eq!(
        admit(&world, noon()).verdict("m1"),
        Some(&Verdict::Admit {
            nodes: vec!["n2".into()],
            budgets: vec!["pool-a".into()]
        })
    );
}

#[test]
fn an_invalid_budget_admits_nothing_new() {
    let b = budget("broken", MaxUnavailable::Nodes(2))
        .invalid("spec.maxUnavailable: \"x\" is neither ...");
    let world = input(nodes(2), vec![b], vec![nm("m1", 1, &["n1"])]);
    let out = admit(&world, noon());
    let q = queued(&out, "m1");
    assert!(q.message().contains("is invalid"), "{}", q.message());
    let status = budget_status(&world, &out, 0, &BudgetObject::default(), noon());
    assert_eq!(status.conditions[0].status, "False");
}

#[test]
fn other_pools_and_idle_maintenances_are_not_concerned() {
    let ns = vec![node("n1"), node("x1").pool("x")];
    let mut idle = nm("idle", 0, &["n1"]);
    idle.wants = false;
    let ms = vec![idle, nm("other", 1, &["x1"]), nm("none", 2, &[])];
    let out = admit(
        &input(ns, vec![budget("pool-a", MaxUnavailable::Nodes(1))], ms),
        noon(),
    );
    assert_eq!(out.verdict("idle"), None);
    assert_eq!(
        out.verdict("other"),
        Some(&Verdict::Admit {
            nodes: vec!["x1".into()],
            budgets: vec![]
        })
    );
    // A maintenance selecting no node is admitted with no node.
    assert_eq!(
        out.verdict("none"),
        Some(&Verdict::Admit {
            nodes: vec![],
            budgets: vec![]
        })
    );
}

#[test]
fn a_maintenance_in_complete_holds_its_nodes_until_it_gave_them_back() {
    let mut done = nm("m1", 1, &["n1"]).admitted(&["n1"]);
    done.wants = false;
    let world = input(
        nodes(2),
        vec![budget("pool-a", MaxUnavailable::Nodes(1))],
        vec![done, nm("m2", 2, &["n2"])],
    );
    assert_eq!(
        queued(&admit(&world, noon()), "m2").reason(),
        "BudgetExhausted"
    );
}

/// Unavailable nodes of the budget at `b` after applying `out`.
fn unavailable_in(world: &AdmissionInput, b: usize) -> usize {
    let budget = &world.budgets[b];
    let held: BTreeSet<&String> = world
        .maintenances
        .iter()
        .filter(|m| m.holding)
        .flat_map(|m| &m.admitted)
        .collect();
    world
        .nodes
        .iter()
        .filter(|n| budget.selects(&n.name, &n.labels))
        .filter(|n| !n.ready || held.contains(&n.name))
        .count()
}

proptest! {
    /// Whatever the pools, budgets and maintenances, a pass never takes an open budget beyond
    /// what it allows, unless it already was (NotReady nodes) — and then it does not grow.
    #[test]
    fn admissions_never_exceed_a_budget(
        ready in proptest::collection::vec(proptest::bool::weighted(0.85), 8),
        pools in proptest::collection::vec(0..2usize, 8),
        maxes in proptest::collection::vec(1..4u32, 2),
        wanted in proptest::collection::vec(proptest::collection::btree_set(0..8usize, 0..4), 1..8),
        holding in proptest::collection::vec(proptest::bool::weighted(0.3), 8),
    ) {
        let pool_names = ["a", "b"];
        let ns: Vec<NodeState> = (0..8)
            .map(|i| {
                let mut n = node(&format!("n{i}")).pool(pool_names[pools[i]]);
                n.ready = ready[i];
                n
            })
            .collect();
        let budgets: Vec<BudgetInput> = (0..2)
            .map(|b| budget(&format!("b{b}"), MaxUnavailable::Nodes(maxes[b])).over(pool_names[b]))
            .collect();
        let mut ms: Vec<MaintenanceState> = Vec::new();
        for (i, nodes) in wanted.iter().enumerate() {
            let names: Vec<String> = nodes.iter().map(|n| format!("n{n}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut m = nm(&format!("m{i}"), i as i64, &refs);
            if holding[i] {
                m = m.admitted(&refs);
            }
            ms.push(m);
        }
        let mut world = input(ns, budgets, ms);
        let before: Vec<usize> = (0..2).map(|b| unavailable_in(&world, b)).collect();
        let out = admit(&world, noon());
        apply(&mut world, &out);
        for (b, before) in before.into_iter().enumerate() {
            let after = unavailable_in(&world, b);
            let allowed = maxes[b] as usize;
            prop_assert!(after <= allowed.max(before), "budget b{b}: {before} → {after} > {allowed}");
        }
    }
}

#[test]
fn queue_messages_name_at_most_five_nodes() {
    let names = named((1..=8).map(|i| format!("n{i}")));
    assert_eq!(names, "n1, n2, n3, n4, n5 and 3 more");
}

#[test]
fn a_queued_maintenance_waits_behind_the_one_just_ahead_while_the_queue_moves() {
    // A rollout two at a time: m1 and m2 hold n1 and n2; q3, q4, q5 wait. Only the first in line
    // names the unavailable nodes; the others name the one just ahead, so their messages stay
    // the same while the nodes come and go (each change is a status write per queued one).
    let budgets = || vec![budget("pool-a", MaxUnavailable::Nodes(2))];
    let queue = |held: &[(&str, i64, &str)]| {
        let mut ms: Vec<_> = held
            .iter()
            .map(|(name, age, node)| nm(name, *age, &[*node]).admitted(&[*node]))
            .collect();
        ms.extend(
            [("q3", 3, "n3"), ("q4", 4, "n4"), ("q5", 5, "n5")]
                .iter()
                .filter(|(name, _, _)| !held.iter().any(|(h, _, _)| h == name))
                .map(|(name, age, node)| nm(name, *age, &[*node])),
        );
        admit(&input(nodes(6), budgets(), ms), noon())
    };
    let before = queue(&[("m1", 1, "n1"), ("m2", 2, "n2")]);
    assert!(
        queued(&before, "q3")
            .message()
            .contains("2 are unavailable (n1: maintenance m1, n2: maintenance m2)")
    );
    let behind = |out: &AdmissionOutput, name: &str| {
        let q = queued(out, name);
        assert_eq!(q.reason(), "BudgetExhausted");
        q.message()
    };
    assert_eq!(
        behind(&before, "q4"),
        "Queued: MaintenanceBudget pool-a is kept for the older maintenance q3, which waits for room in it first"
    );
    let q5 = behind(&before, "q5");
    assert!(q5.contains("older maintenance q4"), "{q5}");
    // m1 gives n1 back and q3 takes it: q4 is first in line, q5's message is unchanged.
    let after = queue(&[("m2", 2, "n2"), ("q3", 3, "n3")]);
    assert!(
        queued(&after, "q4")
            .message()
            .contains("n2: maintenance m2, n3: maintenance q3")
    );
    assert_eq!(behind(&after, "q5"), q5);
}
