//! The worked examples of KEP-4212 (seed `001_885f550469ad801a.txt`) as acceptance tests: each
//! status block of the seed is one step, asserting drainTargets and drainMessage of every node
//! exactly.
//!
//! Pod counts: SPEC 3.3 defines `podsPendingEvacuation` as *targeted* pods without a request.
//! Where the seed shows a node that has finished its targets ("Waiting for ...") it still shows
//! pending pods (e.g. node three, 45), which only fits a reading of "pods the plan will evacuate
//! later". SPEC wins: those rows assert 0, and the seed's number is kept in a comment. Every other
//! count of the seed is asserted as shown.

use super::DrainEvent;
use super::fixtures::{MAX, WithSelector, World, d, ds, nm, pod, pods, st};

/// maintenance-a and -b are created at the same time (a is older by name), -c later.
fn example_world() -> World {
    let mut w = World::new(vec![
        nm(
            "maintenance-a",
            0,
            vec![d(5000), d(15000), ds(3000)],
            &["one", "two"],
        ),
        nm(
            "maintenance-b",
            0,
            vec![d(10000), d(15000), ds(4000)],
            &["one", "three"],
        ),
    ]);
    w.add(pods("one-low", 110, "one", 5000, 10))
        .add(pods("one-mid", 100, "one", 7000, 0))
        .add(pods("two-low", 37, "two", 5000, 7))
        .add(pods("two-high", 30, "two", 12000, 0))
        .add(pods("three-low", 70, "three", 10000, 25))
        .add(pods("three-high", 45, "three", 12000, 0));
    w
}

#[test]
fn pod_selection_and_drain_targets_example() {
    let mut w = example_world();

    // Step 1: for the intersecting node one, the lowest entry (maintenance-a's 5000) goes first.
    w.step();
    w.expect(
        "maintenance-a",
        "one",
        &[d(5000)],
        "Evacuating",
        Some((100, 10)),
    );
    w.expect(
        "maintenance-a",
        "two",
        &[d(5000)],
        "Evacuating",
        Some((30, 7)),
    );
    w.expect(
        "maintenance-b",
        "one",
        &[d(5000)],
        "Evacuating (limited by maintenance-a)",
        Some((100, 10)),
    );
    w.expect(
        "maintenance-b",
        "three",
        &[d(10000)],
        "Evacuating",
        Some((45, 25)),
    );
    assert_eq!(
        (
            w.out("maintenance-a").drain_plan_position,
            w.out("maintenance-b").drain_plan_position
        ),
        (0, 0)
    );

    // Step 2: node three is drained; it waits for node one.
    w.evict("three-low").evict_n("one-low", 5);
    w.step();
    w.expect(
        "maintenance-a",
        "one",
        &[d(5000)],
        "Evacuating",
        Some((100, 5)),
    );
    w.expect(
        "maintenance-a",
        "two",
        &[d(5000)],
        "Evacuating",
        Some((30, 7)),
    );
    w.expect(
        "maintenance-b",
        "one",
        &[d(5000)],
        "Evacuating (limited by maintenance-a)",
        Some((100, 5)),
    );
    w.expect(
        "maintenance-b",
        "three",
        &[d(10000)],
        "Waiting for node one.",
        Some((0, 0)),
    ); // seed: 45, 0

    // Step 3: node one is drained too; both now wait for maintenance-a's node two.
    w.evict("one-low").evict_n("two-low", 5);
    w.step();
    w.expect(
        "maintenance-a",
        "one",
        &[d(5000)],
        "Waiting for node two.",
        Some((0, 0)),
    ); // seed: 100, 0
    w.expect(
        "maintenance-a",
        "two",
        &[d(5000)],
        "Evacuating",
        Some((30, 2)),
    );
    w.expect(
        "maintenance-b",
        "one",
        &[d(5000)],
        "Waiting for node two (maintenance-a).",
        Some((0, 0)),
    ); // seed: 100, 0
    w.expect(
        "maintenance-b",
        "three",
        &[d(10000)],
        "Waiting for node two (maintenance-a).",
        Some((0, 0)),
    ); // seed: 45, 0
    assert_eq!(
        (
            w.out("maintenance-a").drain_plan_position,
            w.out("maintenance-b").drain_plan_position
        ),
        (0, 0)
    );

    // Step 4: node two drains, maintenance-a advances; node one is now limited by maintenance-b.
    w.evict("two-low")
        .request_n("one-mid", 30)
        .request_n("two-high", 9);
    w.step();
    w.expect(
        "maintenance-a",
        "one",
        &[d(10000)],
        "Evacuating (limited by maintenance-b)",
        Some((70, 30)),
    );
    w.expect(
        "maintenance-a",
        "two",
        &[d(15000)],
        "Evacuating",
        Some((21, 9)),
    );
    w.expect(
        "maintenance-b",
        "one",
        &[d(10000)],
        "Evacuating",
        Some((70, 30)),
    );
    w.expect(
        "maintenance-b",
        "three",
        &[d(10000)],
        "Waiting for node one.",
        Some((0, 0)),
    ); // seed: 45, 0
    assert_eq!(
        (
            w.out("maintenance-a").drain_plan_position,
            w.out("maintenance-b").drain_plan_position
        ),
        (1, 0)
    );
    assert_eq!(
        w.out("maintenance-a").events,
        vec![DrainEvent::PlanAdvanced { from: 0, to: 1 }]
    );

    // Step 5: maintenance-c, created later, is fast-forwarded on node one; progress never backtracks.
    w.add_maintenance(nm(
        "maintenance-c",
        100,
        vec![d(2000), d(15000)],
        &["one", "four"],
    ));
    w.add(pods("four-low", 25, "four", 2000, 5));
    w.step();
    w.expect(
        "maintenance-c",
        "one",
        &[d(10000)],
        "Evacuating (fast-forwarded by older maintenance-b)",
        Some((70, 30)),
    );
    w.expect(
        "maintenance-c",
        "four",
        &[d(2000)],
        "Evacuating",
        Some((20, 5)),
    );
    w.expect(
        "maintenance-a",
        "one",
        &[d(10000)],
        "Evacuating (limited by maintenance-b)",
        Some((70, 30)),
    );
    w.expect(
        "maintenance-b",
        "one",
        &[d(10000)],
        "Evacuating",
        Some((70, 30)),
    );
    assert_eq!(
        w.out("maintenance-c").events,
        vec![DrainEvent::FastForwarded {
            node: "one".into(),
            by: Some("maintenance-b".into()),
            older: true
        }]
    );
    assert_eq!(
        DrainEvent::FastForwarded {
            node: "one".into(),
            by: Some("maintenance-b".into()),
            older: true
        }
        .reason(),
        "DrainFastForwarded"
    );

    // The event is emitted once, not on every pass.
    w.step();
    w.expect(
        "maintenance-c",
        "one",
        &[d(10000)],
        "Evacuating (fast-forwarded by older maintenance-b)",
        Some((70, 30)),
    );
    assert!(w.out("maintenance-c").events.is_empty());
}

/// Beyond the seed: the maintenances run to the end of their plans. These plans (as in the seed)
/// lack the default entries admission would add, so a maintenance whose plan ends lower holds a
/// shared node there until it completes: the node follows the least powerful targets (SPEC 3.4).
#[test]
fn pod_selection_example_runs_to_drained() {
    let mut w = example_world();
    w.step();
    w.add_maintenance(nm(
        "maintenance-c",
        100,
        vec![d(2000), d(15000)],
        &["one", "four"],
    ));
    w.add(pods("four-low", 25, "four", 2000, 5));
    for prefix in [
        "three-low",
        "one-low",
        "two-low",
        "four-low",
        "one-mid",
        "two-high",
        "three-high",
    ] {
        w.step();
        w.evict(prefix);
    }
    w.step();
    assert!(w.out("maintenance-c").drained);
    assert!(!w.out("maintenance-a").drained && !w.out("maintenance-b").drained);
    w.expect("maintenance-c", "one", &[d(15000)], "Drained", Some((0, 0)));
    w.expect(
        "maintenance-a",
        "one",
        &[d(15000)],
        "Waiting for maintenance-c.",
        Some((0, 0)),
    );
    w.expect(
        "maintenance-a",
        "two",
        &[d(15000), ds(3000)],
        "Waiting for maintenance-c.",
        Some((0, 0)),
    );
    w.expect(
        "maintenance-b",
        "three",
        &[d(15000), ds(4000)],
        "Waiting for maintenance-c.",
        Some((0, 0)),
    );

    // maintenance-c completes: node one follows a (DaemonSet 3000, below b's 4000).
    w.input.maintenances.retain(|m| m.name != "maintenance-c");
    w.step();
    assert!(w.out("maintenance-a").drained && !w.out("maintenance-b").drained);
    assert_eq!(w.out("maintenance-a").drain_plan_position, 2);
    w.expect(
        "maintenance-a",
        "one",
        &[d(15000), ds(3000)],
        "Drained",
        Some((0, 0)),
    );
    w.expect(
        "maintenance-b",
        "one",
        &[d(15000), ds(3000)],
        "Waiting for maintenance-a.",
        Some((0, 0)),
    );

    w.input.maintenances.retain(|m| m.name != "maintenance-a");
    w.step();
    assert!(w.out("maintenance-b").drained);
    w.expect(
        "maintenance-b",
        "one",
        &[d(15000), ds(4000)],
        "Drained",
        Some((0, 0)),
    );
}

#[test]
fn pod_types_and_label_selectors_progression() {
    let pg: &[(&str, &str)] = &[("app", "postgres")];
    let plan = vec![d(1000), d(2000).sel(pg), d(MAX), ds(1000), ds(MAX), st(MAX)];
    let mut w = World::new(vec![nm("maintenance-five", 0, plan, &["five"])]);
    w.add([
        pod("p-low").on("five").priority(500),
        pod("p-pg").on("five").priority(1500).labels(pg),
        pod("p-other")
            .on("five")
            .priority(1500)
            .labels(&[("app", "mysql")]),
        pod("p-high").on("five").priority(1_000_000),
        pod("ds-low").on("five").priority(500).ds(),
        pod("ds-high").on("five").priority(2_000_000_000).ds(),
        pod("static")
            .on("five")
            .priority(2_000_001_000)
            .static_pod(),
    ]);
    let steps: [(&[&str], Vec<_>, i32, i32); 6] = [
        (&[], vec![d(1000), d(1000).sel(pg)], 0, 1),
        (&["p-low"], vec![d(1000), d(2000).sel(pg)], 1, 1),
        (&["p-pg"], vec![d(MAX), d(MAX).sel(pg)], 2, 2),
        (
            &["p-other", "p-high"],
            vec![d(MAX), d(MAX).sel(pg), ds(1000)],
            3,
            1,
        ),
        (&["ds-low"], vec![d(MAX), d(MAX).sel(pg), ds(MAX)], 4, 1),
        (
            &["ds-high"],
            vec![d(MAX), d(MAX).sel(pg), ds(MAX), st(MAX)],
            5,
            1,
        ),
    ];
    for (evicted, targets, position, pending) in steps {
        for p in evicted {
            w.evict(p);
        }
        w.step();
        w.expect(
            "maintenance-five",
            "five",
            &targets,
            "Evacuating",
            Some((pending, 0)),
        );
        assert_eq!(w.out("maintenance-five").drain_plan_position, position);
        assert!(!w.out("maintenance-five").drained);
    }
    w.evict("static");
    w.step();
    w.expect(
        "maintenance-five",
        "five",
        &[d(MAX), d(MAX).sel(pg), ds(MAX), st(MAX)],
        "Drained",
        Some((0, 0)),
    );
    assert!(w.out("maintenance-five").drained);
}
