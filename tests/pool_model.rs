//! The pool's played scheduler and kubelet, without a cluster: kube-scheduler's filters and
//! choice of node, the kubelet's readiness from the readiness gates and its start and removal
//! delays (`tests/support/pool/schedule.rs`). The pool itself, on a real control plane, is
//! `tests/pool.rs`; the sampler's arithmetic, `tests/pool_measure.rs`.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;
use support::pool::schedule::{self, Seen, Step, Timing, Unfit};

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
