//! Smoke tests on a real control plane: the CRDs install and become Established, objects round
//! trip through kube-rs with the Rust types, the status subresource works, and the chart's CRD
//! file equals `evictord crds`.

mod support;

use evictord::api::{EvictionRequest, EvictionRequestStatus, NodeMaintenance};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::evictord::{BIN, install_crds};

#[tokio::test]
async fn crds_install_and_objects_round_trip() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("smoke").await;

    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "uid-1"},
        "spec": {"target": {"pod": {"name": "p", "uid": "uid-1"}}, "requesters": [{"name": "a.example.com"}]}
    }))
    .unwrap();
    let created = ers.create(&PostParams::default(), &er).await.unwrap();
    assert_eq!(created.spec.target.pod.uid, "uid-1");
    assert_eq!(created.spec.requesters[0].name, "a.example.com");

    let status = json!({"status": {"evictionRequestCancellationPolicy": "Forbid", "podEvictionStatus": {"failedAPIEvictionCounter": 2}}});
    let patched = ers
        .patch_status("uid-1", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let s: EvictionRequestStatus = patched.status.unwrap();
    assert_eq!(s.failed_evictions(), 2);
    // The main resource ignores status; the status subresource ignores spec.
    let read = ers.get("uid-1").await.unwrap();
    assert_eq!(read.status.unwrap().failed_evictions(), 2);

    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": format!("{ns}-m")},
        "spec": {"nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}
    }))
    .unwrap();
    let created = nms.create(&PostParams::default(), &nm).await.unwrap();
    // The schema defaults the stage.
    assert_eq!(created.spec.stage(), evictord::api::Stage::Idle);
    nms.delete(&created.name_any(), &Default::default())
        .await
        .unwrap();

    // Schema constraints the 1.20 server understands: enum and minimum/maximum.
    let bad: serde_json::Value = json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "uid-2"},
        "spec": {"target": {"pod": {"name": "p", "uid": "uid-2"}}, "requesters": [{"name": "a.b"}], "heartbeatDeadlineSeconds": 5}
    });
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<EvictionRequest>(&()),
    );
    let err = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("heartbeatDeadlineSeconds"),
        "{err}"
    );
    c.delete_namespace(&ns).await;
}

#[test]
fn chart_crds_equal_generated_crds() {
    let out = std::process::Command::new(BIN)
        .arg("crds")
        .output()
        .unwrap();
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).unwrap();
    let chart = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/evictord/crds/evictord.dev_crds.yaml"
    ))
    .unwrap();
    assert!(
        generated == chart,
        "charts/evictord/crds/evictord.dev_crds.yaml is stale: regenerate it with `make crds` (evictord crds > charts/evictord/crds/evictord.dev_crds.yaml)"
    );
}

/// A control plane for manual debugging: `EVICTORD_TEST_KEEP=1 cargo test --test smoke --
/// --ignored dev_cluster --nocapture` prints the kubeconfig path and keeps it running for
/// `EVICTORD_DEV_SECONDS` (default 600).
#[tokio::test]
#[ignore = "manual: keeps a control plane running"]
async fn dev_cluster() {
    let c = support::cluster().await;
    install_crds(c).await;
    println!("KUBECONFIG={}", c.kubeconfig.display());
    let secs = std::env::var("EVICTORD_DEV_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
}
