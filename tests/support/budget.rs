//! Maintenance budgets on the test control plane (SPEC 6.1): pools of fake Ready nodes, budgets,
//! one-node maintenances, and a sampler that records how many nodes of a pool are cordoned at
//! once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use evictord::api::{CONDITION_ADMITTED, MaintenanceBudget, NodeMaintenance, Stage};
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::fixtures::node;

/// Creates `n` Ready nodes `<prefix>-1`..`<prefix>-n` labelled `pool=<prefix>`; returns their
/// names.
pub async fn pool(client: &Client, prefix: &str, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 1..=n {
        let name = format!("{prefix}-{i}");
        node(&name)
            .label("pool", prefix)
            .ready()
            .create(client)
            .await;
        names.push(name);
    }
    names
}

/// A MaintenanceBudget over the nodes labelled `pool=<pool>` with this `maxUnavailable` (an
/// integer or a percentage string) and windows (JSON).
pub async fn budget(
    client: &Client,
    name: &str,
    pool: &str,
    max_unavailable: Value,
    windows: Value,
) -> MaintenanceBudget {
    let b: MaintenanceBudget = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "MaintenanceBudget",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "pool", "operator": "In", "values": [pool]}
            ]}]},
            "maxUnavailable": max_unavailable,
            "windows": windows,
        }
    }))
    .expect("budget");
    Api::<MaintenanceBudget>::all(client.clone())
        .create(&PostParams::default(), &b)
        .await
        .unwrap_or_else(|e| panic!("creating budget {name}: {e}"))
}

/// The selector of these nodes by name (one `matchFields` term each, ORed).
pub fn by_name(nodes: &[&str]) -> Value {
    let terms: Vec<Value> = nodes
        .iter()
        .map(
            |n| json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}),
        )
        .collect();
    json!({"nodeSelectorTerms": terms})
}

/// Creates a maintenance of these nodes in `stage`.
pub async fn maintenance(
    client: &Client,
    name: &str,
    nodes: &[&str],
    stage: Stage,
) -> NodeMaintenance {
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeSelector": by_name(nodes), "stage": stage, "reason": "budget test"},
    }))
    .expect("maintenance");
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap_or_else(|e| panic!("creating maintenance {name}: {e}"))
}

/// Moves a maintenance to `stage`.
pub async fn set_stage(client: &Client, name: &str, stage: Stage) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"stage": stage}})),
        )
        .await
        .unwrap_or_else(|e| panic!("moving {name} to {stage}: {e}"));
}

/// The maintenance, if it exists.
pub async fn get(client: &Client, name: &str) -> Option<NodeMaintenance> {
    Api::<NodeMaintenance>::all(client.clone())
        .get_opt(name)
        .await
        .expect("get maintenance")
}

/// The `Admitted` condition: (status, reason, message).
pub fn admitted(nm: &NodeMaintenance) -> Option<(String, String, String)> {
    let c = nm
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_ADMITTED)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// True once the maintenance's `Drained` condition is `True`.
pub fn drained(nm: &NodeMaintenance) -> bool {
    nm.status
        .as_ref()
        .is_some_and(|s| s.is_true(evictord::api::CONDITION_DRAINED))
}

/// The names of the nodes labelled `pool=<pool>` that are cordoned now.
pub async fn cordoned(client: &Client, pool: &str) -> Vec<String> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("pool={pool}")))
        .await
        .expect("list nodes")
        .items
        .into_iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// Samples the cordoned nodes of a pool every 100 ms in the background, keeping the largest
/// count seen and the set of nodes at that moment.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    max: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    worst: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling the nodes of `pool` that are cordoned and were not cordoned by hand
    /// (`by_hand` are left out of the count).
    pub fn start(client: Client, pool: &str, by_hand: &[&str]) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let max = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(AtomicUsize::new(0));
        let worst = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, m, n, w) = (stop.clone(), max.clone(), samples.clone(), worst.clone());
        let pool = pool.to_string();
        let by_hand: Vec<String> = by_hand.iter().map(|s| s.to_string()).collect();
        let task = tokio::spawn(async move {
            // Bounded: at most ten minutes of samples.
            for _ in 0..6000 {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let now: Vec<String> = cordoned(&client, &pool)
                    .await
                    .into_iter()
                    .filter(|n| !by_hand.contains(n))
                    .collect();
                n.fetch_add(1, Ordering::SeqCst);
                if now.len() > m.load(Ordering::SeqCst) {
                    m.store(now.len(), Ordering::SeqCst);
                    *w.lock().expect("sampler") = now;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Sampler {
            stop,
            max,
            samples,
            worst,
            task,
        }
    }

    /// Stops sampling; returns (largest count, the nodes then, samples taken).
    pub async fn finish(self) -> (usize, Vec<String>, usize) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let worst = self.worst.lock().expect("sampler").clone();
        (
            self.max.load(Ordering::SeqCst),
            worst,
            self.samples.load(Ordering::SeqCst),
        )
    }
}
