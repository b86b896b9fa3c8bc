//! A small node pool on a real kube-apiserver with kube-controller-manager, drained both ways
//! evictord offers — one NodeMaintenance, and the real `kubectl drain` through the Eviction API
//! bridge — and rolled one node at a time by `kubectl evictord rollout` (through the real
//! kubectl), with the availability of every workload sampled every 100 ms: no Deployment under
//! the goal (its declared interceptors all served) loses a replica for any time, no
//! PodDisruptionBudget floor is broken, no pod but the DaemonSet's is left on the drained
//! nodes, the rollout never has more nodes cordoned or held than its budget, and where only
//! evictord evicts, its bridge hands none of its own Eviction API calls back. The garbage
//! collector runs, as on every cluster: the requests of the pods evictord evicted are left to it
//! (not marked `Evicted` just before their deletion), and `kubectl drain`'s last retry for a pod
//! evictord evicted costs the webhook no read. kube-apiserver
//! writes every request to its audit log, and each drain's requests are split by client as the
//! pool benchmark splits them: every request's client named (none unattributed), evictord's
//! present, with the components that drain uses. The pool benchmark (`make bench`, part `pool`)
//! runs the same at scale, beside `kubectl drain` alone and the script users write today. Also
//! the table tests of the played scheduler's and kubelet's rules, of the sampler's arithmetic
//! (`tests/support/pool/`) and of the split by user agent.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use evictord::api::{CONDITION_DRAINED, NodeMaintenance, ROLLOUT_LABEL};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::audit::{self, ClientCounts, client_of, count_by_client, evictord_component};
use support::pool::measure::{Availability, Samples, floor_broken};
use support::pool::nodes::{NodeWatch, Peak, Span, held_nodes};
use support::pool::schedule::{self, Seen, Step, Timing, Unfit};
use support::pool::workloads::{self, Budget, MIX, Variant};
use support::pool::{DRAIN_LABEL, Pool, Spec};
use support::wait::until;

// ---- the played scheduler and kubelet (pure rules) ----

fn node(name: &str, spec: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"zone": "a"}}, "spec": spec,
    }))
    .unwrap()
}

fn pod(spec: serde_json::Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "x"}]);
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
}

/// The DaemonSet controller's affinity for one node.
fn daemonset_pod(node: &str, tolerations: serde_json::Value) -> Pod {
    pod(json!({
        "tolerations": tolerations,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}
            ]}]
        }}}
    }))
}

#[test]
fn a_node_fits_a_pod_by_kube_schedulers_filters() {
    let unschedulable = json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"});
    let maintenance = json!([{"key": "evictord.dev/maintenance", "effect": "NoSchedule"}]);
    let cases: Vec<(&str, Pod, Node, Result<(), Unfit>)> = vec![
        ("plain node", pod(json!({})), node("a", json!({})), Ok(())),
        (
            "cordoned",
            pod(json!({})),
            node("a", json!({"unschedulable": true})),
            Err(Unfit::Unschedulable),
        ),
        (
            "cordoned, tolerated (DaemonSet pods)",
            daemonset_pod("a", json!([unschedulable])),
            node("a", json!({"unschedulable": true})),
            Ok(()),
        ),
        (
            "NoSchedule taint",
            pod(json!({})),
            node("a", json!({"taints": maintenance})),
            Err(Unfit::Taint("evictord.dev/maintenance".into())),
        ),
        (
            "NoExecute taint",
            pod(json!({})),
            node(
                "a",
                json!({"taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]}),
            ),
            Err(Unfit::Taint("k".into())),
        ),
        (
            "PreferNoSchedule never filters",
            pod(json!({})),
            node(
                "a",
                json!({"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}),
            ),
            Ok(()),
        ),
        (
            "the maintenance taint tolerated by key",
            pod(
                json!({"tolerations": [{"key": "evictord.dev/maintenance", "operator": "Exists"}]}),
            ),
            node("a", json!({"taints": maintenance})),
            Ok(()),
        ),
        (
            "taint tolerated by key and value",
            pod(json!({"tolerations": [{"key": "k", "value": "v", "effect": "NoExecute"}]})),
            node(
                "a",
                json!({"taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]}),
            ),
            Ok(()),
        ),
        (
            "toleration of another value",
            pod(json!({"tolerations": [{"key": "k", "value": "w"}]})),
            node(
                "a",
                json!({"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}),
            ),
            Err(Unfit::Taint("k".into())),
        ),
        (
            "toleration of every taint",
            pod(json!({"tolerations": [{"operator": "Exists"}]})),
            node("a", json!({"taints": maintenance, "unschedulable": true})),
            Ok(()),
        ),
        (
            "DaemonSet affinity to this node",
            daemonset_pod("a", json!([])),
            node("a", json!({})),
            Ok(()),
        ),
        (
            "DaemonSet affinity to another node",
            daemonset_pod("b", json!([])),
            node("a", json!({})),
            Err(Unfit::Affinity),
        ),
        (
            "nodeSelector matching",
            pod(json!({"nodeSelector": {"zone": "a"}})),
            node("a", json!({})),
            Ok(()),
        ),
        (
            "nodeSelector not matching",
            pod(json!({"nodeSelector": {"zone": "b"}})),
            node("a", json!({})),
            Err(Unfit::Affinity),
        ),
    ];
    for (what, p, n, want) in cases {
        assert_eq!(schedule::fits(&p, &n), want, "{what}");
    }
}

#[test]
fn a_pending_pod_goes_to_the_least_loaded_node_it_fits() {
    let nodes = vec![
        node("a", json!({})),
        node("b", json!({"unschedulable": true})),
        node("c", json!({})),
        node("d", json!({})),
    ];
    let load = |v: &[(&str, usize)]| -> BTreeMap<String, usize> {
        v.iter().map(|(n, c)| (n.to_string(), *c)).collect()
    };
    let cases = [
        (
            "fewest pods",
            load(&[("a", 3), ("c", 1), ("d", 2)]),
            Some("c"),
        ),
        (
            "a node without pods",
            load(&[("a", 3), ("c", 1)]),
            Some("d"),
        ),
        (
            "ties by name",
            load(&[("a", 1), ("c", 1), ("d", 1)]),
            Some("a"),
        ),
        (
            "a cordoned node is never chosen, however empty",
            load(&[("a", 5), ("c", 5), ("d", 5)]),
            Some("a"),
        ),
    ];
    for (what, l, want) in cases {
        assert_eq!(
            schedule::choose_node(&pod(json!({})), &nodes, &l),
            want,
            "{what}"
        );
    }
    let only_cordoned = vec![node("b", json!({"unschedulable": true}))];
    assert_eq!(
        schedule::choose_node(&pod(json!({})), &only_cordoned, &BTreeMap::new()),
        None,
        "no node fits"
    );
}

#[test]
fn the_load_counts_bound_pods_that_have_not_ended() {
    let bound = |node: &str, phase: &str| -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": phase},
            }))
            .unwrap(),
        )
    };
    let pods = vec![
        bound("a", "Running"),
        bound("a", "Pending"),
        bound("a", "Succeeded"),
        bound("b", "Failed"),
        Arc::new(pod(json!({}))),
    ];
    let load = schedule::load(&pods);
    assert_eq!(load.get("a"), Some(&2));
    assert_eq!(load.get("b"), None);
}

fn kubelet_pod(extra: serde_json::Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "a", "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "c", "image": "x"}]},
    });
    if let Some(m) = extra.get("metadata") {
        for (k, val) in m.as_object().unwrap() {
            v["metadata"][k] = val.clone();
        }
    }
    if let Some(s) = extra.get("status") {
        v["status"] = s.clone();
    }
    if let Some(g) = extra.get("readinessGates") {
        v["spec"]["readinessGates"] = g.clone();
    }
    serde_json::from_value(v).unwrap()
}

/// A started pod (containers ready) with the `evictord.dev/serving` gate: its `Ready` and the
/// gate's condition (`None`: not written yet).
fn gated_pod(ready: bool, serving: Option<bool>) -> Pod {
    let status = |b: bool| if b { "True" } else { "False" };
    let mut conditions = vec![
        json!({"type": "ContainersReady", "status": "True"}),
        json!({"type": "Ready", "status": status(ready)}),
    ];
    if let Some(s) = serving {
        conditions.push(json!({"type": "evictord.dev/serving", "status": status(s)}));
    }
    kubelet_pod(json!({
        "readinessGates": [{"conditionType": "evictord.dev/serving"}],
        "status": {"phase": "Running", "conditions": conditions},
    }))
}

/// A kubelet's `Ready` is its containers' readiness and every readiness gate: the played kubelet
/// follows the gate's condition both ways, and leaves a pod without gates alone once started.
#[test]
fn the_kubelet_computes_ready_from_the_readiness_gates() {
    let timing = Timing::default();
    let t0 = Instant::now();
    let bound = Seen {
        bound: Some(t0),
        deleting: None,
    };
    let started = json!({"status": {"phase": "Running", "conditions": [
        {"type": "ContainersReady", "status": "True"}, {"type": "Ready", "status": "True"}]}});
    let cases = [
        (
            "no gate, started and Ready",
            kubelet_pod(started),
            Step::Wait,
        ),
        (
            "gate not written yet, unready",
            gated_pod(false, None),
            Step::Wait,
        ),
        (
            "gate True, unready",
            gated_pod(false, Some(true)),
            Step::Gate(true),
        ),
        ("gate True, Ready", gated_pod(true, Some(true)), Step::Wait),
        (
            "gate False, Ready",
            gated_pod(true, Some(false)),
            Step::Gate(false),
        ),
        (
            "gate False, unready",
            gated_pod(false, Some(false)),
            Step::Wait,
        ),
    ];
    for (what, p, want) in cases {
        assert_eq!(
            schedule::kubelet_step(&p, &bound, t0 + Duration::from_secs(9), &timing),
            want,
            "{what}"
        );
    }
}

#[test]
fn the_kubelet_starts_a_pod_after_its_delay_and_removes_it_after_its_grace_period() {
    let timing = Timing::default();
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let deleting = json!({"metadata": {"deletionTimestamp": "2026-11-25T00:00:00Z", "deletionGracePeriodSeconds": 30}});
    let quick = json!({"metadata": {"deletionTimestamp": "2026-11-25T00:00:00Z", "deletionGracePeriodSeconds": 1}});
    let bound = Seen {
        bound: Some(t0),
        deleting: None,
    };
    let dying = Seen {
        bound: Some(t0),
        deleting: Some(t0),
    };
    let cases = [
        (
            "bound, within the start delay",
            kubelet_pod(json!({})),
            bound,
            at(1.9),
            Step::Wait,
        ),
        (
            "bound, start delay over",
            kubelet_pod(json!({})),
            bound,
            at(2.0),
            Step::Ready,
        ),
        (
            "already Ready",
            kubelet_pod(ready.clone()),
            bound,
            at(9.0),
            Step::Wait,
        ),
        (
            "deleting, within 2 s",
            kubelet_pod(deleting.clone()),
            dying,
            at(1.5),
            Step::Wait,
        ),
        (
            "deleting, 2 s over",
            kubelet_pod(deleting.clone()),
            dying,
            at(2.0),
            Step::Remove,
        ),
        (
            "deleting, the pod's own 1 s grace",
            kubelet_pod(quick),
            dying,
            at(1.0),
            Step::Remove,
        ),
        (
            "deletion not seen yet",
            kubelet_pod(deleting),
            bound,
            at(60.0),
            Step::Wait,
        ),
    ];
    for (what, p, seen, now, want) in cases {
        assert_eq!(
            schedule::kubelet_step(&p, &seen, now, &timing),
            want,
            "{what}"
        );
    }
}

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
    ];
    let counts = count_by_client(&log, at(10), at(20));
    assert_eq!(counts.total, 4);
    assert_eq!(counts.of("evictord"), 2);
    assert_eq!(counts.of("kubectl"), 1);
    assert_eq!(counts.of("pool-kubelet"), 0);
    assert_eq!(counts.evictord_by_component["controller"], 1);
    assert_eq!(counts.evictord_by_component["interceptor"], 1);
    assert_eq!(counts.other_user_agents[""], 1);
}

// ---- the pool on the real control plane ----

/// 4 nodes, 2 drained, about 30 pods: every row of the mix.
fn small_pool(variant: Variant) -> Spec {
    Spec {
        nodes: 4,
        drained: 2,
        pods: 30,
        variant,
        timing: Timing::default(),
        served: workloads::SERVED.iter().map(|s| s.to_string()).collect(),
        at_least_one: true,
    }
}

async fn settled_pool(client: &Client, ns: &str, variant: Variant) -> Pool {
    let pool = Pool::create(control_plane().await, client, ns, ns, &small_pool(variant))
        .await
        .expect("creating the pool");
    pool.wait_settled(Duration::from_secs(150))
        .await
        .expect("the pool settled");
    pool
}

fn report(s: &Samples) -> String {
    s.workloads
        .iter()
        .filter(|w| {
            w.availability.unavailable_replica_seconds > 0.0
                || w.availability.floor_broken_samples > 0
        })
        .map(|w| {
            format!(
                "{} ({}): min {}/{}, {:.1} replica-s, floor broken {} samples",
                w.tracked.name,
                w.tracked.row,
                w.availability.min_available,
                w.tracked.desired,
                w.availability.unavailable_replica_seconds,
                w.availability.floor_broken_samples
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The goal: no Deployment under it lost a replica, no floor broken, the nodes empty.
fn assert_no_downtime(s: &Samples, how: &str) {
    assert!(s.samples > 50, "{how}: only {} samples", s.samples);
    assert!(
        s.workloads.iter().any(|w| w.tracked.goal),
        "{how}: no Deployment under the goal"
    );
    assert!(
        !s.departures.is_empty(),
        "{how}: no pod left the drained nodes"
    );
    let misses = s.goal_misses();
    assert!(
        misses.is_empty(),
        "{how}: {} Deployments lost availability:\n{}",
        misses.len(),
        report(s)
    );
    assert!(
        s.floors_broken().is_empty(),
        "{how}: PodDisruptionBudget floors broken:\n{}",
        report(s)
    );
    assert!(
        s.left_on_drained.is_empty(),
        "{how}: pods left on the drained nodes: {:?}",
        s.left_on_drained
    );
}

/// This binary's control plane: kube-apiserver writing every request to its audit log (from
/// its start: every test must come through here), kube-controller-manager running.
async fn control_plane() -> &'static support::TestCluster {
    support::control_plane::cluster_with_request_audit().await;
    support::control_plane::cluster_with_controller_manager().await
}

/// kube-apiserver's requests received since `from`, by client (as the pool benchmark splits
/// them), printed; the split must be whole and must see evictord: every request is named by
/// its client (none `other`: a client without a user agent would hide its requests), and
/// evictord sent some, from each of `components`. (The tests of this binary run side by side:
/// the window holds the others' requests too.)
fn requests_by_client(
    how: &str,
    requests: &[audit::AuditedRequest],
    from: SystemTime,
    components: &[&str],
) -> ClientCounts {
    let counts = count_by_client(requests, from, SystemTime::now());
    eprintln!(
        "{how}: {} kube-apiserver requests by client {:?}, evictord's by component {:?}",
        counts.total, counts.by_client, counts.evictord_by_component
    );
    assert!(
        counts.other_user_agents.is_empty(),
        "{how}: requests of unnamed clients, by user agent: {:?}",
        counts.other_user_agents
    );
    assert!(
        counts.of("evictord") > 0,
        "{how}: no request of evictord's: {counts:?}"
    );
    for component in components {
        assert!(
            counts.evictord_by_component.contains_key(*component),
            "{how}: no request of evictord's {component}: {counts:?}"
        );
    }
    counts
}

/// Every request in this binary's kube-apiserver audit log so far.
async fn audited() -> Vec<audit::AuditedRequest> {
    let c = control_plane().await;
    audit::requests(c.request_audit.as_ref().expect("the request audit log"))
}

/// The UIDs of `ns`'s pods now, by name, and the names generated from a `generateName`.
async fn pod_names(client: &Client, ns: &str) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("the pool's pods");
    let mut uids = BTreeMap::new();
    let mut generated = BTreeSet::new();
    for p in pods {
        let name = p.metadata.name.clone().unwrap_or_default();
        if p.metadata.generate_name.is_some() {
            generated.insert(name.clone());
        }
        uids.insert(name, p.metadata.uid.unwrap_or_default());
    }
    (uids, generated)
}

async fn setup(prefix: &str) -> (Client, String) {
    let c = control_plane().await;
    support::evictord::shared(support::surge::FLAGS).await;
    // As on every real cluster (and in the pool benchmark): the requests evictord creates are
    // deleted with their pods.
    support::control_plane::start_garbage_collector(c).await;
    (c.client().await, c.namespace(prefix).await)
}

#[tokio::test]
async fn a_node_maintenance_drains_a_pool_without_downtime() {
    let (client, ns) = setup("pool-nm").await;
    let pool = settled_pool(&client, &ns, Variant::Full).await;
    let sampler = pool.sample(Duration::from_secs(300)).await.unwrap();
    let (uids, _) = pod_names(&client, &ns).await;
    let from = SystemTime::now();
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let nm = support::fixtures::draining_maintenance(&ns, DRAIN_LABEL, &ns, "pool test");
    nms.create(&PostParams::default(), &nm).await.unwrap();
    until(
        Duration::from_secs(180),
        "the NodeMaintenance Drained",
        || async {
            let nm = nms.get(&ns).await.ok()?;
            nm.status?.is_true(CONDITION_DRAINED).then_some(())
        },
    )
    .await;
    pool.wait_restored(Duration::from_secs(90))
        .await
        .expect("the Deployments back at their replicas");
    let samples = sampler.stop().await;
    let requests = audited().await;
    let counts = requests_by_client(
        "NodeMaintenance",
        &requests,
        from,
        &["controller", "interceptor"],
    );
    for client in [
        "pool-kubelet",
        "pool-scheduler",
        "kube-controller-manager",
        "test-harness",
    ] {
        assert!(
            counts.of(client) > 0,
            "no request of {client}'s: {counts:?}"
        );
    }
    audit::assert_own_evictions_not_bridged(&requests, &ns, from, "NodeMaintenance");
    // The requests of the pods the controller evicted are left to the garbage collector; one in
    // ten may be written if the collector is far behind on a loaded machine.
    let (late, evicted) = audit::status_writes_after_pod_gone(&requests, &ns, from, &uids);
    assert!(
        evicted > 0 && late.len() * 10 <= evicted,
        "NodeMaintenance: {} status writes of requests after their pod was gone, for {evicted} \
         pods the controller evicted: {late:#?}",
        late.len()
    );
    assert_no_downtime(&samples, "NodeMaintenance");
    let _ = nms.delete(&ns, &DeleteParams::default()).await;
    pool.remove().await.unwrap();
}

#[tokio::test]
async fn kubectl_drain_through_the_bridge_drains_a_pool_without_downtime() {
    let (client, ns) = setup("pool-kubectl").await;
    let pool = settled_pool(&client, &ns, Variant::Full).await;
    let sampler = pool.sample(Duration::from_secs(300)).await.unwrap();
    let (_, generated) = pod_names(&client, &ns).await;
    let from = SystemTime::now();
    let (code, output) = kubectl_drain(&pool, Duration::from_secs(200)).await;
    assert_eq!(code, Some(0), "kubectl drain failed:\n{output}");
    assert!(
        output.contains("Eviction triggered"),
        "the bridge never answered:\n{output}"
    );
    pool.wait_restored(Duration::from_secs(90))
        .await
        .expect("the Deployments back at their replicas");
    let samples = sampler.stop().await;
    let requests = audited().await;
    let counts = requests_by_client(
        "kubectl drain through the bridge",
        &requests,
        from,
        &["webhook", "controller"],
    );
    // kubectl's last retry comes after evictord evicted the pod: a generated name the webhook's
    // cache saw deleted is not read again.
    let reads = audit::webhook_reads_of_gone_pods(&requests, &ns, from, &generated);
    assert!(
        reads.is_empty(),
        "kubectl drain through the bridge: the webhook read pods it had seen deleted: {reads:#?}"
    );
    assert!(
        counts.of("kubectl") > 0,
        "no request of kubectl's: {counts:?}"
    );
    assert_no_downtime(&samples, "kubectl drain through the bridge");
    pool.remove().await.unwrap();
}

/// `kubectl evictord rollout` of the drained nodes one at a time, through the real kubectl, with
/// a step that records each node: the step runs once per node, never more than one node is
/// cordoned (or held by a maintenance) at once, every node is given back, the rollout's objects
/// are gone, and no Deployment under the goal loses a replica.
#[tokio::test]
async fn a_rollout_rolls_a_pool_one_node_at_a_time_without_downtime() {
    let (client, ns) = setup("pool-roll").await;
    let c = control_plane().await;
    let pool = settled_pool(&client, &ns, Variant::Full).await;
    let ran = c.dir.join(format!("rollout-steps-{ns}"));
    let log = c.dir.join(format!("rollout-{ns}.log"));
    let step = format!("echo \"$EVICTORD_NODE\" >> {}", ran.display());
    let selector = format!("{DRAIN_LABEL}={ns}");
    let sampler = pool.sample(Duration::from_secs(300)).await.unwrap();
    let from = SystemTime::now();
    let args = [
        "rollout",
        &ns,
        "-l",
        &selector,
        "--max-unavailable",
        "1",
        "--exec",
        &step,
        "--timeout",
        "200s",
        // The pool's bare pods and emptyDir volumes, as kubectl drain's flags say.
        "--force",
        "--delete-emptydir-data",
    ];
    let file = std::fs::File::create(&log).unwrap();
    let mut child = support::plugin::plugin_command(&args)
        .await
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("kubectl evictord rollout");
    let deadline = Instant::now() + Duration::from_secs(230);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, Some(0), "kubectl evictord rollout:\n{output}");
    pool.wait_restored(Duration::from_secs(90))
        .await
        .expect("the Deployments back at their replicas");
    let samples = sampler.stop().await;
    let mut stepped: Vec<String> = std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    stepped.sort();
    assert_eq!(stepped, pool.drained, "the step once per node:\n{output}");
    let nodes = &samples.nodes;
    assert!(
        nodes.most_unavailable.count <= 1,
        "more than one node cordoned or NotReady at once: {:?}\n{output}",
        nodes.most_unavailable
    );
    let held = nodes.most_held.as_ref().expect("the maintenances watched");
    assert!(held.count <= 1, "more than one node held at once: {held:?}");
    let mut back = nodes.given_back.clone();
    back.sort();
    assert_eq!(back, pool.drained, "every node given back");
    // The rollout deletes its maintenances at the end; evictord removes their finalizers.
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let mine = ListParams::default().labels(&format!("{ROLLOUT_LABEL}={ns}"));
    until(
        Duration::from_secs(60),
        "the rollout's maintenances gone",
        || async { nms.list(&mine).await.ok()?.items.is_empty().then_some(()) },
    )
    .await;
    let requests = audited().await;
    requests_by_client(
        "kubectl evictord rollout",
        &requests,
        from,
        &["plugin", "controller"],
    );
    audit::assert_own_evictions_not_bridged(&requests, &ns, from, "kubectl evictord rollout");
    assert_no_downtime(&samples, "kubectl evictord rollout");
    eprintln!(
        "rollout: {} pods moved of {} on the rolled nodes at the start",
        samples.departures.len(),
        samples.pods_on_drained_at_start
    );
    pool.remove().await.unwrap();
}

/// The measurement can fail: `kubectl drain` alone (no evictord on the control plane; run this
/// test on its own, `cargo test --test pool -- --ignored`) of the pool without the 1-replica
/// budgets finishes, and the sampler sees the Deployments lose replicas.
#[tokio::test]
#[ignore = "needs a control plane without evictord: run alone with --ignored"]
async fn kubectl_drain_alone_loses_availability() {
    let c = control_plane().await;
    let client = c.client().await;
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        webhooks.items.is_empty(),
        "evictord's webhooks are registered: run this test alone"
    );
    let ns = c.namespace("pool-alone").await;
    let pool = settled_pool(&client, &ns, Variant::Finishable).await;
    let sampler = pool.sample(Duration::from_secs(300)).await.unwrap();
    let (code, output) = kubectl_drain(&pool, Duration::from_secs(200)).await;
    assert_eq!(code, Some(0), "kubectl drain failed:\n{output}");
    pool.wait_restored(Duration::from_secs(90)).await.unwrap();
    let samples = sampler.stop().await;
    let misses = samples.goal_misses();
    assert!(
        !misses.is_empty(),
        "kubectl drain alone cost no Deployment a replica:\n{}",
        report(&samples)
    );
    eprintln!("kubectl drain alone:\n{}", report(&samples));
    pool.remove().await.unwrap();
}

/// `kubectl drain` of the pool's drained nodes in one call, with the flags of `make bench`;
/// returns its exit code (`None`: killed after `within`) and its output.
async fn kubectl_drain(pool: &Pool, within: Duration) -> (Option<i32>, String) {
    let c = control_plane().await;
    let mut args = vec!["drain".to_string()];
    args.extend(pool.drained.iter().cloned());
    args.extend(
        support::pool::KUBECTL_DRAIN_FLAGS
            .iter()
            .map(|s| s.to_string()),
    );
    args.push(format!("--timeout={}s", within.as_secs()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = c.dir.join(format!("kubectl-drain-{}.log", pool.id));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = support::tools::kubectl_command(c, &args)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .expect("kubectl drain");
    let deadline = Instant::now() + within + Duration::from_secs(10);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    (code, std::fs::read_to_string(&log).unwrap_or_default())
}
