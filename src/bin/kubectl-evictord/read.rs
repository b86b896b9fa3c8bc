//! Reads of the cluster, each failure worded by `evictord::plugin::errors`.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};

use evictord::api::{EvictionInterceptor, EvictionRequest, MaintenanceBudget, NodeMaintenance};
use evictord::cluster::CachedPod;
use evictord::cluster::budget::budget_resource;
use evictord::interceptor::hpa;
use evictord::interceptor::hpa::record::AutoscalerFacts;
use evictord::interceptor::hpa::target::controller_of;
use evictord::plugin::autoscalers::{NamespacedAutoscaler, ReplicaSetOwner};
use evictord::plugin::blockers::Budget;
use evictord::plugin::drain_rules::{NamespaceLabels, reads_namespaces};
use evictord::plugin::errors::{Access, api_error};
use evictord::plugin::{Error, Result};

/// Fails with "install the chart first" when the evictord.dev API is not served.
pub async fn ensure_crds(client: &Client) -> Result<()> {
    match client
        .list_api_group_resources("evictord.dev/v1alpha1")
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(Error::CrdsMissing),
        Err(e) => Err(api_error(
            Access::new("get", "the evictord.dev/v1alpha1 API"),
            e,
        )),
    }
}

/// The named nodes, each of which must exist.
pub async fn named_nodes(client: &Client, names: &[String]) -> Result<Vec<String>> {
    let api: Api<Node> = Api::all(client.clone());
    for n in names {
        api.get(n)
            .await
            .map_err(|e| api_error(Access::new("get", "nodes").named(n), e))?;
    }
    Ok(names.to_vec())
}

/// The nodes a label selector matches; at least one.
pub async fn selected_nodes(client: &Client, selector: &str) -> Result<Vec<String>> {
    let api: Api<Node> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| api_error(Access::new("list", "nodes"), e))?;
    let names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    if names.is_empty() {
        return Err(Error::NoNodeMatches(selector.to_string()));
    }
    Ok(names)
}

/// Every node (the selectors of maintenances are evaluated against them).
pub async fn all_nodes(client: &Client) -> Result<Vec<Arc<Node>>> {
    let api: Api<Node> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| api_error(Access::new("list", "nodes"), e))?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}

/// The pods bound to these nodes, reduced as the controller's cache reduces them.
pub async fn pods_on(client: &Client, nodes: &[String]) -> Result<Vec<CachedPod>> {
    let api: Api<CachedPod> = Api::all(client.clone());
    let mut pods = Vec::new();
    for n in nodes {
        let list = api
            .list(&ListParams::default().fields(&format!("spec.nodeName={n}")))
            .await
            .map_err(|e| api_error(Access::new("list", "pods"), e))?;
        pods.extend(list.items.into_iter().map(CachedPod::trim));
    }
    Ok(pods)
}

/// The names of the registered interceptors (EvictionInterceptor objects), or `None` when they
/// cannot be listed (an evictord without that CRD, or no permission): registration is unknown
/// then, and nothing is said about it.
pub async fn registered_interceptors(client: &Client) -> Option<BTreeSet<String>> {
    let api: Api<EvictionInterceptor> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter_map(|i| i.metadata.name)
            .collect(),
    )
}

/// The namespaces' labels, read only when a rule of these maintenances selects namespaces by
/// their labels (so that a person who may not list namespaces is not refused for nothing).
pub async fn namespace_labels<'a>(
    client: &Client,
    maintenances: impl IntoIterator<Item = &'a NodeMaintenance>,
) -> Result<NamespaceLabels> {
    if !reads_namespaces(maintenances) {
        return Ok(NamespaceLabels::new());
    }
    let api: Api<Namespace> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| api_error(Access::new("list", "namespaces"), e))?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
        .collect())
}

/// Every NodeMaintenance.
pub async fn maintenances(client: &Client) -> Result<Vec<NodeMaintenance>> {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| api_error(Access::new("list", "nodemaintenances.evictord.dev"), e))?;
    Ok(list.items)
}

/// Every MaintenanceBudget; none where the resource is not served (an evictord from before
/// budgets: nothing limits its maintenances).
pub async fn maintenance_budgets(client: &Client) -> Result<Vec<MaintenanceBudget>> {
    let api: Api<MaintenanceBudget> = Api::all(client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(api_error(
            Access::new("list", "maintenancebudgets.evictord.dev"),
            e,
        )),
    }
}

/// One NodeMaintenance.
pub async fn maintenance(client: &Client, name: &str) -> Result<NodeMaintenance> {
    Api::<NodeMaintenance>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| {
            api_error(
                Access::new("get", "nodemaintenances.evictord.dev").named(name),
                e,
            )
        })
}

/// Every EvictionRequest.
pub async fn requests(client: &Client) -> Result<Vec<EvictionRequest>> {
    let api: Api<EvictionRequest> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| api_error(Access::new("list", "evictionrequests.evictord.dev"), e))?;
    Ok(list.items)
}

/// The PodDisruptionBudgets of the pods' namespaces (policy/v1, else policy/v1beta1 on servers
/// before 1.21).
pub async fn budgets(client: &Client, pods: &[CachedPod]) -> Result<Vec<Budget>> {
    let namespaces: BTreeSet<&str> = pods.iter().map(|p| p.namespace()).collect();
    let mut out = Vec::new();
    for ns in namespaces {
        let mut list = None;
        for version in ["v1", "v1beta1"] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &budget_resource(version));
            match api.list(&ListParams::default()).await {
                Ok(l) => {
                    list = Some((version, l));
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => {
                    return Err(api_error(
                        Access::new("list", "poddisruptionbudgets.policy").in_namespace(ns),
                        e,
                    ));
                }
            }
        }
        if let Some((version, l)) = list {
            for pdb in l.items {
                let v = serde_json::to_value(&pdb).unwrap_or_default();
                out.push(Budget::from_json(ns, version, &v));
            }
        }
    }
    Ok(out)
}

/// The namespaces of the pods that declare the HPA interceptor: only there does `plan` look for
/// ReplicaSets and HorizontalPodAutoscalers.
fn autoscaled_namespaces(pods: &[CachedPod]) -> BTreeSet<&str> {
    pods.iter()
        .filter(|p| p.interceptors().iter().any(|i| i == hpa::NAME))
        .map(|p| p.namespace())
        .collect()
}

/// The controllers of the ReplicaSets in the namespaces of pods that declare the HPA interceptor.
pub async fn replicaset_owners(
    client: &Client,
    pods: &[CachedPod],
) -> Result<Vec<ReplicaSetOwner>> {
    let mut out = Vec::new();
    for ns in autoscaled_namespaces(pods) {
        let api: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| api_error(Access::new("list", "replicasets.apps").in_namespace(ns), e))?;
        out.extend(list.items.into_iter().map(|rs| ReplicaSetOwner {
            namespace: ns.to_string(),
            owner: controller_of(rs.metadata.owner_references.as_ref()).cloned(),
            name: rs.metadata.name.unwrap_or_default(),
        }));
    }
    Ok(out)
}

/// The HorizontalPodAutoscalers (in the `autoscaling` version the interceptor would use) of the
/// namespaces of pods that declare the HPA interceptor.
pub async fn autoscalers(client: &Client, pods: &[CachedPod]) -> Result<Vec<NamespacedAutoscaler>> {
    let namespaces = autoscaled_namespaces(pods);
    if namespaces.is_empty() {
        return Ok(Vec::new());
    }
    let Some(version) = hpa::discover_version(client).await else {
        return Ok(Vec::new());
    };
    let resource = hpa::discovery::autoscaler_resource(version);
    let mut out = Vec::new();
    for ns in namespaces {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let list = api.list(&ListParams::default()).await.map_err(|e| {
            api_error(
                Access::new("list", "horizontalpodautoscalers.autoscaling").in_namespace(ns),
                e,
            )
        })?;
        out.extend(list.items.iter().map(|h| NamespacedAutoscaler {
            namespace: ns.to_string(),
            autoscaler: AutoscalerFacts::read(h).autoscaler,
        }));
    }
    Ok(out)
}
