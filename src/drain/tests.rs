//! Edge cases of [`plan_drain`](super::plan_drain): empty nodes, pods that reappear, pods the
//! Eviction API cannot remove, terminal pods, recorded progress, and the deadlock breaker.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::{
    INTERCEPTORS_ANNOTATION, MIRROR_POD_ANNOTATION, NodeMaintenanceNodeStatus, NodeReference,
    PodType,
};
use crate::cluster::CachedPod;

use super::fixtures::{MAX, WithSelector, World, d, ds, nm, pod, st};
use super::{DrainEvent, DrainPod, Leaving, PodRef, Stay, plan_drain};

/// The twelve default entries admission inserts (SPEC 3.2 M2).
fn default_plan() -> Vec<crate::api::DrainPlanEntry> {
    let prios = [1_000_000_000, 2_000_000_000, 2_000_001_000, MAX];
    let mut plan: Vec<_> = prios.iter().map(|&p| d(p)).collect();
    plan.extend(prios.iter().map(|&p| ds(p)));
    plan.extend(prios.iter().map(|&p| st(p)));
    plan
}

#[test]
fn empty_node_finishes_the_whole_plan_in_one_pass() {
    let mut w = World::new(vec![nm("m", 0, default_plan(), &["n"])]);
    w.step();
    let out = w.out("m");
    assert!(out.drained);
    assert_eq!(out.drain_plan_position, 11);
    assert_eq!(
        out.events,
        vec![DrainEvent::PlanAdvanced { from: 0, to: 11 }]
    );
    assert!(out.pods_to_request.is_empty());
    w.expect(
        "m",
        "n",
        &[d(MAX), ds(MAX), st(MAX)],
        "Drained",
        Some((0, 0)),
    );
    // Nothing changes on the next pass, and no event repeats.
    w.step();
    assert!(w.out("m").drained && w.out("m").events.is_empty());
}

#[test]
fn maintenance_without_nodes_is_drained() {
    let mut w = World::new(vec![nm("m", 0, vec![d(5), d(10)], &[])]);
    w.step();
    assert!(w.out("m").drained && w.out("m").node_statuses.is_empty());
    assert_eq!(w.out("m").drain_plan_position, 1);
}

#[test]
fn pod_appearing_that_matches_an_earlier_entry_is_targeted_again() {
    let mut w = World::new(vec![nm("m", 0, vec![d(100), d(200)], &["n"])]);
    w.add([pod("high").on("n").priority(150)]);
    w.step();
    w.expect("m", "n", &[d(200)], "Evacuating", Some((1, 0)));
    assert_eq!(w.out("m").drain_plan_position, 1);

    w.add([pod("late").on("n").priority(50).requested()]);
    w.step();
    w.expect("m", "n", &[d(200)], "Evacuating", Some((1, 1)));
    let requested: Vec<&str> = w
        .out("m")
        .pods_to_request
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(requested, ["high", "late"]);
    assert_eq!(
        w.out("m").drain_plan_position,
        1,
        "the position never moves back"
    );
}

/// SPEC 5.5: the node's message names the pods whose interceptors to come nothing registers
/// (three names per pod at most); such pods block as any other.
#[test]
fn pods_waiting_on_unregistered_interceptors_are_named() {
    let mut w = World::new(vec![nm("m", 0, vec![d(MAX), ds(MAX)], &["n"])]);
    w.add([
        pod("db").on("n").unregistered(&[
            "a.example.com",
            "b.example.com",
            "c.example.com",
            "d.example.com",
        ]),
        pod("web").on("n").unregistered(&["typo.example.com"]),
        pod("plain").on("n"),
    ]);
    w.step();
    assert!(!w.out("m").drained);
    w.expect(
        "m",
        "n",
        &[d(MAX)],
        "Evacuating; 2 pods wait on unregistered interceptors: default/db (a.example.com, \
         b.example.com, c.example.com, 1 more), default/web (typo.example.com)",
        None,
    );
}

#[test]
fn staying_daemonset_pod_is_requested_but_does_not_block_drained() {
    let mut w = World::new(vec![nm("m", 0, vec![d(MAX), ds(MAX)], &["n"])]);
    w.add([pod("agent")
        .on("n")
        .priority(2_000_001_000)
        .ds()
        .stays(Stay::ToleratesTaint)]);
    w.step();
    let out = w.out("m");
    assert!(out.drained);
    assert_eq!(
        out.pods_to_request,
        vec![PodRef {
            namespace: "default".into(),
            name: "agent".into(),
            uid: "uid-agent".into()
        }]
    );
    w.expect(
        "m",
        "n",
        &[d(MAX), ds(MAX)],
        "Drained; 1 pod stays: default/agent (its DaemonSet tolerates the evictord.dev/maintenance taint)",
        Some((1, 0)),
    );
}

#[test]
fn staying_pods_are_named_up_to_five() {
    let mut w = World::new(vec![nm("m", 0, vec![ds(MAX)], &["n"])]);
    w.add((0..7).map(|i| {
        pod(&format!("ds{i}"))
            .on("n")
            .ds()
            .stays(Stay::NoDaemonSetInterceptor)
    }));
    w.add([pod("web").on("n").ds()]);
    w.step();
    assert!(
        !w.out("m").drained,
        "the DaemonSet pod that can leave blocks until it is gone"
    );
    w.expect(
        "m",
        "n",
        &[ds(MAX)],
        "Evacuating; 7 pods stay: default/ds0 (the daemonset.apps.k8s.io interceptor is off), default/ds1 (the daemonset.apps.k8s.io interceptor is off), default/ds2 (the daemonset.apps.k8s.io interceptor is off), default/ds3 (the daemonset.apps.k8s.io interceptor is off), default/ds4 (the daemonset.apps.k8s.io interceptor is off), and 2 more",
        Some((8, 0)),
    );
}

#[test]
fn terminal_pods_block_nothing_and_get_no_request() {
    let mut w = World::new(vec![nm("m", 0, vec![d(100)], &["n"])]);
    w.add([pod("done").on("n").priority(5).terminal()]);
    w.step();
    assert!(w.out("m").drained && w.out("m").pods_to_request.is_empty());
    w.expect("m", "n", &[d(100)], "Drained", Some((0, 0)));
}

#[test]
fn recorded_progress_is_kept_and_never_moves_backwards() {
    let mut m = nm("m", 0, vec![d(100), d(200), d(300)], &["n"]);
    m.drain_plan_position = Some(1);
    // Recorded beyond the maintenance's own targets, e.g. by an older maintenance since completed.
    m.node_statuses = vec![NodeMaintenanceNodeStatus {
        node_ref: NodeReference { name: "n".into() },
        drain_targets: vec![d(250)],
        ..Default::default()
    }];
    let mut w = World::new(vec![m]);
    w.add([pod("p").on("n").priority(220)]);
    w.step();
    w.expect(
        "m",
        "n",
        &[d(250)],
        "Evacuating (fast-forwarded)",
        Some((1, 0)),
    );
    assert_eq!(w.out("m").drain_plan_position, 1);
    assert!(
        w.out("m").events.is_empty(),
        "the recorded status already showed the fast-forward"
    );
}

#[test]
fn out_of_range_recorded_position_is_clamped() {
    let mut m = nm("m", 0, vec![d(100)], &["n"]);
    m.drain_plan_position = Some(7);
    let out = plan_drain(&World::new(vec![m]).input);
    assert_eq!(out.maintenances[0].drain_plan_position, 0);
    assert!(out.maintenances[0].drained);
}

/// M (older) and X have incomparable targets on node n once M reaches its selector entry: the
/// meet is below both, so both would wait forever. The node follows the older M.
#[test]
fn incomparable_targets_follow_the_older_maintenance() {
    let pg: &[(&str, &str)] = &[("app", "pg")];
    let mut w = World::new(vec![
        nm(
            "maintenance-m",
            0,
            vec![d(1000), d(2000).sel(pg), d(3000)],
            &["n"],
        ),
        nm("maintenance-x", 10, vec![d(1500), d(MAX)], &["n"]),
    ]);
    w.add([
        pod("pg-1800").on("n").priority(1800).labels(pg),
        pod("plain-1200").on("n").priority(1200),
    ]);
    w.step();
    w.expect(
        "maintenance-m",
        "n",
        &[d(1000), d(2000).sel(pg)],
        "Evacuating",
        Some((1, 0)),
    );
    w.expect(
        "maintenance-x",
        "n",
        &[d(1000), d(2000).sel(pg)],
        "Evacuating (limited by maintenance-m)",
        Some((1, 0)),
    );
    let resolved = DrainEvent::DeadlockResolved {
        node: "n".into(),
        winner: "maintenance-m".into(),
    };
    assert!(w.out("maintenance-m").events.contains(&resolved));
    assert!(w.out("maintenance-x").events.contains(&resolved));
    assert!(
        w.out("maintenance-x")
            .events
            .contains(&DrainEvent::FastForwarded {
                node: "n".into(),
                by: Some("maintenance-m".into()),
                older: true
            })
    );

    w.evict("pg-1800");
    w.step();
    assert_eq!(w.out("maintenance-m").drain_plan_position, 2);
    w.expect(
        "maintenance-m",
        "n",
        &[d(1500), d(2000).sel(pg)],
        "Evacuating (limited by maintenance-x)",
        Some((1, 0)),
    );
    w.expect(
        "maintenance-x",
        "n",
        &[d(1500), d(2000).sel(pg)],
        "Evacuating (fast-forwarded by older maintenance-m)",
        Some((1, 0)),
    );
    assert!(
        w.out("maintenance-x").events.is_empty(),
        "fast-forward reported once"
    );

    // x reaches its last entry; m, at the end of its plan, holds the node at 3000 until it completes.
    w.evict("plain-1200");
    w.step();
    assert!(w.out("maintenance-m").drained);
    assert_eq!(w.out("maintenance-x").drain_plan_position, 1);
    w.expect(
        "maintenance-x",
        "n",
        &[d(3000), d(3000).sel(pg)],
        "Waiting for maintenance-m.",
        Some((0, 0)),
    );
}

#[test]
fn drain_pod_from_cached_pod() {
    let owner = OwnerReference {
        kind: "DaemonSet".into(),
        controller: Some(true),
        ..Default::default()
    };
    let mut ds_pod = CachedPod {
        metadata: ObjectMeta {
            name: Some("agent".into()),
            namespace: Some("kube-system".into()),
            uid: Some("u1".into()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        ..Default::default()
    };
    ds_pod.spec.priority = Some(7);
    let all = Leaving {
        daemonset_interceptor: true,
        node_agent: true,
    };
    let none = Leaving {
        daemonset_interceptor: false,
        node_agent: false,
    };
    let p = DrainPod::from_cached(&ds_pod, None, all);
    assert_eq!(
        (p.pod_type, p.priority, p.stays, p.has_request),
        (PodType::DaemonSet, 7, None, false)
    );
    assert_eq!(
        (p.name.as_str(), p.namespace.as_str(), p.uid.as_str()),
        ("agent", "kube-system", "u1")
    );
    assert_eq!(
        DrainPod::from_cached(&ds_pod, None, none).stays,
        Some(Stay::NoDaemonSetInterceptor)
    );

    ds_pod.metadata.annotations = Some(
        [(
            INTERCEPTORS_ANNOTATION.to_string(),
            "agent.example.com".to_string(),
        )]
        .into(),
    );
    assert!(DrainPod::from_cached(&ds_pod, None, none).leaves());

    let mut mirror = CachedPod::default();
    mirror.metadata.annotations =
        Some([(MIRROR_POD_ANNOTATION.to_string(), "x".to_string())].into());
    let p = DrainPod::from_cached(&mirror, None, none);
    assert_eq!(
        (p.pod_type, p.stays),
        (PodType::Static, Some(Stay::NoNodeAgent))
    );
    assert!(DrainPod::from_cached(&mirror, None, all).leaves());

    let mut done = CachedPod::default();
    done.status.phase = Some("Succeeded".into());
    let p = DrainPod::from_cached(&done, None, none);
    assert_eq!(
        (p.pod_type, p.leaves(), p.terminal),
        (PodType::Default, true, true)
    );
}

/// Two maintenances with incomparable targets, each holding the other back on a different node
/// (recorded progress differs per node): no single node is stuck, but the pair is. The older one
/// wins on the node where it is held back, and both then run to the end of their plans.
#[test]
fn waiting_cycle_across_nodes_is_broken_for_the_older_maintenance() {
    let pg: &[(&str, &str)] = &[("app", "pg")];
    let status = |node: &str, targets| NodeMaintenanceNodeStatus {
        node_ref: NodeReference { name: node.into() },
        drain_targets: targets,
        ..Default::default()
    };
    let mut m1 = nm(
        "m1",
        0,
        vec![d(1000), d(2000).sel(pg), d(3000)],
        &["n1", "n2"],
    );
    m1.drain_plan_position = Some(1);
    m1.node_statuses = vec![status("n1", vec![d(1000), d(2000).sel(pg)])];
    let mut m2 = nm("m2", 10, vec![d(1500), d(MAX)], &["n1", "n2"]);
    m2.drain_plan_position = Some(0);
    m2.node_statuses = vec![status("n2", vec![d(1500)])];
    let mut w = World::new(vec![m1, m2]);
    w.step();
    let resolved = DrainEvent::DeadlockResolved {
        node: "n2".into(),
        winner: "m1".into(),
    };
    assert!(w.out("m1").events.contains(&resolved) && w.out("m2").events.contains(&resolved));
    assert!(w.out("m1").drained);
    assert_eq!(
        (
            w.out("m1").drain_plan_position,
            w.out("m2").drain_plan_position
        ),
        (2, 1)
    );
    w.expect(
        "m2",
        "n1",
        &[d(3000), d(3000).sel(pg)],
        "Waiting for m1.",
        Some((0, 0)),
    );
    w.expect(
        "m2",
        "n2",
        &[d(3000), d(3000).sel(pg)],
        "Waiting for m1.",
        Some((0, 0)),
    );
}

/// SPEC 6.2: a skipped pod is never requested, stays and holds nothing; a pod waited for is not
/// requested but holds the node until it finished; both are listed in the node status.
#[test]
fn skipped_pods_stay_and_pods_waited_for_hold_the_node_until_they_finish() {
    use crate::api::DrainBehavior::{Skip, WaitCompleted};
    let mut w = World::new(vec![nm("m", 0, vec![d(MAX)], &["n"])]);
    w.add([
        pod("web").on("n"),
        pod("cache").on("n").behavior(Skip),
        pod("job").on("n").behavior(WaitCompleted),
    ]);
    w.step();
    let requested: Vec<&str> = w
        .out("m")
        .pods_to_request
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(requested, ["web"]);
    let s = w.status("m", "n");
    assert_eq!(s.skipped_pods, ["default/cache"]);
    assert_eq!(s.waiting_pods, ["default/job"]);
    assert_eq!(
        s.drain_message,
        "Evacuating; 1 pod waits to complete: default/job; 1 pod skipped: default/cache"
    );
    // The requested pod leaves: the pod waited for still holds the node.
    w.evict("web");
    w.step();
    assert!(!w.out("m").drained);
    // It finishes: the node is drained, the skipped pod still there.
    for p in w.input.pods.values_mut().flatten() {
        if p.name == "job" {
            p.terminal = true;
        }
    }
    w.step();
    assert!(w.out("m").drained);
    assert_eq!(w.status("m", "n").skipped_pods, ["default/cache"]);
}

/// SPEC 6.2: the pods `kubectl drain` refuses without `--force` / `--delete-emptydir-data` are
/// listed (Default pods only: DaemonSet pods keep their own behaviour), and still requested by the
/// API.
#[test]
fn unmanaged_and_local_data_pods_are_listed_and_requested() {
    let mut w = World::new(vec![nm("m", 0, vec![d(MAX), ds(MAX)], &["n"])]);
    w.add([
        pod("bare").on("n").unmanaged(),
        pod("scratch").on("n").local_data(),
        pod("both").on("n").unmanaged().local_data(),
        pod("agent").on("n").ds().unmanaged().local_data(),
    ]);
    w.step();
    let s = w.status("m", "n");
    assert_eq!(s.unmanaged_pods, ["default/bare", "default/both"]);
    assert_eq!(s.local_data_pods, ["default/scratch", "default/both"]);
    assert_eq!(w.out("m").pods_to_request.len(), 3);
}
