//! Table tests of [`on_request`]: one row per rule.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rstest::rstest;
use serde_json::json;

use super::*;
use crate::api::{
    DrainPlanEntry, NodeMaintenanceNodeStatus, NodeMaintenanceSpec, NodeMaintenanceStatus,
    NodeReference, Stage,
};
use crate::interceptor::kubelet::held::{HeldEntry, ManifestFile};
use crate::interceptor::kubelet::manifest::StaticPodId;

const NODE: &str = "One";

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn mirror_pod(priority: i32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "etcd-one", "namespace": "kube-system", "uid": "u1",
            "annotations": {"kubernetes.io/config.mirror": "hash"}},
        "spec": {"nodeName": NODE, "priority": priority, "terminationGracePeriodSeconds": 20,
            "containers": [{"name": "c", "image": "i"}]}
    }))
    .unwrap()
}

fn plain_pod() -> Pod {
    let mut p = mirror_pod(0);
    p.metadata.annotations = None;
    p
}

/// A maintenance in Drain whose recorded targets for the node reach Static pods up to
/// `static_priority` (none when `None`).
fn maintenance(static_priority: Option<i32>) -> NodeMaintenance {
    let mut targets = vec![DrainPlanEntry {
        pod_priority: i32::MAX,
        pod_type: PodType::Default,
        pod_selector: None,
    }];
    if let Some(p) = static_priority {
        targets.push(DrainPlanEntry {
            pod_priority: p,
            pod_type: PodType::Static,
            pod_selector: None,
        });
    }
    let mut m = NodeMaintenance::new(
        "os-upgrade",
        NodeMaintenanceSpec {
            stage: Some(Stage::Drain),
            reason: Some("OS upgrade".into()),
            ..Default::default()
        },
    );
    m.metadata.creation_timestamp = Some(Time(t(-100)));
    m.status = Some(NodeMaintenanceStatus {
        node_statuses: vec![NodeMaintenanceNodeStatus {
            node_ref: NodeReference { name: NODE.into() },
            drain_targets: targets,
            ..Default::default()
        }],
        ..Default::default()
    });
    m
}

fn manifest(file: &str, ns: &str, name: &str) -> ManifestFile {
    ManifestFile {
        file: file.into(),
        id: Some(StaticPodId {
            namespace: ns.into(),
            name: name.into(),
        }),
        hash: format!("hash-{file}"),
    }
}

fn etcd_dir() -> Snapshot {
    Snapshot {
        manifests: vec![
            manifest("etcd.yaml", "kube-system", "etcd"),
            manifest("web.yaml", "default", "web"),
            ManifestFile {
                file: "notes.txt".into(),
                id: None,
                hash: "x".into(),
            },
        ],
        entries: vec![],
    }
}

fn held_etcd(original: Option<&str>) -> Snapshot {
    let mut s = etcd_dir();
    s.manifests.retain(|m| m.file != "etcd.yaml");
    s.entries.push(HeldEntry {
        file: "etcd.yaml".into(),
        record: Some(Ok(held_record())),
        held: Some("hash-etcd.yaml".into()),
        original: original.map(str::to_string),
    });
    s
}

fn held_record() -> Record {
    Record {
        file: "etcd.yaml".into(),
        sha256: "hash-etcd.yaml".into(),
        node: NODE.into(),
        maintenance: "os-upgrade".into(),
        reason: "OS upgrade".into(),
        pod: HeldPod {
            namespace: "kube-system".into(),
            name: "etcd-one".into(),
            uid: "u1".into(),
        },
        grace_period_seconds: 20,
        held_at: t(0),
        intent: Intent::Hold,
    }
}

fn decide(pod: Option<&Pod>, m: &[NodeMaintenance], snapshot: &Snapshot) -> Step {
    decide_for(pod, m, snapshot, false)
}

fn decide_for(
    pod: Option<&Pod>,
    m: &[NodeMaintenance],
    snapshot: &Snapshot,
    requested_by_maintenance: bool,
) -> Step {
    on_request(&RequestInput {
        node: NODE,
        dir: "/etc/kubernetes/manifests",
        pod,
        maintenances: m,
        snapshot,
        requested_by_maintenance,
        now: t(0),
    })
}

/// What kind of step, and a part of its message.
fn summary(step: &Step) -> (&'static str, String) {
    match step {
        Step::Complete(m) => ("complete", m.clone()),
        Step::Wait { message, .. } => ("wait", message.clone()),
        Step::Hold(records) => (
            "hold",
            records
                .iter()
                .map(|r| r.file.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
    }
}

#[rstest]
// Gone: complete (the kubelet removed the mirror pod).
#[case::pod_gone(
    None,
    Some(2_000_001_000),
    etcd_dir(),
    "complete",
    "the mirror pod is gone"
)]
// Not a static pod.
#[case::not_a_mirror_pod(
    Some(plain_pod()),
    Some(2_000_001_000),
    etcd_dir(),
    "complete",
    "is not a static pod"
)]
// Not targeted: no Static target yet, or the pod's priority is above it.
#[case::static_not_reached(
    Some(mirror_pod(0)),
    None,
    etcd_dir(),
    "complete",
    "no NodeMaintenance in stage Drain targets static pod kube-system/etcd-one"
)]
#[case::priority_above_target(
    Some(mirror_pod(2_000_001_000)),
    Some(1_000_000_000),
    etcd_dir(),
    "complete",
    "priority 2000001000"
)]
// Targeted: hold the manifest that defines it (namespace and `<name>-<node>` match).
#[case::targeted(
    Some(mirror_pod(2_000_001_000)),
    Some(2_000_001_000),
    etcd_dir(),
    "hold",
    "etcd.yaml"
)]
// No manifest for it in the directory.
#[case::no_manifest(
    Some(mirror_pod(0)),
    Some(0),
    Snapshot::default(),
    "complete",
    "no manifest in the static pod directory"
)]
// Already held: wait for the kubelet (also once no maintenance targets it any more).
#[case::already_held(
    Some(mirror_pod(0)),
    Some(0),
    held_etcd(None),
    "wait",
    "etcd is terminating the pod due to node maintenance os-upgrade (OS upgrade)"
)]
#[case::held_and_untargeted(
    Some(mirror_pod(0)),
    None,
    held_etcd(None),
    "wait",
    "held in /etc/kubernetes/manifests/.evictord-held"
)]
fn request_rows(
    #[case] pod: Option<Pod>,
    #[case] static_target: Option<i32>,
    #[case] snapshot: Snapshot,
    #[case] kind: &str,
    #[case] text: &str,
) {
    let got = decide(pod.as_ref(), &[maintenance(static_target)], &snapshot);
    let (k, message) = summary(&got);
    assert_eq!(k, kind, "{got:?}");
    assert!(message.contains(text), "{message:?} lacks {text:?}");
}

#[test]
fn a_manifest_in_another_namespace_or_for_another_node_is_not_the_pods() {
    let s = Snapshot {
        manifests: vec![
            manifest("a.yaml", "default", "etcd"),
            manifest("b.yaml", "kube-system", "etcd-one"),
        ],
        entries: vec![],
    };
    let got = decide(Some(&mirror_pod(0)), &[maintenance(Some(0))], &s);
    assert_eq!(summary(&got).0, "complete", "{got:?}");
}

#[test]
fn every_manifest_that_defines_the_pod_is_held() {
    let mut s = etcd_dir();
    s.manifests
        .push(manifest("etcd-copy.json", "kube-system", "etcd"));
    let got = decide(Some(&mirror_pod(0)), &[maintenance(Some(0))], &s);
    assert_eq!(
        summary(&got),
        ("hold", "etcd.yaml,etcd-copy.json".to_string())
    );
}

#[test]
fn the_record_names_the_maintenance_pod_and_grace_period() {
    let Step::Hold(records) = decide(Some(&mirror_pod(0)), &[maintenance(Some(0))], &etcd_dir())
    else {
        panic!("no hold");
    };
    assert_eq!(records, vec![held_record()]);
    // Once held, the request waits with the hold time plus the grace period as expected finish.
    assert_eq!(
        after_hold(&records, "/d"),
        Step::Wait {
            message: holding_message(&records[0], "/d"),
            expected_finish: Some(t(20)),
        }
    );
}

#[test]
fn an_earlier_held_copy_of_the_same_file_is_not_overwritten() {
    // Someone put etcd.yaml back while an earlier copy is held (a conflict): no second hold.
    let mut s = held_etcd(Some("other"));
    s.manifests
        .push(manifest("etcd.yaml", "kube-system", "etcd"));
    let got = decide(Some(&mirror_pod(0)), &[maintenance(Some(0))], &s);
    let (k, m) = summary(&got);
    assert_eq!(k, "complete");
    assert!(m.contains("already holds an earlier copy"), "{m}");
}

#[test]
fn a_selector_target_matches_the_pods_labels() {
    let mut m = maintenance(None);
    let status = m.status.as_mut().unwrap();
    status.node_statuses[0].drain_targets.push(DrainPlanEntry {
        pod_priority: i32::MAX,
        pod_type: PodType::Static,
        pod_selector: Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "tier".to_string(),
                    "control".to_string(),
                )])),
                ..Default::default()
            },
        ),
    });
    let mut pod = mirror_pod(0);
    assert_eq!(
        summary(&decide(Some(&pod), &[m.clone()], &etcd_dir())).0,
        "complete"
    );
    pod.metadata.labels = Some(BTreeMap::from([(
        "tier".to_string(),
        "control".to_string(),
    )]));
    assert_eq!(summary(&decide(Some(&pod), &[m], &etcd_dir())).0, "hold");
}

#[test]
fn message_without_reason() {
    let mut r = held_record();
    r.reason = String::new();
    assert!(holding_message(&r, "/d").starts_with(
        "etcd is terminating the pod due to node maintenance os-upgrade: its manifest etcd.yaml"
    ));
}

/// The agent may see a request of the node maintenance controller before the maintenance status
/// that records its targets: such requests wait for the status, others complete.
#[rstest]
#[case::by_the_maintenance_not_yet_recorded(
    true,
    None,
    "wait",
    "waiting for a NodeMaintenance in stage Drain to record"
)]
#[case::by_the_maintenance_recorded(true, Some(0), "hold", "etcd.yaml")]
#[case::by_someone_else(false, None, "complete", "no NodeMaintenance in stage Drain targets")]
fn request_of_the_maintenance_waits_for_its_recorded_targets(
    #[case] by_maintenance: bool,
    #[case] static_target: Option<i32>,
    #[case] kind: &str,
    #[case] text: &str,
) {
    let got = decide_for(
        Some(&mirror_pod(0)),
        &[maintenance(static_target)],
        &etcd_dir(),
        by_maintenance,
    );
    let (k, message) = summary(&got);
    assert_eq!(k, kind, "{got:?}");
    assert!(message.contains(text), "{message:?} lacks {text:?}");
}
