//! Fixture builders for the real-cluster tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// A pod under construction.
#[derive(Clone, Debug)]
pub struct PodBuilder {
    name: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    node: Option<String>,
    priority_class: Option<String>,
    owner: Option<Value>,
}

/// A pod named `name` (one container, grace period 0 so that deletion is immediate).
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder {
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        node: None,
        priority_class: None,
        owner: None,
    }
}

impl PodBuilder {
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
    pub fn interceptors(self, names: &[&str]) -> Self {
        self.annotation("evictord.dev/eviction-interceptors", &names.join(","))
    }
    pub fn on_node(mut self, node: &str) -> Self {
        self.node = Some(node.into());
        self
    }
    pub fn priority_class(mut self, pc: &str) -> Self {
        self.priority_class = Some(pc.into());
        self
    }
    pub fn daemonset(mut self, ds: &str) -> Self {
        self.owner = Some(
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds, "uid": format!("ds-{ds}"), "controller": true}),
        );
        self
    }
    /// Owned by a ReplicaSet (a controller reference is what `kubectl drain` asks of a pod it
    /// may evict without `--force`).
    pub fn replicaset(mut self, rs: &str) -> Self {
        self.owner = Some(
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": format!("rs-{rs}"), "controller": true}),
        );
        self
    }
    pub fn mirror(self) -> Self {
        self.annotation("kubernetes.io/config.mirror", "mirror")
    }

    pub fn build(&self) -> Pod {
        let mut v = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "labels": self.labels, "annotations": self.annotations},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": false,
                "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]
            }
        });
        if let Some(n) = &self.node {
            v["spec"]["nodeName"] = json!(n);
        }
        if let Some(pc) = &self.priority_class {
            v["spec"]["priorityClassName"] = json!(pc);
        }
        if let Some(o) = &self.owner {
            v["metadata"]["ownerReferences"] = json!([o]);
        }
        serde_json::from_value(v).expect("pod")
    }

    /// Creates the pod and marks it Running (a PodDisruptionBudget counts only running pods).
    pub async fn create(&self, client: &Client, ns: &str) -> Pod {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let created = api
            .create(&PostParams::default(), &self.build())
            .await
            .unwrap_or_else(|e| panic!("creating pod {}: {e}", self.name));
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        api.patch_status(
            &self.name,
            &Default::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .map_or(created, |p| p)
    }
}

/// A Node under construction (a fake node: nothing runs on it, pods are bound by `nodeName`).
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    name: String,
    labels: BTreeMap<String, String>,
    unschedulable: bool,
    ready: bool,
}

/// A node named `name`. Nodes are cluster-scoped: give each test its own names.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder {
        name: name.into(),
        labels: BTreeMap::new(),
        unschedulable: false,
        ready: false,
    }
}

impl NodeBuilder {
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
    /// Cordoned before any maintenance.
    pub fn unschedulable(mut self) -> Self {
        self.unschedulable = true;
        self
    }
    /// With a `Ready=True` condition (written to the status once created), as a kubelet reports
    /// it: maintenance budgets count a node without one as unavailable.
    pub fn ready(mut self) -> Self {
        self.ready = true;
        self
    }

    pub fn build(&self) -> k8s_openapi::api::core::v1::Node {
        let mut v = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
        });
        if self.unschedulable {
            v["spec"] = json!({"unschedulable": true});
        }
        serde_json::from_value(v).expect("node")
    }

    pub async fn create(&self, client: &Client) -> k8s_openapi::api::core::v1::Node {
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        let node = api
            .create(&PostParams::default(), &self.build())
            .await
            .unwrap_or_else(|e| panic!("creating node {}: {e}", self.name));
        if !self.ready {
            return node;
        }
        set_node_ready(client, &self.name, true).await
    }
}

/// Sets the node's `Ready` condition to `True` or `False` (the status a kubelet reports).
pub async fn set_node_ready(
    client: &Client,
    name: &str,
    ready: bool,
) -> k8s_openapi::api::core::v1::Node {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let now = jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
        "message": "set by the test",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }]}});
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(&patch),
    )
    .await
    .unwrap_or_else(|e| panic!("setting node {name} ready={ready}: {e}"))
}

/// Creates a PriorityClass (scheduling.k8s.io/v1) of that value, if it does not exist yet.
pub async fn priority_class(client: &Client, name: &str, value: i32) {
    let api: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(client.clone());
    let pc = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": value,
    }))
    .expect("priority class");
    match api.create(&PostParams::default(), &pc).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating priority class {name}: {e}"),
    }
}

/// The policy/v1beta1 PodDisruptionBudget API (the version kube-apiserver v1.20 serves).
pub fn pdb_api(client: &Client, ns: &str) -> Api<kube::api::DynamicObject> {
    let ar = kube::api::ApiResource {
        group: "policy".into(),
        version: "v1beta1".into(),
        api_version: "policy/v1beta1".into(),
        kind: "PodDisruptionBudget".into(),
        plural: "poddisruptionbudgets".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Creates a PodDisruptionBudget that allows no disruption of the pods labelled `key=value`
/// (`minAvailable` = `pods`; with no disruption controller its status never allows one anyway).
/// Only pods whose status says Running are protected.
pub async fn blocking_pdb(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
    value: &str,
    pods: i32,
) {
    let pdb = serde_json::from_value(json!({
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": pods, "selector": {"matchLabels": {key: value}}},
    }))
    .expect("pdb");
    pdb_api(client, ns)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap_or_else(|e| panic!("creating PodDisruptionBudget {name}: {e}"));
}

/// A NodeMaintenance in stage Drain selecting the nodes labelled `key=value`.
pub fn draining_maintenance(
    name: &str,
    key: &str,
    value: &str,
    reason: &str,
) -> evictord::api::NodeMaintenance {
    serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
            ]},
            "stage": "Drain",
            "reason": reason,
        }
    }))
    .expect("NodeMaintenance")
}

/// A RollingUpdate Deployment of `replicas` pods labelled `app=name` whose pod template declares
/// `interceptors`, with `maxSurge`/`maxUnavailable` (grace period 0, like [`pod`]).
pub fn deployment(
    name: &str,
    replicas: i32,
    max_surge: i32,
    max_unavailable: i32,
    interceptors: &[&str],
) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {"evictord.dev/eviction-interceptors": interceptors.join(",")},
                },
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]
                }
            }
        }
    }))
    .expect("deployment")
}

/// An EvictionRequest for pod `name` of `uid`, named after the UID, with these requesters.
pub fn eviction_request(
    name: &str,
    uid: &str,
    requesters: &[&str],
) -> evictord::api::EvictionRequest {
    serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": uid},
        "spec": {
            "target": {"pod": {"name": name, "uid": uid}},
            "requesters": requesters.iter().map(|r| json!({"name": r})).collect::<Vec<_>>(),
        }
    }))
    .expect("EvictionRequest")
}

/// Creates [`eviction_request`] in `ns`; returns the API of the namespace's EvictionRequests.
pub async fn create_eviction_request(
    client: &Client,
    ns: &str,
    name: &str,
    uid: &str,
    requesters: &[&str],
) -> Api<evictord::api::EvictionRequest> {
    let api = Api::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &eviction_request(name, uid, requesters),
    )
    .await
    .unwrap_or_else(|e| panic!("creating the EvictionRequest of pod {name}: {e}"));
    api
}

/// The reasons of the events on objects of `kind`, in namespace `ns` (`None`: every namespace);
/// repeated events are folded into one with a count.
pub async fn event_reasons(client: &Client, ns: Option<&str>, kind: &str) -> Vec<String> {
    let events: Api<Event> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some(kind))
        .filter_map(|e| e.reason)
        .collect()
}
