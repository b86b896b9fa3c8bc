//! A fake scheduler and kubelet for one namespace: there is neither on the test control plane,
//! so pods created by ReplicaSets are bound (the `binding` subresource) to the node the test
//! chooses — a DaemonSet's pod to the node its required node affinity names, as the scheduler
//! would — and marked Running and Ready (status patch), which makes them available to the
//! Deployment and healthy to the disruption controller. A pod being deleted goes away once its
//! grace period is over (deleted with grace 0), as a kubelet would have stopped it.
//!
//! A pod with readiness gates is tended as a real kubelet would: it gets an IP (the endpoint
//! controllers list pods by IP), its `Ready` condition is computed from its containers and every
//! readiness gate (`True` only when each gate's condition is `True`, back to `False` when one turns
//! `False`), and conditions are written one by one with strategic merge patches, so the gates'
//! conditions, which others own, are never erased.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// Handle of a running fake kubelet; stops when dropped.
pub struct Kubelet {
    node: Arc<Mutex<String>>,
    ready: Arc<Mutex<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Kubelet {
    /// Binds the unbound pods of `ns` to `node` and marks bound pods Ready, every 100 ms.
    pub fn start(client: Client, ns: &str, node: &str) -> Kubelet {
        let target = Arc::new(Mutex::new(node.to_string()));
        let ready = Arc::new(Mutex::new(true));
        let (t, r) = (target.clone(), ready.clone());
        let ns = ns.to_string();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, &ns);
            loop {
                let node = t.lock().expect("lock").clone();
                let make_ready = *r.lock().expect("lock");
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    for p in list.items {
                        tend(&pods, &p, &node, make_ready).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Kubelet {
            node: target,
            ready,
            task,
        }
    }

    /// New pods go to `node` from now on.
    pub fn schedule_to(&self, node: &str) {
        *self.node.lock().expect("lock") = node.to_string();
    }

    /// Whether bound pods are made Ready (false holds new pods unready).
    pub fn set_ready(&self, ready: bool) {
        *self.ready.lock().expect("lock") = ready;
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The one node a pod's required node affinity names by `metadata.name` (how the DaemonSet
/// controller pins its pods), if it does.
fn pinned_node(p: &Pod) -> Option<String> {
    let terms = &p
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields.as_ref()?.iter().find_map(|f| {
            (f.key == "metadata.name" && f.operator == "In")
                .then(|| f.values.as_ref()?.first().cloned())
                .flatten()
        })
    })
}

async fn tend(pods: &Api<Pod>, p: &Pod, node: &str, make_ready: bool) {
    let name = p.name_any();
    if let Some(deleting) = &p.metadata.deletion_timestamp {
        // deletionTimestamp is when the grace period ends.
        if deleting.0 <= jiff::Timestamp::now() {
            let params = kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(kube::api::Preconditions {
                    uid: p.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let _ = pods.delete(&name, &params).await;
        }
        return;
    }
    let bound = p.spec.as_ref().and_then(|s| s.node_name.clone());
    if bound.is_none() {
        let node = pinned_node(p).unwrap_or_else(|| node.to_string());
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let _ = pods
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await;
        return;
    }
    let gates: Vec<String> = p
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|g| g.condition_type.clone())
        .collect();
    if !gates.is_empty() {
        tend_gated(pods, p, &gates, make_ready).await;
        return;
    }
    let is_ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if make_ready && !is_ready {
        let now = jiff::Timestamp::now().to_string();
        let status = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ]}});
        let _ = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
}

/// A pod IP no other pod of this process got: 10.200.x.y (data only: nothing is sent to it).
pub fn next_pod_ip() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("10.200.{}.{}", (n / 250) % 250, n % 250 + 1)
}

/// The status of condition `type_`, if the pod has it.
pub fn condition<'a>(p: &'a Pod, type_: &str) -> Option<&'a str> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// A bound pod with readiness gates, as a kubelet tends it: an IP and `Running` first, then
/// `ContainersReady` (when `make_ready`, and never taken back), then `Ready` from the containers and
/// every gate, each one strategic merge patch of one condition.
async fn tend_gated(pods: &Api<Pod>, p: &Pod, gates: &[String], make_ready: bool) {
    let name = p.name_any();
    let status = p.status.clone().unwrap_or_default();
    let patch = |status: serde_json::Value| async move {
        let _ = pods
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(&json!({ "status": status })),
            )
            .await;
    };
    if status.pod_ip.is_none() || status.phase.as_deref() != Some("Running") {
        let ip = status.pod_ip.clone().unwrap_or_else(next_pod_ip);
        patch(json!({"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]})).await;
        return;
    }
    let now = jiff::Timestamp::now().to_string();
    let containers = condition(p, "ContainersReady") == Some("True");
    if make_ready && !containers {
        patch(json!({"conditions": [
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
        ]}))
        .await;
        return;
    }
    let gates_true = gates.iter().all(|g| condition(p, g) == Some("True"));
    let ready = containers && gates_true;
    if (condition(p, "Ready") == Some("True")) != ready {
        let reason = if ready || !containers {
            ""
        } else {
            "ReadinessGatesNotReady"
        };
        patch(json!({"conditions": [{
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "reason": reason,
            "lastTransitionTime": now,
        }]}))
        .await;
    }
}
