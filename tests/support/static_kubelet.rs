//! A played kubelet for static pods: there is no kubelet on the test control plane, so this one
//! keeps a mirror pod for each manifest of a static pod directory, reading the directory as the
//! kubelet v1.20 file source does (no dot-names, no subdirectories, first YAML document, kind
//! Pod), and deletes the mirror pod of a manifest that is gone once the pod's grace period has
//! passed (the time the real kubelet takes to stop it). Mirror pods are named
//! `<name>-<node>`, carry `kubernetes.io/config.mirror` (the manifest's hash) and are marked
//! Running. [`StaticKubelet::started`] counts the mirror pods it created per manifest name, so a
//! test sees a pod started early.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evictord::interceptor::kubelet::manifest::{
    content_hash, is_visible_to_kubelet, mirror_pod_name,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use serde_json::json;

/// Handle of a running played kubelet; stops when dropped.
pub struct StaticKubelet {
    started: Arc<Mutex<BTreeMap<String, usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StaticKubelet {
    /// Tends the static pods of `dir` on `node` every 200 ms.
    pub fn start(client: Client, dir: &Path, node: &str) -> StaticKubelet {
        let started = Arc::new(Mutex::new(BTreeMap::new()));
        let counts = started.clone();
        let dir = dir.to_path_buf();
        let node = node.to_string();
        let task = tokio::spawn(async move {
            let mut gone_since: BTreeMap<(String, String), Instant> = BTreeMap::new();
            loop {
                tend(&client, &dir, &node, &counts, &mut gone_since).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        StaticKubelet { started, task }
    }

    /// How many mirror pods were created for the manifest whose pod is named `name`.
    pub fn started(&self, name: &str) -> usize {
        self.started
            .lock()
            .expect("lock")
            .get(name)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for StaticKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The static pods of `dir`: (namespace, mirror name) → (mirror pod, manifest name).
fn manifests(dir: &Path, node: &str) -> BTreeMap<(String, String), (Pod, String)> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let path: PathBuf = e.path();
        if !is_visible_to_kubelet(&name) || !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let Some(doc) = serde_norway::Deserializer::from_slice(&bytes).next() else {
            continue;
        };
        let Ok(mut pod) = Pod::deserialize(doc) else {
            continue;
        };
        let Some(base) = pod.metadata.name.clone() else {
            continue;
        };
        let ns = pod
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let hash = content_hash(&bytes);
        pod.metadata.name = Some(mirror_pod_name(&base, node));
        pod.metadata.namespace = Some(ns.clone());
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("kubernetes.io/config.mirror".into(), hash.clone());
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = Some(node.to_string());
        }
        out.insert((ns, mirror_pod_name(&base, node)), (pod, base));
    }
    out
}

async fn tend(
    client: &Client,
    dir: &Path,
    node: &str,
    started: &Mutex<BTreeMap<String, usize>>,
    gone_since: &mut BTreeMap<(String, String), Instant>,
) {
    let wanted = manifests(dir, node);
    let all: Api<Pod> = Api::all(client.clone());
    let Ok(list) = all
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
    else {
        return;
    };
    let mirrors: BTreeMap<(String, String), Pod> = list
        .items
        .into_iter()
        .filter(|p| p.annotations().contains_key("kubernetes.io/config.mirror"))
        .map(|p| ((p.namespace().unwrap_or_default(), p.name_any()), p))
        .collect();
    for (key, (pod, base)) in &wanted {
        gone_since.remove(key);
        if mirrors.contains_key(key) {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), &key.0);
        if api.create(&PostParams::default(), pod).await.is_ok() {
            *started
                .lock()
                .expect("lock")
                .entry(base.clone())
                .or_default() += 1;
            let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
            let _ = api
                .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
    }
    for (key, pod) in &mirrors {
        if wanted.contains_key(key) {
            continue;
        }
        let grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64;
        let since = *gone_since.entry(key.clone()).or_insert_with(Instant::now);
        if since.elapsed() >= Duration::from_secs(grace) {
            let api: Api<Pod> = Api::namespaced(client.clone(), &key.0);
            let _ = api
                .delete(&key.1, &DeleteParams::default().grace_period(0))
                .await;
            gone_since.remove(key);
        }
    }
}
