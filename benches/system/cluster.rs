//! The benchmark's operations on the test cluster, shared by its parts: creating pods in bulk
//! ([`create_pods`]; [`bench_pod`] is a realistic one), unregistering the admission webhooks, and
//! deleting what a run created ([`delete_requests`], [`delete_all`]).

use std::time::{Duration, Instant};

use evictord::api::EvictionRequest;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// Parallel API calls of the pod creator.
const CREATORS: usize = 32;

/// A realistic Deployment pod (about 1.5 KiB of JSON): labels, a ReplicaSet owner, a node, one
/// container with ports, env and resources; one in ten carries the interceptor annotation.
pub fn bench_pod(name: &str, i: usize) -> Pod {
    let mut annotations = serde_json::Map::new();
    annotations.insert(
        "kubectl.kubernetes.io/restartedAt".into(),
        "2026-01-01T00:00:00Z".into(),
    );
    if i.is_multiple_of(10) {
        annotations.insert(
            "evictord.dev/eviction-interceptors".into(),
            "checkout.shop.example.com,pdb.example.com".into(),
        );
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "web", "pod-template-hash": "7d9c6b5f4", "tier": "frontend", "team": "shop"},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c6b5f4",
                                 "uid": "5f0c7a9e-1d2b-4c3d-8e4f-5a6b7c8d9e0f", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": format!("node-{:03}", i % 100),
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "web", "image": "registry.example.com/shop/web:1.24.3",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "REGION", "value": "eu-west-1"},
                        {"name": "FEATURES", "value": "checkout,cart,recommendations"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5}
            }]
        }
    }))
    .expect("pod")
}

/// Creates pods `from..to` named `{prefix}-{i}` with [`CREATORS`] calls in flight; stops at
/// `deadline`. Returns how many were created.
pub async fn create_pods(
    client: &Client,
    ns: &str,
    prefix: &str,
    range: std::ops::Range<usize>,
    deadline: Instant,
    build: impl Fn(&str, usize) -> Pod,
) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pods: Vec<(String, Pod)> = range
        .map(|i| {
            let name = format!("{prefix}-{i:06}");
            let pod = build(&name, i);
            (name, pod)
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(pods)
        .map(|(name, pod)| {
            let api = api.clone();
            async move {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                for _ in 0..5 {
                    match api.create(&PostParams::default(), &pod).await {
                        Ok(p) => return Ok(Some(p)),
                        // Throttled or busy: the server asks to retry.
                        Err(kube::Error::Api(e)) if e.code == 429 || e.code >= 500 => {
                            tokio::time::sleep(Duration::from_millis(200)).await
                        }
                        Err(e) => return Err(anyhow::anyhow!("creating pod {name}: {e}")),
                    }
                }
                Err(anyhow::anyhow!(
                    "creating pod {name}: still refused after 5 tries"
                ))
            }
        })
        .buffer_unordered(CREATORS)
        .collect()
        .await;
    let mut created = Vec::new();
    for r in results {
        if let Some(p) = r? {
            created.push(p);
        }
    }
    Ok(created)
}

pub async fn unregister_webhooks(client: &Client) -> anyhow::Result<()> {
    let v: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let m: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    v.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    m.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    // The apiserver picks configuration changes up asynchronously.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(())
}

pub async fn delete_requests(client: &Client, ns: &str) -> anyhow::Result<()> {
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    delete_all(
        &api,
        &format!("EvictionRequests of {ns}"),
        Duration::from_secs(30),
    )
    .await
}

/// Deletes every object `api` lists and waits until none is left (polled every 100 ms).
pub async fn delete_all<K>(api: &Api<K>, what: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if api
            .list_metadata(&ListParams::default().limit(1))
            .await?
            .items
            .is_empty()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{what} were not deleted within {}s", timeout.as_secs())
}
