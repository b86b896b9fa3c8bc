//! What wakes a rollout, and its nodes: a watch of the rollout's maintenances and one of the nodes
//! (kept in a reflector's store). A change of a maintenance or of a rolled node wakes the driver at
//! once instead of at its next tick, and the nodes are read from the store instead of a LIST of
//! every node each time the driver looks.
//!
//! The maintenances are still read with a LIST when the driver looks (the rollout writes them, and
//! it must see its own writes before it acts again); a watch that fails retries with the
//! watcher's backoff while the driver's slow tick goes on.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use evictord::api::NodeMaintenance;
use evictord::plugin::rollout::naming::label_selector;
use evictord::plugin::{Error, Result};

/// How long the first list of the nodes may take.
const SYNC_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// The rollout's watches; dropped, they stop.
pub struct Watches {
    /// Every node, as the last watch event left it.
    nodes: Store<Node>,
    /// Notified on each change of a rolled node or of one of the rollout's maintenances.
    wake: Arc<Notify>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Watches {
    /// Starts both watches and waits for the nodes' first list.
    ///
    /// # Errors
    /// When the nodes cannot be listed within a minute.
    pub async fn start(client: &Client, rollout: &str, rolled: &[String]) -> Result<Self> {
        let wake = Arc::new(Notify::new());
        let rolled: Arc<BTreeSet<String>> = Arc::new(rolled.iter().cloned().collect());
        let (nodes, writer) = reflector::store();
        let node_stream = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .applied_objects();
        let node_wake = wake.clone();
        let node_task = tokio::spawn(async move {
            futures::pin_mut!(node_stream);
            while let Some(event) = node_stream.next().await {
                if let Ok(node) = event
                    && rolled.contains(&node.name_any())
                {
                    node_wake.notify_one();
                }
            }
        });
        let maintenances: Api<NodeMaintenance> = Api::all(client.clone());
        let config = watcher::Config::default().labels(&label_selector(rollout));
        let nm_stream = watcher(maintenances, config).default_backoff();
        let nm_wake = wake.clone();
        let nm_task = tokio::spawn(async move {
            futures::pin_mut!(nm_stream);
            while let Some(event) = nm_stream.next().await {
                if event.is_ok() {
                    nm_wake.notify_one();
                }
            }
        });
        let watches = Self {
            nodes,
            wake,
            tasks: vec![node_task, nm_task],
        };
        tokio::time::timeout(SYNC_WITHIN, watches.nodes.wait_until_ready())
            .await
            .map_err(|_| {
                Error::Rollout(format!(
                    "the nodes could not be listed and watched within {} s; may you? (kubectl auth can-i watch nodes)",
                    SYNC_WITHIN.as_secs()
                ))
            })?
            .map_err(|_| Error::Rollout("the watch of the nodes ended before its first list".into()))?;
        Ok(watches)
    }

    /// Every node the store holds.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
    }

    /// Resolves at the next change (or at once if one came since the last call).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }
}
