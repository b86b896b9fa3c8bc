//! The DaemonSet drain scenario of `daemonset.apps.k8s.io`, shared by its test binaries: two
//! nodes of the test's own, DaemonSets that run on exactly those nodes (kube-controller-manager's
//! DaemonSet controller creates the pods, the fake kubelet binds and starts them), NodeMaintenances
//! over them, and a timeline of every pod the namespace ever ran.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evictord::api::{CONDITION_DRAINED, MAINTENANCE_TAINT, NodeMaintenance};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::fixtures::node;
use super::kubelet::Kubelet;
use super::wait::until;

/// Node label: the nodes of one test (DaemonSets select them by it).
pub const TEST_LABEL: &str = "ds.evictord.dev/test";
/// Node label: the node's own name (maintenances select nodes by it).
pub const NODE_LABEL: &str = "ds.evictord.dev/node";

/// Nodes `one` and `two` of the test, and the fake kubelet of its namespace.
pub struct DaemonSetScenario {
    pub client: Client,
    pub ns: String,
    pub one: String,
    pub two: String,
    pub kubelet: Kubelet,
}

/// A pod as the timeline saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub name: String,
    pub node: String,
    pub first: Instant,
    /// When it was last seen (while it exists: the latest sample).
    pub last: Instant,
    /// When a sample first saw it terminating.
    pub terminating: Option<Instant>,
    pub gone: bool,
}

/// Every pod of the namespace by UID, sampled every 100 ms.
pub struct Timeline {
    pub pods: Arc<Mutex<BTreeMap<String, Seen>>>,
    task: tokio::task::JoinHandle<()>,
    pub start: Instant,
}

impl Timeline {
    /// The pods seen so far.
    pub fn snapshot(&self) -> BTreeMap<String, Seen> {
        self.pods.lock().expect("lock").clone()
    }

    /// Prints each pod's start and stop, relative to the start of the timeline, in order.
    pub fn print(&self) {
        let mut rows: Vec<Seen> = self.snapshot().into_values().collect();
        rows.sort_by_key(|s| s.first);
        for s in rows {
            let at = |t: Instant| format!("{:6.1}s", t.duration_since(self.start).as_secs_f64());
            let stop = if s.gone {
                at(s.last)
            } else {
                "  running".into()
            };
            println!(
                "{:40} {:28} start {} stop {}",
                s.name,
                s.node,
                at(s.first),
                stop
            );
        }
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DaemonSetScenario {
    /// Creates the two nodes, Ready and without the `node.kubernetes.io/not-ready` taint that
    /// kube-apiserver puts on new nodes (the node lifecycle controller, not run here, would lift
    /// it; DaemonSet pods do not tolerate it for scheduling); new non-DaemonSet pods go to node one.
    pub async fn start(client: Client, ns: &str) -> DaemonSetScenario {
        let (one, two) = (format!("{ns}-one"), format!("{ns}-two"));
        let nodes: Api<Node> = Api::all(client.clone());
        for n in [&one, &two] {
            node(n)
                .label(TEST_LABEL, ns)
                .label(NODE_LABEL, n)
                .create(&client)
                .await;
            let now = jiff::Timestamp::now().to_string();
            let ready = json!({"status": {"conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now, "lastTransitionTime": now
            }]}});
            nodes
                .patch_status(n, &PatchParams::default(), &Patch::Merge(&ready))
                .await
                .unwrap_or_else(|e| panic!("node {n} Ready: {e}"));
            nodes
                .patch(
                    n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"taints": null}})),
                )
                .await
                .unwrap_or_else(|e| panic!("node {n} untainted: {e}"));
        }
        let kubelet = Kubelet::start(client.clone(), ns, &one);
        DaemonSetScenario {
            client,
            ns: ns.to_string(),
            one,
            two,
            kubelet,
        }
    }

    /// A DaemonSet on the test's nodes; `tolerate_all` gives its template the toleration
    /// `operator: Exists` (it tolerates every taint, the maintenance taint included).
    pub async fn daemonset(&self, name: &str, tolerate_all: bool, grace: i64) {
        let mut ds = json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {TEST_LABEL: self.ns},
                        "terminationGracePeriodSeconds": grace,
                        "automountServiceAccountToken": false,
                        "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]
                    }
                }
            }
        });
        if tolerate_all {
            ds["spec"]["template"]["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
        }
        let ds: DaemonSet = serde_json::from_value(ds).expect("DaemonSet");
        Api::<DaemonSet>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &ds)
            .await
            .unwrap_or_else(|e| panic!("creating DaemonSet {name}: {e}"));
    }

    /// The running (not terminating) pods of DaemonSet `name`, by node: their UIDs.
    pub async fn running(&self, name: &str) -> BTreeMap<String, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let list = pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .expect("list pods");
        list.items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                let node = p.spec.as_ref()?.node_name.clone()?;
                let ready = p
                    .status
                    .as_ref()?
                    .conditions
                    .as_ref()?
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                ready.then(|| (node, p.metadata.uid.clone().unwrap_or_default()))
            })
            .collect()
    }

    /// Waits until DaemonSet `name` runs a ready pod on each node in `nodes` and on no other.
    pub async fn wait_running_on(&self, name: &str, nodes: &[&str]) -> BTreeMap<String, String> {
        let what = format!("DaemonSet {name} running on {nodes:?}");
        until(Duration::from_secs(90), &what, || async {
            let running = self.running(name).await;
            let on: Vec<&str> = running.keys().map(String::as_str).collect();
            (on == nodes).then_some(running)
        })
        .await
    }

    /// A NodeMaintenance in stage Drain (default plan) over `nodes`.
    pub async fn maintenance(&self, name: &str, nodes: &[&str]) {
        let nm: NodeMaintenance = serde_json::from_value(json!({
            "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": NODE_LABEL, "operator": "In", "values": nodes}]}
                ]},
                "stage": "Drain",
                "reason": "kernel upgrade",
            }
        }))
        .expect("NodeMaintenance");
        Api::<NodeMaintenance>::all(self.client.clone())
            .create(&PostParams::default(), &nm)
            .await
            .unwrap_or_else(|e| panic!("creating NodeMaintenance {name}: {e}"));
    }

    /// The maintenance once `Drained=True`.
    pub async fn wait_drained(&self, name: &str, timeout: Duration) -> NodeMaintenance {
        let api: Api<NodeMaintenance> = Api::all(self.client.clone());
        until(timeout, &format!("{name} Drained"), || async {
            let nm = api.get(name).await.ok()?;
            nm.status.as_ref()?.is_true(CONDITION_DRAINED).then_some(nm)
        })
        .await
    }

    /// Moves the maintenance to Complete.
    pub async fn complete(&self, name: &str) {
        Api::<NodeMaintenance>::all(self.client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"stage": "Complete"}})),
            )
            .await
            .unwrap_or_else(|e| panic!("completing {name}: {e}"));
    }

    /// (tainted with the maintenance taint, unschedulable) of a node.
    pub async fn node_state(&self, name: &str) -> (bool, bool) {
        let n = Api::<Node>::all(self.client.clone())
            .get(name)
            .await
            .expect("node");
        let spec = n.spec.unwrap_or_default();
        let tainted = spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == MAINTENANCE_TAINT && t.effect == "NoSchedule");
        (tainted, spec.unschedulable.unwrap_or(false))
    }

    /// Starts sampling every pod of the namespace every 100 ms.
    pub fn timeline(&self) -> Timeline {
        let pods_seen: Arc<Mutex<BTreeMap<String, Seen>>> = Arc::default();
        let seen = pods_seen.clone();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    let now = Instant::now();
                    let mut seen = seen.lock().expect("lock");
                    let present: Vec<String> = list
                        .items
                        .iter()
                        .filter_map(|p| p.metadata.uid.clone())
                        .collect();
                    for p in &list.items {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        let node = p
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.clone())
                            .unwrap_or_default();
                        let e = seen.entry(uid).or_insert_with(|| Seen {
                            name: p.name_any(),
                            node: node.clone(),
                            first: now,
                            last: now,
                            terminating: None,
                            gone: false,
                        });
                        e.last = now;
                        e.node = node;
                        if p.metadata.deletion_timestamp.is_some() && e.terminating.is_none() {
                            e.terminating = Some(now);
                        }
                    }
                    for (uid, s) in seen.iter_mut() {
                        if !present.contains(uid) {
                            s.gone = true;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Timeline {
            pods: pods_seen,
            task,
            start: Instant::now(),
        }
    }
}
