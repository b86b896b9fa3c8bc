//! GitOps on a real kube-apiserver: a NodeMaintenance manifest with a partial `drainPlan`
//! (the mutating webhook completes it on CREATE only) re-applied unchanged with
//! `kubectl apply --server-side`, as Argo CD and Flux do on every sync, is admitted; a real
//! change of the plan is still denied (rule N4). Controllers are off: nothing but the applies
//! writes the object.

mod support;

use evictord::api::NodeMaintenance;
use kube::Api;
use support::tools::kubectl;

const ARGS: &[&str] = &["--controllers=none"];

fn manifest(name: &str, priority: i32, stage: &str) -> String {
    format!(
        r#"apiVersion: evictord.dev/v1alpha1
kind: NodeMaintenance
metadata:
  name: {name}
spec:
  nodeSelector:
    nodeSelectorTerms:
      - matchFields:
          - key: metadata.name
            operator: In
            values: [{name}-node]
  stage: {stage}
  reason: kernel upgrade
  drainPlan:
    - podType: Default
      podPriority: {priority}
"#
    )
}

fn apply(c: &support::TestCluster, body: &str) -> std::process::Output {
    kubectl(
        c,
        &[
            "apply",
            "--server-side",
            "--field-manager=gitops",
            "-f",
            "-",
        ],
        Some(body),
    )
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn reapplying_a_partial_drain_plan_server_side_is_admitted() {
    support::evictord::shared(ARGS).await;
    let c = support::cluster().await;
    let client = c.client().await;
    let api: Api<NodeMaintenance> = Api::all(client);
    let name = "ssa-partial-plan";

    let first = apply(c, &manifest(name, 100, "Idle"));
    assert!(first.status.success(), "first apply: {}", text(&first));
    let created = api.get(name).await.expect("created");
    assert!(
        created.spec.drain_plan.len() > 1,
        "the webhook completed the plan: {:?}",
        created.spec.drain_plan
    );

    // The same manifest again (every sync), then with a stage change (the GitOps way to move
    // a maintenance on).
    for (what, body) in [
        ("unchanged", manifest(name, 100, "Idle")),
        ("again", manifest(name, 100, "Idle")),
        ("to Cordon", manifest(name, 100, "Cordon")),
    ] {
        let out = apply(c, &body);
        assert!(out.status.success(), "apply {what}: {}", text(&out));
        let now = api.get(name).await.expect("get");
        assert_eq!(
            now.spec.drain_plan, created.spec.drain_plan,
            "apply {what} keeps the completed plan"
        );
    }
    assert_eq!(
        api.get(name).await.expect("get").spec.stage(),
        evictord::api::Stage::Cordon
    );

    // A different plan is still a change: N4.
    let changed = apply(c, &manifest(name, 200, "Cordon"));
    assert!(!changed.status.success(), "a changed plan must be denied");
    assert!(
        text(&changed).contains("rule N4"),
        "N4 denial expected: {}",
        text(&changed)
    );
}
