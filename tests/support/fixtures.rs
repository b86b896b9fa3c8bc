//! Fixture builders for the real-cluster tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
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
