//! The zero-downtime drain scenario of the HPA interceptor, shared by its test binaries: the
//! Deployment scenario of [`super::surge`] (node `a` drained, replacements on node `b`, a
//! PodDisruptionBudget, the fake kubelet, the availability sampler) with pods that declare
//! `horizontalpodautoscaler.autoscaling.k8s.io,deployment.apps.k8s.io` and a
//! HorizontalPodAutoscaler of the Deployment, which the test kube-controller-manager enforces.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::fixtures::{blocking_pdb, deployment, node};
use super::kubelet::Kubelet;
use super::surge::{POOL, Scenario};
use super::wait::until;

/// The interceptor.
pub const HPA: &str = "horizontalpodautoscaler.autoscaling.k8s.io";
/// What the pods declare: the HPA interceptor first, as seed 000's example pod.
pub const INTERCEPTORS: &[&str] = &[HPA, "deployment.apps.k8s.io"];
/// The autoscaler's annotation holding the surge.
pub const RECORD: &str = "evictord.dev/hpa-surge";
/// The autoscaler's name.
pub const AUTOSCALER: &str = "web-hpa";

/// An autoscaler (autoscaling/v1, which every server serves) of Deployment `target`.
pub fn autoscaler(
    name: &str,
    kind: &str,
    target: &str,
    min: i32,
    max: i32,
) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
                 "minReplicas": min, "maxReplicas": max},
    }))
    .expect("HorizontalPodAutoscaler")
}

/// The Deployment `web` of [`Scenario`] (maxSurge 1) on node `a` with [`INTERCEPTORS`], scaled
/// by the autoscaler [`AUTOSCALER`] between `min` and `max`.
pub async fn start(client: Client, ns: &str, replicas: i32, min: i32, max: i32) -> Scenario {
    start_with_surge(client, ns, replicas, 1, min, max).await
}

/// [`start`] with `maxSurge` `max_surge`.
pub async fn start_with_surge(
    client: Client,
    ns: &str,
    replicas: i32,
    max_surge: i32,
    min: i32,
    max: i32,
) -> Scenario {
    let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
    node(&a).label(POOL, &a).create(&client).await;
    node(&b).create(&client).await;
    let kubelet = Kubelet::start(client.clone(), ns, &a);
    let name = "web".to_string();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &deployment(&name, replicas, max_surge, 0, INTERCEPTORS),
        )
        .await
        .expect("create Deployment");
    blocking_pdb(&client, ns, "web", "app", &name, replicas).await;
    autoscalers(&client, ns)
        .create(
            &PostParams::default(),
            &autoscaler(AUTOSCALER, "Deployment", &name, min, max),
        )
        .await
        .expect("create HorizontalPodAutoscaler");
    let s = Scenario {
        client,
        ns: ns.to_string(),
        a,
        b,
        name,
        replicas,
        kubelet,
    };
    wait_available_on(
        &s,
        &s.a.clone(),
        replicas,
        "the Deployment available on node a",
    )
    .await;
    s.kubelet.schedule_to(&s.b);
    s
}

/// The autoscalers of `ns`.
pub fn autoscalers(client: &Client, ns: &str) -> Api<HorizontalPodAutoscaler> {
    Api::namespaced(client.clone(), ns)
}

/// (`minReplicas`, `maxReplicas`, surge recorded) of the scenario's autoscaler.
pub async fn limits(s: &Scenario) -> Option<(i32, i32, bool)> {
    let h = autoscalers(&s.client, &s.ns).get(AUTOSCALER).await.ok()?;
    Some((
        h.spec.min_replicas.unwrap_or(1),
        h.spec.max_replicas,
        h.annotations().contains_key(RECORD),
    ))
}

/// Waits until the autoscaler's limits are `min`/`max` and a surge is recorded or not.
pub async fn wait_limits(s: &Scenario, min: i32, max: i32, recorded: bool) {
    until(
        Duration::from_secs(90),
        &format!("the autoscaler at min {min}, max {max}, surge recorded: {recorded}"),
        || async { (limits(s).await? == (min, max, recorded)).then_some(()) },
    )
    .await;
}

/// Waits until the Deployment has `replicas` replicas, all available and on `node`, and no
/// other pod.
pub async fn wait_available_on(s: &Scenario, node: &str, replicas: i32, what: &str) {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    until(Duration::from_secs(120), what, || async {
        let d = s.deployments().get(&s.name).await.ok()?;
        let status = d.status.clone()?;
        let settled = d.spec.replicas == Some(replicas)
            && status.replicas == Some(replicas)
            && status.available_replicas == Some(replicas);
        let list = pods.list(&ListParams::default()).await.ok()?;
        let on_node = list
            .items
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
        (settled && on_node && list.items.len() == replicas as usize).then_some(())
    })
    .await;
}

/// Waits until every pod of the Deployment is on `node` and available, whatever the replicas
/// the autoscaler keeps (inside its limits it cannot compute metrics without a metrics server,
/// and leaves the replicas of the surge); returns them.
pub async fn wait_moved_to(s: &Scenario, node: &str) -> i32 {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    until(
        Duration::from_secs(120),
        "every pod of the Deployment available on node b",
        || async {
            let d = s.deployments().get(&s.name).await.ok()?;
            let replicas = d.spec.replicas?;
            let status = d.status?;
            let list = pods.list(&ListParams::default()).await.ok()?;
            let on_node = list
                .items
                .iter()
                .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
            (on_node
                && list.items.len() == replicas as usize
                && status.available_replicas == Some(replicas))
            .then_some(replicas)
        },
    )
    .await
}

/// Runs the real `kubectl drain` of `node` (through the Eviction API bridge); returns whether
/// it succeeded and its output.
pub async fn kubectl_drain(node: &str) -> (bool, String) {
    let c = super::control_plane::cluster_with_controller_manager().await;
    let mut drain = super::tools::kubectl_command(
        c,
        &[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("kubectl drain");
    // Bounded: kubectl's own --timeout is 180 s.
    let mut status = None;
    for _ in 0..2000 {
        status = drain.try_wait().expect("kubectl drain status");
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if status.is_none() {
        let _ = drain.kill();
    }
    let out = drain.wait_with_output().expect("kubectl drain output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (status.is_some_and(|s| s.success()), text)
}
