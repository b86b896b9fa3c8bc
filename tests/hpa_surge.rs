//! The `horizontalpodautoscaler.autoscaling.k8s.io` interceptor on a real kube-apiserver with
//! kube-controller-manager (deployment, replicaset, statefulset, disruption and
//! horizontal-pod-autoscaler controllers; the autoscaler enforces its limits without a metrics
//! server): draining a node, by a NodeMaintenance or by a plain `kubectl drain` through the
//! bridge, never lowers the available replicas of an autoscaled Deployment, and the autoscaler's
//! limits are put back. Pods of one workload surge together within its room; an autoscaler at
//! its ceiling; a user's floor wins; a canceled request puts the floor back; a StatefulSet; no
//! surge when it cannot be done; `kubectl evictord plan` names the autoscaler.

mod support;

use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::fixtures::{blocking_pdb, create_eviction_request, event_reasons, node, pod};
use support::hpa::{
    AUTOSCALER, HPA, autoscaler, autoscalers, kubectl_drain, limits, start, wait_limits,
    wait_moved_to,
};
use support::kubelet::Kubelet;
use support::surge::{FLAGS, POOL, Scenario};
use support::wait::until;

async fn setup(prefix: &str) -> (Client, String) {
    let c = support::control_plane::cluster_with_controller_manager().await;
    support::evictord::shared(FLAGS).await;
    (c.client().await, c.namespace(prefix).await)
}

/// The messages the pod's interceptors left in its EvictionRequest (it is kept after the
/// eviction), by interceptor.
async fn interceptor_messages(client: &Client, ns: &str) -> Vec<(String, String)> {
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let list = requests.list(&ListParams::default()).await.unwrap();
    let r = list.items.first().expect("the pod's EvictionRequest");
    r.status
        .as_ref()
        .map(|s| {
            s.interceptors
                .iter()
                .map(|i| (i.name.clone(), i.message.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// The headline with a NodeMaintenance: a 1-replica Deployment scaled by an autoscaler (min 1,
/// max 3) and protected by a PodDisruptionBudget `minAvailable: 1` is drained without ever
/// having fewer than 1 available replica; the floor is back at 1 after the drain. `plan` named
/// the autoscaler beforehand.
#[tokio::test]
async fn a_maintenance_drains_an_autoscaled_deployment_without_downtime() {
    let (client, ns) = setup("hpa-nm").await;
    let s = start(client.clone(), &ns, 1, 1, 3).await;

    let out = support::plugin::plugin(&["plan", &s.a, "-o", "json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", support::plugin::text(&out)));
    assert_eq!(
        report["pods"][0]["autoscaler"], "web-hpa (Deployment web)",
        "{report}"
    );

    let sampler = s.sample();
    s.drain().await;
    s.wait_drained(Duration::from_secs(180)).await;
    let replicas = wait_moved_to(&s, &s.b.clone()).await;
    wait_limits(&s, 1, 3, false).await;
    let ((min, samples), most) = sampler.stop_all().await;
    // The sampler ran before, through and after the drain (which the wakes made short: a second or two).
    assert!(samples >= 3, "only {samples} samples");
    assert!(
        min >= 1,
        "the Deployment had only {min} available replicas during the drain"
    );
    assert_eq!(most, 2, "the autoscaler surged the Deployment to 2");
    assert!(replicas >= 1);

    let reasons = event_reasons(&client, Some(&ns), "HorizontalPodAutoscaler").await;
    for reason in ["SurgeStarted", "SurgeFinished"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event: {reasons:?}"
        );
    }
    // The HPA interceptor surged; the Deployment interceptor after it left the autoscaled
    // Deployment alone, as before.
    let messages = interceptor_messages(&client, &ns).await;
    let of = |name: &str| {
        messages
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    };
    assert!(of(HPA).contains("the pod may go"), "{messages:?}");
    assert!(
        of("deployment.apps.k8s.io")
            .contains("HorizontalPodAutoscaler web-hpa scales Deployment web"),
        "{messages:?}"
    );
    let e = support::evictord::shared(FLAGS).await;
    for series in [
        "evictord_hpa_interceptor_surges_total{result=\"started\"}",
        "evictord_hpa_interceptor_surges_total{result=\"finished\"}",
        "evictord_hpa_interceptor_time_to_available_seconds_count",
    ] {
        assert!(e.metric(series).await >= 1.0, "{series}");
    }
}

/// The headline with the tool users run today: a plain `kubectl drain` through the Eviction API
/// bridge finishes, and the Deployment keeps 1 available replica throughout.
#[tokio::test]
async fn kubectl_drain_through_the_bridge_keeps_the_autoscaled_deployment_available() {
    let (client, ns) = setup("hpa-kubectl").await;
    let s = start(client, &ns, 1, 1, 3).await;
    let sampler = s.sample();
    let (ok, text) = kubectl_drain(&s.a).await;
    assert!(ok, "kubectl drain failed or hung:\n{text}");
    assert!(
        text.contains("Eviction triggered"),
        "the bridge answered:\n{text}"
    );
    wait_moved_to(&s, &s.b.clone()).await;
    wait_limits(&s, 1, 3, false).await;
    let (min, samples) = sampler.stop().await;
    // The sampler ran before, through and after the drain (which the wakes made short: a second or two).
    assert!(samples >= 3, "only {samples} samples");
    assert!(
        min >= 1,
        "the Deployment had {min} available replicas during kubectl drain"
    );
}

/// Two pods of one Deployment (maxSurge 2) drained together surge together, within the room:
/// the floor goes from 2 to 4 at once, never beyond.
#[tokio::test]
async fn pods_of_one_workload_surge_together_within_max_surge() {
    let (client, ns) = setup("hpa-together").await;
    let s = support::hpa::start_with_surge(client, &ns, 2, 2, 2, 6).await;
    let sampler = s.sample();
    // New pods stay unready: one pod at a time would hold the floor at 3.
    s.kubelet.set_ready(false);
    s.drain().await;
    wait_limits(&s, 4, 6, true).await;
    s.kubelet.set_ready(true);
    s.wait_drained(Duration::from_secs(180)).await;
    wait_moved_to(&s, &s.b.clone()).await;
    wait_limits(&s, 2, 6, false).await;
    let ((min, _), most) = sampler.stop_all().await;
    assert!(min >= 2, "only {min} available replicas during the drain");
    assert_eq!(most, 4, "never beyond maxSurge 2");
}

/// An autoscaler at its ceiling (min 1, max 1): both limits go up for the surge and back after
/// it, and the autoscaler then brings the Deployment back to 1.
#[tokio::test]
async fn an_autoscaler_at_its_ceiling_is_raised_and_put_back() {
    let (client, ns) = setup("hpa-max").await;
    let s = start(client, &ns, 1, 1, 1).await;
    let sampler = s.sample();
    s.kubelet.set_ready(false);
    s.drain().await;
    wait_limits(&s, 2, 2, true).await;
    s.kubelet.set_ready(true);
    s.wait_drained(Duration::from_secs(180)).await;
    wait_limits(&s, 1, 1, false).await;
    support::hpa::wait_available_on(&s, &s.b.clone(), 1, "the Deployment back at 1 on node b")
        .await;
    let (min, _) = sampler.stop().await;
    assert!(min >= 1, "only {min} available replicas during the drain");
}

/// Creates an EvictionRequest for the one pod of the scenario's Deployment; returns its API and
/// name.
async fn request_one(s: &Scenario) -> (Api<EvictionRequest>, String) {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    let p = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    let (name, uid) = (p.name_any(), p.metadata.uid.clone().unwrap());
    let api = create_eviction_request(&s.client, &s.ns, &name, &uid, &["test.example.com"]).await;
    (api, uid)
}

/// Waits until the HPA interceptor's entry is complete; returns its message.
async fn completed_message(api: &Api<EvictionRequest>, uid: &str) -> String {
    until(
        Duration::from_secs(60),
        "the HPA interceptor complete",
        || async {
            let s = api.get(uid).await.ok()?.status?;
            let e = s.interceptor(HPA)?;
            e.completion_time.as_ref()?;
            e.message.clone()
        },
    )
    .await
}

/// A user setting `minReplicas` during the surge: their value stays, the request completes
/// saying so, and the record goes once the pod is gone.
#[tokio::test]
async fn a_users_floor_during_the_surge_wins() {
    let (client, ns) = setup("hpa-user").await;
    let s = start(client.clone(), &ns, 1, 1, 5).await;
    s.kubelet.set_ready(false);
    let (api, uid) = request_one(&s).await;
    wait_limits(&s, 2, 5, true).await;
    autoscalers(&client, &ns)
        .patch(
            AUTOSCALER,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"minReplicas": 4}})),
        )
        .await
        .unwrap();
    let message = completed_message(&api, &uid).await;
    assert!(
        message.contains("changed to 4 by someone else"),
        "{message:?}"
    );
    // Once the new pods are ready the PDB lets the pod go, and the abandoned record is dropped.
    s.kubelet.set_ready(true);
    wait_limits(&s, 4, 5, false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(limits(&s).await, Some((4, 5, false)), "their floor stays");
    assert!(
        event_reasons(&client, Some(&ns), "HorizontalPodAutoscaler")
            .await
            .iter()
            .any(|r| r == "SurgeAbandoned")
    );
}

/// A request canceled during the surge: the floor goes back.
#[tokio::test]
async fn a_canceled_request_puts_the_floor_back() {
    let (client, ns) = setup("hpa-cancel").await;
    let s = start(client, &ns, 1, 1, 3).await;
    s.kubelet.set_ready(false);
    let (api, uid) = request_one(&s).await;
    wait_limits(&s, 2, 3, true).await;
    api.patch(
        &uid,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"requesters": []}})),
    )
    .await
    .unwrap();
    wait_limits(&s, 1, 3, false).await;
    let st = api.get(&uid).await.unwrap().status.unwrap();
    assert!(st.is_true("Canceled"));
}

/// Any workload with a scale subresource and ready replicas: a 1-replica StatefulSet (whose
/// status on this server has `readyReplicas`, not `availableReplicas`) scaled by an autoscaler is
/// drained one pod at a time with never fewer than 1 ready replica.
#[tokio::test]
async fn an_autoscaled_statefulset_drains_without_downtime() {
    let (client, ns) = setup("hpa-sts").await;
    let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
    node(&a).label(POOL, &a).create(&client).await;
    node(&b).create(&client).await;
    let kubelet = Kubelet::start(client.clone(), &ns, &a);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let sts = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 1, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}, "annotations": {"evictord.dev/eviction-interceptors": HPA}},
                "spec": {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
                         "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}
            }
        }
    }))
    .unwrap();
    sets.create(&PostParams::default(), &sts).await.unwrap();
    blocking_pdb(&client, &ns, "db", "app", "db", 1).await;
    autoscalers(&client, &ns)
        .create(
            &PostParams::default(),
            &autoscaler("db-hpa", "StatefulSet", "db", 1, 3),
        )
        .await
        .unwrap();
    let ready = || async {
        sets.get("db")
            .await
            .ok()
            .and_then(|s| s.status?.ready_replicas)
            .unwrap_or(0)
    };
    until(Duration::from_secs(60), "the StatefulSet ready", || async {
        (ready().await == 1).then_some(())
    })
    .await;
    kubelet.schedule_to(&b);
    let nm = support::fixtures::draining_maintenance(&ns, POOL, &a, "hpa statefulset");
    Api::<evictord::api::NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    // Bounded: 180 s of samples every 100 ms.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut fewest = i32::MAX;
    let mut moved = false;
    for _ in 0..1800 {
        fewest = fewest.min(ready().await);
        let list = pods.list(&ListParams::default()).await.unwrap();
        let on_b = !list.items.is_empty()
            && list
                .items
                .iter()
                .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(b.as_str()));
        let floor = autoscalers(&client, &ns)
            .get("db-hpa")
            .await
            .unwrap()
            .spec
            .min_replicas;
        if on_b && floor == Some(1) {
            moved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        moved,
        "the StatefulSet never moved to node b with its floor back at 1"
    );
    assert!(
        fewest >= 1,
        "the StatefulSet had {fewest} ready replicas during the drain"
    );
}

/// Creates a pod of `builder`, requests its eviction, and returns the HPA interceptor's message.
async fn completes_at_once(client: &Client, ns: &str, p: support::fixtures::PodBuilder) -> String {
    let p = p.interceptors(&[HPA]).create(client, ns).await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = create_eviction_request(client, ns, &p.name_any(), &uid, &["test.example.com"]).await;
    completed_message(&api, &uid).await
}

/// No surge, with the reason: a pod without a controller, a workload no autoscaler scales, an
/// autoscaler whose target cannot be read, a paused Deployment.
#[tokio::test]
async fn no_surge_when_it_cannot_be_done() {
    let (client, ns) = setup("hpa-none").await;
    let bare = completes_at_once(&client, &ns, pod("bare")).await;
    assert!(bare.contains("has no controller"), "{bare:?}");

    let unscaled = completes_at_once(&client, &ns, pod("owned").replicaset("lonely")).await;
    assert!(
        unscaled.contains("no HorizontalPodAutoscaler scales ReplicaSet lonely"),
        "{unscaled:?}"
    );

    // An autoscaler of a kind the server does not serve, which "owns" the pod.
    let mut widget = autoscaler("widget-hpa", "Widget", "w", 1, 3);
    widget.spec.scale_target_ref.api_version = Some("example.com/v1".into());
    autoscalers(&client, &ns)
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    let mut owned = pod("widget-pod").interceptors(&[HPA]).build();
    owned.metadata.owner_references = serde_json::from_value(json!([
        {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "w-1", "controller": true}
    ]))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let p = pods.create(&PostParams::default(), &owned).await.unwrap();
    let uid = p.metadata.uid.clone().unwrap();
    let api =
        create_eviction_request(&client, &ns, "widget-pod", &uid, &["test.example.com"]).await;
    let unreadable = completed_message(&api, &uid).await;
    assert!(
        unreadable
            .contains("HorizontalPodAutoscaler widget-hpa scales Widget w, which cannot be read"),
        "{unreadable:?}"
    );
    let w = autoscalers(&client, &ns).get("widget-hpa").await.unwrap();
    assert_eq!(w.spec.min_replicas, Some(1), "not raised");
}

#[tokio::test]
async fn a_paused_deployment_is_not_surged() {
    let (client, ns) = setup("hpa-paused").await;
    let s = start(client.clone(), &ns, 1, 1, 3).await;
    let d = s
        .deployments()
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    until(Duration::from_secs(30), "the pause observed", || async {
        let now = s.deployments().get(&s.name).await.ok()?;
        (now.status?.observed_generation == d.metadata.generation).then_some(())
    })
    .await;
    let (api, uid) = request_one(&s).await;
    let message = completed_message(&api, &uid).await;
    assert!(message.contains("Deployment web is paused"), "{message:?}");
    assert_eq!(limits(&s).await, Some((1, 3, false)), "never raised");
}
