//! The soak's checker on made-up inputs (no control plane): each broken invariant reported while
//! it runs, and what a violation's report says — the audit log's removals and the logs' lines
//! (`tests/support/soak/checker.rs`, `tests/support/soak/evidence.rs`). The soak itself is
//! `tests/soak.rs`.

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use support::soak::checker::{Checker, Inputs};
use support::soak::replicas::Started;

#[test]
fn a_violation_names_its_pods_and_kube_apiservers_log_lines_are_dated() {
    use support::soak::evidence::{klog_time, pods_named};
    let what = "dw-000 below desired (goal) (dw, MaxUnavailable(1)): 2 available of 3 desired; \
                pods: dw-000-98cfbbc65-w8rtr (Pending on \"n2\"), dw-000-98cfbbc65-vr6v6 \
                (Running, terminating on \"n4\")";
    assert_eq!(
        pods_named(what),
        ["dw-000-98cfbbc65-w8rtr", "dw-000-98cfbbc65-vr6v6"]
    );
    assert!(pods_named("pod x (UID u) evicted twice by evictord").is_empty());
    let tz = jiff::tz::TimeZone::system();
    let near: jiff::Timestamp = "2026-11-29T02:44:40Z".parse().unwrap();
    let written = near.to_zoned(tz.clone()) - jiff::SignedDuration::from_secs(2);
    let line = format!(
        "{} 24200 dispatcher.go:170] Failed calling webhook, failing open x: EOF",
        written.strftime("W%m%d %H:%M:%S%.6f")
    );
    assert_eq!(
        klog_time(&line, near.into()),
        Some(written.timestamp().into())
    );
    assert_eq!(klog_time("not a klog line", near.into()), None);

    // The events of the pods and of their requests (by UID), oldest first; others left out.
    let event = |kind: &str, name: &str, at: &str, reason: &str| {
        serde_json::from_value::<k8s_openapi::api::core::v1::Event>(serde_json::json!({
            "metadata": {"name": format!("{name}.{reason}"), "namespace": "ns"},
            "involvedObject": {"kind": kind, "name": name},
            "lastTimestamp": at, "type": "Normal", "reason": reason, "message": "m",
        }))
        .unwrap()
    };
    let events = [
        event("EvictionRequest", "u1", "2026-11-29T02:44:35Z", "Evicted"),
        event("Pod", "p", "2026-11-29T02:44:30Z", "EvictionIntercepted"),
        event("Pod", "other", "2026-11-29T02:44:31Z", "Killing"),
    ];
    assert_eq!(
        support::soak::evidence::event_lines(&events, &["p".into(), "u1".into()]),
        [
            "event: 2026-11-29T02:44:30Z Pod/p Normal EvictionIntercepted: m",
            "event: 2026-11-29T02:44:35Z EvictionRequest/u1 Normal Evicted: m",
        ]
    );
}

#[tokio::test]
async fn the_checker_reports_each_broken_invariant_while_it_runs() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::runtime::{reflector, watcher};
    use support::pool::workloads::{Budget, WORKLOAD_LABEL};

    let dir = tempfile::tempdir().unwrap();
    let (pods, mut pods_writer) = reflector::store::<Pod>();
    let (nodes, _nodes_writer) = reflector::store::<Node>();
    for (name, uid, ready) in [("d3-a", "u1", "True"), ("d3-b", "u2", "False")] {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid,
                         "labels": {WORKLOAD_LABEL: "d3-000"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
        }))
        .unwrap();
        pods_writer.apply_watcher_event(&watcher::Event::Apply(pod));
    }
    let t0 = jiff::Timestamp::now();
    let at = |s: i64| (t0 + jiff::SignedDuration::from_secs(s)).to_string();
    let log = dir.path().join("a.log");
    std::fs::write(
        &log,
        format!(
            "{} INFO evictord: acquired leadership\n{} WARN evictord::admission::pod_eviction::shell: eviction call not bridged; failurePolicy decides name=d3-b\n\
             {} INFO interceptor{{request=ns/u2}}: Surged from 3 to 4 replicas\n",
            at(0),
            at(-6),
            at(-7)
        ),
    )
    .unwrap();
    // kube-apiserver's log (klog, local time) and a kubectl drain log that name the pod.
    let klog = |s: i64| {
        let t = (t0 + jiff::SignedDuration::from_secs(s)).to_zoned(jiff::tz::TimeZone::system());
        t.strftime("W%m%d %H:%M:%S%.6f   4242 dispatcher.go:170]")
            .to_string()
    };
    std::fs::write(
        dir.path().join("apiserver.err"),
        format!(
            "{} Failed calling webhook, failing open pods-eviction.validate.evictord.dev: EOF\n\
             {} Failed calling webhook, failing open pods-eviction.validate.evictord.dev: long before\n",
            klog(-5),
            klog(-600)
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("soak-kubectl-drain-1-1.log"),
        "evicting pod ns/d3-b\nevicting pod ns/d3-c\n",
    )
    .unwrap();
    let audit = dir.path().join("audit.log");
    let call = |pod: &str, who: &str, s: i64| {
        serde_json::json!({
            "stage": "ResponseComplete", "verb": "create",
            "objectRef": {"resource": "pods", "subresource": "eviction", "namespace": "ns", "name": pod},
            "userAgent": format!("evictord/0.1.0 (controller; {who})"),
            "responseStatus": {"code": 201}, "requestReceivedTimestamp": at(s),
        })
        .to_string()
    };
    // A delete by another client that passed a failed webhook, before the violations.
    let delete = serde_json::json!({
        "stage": "ResponseComplete", "verb": "delete",
        "objectRef": {"resource": "pods", "namespace": "ns", "name": "d3-b"},
        "userAgent": "kubectl/v1.35.0", "responseStatus": {"code": 200},
        "requestReceivedTimestamp": at(-5), "stageTimestamp": at(-4),
        "annotations": {"failed-open.validating.webhook.admission.k8s.io/round_0_index_0": "pods.evictord.dev"},
    })
    .to_string();
    let lines = [
        delete,
        call("d3-a", "a", 1),
        call("d3-a", "a", 2),
        call("d3-b", "b", 3),
    ];
    std::fs::write(&audit, lines.join("\n") + "\n").unwrap();
    let checker = Checker::start(Inputs {
        replicas: Arc::new(std::sync::Mutex::new(vec![Started {
            identity: "a".into(),
            log,
            old: false,
            started: SystemTime::now(),
        }])),
        ..one_deployment(pods, nodes, dir.path(), Budget::MaxUnavailable(1))
    });
    support::wait::until(
        Duration::from_secs(10),
        "four violations while running",
        || {
            let n = checker.violations_so_far();
            async move { (n >= 4).then_some(()) }
        },
    )
    .await;
    let (violations, counts) = checker.stop().await;
    let text: Vec<&str> = violations.iter().map(|v| v.what.as_str()).collect();
    assert_eq!(violations.len(), 4, "{text:#?}");
    assert!(
        text[0].contains("below desired (goal)") && text[0].contains("1 available of 3"),
        "{text:#?}"
    );
    assert!(text[1].contains("PDB floor broken"), "{text:#?}");
    // Each violation of a workload names who removed its pods just before, and what the logs
    // say of them: kube-apiserver's webhooks that failed open in the window (not before it),
    // kubectl drain's lines and the replicas' lines that name the pods.
    let evidence = &violations[0].evidence;
    let has = |want: &str| evidence.iter().any(|r| r.contains(want));
    assert!(
        has("removed before: ")
            && has(
                "delete d3-b by \"kubectl/v1.35.0\" answered 200 in 1.00 s, webhook failed open: pods.evictord.dev"
            ),
        "{evidence:#?}"
    );
    assert!(
        has("kube-apiserver: W") && has("failing open pods-eviction.validate.evictord.dev: EOF"),
        "{evidence:#?}"
    );
    assert!(!has("long before"), "{evidence:#?}");
    assert!(has("kubectl drain: evicting pod ns/d3-b"), "{evidence:#?}");
    assert!(!has("d3-c"), "{evidence:#?}");
    assert!(
        has("evictord a: ") && has("request=ns/u2}: Surged"),
        "{evidence:#?}"
    );
    // Each pod followed by its UIDs (the pods in the store's order).
    let mut objects: Vec<[String; 2]> = violations[0]
        .objects
        .chunks(2)
        .map(|c| [c[0].clone(), c[1].clone()])
        .collect();
    objects.sort();
    assert_eq!(objects, [["d3-a", "u1"], ["d3-b", "u2"]]);
    assert!(
        has("evictord a: ") && has("not bridged; failurePolicy decides name=d3-b"),
        "{evidence:#?}"
    );
    assert!(
        text.iter().any(|t| t.contains("evicted twice by evictord")),
        "{text:#?}"
    );
    assert!(text.iter().any(|t| t.contains("by replica b")), "{text:#?}");
    assert_eq!(counts.eviction_calls, 3);
    assert!(counts.goal_replica_seconds > 0.0);
}

/// While the goal is suspended (an upgrade stopping an earlier build's replicas), a Deployment
/// below its desired replicas is counted, not reported, for the whole episode.
#[tokio::test]
async fn a_suspended_goal_counts_the_episode_instead_of_reporting_it() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::runtime::{reflector, watcher};
    use support::pool::workloads::{Budget, WORKLOAD_LABEL};

    let dir = tempfile::tempdir().unwrap();
    let (pods, mut pods_writer) = reflector::store::<Pod>();
    let (nodes, _nodes_writer) = reflector::store::<Node>();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "d3-a", "namespace": "ns", "uid": "u1",
                     "labels": {WORKLOAD_LABEL: "d3-000"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    pods_writer.apply_watcher_event(&watcher::Event::Apply(pod));
    let suspended = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let checker = Checker::start(Inputs {
        goal_suspended: Some(suspended.clone()),
        ..one_deployment(pods, nodes, dir.path(), Budget::None)
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The episode goes on after the suspension ends: still not reported.
    suspended.store(false, std::sync::atomic::Ordering::Release);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (violations, counts) = checker.stop().await;
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!(counts.goal_episodes_suspended, 1);
}

/// The checker's inputs for one Deployment `d3-000` of 3 replicas under the zero-loss goal with
/// `budget`, in namespace `ns`, its logs in `dir` (the audit log `dir/audit.log`), no replica
/// started and the goal never suspended.
fn one_deployment(
    pods: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Pod>,
    nodes: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Node>,
    dir: &std::path::Path,
    budget: support::pool::workloads::Budget,
) -> Inputs {
    use support::pool::measure::Tracked;
    use support::pool::workloads::Kind;
    Inputs {
        pods,
        nodes,
        budgeted: Default::default(),
        max_unavailable: 0,
        tracked: vec![Tracked {
            name: "d3-000".into(),
            row: "d3".into(),
            kind: Kind::Deployment,
            desired: 3,
            budget,
            goal: true,
        }],
        audit_log: dir.join("audit.log"),
        logs: dir.to_path_buf(),
        goal_suspended: None,
        namespace: "ns".into(),
        replicas: Arc::new(std::sync::Mutex::new(Vec::new())),
    }
}
