//! The chart's RBAC: `evictord serve` with the Deployment's own flags, authenticated as the
//! chart's ServiceAccount, runs every flow (surges, endpoints, autoscalers) without a single
//! `Forbidden`.

use crate::support::Evictord;
use crate::support::evictord::SpawnOptions;
use crate::support::fixtures::pod;
use crate::support::wait::until;
use evictord::api::EvictionRequest;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::*;

/// `evictord serve` as the chart's ServiceAccount, with the chart's RBAC applied for real and the
/// Deployment's own flags: certificate Secret created, caBundle patched, lease acquired, an
/// EvictionRequest evicts its pod, SIGTERM releases the lease, and the log holds no `Forbidden`.
#[tokio::test]
async fn chart_rbac_is_enough_for_every_call_of_serve() {
    let c = support::cluster().await;
    let (release, ns) = ("rbac", "rbac-system");
    let fullname = "rbac-evictord";
    let docs = apply_chart(c, release, ns, None).await;
    let sa = format!("system:serviceaccount:{ns}:{fullname}");
    let kubeconfig = c.kubeconfig_as(&sa);

    // The chart's own flags, minus the listen addresses (the test picks loopback ports).
    let chart_args: Vec<String> = deployment_args(&docs)
        .into_iter()
        .filter(|a| {
            a != "serve" && !a.starts_with("--webhook-addr=") && !a.starts_with("--probe-addr=")
        })
        .collect();
    for flag in [
        format!("--tls-secret={fullname}-tls"),
        format!("--service-name={fullname}"),
        format!("--service-namespace={ns}"),
        format!("--webhook-config-name={fullname}"),
        "--leader-election".to_string(),
        format!("--leader-election-namespace={ns}"),
        format!("--leader-election-id={fullname}-leader"),
    ] {
        assert!(chart_args.contains(&flag), "{flag} not in {chart_args:?}");
    }
    let mut args: Vec<&str> = chart_args.iter().map(String::as_str).collect();
    args.push("--cert-check-interval=1s");

    // The chart's webhook configurations, by URL: caBundle patching must find them by name. The
    // placeholder CA (the control plane's) is what evictord must replace.
    let port = support::control_plane::free_port();
    Evictord::register_webhooks_at(c, fullname, port, &c.dir.join("ca.crt")).await;

    let mut e = Evictord::spawn(
        c,
        &args,
        SpawnOptions {
            kubeconfig: Some(kubeconfig),
            webhook_port: Some(port),
            ..Default::default()
        },
    );
    e.ready().await;
    let client = c.client().await;

    // The certificate Secret, created by the ServiceAccount.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets
        .get(&format!("{fullname}-tls"))
        .await
        .expect("the certificate Secret");
    let data = secret.data.unwrap();
    let ca = data.get("ca.crt").expect("ca.crt").clone();
    assert!(data.contains_key("tls.crt") && data.contains_key("tls.key"));

    // caBundle patched into both configurations.
    let vwc = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(fullname)
        .await
        .unwrap();
    for w in vwc.webhooks.unwrap() {
        assert_eq!(w.client_config.ca_bundle.as_ref(), Some(&ca), "{}", w.name);
    }
    let mwc = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(fullname)
        .await
        .unwrap();
    for w in mwc.webhooks.unwrap() {
        assert_eq!(w.client_config.ca_bundle.as_ref(), Some(&ca), "{}", w.name);
    }

    // The lease.
    let identity = format!("evictord-{}", e.pid().unwrap());
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    until(T, "the lease held by evictord", || async {
        let l = leases.get_opt(&format!("{fullname}-leader")).await.ok()??;
        (l.spec?.holder_identity? == identity).then_some(())
    })
    .await;

    // An EvictionRequest evicts its pod (webhook lookups, SubjectAccessReviews, label and status
    // patches, the Eviction API, events).
    let test_ns = c.namespace("rbac-flow").await;
    let p = pod("victim")
        .label("app", "victim")
        .create(&client, &test_ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), &test_ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "victim", "uid": uid}}, "requesters": [{"name": "rbac.example.com"}]}
    }))
    .unwrap();
    ers.create(&PostParams::default(), &er)
        .await
        .expect("create EvictionRequest");
    until(T, "Evicted=True", || async {
        let r = ers.get(&uid).await.ok()?;
        r.status
            .as_ref()
            .is_some_and(|s| s.is_true("Evicted"))
            .then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &test_ns);
    assert!(pods.get_opt("victim").await.unwrap().is_none());
    let labelled = ers.get(&uid).await.unwrap();
    assert!(
        labelled.metadata.labels.is_some_and(|l| !l.is_empty()),
        "the controller's label patch went through"
    );

    surge_as_the_chart_account(&client, &test_ns).await;
    hpa_surge_as_the_chart_account(&client, &test_ns).await;
    endpoints_as_the_chart_account(&client, &test_ns).await;

    // SIGTERM: graceful stop, lease released.
    let status = e.stop().expect("exit status");
    assert!(status.success(), "exit: {status}\n{}", e.logs());
    let logs = e.logs();
    assert!(
        logs.contains("released the leader lease"),
        "lease not released:\n{logs}"
    );
    for bad in [
        "Forbidden",
        "forbidden",
        "denied the request",
        "could not patch caBundle",
        // The interceptors' watch caches (DaemonSets, ReplicaSets, a surged workload's pods)
        // need list and watch.
        "may not list and watch",
    ] {
        assert!(
            !logs.contains(bad),
            "{bad:?} in the log of serve running as {sa}:\n{logs}"
        );
    }

    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(fullname, &Default::default())
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(fullname, &Default::default())
        .await;
    c.delete_namespace(&test_ns).await;
}

/// The Deployment interceptor's calls as the chart's ServiceAccount: pod → ReplicaSet →
/// Deployment, the HorizontalPodAutoscaler list, the surge patch, and the settler's watch and
/// restore patch. There is no kube-controller-manager in this binary: the test writes the
/// Deployment's status and owner chain itself.
async fn surge_as_the_chart_account(client: &kube::Client, ns: &str) {
    use kube::api::{Patch, PatchParams};
    let (deployments, rs) = settled_deployment(client, ns, "web", "deployment.apps.k8s.io").await;
    let mut web = pod("web-1-a")
        .label("app", "web")
        .interceptors(&["deployment.apps.k8s.io"])
        .build();
    web.metadata.owner_references = serde_json::from_value(owner(
        "ReplicaSet",
        "web-1",
        rs.metadata.uid.as_deref().unwrap(),
    ))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let web = pods.create(&PostParams::default(), &web).await.unwrap();
    let uid = web.metadata.uid.clone().unwrap();
    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "web-1-a", "uid": uid}}, "requesters": [{"name": "rbac.example.com"}]}
    }))
    .unwrap();
    ers.create(&PostParams::default(), &er).await.unwrap();
    let generation = until(T, "the Deployment surged to 2", || async {
        let d = deployments.get("web").await.ok()?;
        (d.spec.replicas == Some(2)).then_some(d.metadata.generation?)
    })
    .await;
    // The "deployment controller" and the "kubelet": the surge pod runs, Ready, and the
    // Deployment's status counts it (the interceptor checks the pods as well as the status).
    let mut surge = pod("web-1-b").label("app", "web").build();
    surge.metadata.owner_references = web.metadata.owner_references.clone();
    pods.create(&PostParams::default(), &surge)
        .await
        .expect("create the surge pod");
    pods.patch_status(
        "web-1-b",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("the surge pod Ready");
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&settled(generation, 2)),
        )
        .await
        .unwrap();
    until(
        T,
        "the pod evicted and the Deployment back at 1",
        || async {
            let d = deployments.get("web").await.ok()?;
            let gone = pods.get_opt("web-1-a").await.ok()?.is_none();
            (gone && d.spec.replicas == Some(1)).then_some(())
        },
    )
    .await;
}

/// The HorizontalPodAutoscaler interceptor's calls as the chart's ServiceAccount: pod →
/// ReplicaSet → Deployment, the autoscalers' list, the Deployment and its scale subresource, the
/// floor's patch, and the settler's watch and restoring patch. The test plays the deployment and
/// horizontal-pod-autoscaler controllers (there is no kube-controller-manager in this binary).
/// The `endpoints.evictord.dev` interceptor and the keeper of its gate as the chart's account:
/// the pod webhook adds the gate, the keeper sets it `True`, the interceptor reads the budgets and
/// the Services, sets it `False`, waits until the Endpoints (written here, as the endpoints
/// controller would, which this control plane does not run) drop the pod, and lets it go.
async fn endpoints_as_the_chart_account(client: &kube::Client, ns: &str) {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    use kube::api::{Patch, PatchParams};
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let gated = pod("gated")
        .label("app", "gated")
        .interceptors(&["endpoints.evictord.dev"])
        .annotation("evictord.dev/deregistration-delay", "0s")
        .create(client, ns)
        .await;
    let uid = gated.metadata.uid.clone().unwrap();
    let gates = gated
        .spec
        .clone()
        .unwrap()
        .readiness_gates
        .unwrap_or_default();
    assert_eq!(gates[0].condition_type, "evictord.dev/serving", "rule P9");
    let serving = |p: &Pod| evictord::serving::condition_of(p).map(|c| c.status.clone());
    until(T, "evictord.dev/serving True", || async {
        let p = pods.get("gated").await.ok()?;
        (serving(&p).as_deref() == Some("True")).then_some(())
    })
    .await;
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "gated"},
        "spec": {"selector": {"app": "gated"}, "ports": [{"port": 80}]}}))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let address =
        json!({"ip": "10.9.0.1", "targetRef": {"kind": "Pod", "name": "gated", "uid": uid}});
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), ns);
    let listed = |ready: bool| {
        let (key, other) = if ready {
            ("addresses", "notReadyAddresses")
        } else {
            ("notReadyAddresses", "addresses")
        };
        json!({"metadata": {"name": "gated"}, "subsets": [{key: [address.clone()], other: null, "ports": [{"port": 80}]}]})
    };
    endpoints
        .create(
            &PostParams::default(),
            &serde_json::from_value(listed(true)).unwrap(),
        )
        .await
        .unwrap();
    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "gated", "uid": uid}}, "requesters": [{"name": "rbac.example.com"}]}
    }))
    .unwrap();
    ers.create(&PostParams::default(), &er).await.unwrap();
    until(T, "the interceptor waiting for Service gated", || async {
        let s = ers.get(&uid).await.ok()?.status?;
        let m = s.interceptor("endpoints.evictord.dev")?.message.clone()?;
        m.contains("waiting until Service gated drop it")
            .then_some(())
    })
    .await;
    let p = pods.get("gated").await.unwrap();
    assert_eq!(serving(&p).as_deref(), Some("False"));
    endpoints
        .patch(
            "gated",
            &PatchParams::default(),
            &Patch::Merge(&listed(false)),
        )
        .await
        .unwrap();
    until(T, "the gated pod evicted", || async {
        let r = ers.get(&uid).await.ok()?;
        r.status?.is_true("Evicted").then_some(())
    })
    .await;
}

async fn hpa_surge_as_the_chart_account(client: &kube::Client, ns: &str) {
    use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
    use kube::ResourceExt;
    use kube::api::{Patch, PatchParams};
    const HPA: &str = "horizontalpodautoscaler.autoscaling.k8s.io";
    let (deployments, rs) = settled_deployment(client, ns, "api", HPA).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "api-hpa"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                 "minReplicas": 1, "maxReplicas": 3},
    }))
    .unwrap();
    hpas.create(&PostParams::default(), &hpa)
        .await
        .expect("create HorizontalPodAutoscaler");
    let mut api_pod = pod("api-1-a")
        .label("app", "api")
        .interceptors(&[HPA])
        .build();
    api_pod.metadata.owner_references = serde_json::from_value(owner(
        "ReplicaSet",
        "api-1",
        rs.metadata.uid.as_deref().unwrap(),
    ))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let api_pod = pods.create(&PostParams::default(), &api_pod).await.unwrap();
    let uid = api_pod.metadata.uid.clone().unwrap();
    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "api-1-a", "uid": uid}}, "requesters": [{"name": "rbac.example.com"}]}
    }))
    .unwrap();
    ers.create(&PostParams::default(), &er).await.unwrap();
    until(T, "the autoscaler's floor raised to 2", || async {
        let h = hpas.get("api-hpa").await.ok()?;
        (h.spec.min_replicas == Some(2)).then_some(())
    })
    .await;
    // evictord brings the Deployment up to the raised floor itself, through its scale
    // subresource (no autoscaler runs here to do it).
    until(
        T,
        "the Deployment scaled to the raised floor by evictord",
        || async {
            let d = deployments.get("api").await.ok()?;
            (d.spec.replicas == Some(2)).then_some(())
        },
    )
    .await;
    // The "deployment controller" and the "kubelet"
    // start a Ready pod and make it available (the interceptor checks the pods as well as the
    // status).
    let mut surge = pod("api-1-b").label("app", "api").build();
    surge.metadata.owner_references = api_pod.metadata.owner_references.clone();
    pods.create(&PostParams::default(), &surge)
        .await
        .expect("create the surge pod");
    pods.patch_status(
        "api-1-b",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("the surge pod Ready");
    let d = deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    deployments
        .patch_status(
            "api",
            &PatchParams::default(),
            &Patch::Merge(&settled(d.metadata.generation.unwrap(), 2)),
        )
        .await
        .unwrap();
    until(
        T,
        "the pod evicted and the autoscaler's floor back at 1",
        || async {
            let h = hpas.get("api-hpa").await.ok()?;
            let gone = pods.get_opt("api-1-a").await.ok()?.is_none();
            let recorded = h.annotations().contains_key("evictord.dev/hpa-surge");
            (gone && h.spec.min_replicas == Some(1) && !recorded).then_some(())
        },
    )
    .await;
}

/// The status of a Deployment whose controller observed `generation`, with `n` replicas, all of
/// them ready and available.
fn settled(generation: i64, n: i32) -> serde_json::Value {
    json!({"status": {"observedGeneration": generation, "replicas": n, "updatedReplicas": n,
        "availableReplicas": n, "readyReplicas": n}})
}

/// An `ownerReferences` list naming `kind` `name` (`uid`) as the controller.
fn owner(kind: &str, name: &str, uid: &str) -> serde_json::Value {
    json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}])
}

/// Deployment `name` of 1 replica declaring `interceptor`, its status written as settled, and its
/// ReplicaSet `<name>-1` (pods labelled `app=<name>`) owned by it: there is no
/// kube-controller-manager in this binary. Returns the Deployments' API and the ReplicaSet.
async fn settled_deployment(
    client: &kube::Client,
    ns: &str,
    name: &str,
    interceptor: &str,
) -> (
    Api<k8s_openapi::api::apps::v1::Deployment>,
    k8s_openapi::api::apps::v1::ReplicaSet,
) {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use kube::api::{Patch, PatchParams};
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = deployments
        .create(
            &PostParams::default(),
            &support::fixtures::deployment(name, 1, 1, 0, &[interceptor]),
        )
        .await
        .expect("create Deployment");
    deployments
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&settled(1, 1)))
        .await
        .expect("Deployment status");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": format!("{name}-1"), "ownerReferences": owner("Deployment", name, d.metadata.uid.as_deref().unwrap())},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}}},
    }))
    .unwrap();
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &rs)
        .await
        .expect("create ReplicaSet");
    (deployments, rs)
}
