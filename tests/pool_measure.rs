//! The pool's measures, without a cluster: the sampler's arithmetic (PodDisruptionBudget floors,
//! replica-seconds lost, nodes held), the workload table, and the split of audited requests by
//! user agent (`tests/support/pool/`, `tests/support/audit.rs`). The pool itself, on a real
//! control plane, is `tests/pool.rs`; the played scheduler and kubelet, `tests/pool_model.rs`.

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use evictord::api::NodeMaintenance;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use support::audit::{
    self, client_of, controller_manager_controller, count_by_client, evictord_component,
};
use support::pool::measure::{Availability, floor_broken};
use support::pool::nodes::{NodeWatch, Peak, Span, held_nodes};
use support::pool::workloads::{self, Budget, MIX, Variant};

// ---- the sampler's arithmetic and the workload table ----

#[test]
fn a_pdb_floor_is_broken_below_min_available_or_beyond_max_unavailable() {
    let cases = [
        (Budget::None, 3, 0, false),
        (Budget::MinAvailable(1), 1, 1, false),
        (Budget::MinAvailable(1), 1, 0, true),
        (Budget::MaxUnavailable(1), 3, 2, false),
        (Budget::MaxUnavailable(1), 3, 1, true),
        (Budget::MaxUnavailable(1), 3, 4, false),
    ];
    for (budget, desired, available, want) in cases {
        assert_eq!(
            floor_broken(budget, desired, available),
            want,
            "{budget:?} {desired} {available}"
        );
    }
}

#[test]
fn unavailability_is_replica_seconds_below_desired_held_between_samples() {
    let mut a = Availability::new(3);
    let budget = Budget::MaxUnavailable(1);
    for (t, available) in [(0.0, 3), (1.0, 2), (1.5, 1), (2.0, 4), (3.0, 3)] {
        a.observe(t, available, budget);
    }
    // 2 held for 0.5 s (1 below), 1 held for 0.5 s (2 below): 0.5 + 1.0.
    assert!((a.unavailable_replica_seconds - 1.5).abs() < 1e-9, "{a:?}");
    assert_eq!(a.min_available, 1);
    assert!((a.min_ratio() - 1.0 / 3.0).abs() < 1e-9);
    assert_eq!(a.floor_broken_samples, 1);
    assert!((a.floor_broken_seconds - 0.5).abs() < 1e-9);
    assert_eq!(
        a.changes,
        vec![(0.0, 3), (1.0, 2), (1.5, 1), (2.0, 4), (3.0, 3)]
    );
    let mut steady = Availability::new(1);
    for t in 0..10 {
        steady.observe(f64::from(t), 1, Budget::MinAvailable(1));
    }
    assert_eq!(steady.unavailable_replica_seconds, 0.0);
    assert_eq!(
        steady.changes.len(),
        1,
        "only the first sample and changes are kept"
    );
}

#[test]
fn the_mix_sizes_to_the_pool_and_the_finishable_pool_leaves_out_single_replica_budgets() {
    let pods = |plan: &[(workloads::Row, usize)], nodes: usize| -> usize {
        plan.iter()
            .map(|(r, n)| match r.kind {
                workloads::Kind::DaemonSet => nodes,
                _ => *n * r.replicas as usize,
            })
            .sum()
    };
    let full = workloads::plan(MIX, 1000, 40, Variant::Full, false);
    let n = pods(&full, 40);
    assert!((990..=1010).contains(&n), "{n} pods");
    let finishable = workloads::plan(MIX, 1000, 40, Variant::Finishable, false);
    for ((row, a), (_, b)) in full.iter().zip(&finishable) {
        let want = if row.blocks_kubectl_drain { 0 } else { *a };
        assert_eq!(*b, want, "{}", row.name);
    }
    let small = workloads::plan(MIX, 30, 4, Variant::Full, true);
    assert!(small.iter().all(|(_, n)| *n >= 1), "{small:?}");
}

#[test]
fn an_unserved_interceptor_is_left_out_and_its_rows_leave_the_goal() {
    let hpa_row = MIX.iter().find(|r| r.hpa).unwrap();
    let only_deployment = vec![workloads::DEPLOYMENT.to_string()];
    assert_eq!(
        workloads::declared(hpa_row, &only_deployment),
        only_deployment
    );
    assert!(!workloads::under_goal(hpa_row, &only_deployment));
    let both = vec![
        workloads::HPA.to_string(),
        workloads::DEPLOYMENT.to_string(),
    ];
    assert_eq!(workloads::declared(hpa_row, &both), both);
    assert!(workloads::under_goal(hpa_row, &both));
    let statefulset = MIX
        .iter()
        .find(|r| r.kind == workloads::Kind::StatefulSet)
        .unwrap();
    assert!(!workloads::under_goal(statefulset, &both));
    // The endpoints interceptor changes when a pod stops serving, not how many replicas are
    // available: its row stays under the goal without it, and its pods carry it only when served.
    let behind_service = MIX.iter().find(|r| workloads::has_service(r)).unwrap();
    assert!(workloads::under_goal(behind_service, &both));
    assert!(!workloads::leaves_endpoints_first(behind_service, &both));
    let with_endpoints = vec![
        workloads::DEPLOYMENT.to_string(),
        workloads::ENDPOINTS.to_string(),
    ];
    assert!(workloads::leaves_endpoints_first(
        behind_service,
        &with_endpoints
    ));
}

#[test]
fn the_sampler_counts_nodes_cordoned_or_not_ready_and_held_and_sees_them_given_back() {
    let n = |name: &str, cordoned: bool, ready: bool| -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"unschedulable": cordoned},
                "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
            }))
            .unwrap(),
        )
    };
    let set = |v: &[&str]| -> std::collections::BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    };
    let mut w = NodeWatch::new(set(&["a", "b"]));
    // (t, nodes, held) → (cordoned, not ready, unavailable, held)
    let steps = [
        (
            0.0,
            vec![
                n("a", false, true),
                n("b", false, true),
                n("c", false, true),
            ],
            set(&[]),
            (0, 0, 0, 0),
        ),
        (
            1.0,
            vec![n("a", true, true), n("b", false, true), n("c", false, true)],
            set(&["a"]),
            (1, 0, 1, 1),
        ),
        // b NotReady counts both ways; a node outside the pool's list is never held.
        (
            2.0,
            vec![
                n("a", true, true),
                n("b", false, false),
                n("c", false, true),
            ],
            set(&["a", "z"]),
            (1, 1, 2, 2),
        ),
        // a given back; c cordoned by hand: unavailable, not held.
        (
            3.0,
            vec![n("a", false, true), n("b", false, true), n("c", true, true)],
            set(&[]),
            (1, 0, 1, 0),
        ),
    ];
    for (t, nodes, held, want) in steps {
        let c = w.observe(t, &nodes, Some(&held));
        assert_eq!(
            (c.cordoned, c.not_ready, c.unavailable, c.held.unwrap()),
            want,
            "at {t}"
        );
    }
    assert!(w.given_back("a"), "a was cordoned, then schedulable");
    assert!(!w.given_back("b"), "b was never cordoned");
    assert!(!w.given_back("c"), "c is not a drained node");
    let f = w.finish();
    assert_eq!(
        f.most_unavailable,
        Peak {
            count: 2,
            at: 2.0,
            nodes: vec!["a".into(), "b".into()]
        }
    );
    assert_eq!(f.most_held.unwrap().count, 2);
    assert_eq!(f.given_back, vec!["a".to_string()]);
    let a = f.spans.iter().find(|s| s.node == "a").unwrap();
    assert_eq!(
        a.cordoned,
        vec![Span {
            from: 1.0,
            to: Some(3.0)
        }]
    );
    assert_eq!(
        a.held,
        vec![Span {
            from: 1.0,
            to: Some(3.0)
        }]
    );
    let c = f.spans.iter().find(|s| s.node == "c").unwrap();
    assert_eq!(
        c.cordoned,
        vec![Span {
            from: 3.0,
            to: None
        }]
    );
    assert!(c.held.is_empty());
}

#[test]
fn a_maintenance_holds_its_admitted_nodes_until_it_gives_them_back() {
    let m = |name: &str, status: serde_json::Value| -> Arc<NodeMaintenance> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
                "metadata": {"name": name},
                "spec": {"nodeSelector": {"nodeSelectorTerms": []}, "stage": "Drain"},
                "status": status,
            }))
            .unwrap(),
        )
    };
    let condition = |status: &str| {
        json!([{"type": "Admitted", "status": status, "reason": "R", "message": "",
                "lastTransitionTime": "2026-11-26T00:00:00Z"}])
    };
    let cases = [
        (
            "queued",
            m("q", json!({"conditions": condition("False")})),
            vec![],
        ),
        (
            "admitted",
            m(
                "a",
                json!({"admission": {"nodes": [{"name": "n1"}, {"name": "n2"}]}, "conditions": condition("True")}),
            ),
            vec!["n1", "n2"],
        ),
        (
            "given back",
            m(
                "r",
                json!({"admission": {"nodes": [{"name": "n3"}], "releasedTime": "2026-11-26T00:01:00Z"}}),
            ),
            vec![],
        ),
        (
            "acted before records were kept",
            m(
                "e",
                json!({"conditions": condition("True"), "nodeStatuses": [{"nodeRef": {"name": "n4"}}]}),
            ),
            vec!["n4"],
        ),
    ];
    for (what, nm, want) in cases {
        let got: Vec<String> = held_nodes(&[nm]).into_iter().collect();
        assert_eq!(got, want, "{what}");
    }
}

// ---- kube-apiserver's requests by client (the pool benchmark's split) ----

#[test]
fn a_request_is_counted_for_the_client_its_user_agent_names() {
    let cases = [
        (
            "evictord/0.1.0 (controller; evictord-7d9c-x2x4q)",
            "evictord",
            Some("controller"),
        ),
        (
            "evictord/0.1.0 (node-agent; node-1)",
            "evictord",
            Some("node-agent"),
        ),
        ("evictord/0.1.0 (plugin)", "evictord", Some("plugin")),
        (
            "kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faddb23/deployment-controller",
            "kube-controller-manager",
            None,
        ),
        (
            "kubectl/v1.35.2 (linux/amd64) kubernetes/abc",
            "kubectl",
            None,
        ),
        ("pool-kubelet", "pool-kubelet", None),
        ("pool-scheduler", "pool-scheduler", None),
        (
            "kube-apiserver/v1.20.2 (linux/amd64) kubernetes/faddb23",
            "kube-apiserver",
            None,
        ),
        (
            support::control_plane::HARNESS_USER_AGENT,
            "test-harness",
            None,
        ),
        ("", "other", None),
        ("Go-http-client/2.0", "other", None),
        // A name that only starts like evictord's is not evictord's.
        ("evictord-bench", "other", None),
    ];
    for (ua, client, component) in cases {
        assert_eq!(client_of(ua), client, "{ua:?}");
        assert_eq!(evictord_component(ua), component, "{ua:?}");
    }
    // kube-controller-manager's controllers each name themselves after the commit.
    let controllers = [
        (
            "kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faecb19/replicaset-controller",
            Some("replicaset-controller"),
        ),
        (
            "kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faecb19/metadata-informers",
            Some("metadata-informers"),
        ),
        (
            "kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faecb19",
            None,
        ),
        (
            "kubectl/v1.35.2 (linux/amd64) kubernetes/abc/deployment-controller",
            None,
        ),
    ];
    for (ua, controller) in controllers {
        assert_eq!(controller_manager_controller(ua), controller, "{ua:?}");
    }
    let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
    let request = |ua: &str, s: u64| audit::AuditedRequest {
        user: "admin".into(),
        user_agent: ua.into(),
        verb: "get".into(),
        resource: "pods".into(),
        code: 200,
        received: at(s),
        uri: "/api/v1/pods".into(),
    };
    let log = [
        request("evictord/0.1.0 (controller; a)", 9),
        request("evictord/0.1.0 (controller; a)", 10),
        request("evictord/0.1.0 (interceptor; a)", 11),
        request("kubectl/v1.35.2", 12),
        request("", 13),
        request("pool-kubelet", 21),
        request(
            "kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faecb19/disruption-controller",
            14,
        ),
        request(
            "kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faecb19",
            15,
        ),
    ];
    let counts = count_by_client(&log, at(10), at(20));
    assert_eq!(counts.total, 6);
    assert_eq!(counts.of("kube-controller-manager"), 2);
    assert_eq!(
        counts.controller_manager_by_controller["disruption-controller"],
        1
    );
    assert_eq!(counts.controller_manager_by_controller["-"], 1);
    assert_eq!(
        counts.controller_manager_by_request["disruption-controller get pods 200"],
        1
    );
    assert_eq!(counts.of("evictord"), 2);
    assert_eq!(counts.of("kubectl"), 1);
    assert_eq!(counts.of("pool-kubelet"), 0);
    assert_eq!(counts.evictord_by_component["controller"], 1);
    assert_eq!(counts.evictord_by_component["interceptor"], 1);
    assert_eq!(counts.other_user_agents[""], 1);
}
