//! Admission edge cases through a real kube-apiserver (controllers off, so status writes come
//! only from the tests): an object the webhook cannot read is denied with a message naming the
//! field, and an interceptor-aware tool may initialise the whole status interceptor list at once
//! (rule S4).

mod support;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::fixtures::{create_eviction_request, pod};
use support::tools::kubectl;

const ARGS: &[&str] = &["--controllers=none"];

/// The mutating NodeMaintenance webhook runs before schema validation, so it is the first to see
/// `stage: Drian`: the user gets the field, the value and the allowed values, not "Internal
/// error occurred: ... rejected our request for an unknown reason".
#[tokio::test]
async fn node_maintenance_with_an_unknown_stage_names_the_field() {
    support::evictord::shared(ARGS).await;
    let c = support::cluster().await;
    let manifest = r#"
apiVersion: evictord.dev/v1alpha1
kind: NodeMaintenance
metadata: {name: typo}
spec:
  nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [nowhere]}]}]}
  stage: Drian
"#;
    let out = kubectl(c, &["create", "-f", "-"], Some(manifest));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "created: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        err.contains("spec.stage: unknown variant `Drian`, expected one of `Idle`, `Cordon`, `Drain`, `Complete`"),
        "{err}"
    );
    assert!(!err.contains("unknown reason"), "{err}");
}

#[tokio::test]
async fn s4_status_initialised_all_at_once_by_a_tool() {
    support::evictord::shared(ARGS).await;
    let c = support::cluster().await;
    let client = c.client().await;
    let ns = c.namespace("s4-init").await;
    let p = pod("p")
        .interceptors(&["a.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = create_eviction_request(&client, &ns, "p", &uid, &["tool.example.com"]).await;
    let init = json!({"status": {
        "targetInterceptors": [{"name": "a.example.com"}, {"name": "imperative-eviction.k8s.io"}],
        "interceptors": [{"name": "a.example.com"}, {"name": "imperative-eviction.k8s.io"}],
    }});
    let written = api
        .patch_status(&uid, &PatchParams::default(), &Patch::Merge(&init))
        .await
        .unwrap_or_else(|e| panic!("S4 allows initialising the whole list at once: {e}"));
    let s = written.status.unwrap();
    assert_eq!(s.interceptors.len(), 2);
    assert!(s.active_interceptors.is_empty());
}
