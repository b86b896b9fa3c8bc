//! What wakes a rollout, and its nodes: a watch of the rollout's maintenances and one of the nodes
//! (kept in a reflector's store). A change of a maintenance or of a rolled node wakes the driver at
//! once instead of at its next tick, and the nodes are read from the store instead of a LIST of
//! every node each time the driver looks.
//!
//! The maintenances are still read with a LIST when the driver looks (the rollout writes them, and
//! it must see its own writes before it acts again); a watch that fails retries with the
//! watcher's backoff while the driver's slow tick goes on — except a refusal (403) of the nodes'
//! watch, which no retry mends and which would leave the rollout acting on nodes as they were:
//! asked before anything is written (a SelfSubjectAccessReview, as `kubectl auth can-i` asks), and
//! watched for after, the rollout stops and names the permission.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use evictord::api::NodeMaintenance;
use evictord::plugin::rollout::naming::label_selector;
use evictord::plugin::rollout::turn::{maintenance_turn, node_turn};
use evictord::plugin::{Error, Result};
use evictord_interceptor::pods::is_forbidden;

/// How long the first list of the nodes may take.
const SYNC_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// The rollout's watches; dropped, they stop.
pub struct Watches {
    /// Every node, as the last watch event left it.
    nodes: Store<Node>,
    /// Notified on each change of a rolled node or of one of the rollout's maintenances, and
    /// when the nodes' watch is refused.
    wake: Arc<Notify>,
    /// Set when a change turned a phase ([`Watches::take_turn`]).
    urgent: Arc<AtomicBool>,
    /// Why kube-apiserver refused the nodes' watch, once it did.
    refused: Arc<Mutex<Option<String>>>,
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
        let urgent = Arc::new(AtomicBool::new(false));
        let node_urgent = urgent.clone();
        let refused: Arc<Mutex<Option<String>>> = Arc::default();
        let refusal = refused.clone();
        let node_task = tokio::spawn(async move {
            let mut turns = Turns::default();
            futures::pin_mut!(node_stream);
            while let Some(event) = node_stream.next().await {
                match event {
                    Ok(node) if rolled.contains(&node.name_any()) => {
                        if turns.turned(node.name_any(), node_turn(&node)) {
                            node_urgent.store(true, Ordering::Release);
                        }
                        node_wake.notify_one();
                    }
                    Ok(_) => {}
                    Err(e) if is_forbidden(&e) => {
                        let mut r = refusal.lock().unwrap_or_else(|e| e.into_inner());
                        if r.is_none() {
                            *r = Some(e.to_string());
                            node_wake.notify_one();
                        }
                    }
                    Err(_) => {}
                }
            }
        });
        let maintenances: Api<NodeMaintenance> = Api::all(client.clone());
        let config = watcher::Config::default().labels(&label_selector(rollout));
        let nm_stream = watcher(maintenances, config).default_backoff();
        let nm_wake = wake.clone();
        let nm_urgent = urgent.clone();
        let nm_task = tokio::spawn(async move {
            let mut turns = Turns::default();
            let nm_stream = nm_stream.touched_objects();
            futures::pin_mut!(nm_stream);
            while let Some(event) = nm_stream.next().await {
                if let Ok(nm) = event {
                    if turns.turned(nm.name_any(), maintenance_turn(&nm)) {
                        nm_urgent.store(true, Ordering::Release);
                    }
                    nm_wake.notify_one();
                }
            }
        });
        let watches = Self {
            nodes,
            wake,
            urgent,
            refused,
            tasks: vec![node_task, nm_task],
        };
        may_watch_nodes(client).await?;
        tokio::time::timeout(SYNC_WITHIN, watches.nodes.wait_until_ready())
            .await
            .map_err(|_| {
                Error::Rollout(format!(
                    "the nodes could not be listed and watched within {} s; may you? (kubectl auth can-i watch nodes)",
                    SYNC_WITHIN.as_secs()
                ))
            })?
            .map_err(|_| Error::Rollout("the watch of the nodes ended before its first list".into()))?;
        watches.check()?;
        Ok(watches)
    }

    /// An error once kube-apiserver refused the nodes' watch: the store would keep the nodes as
    /// they were.
    ///
    /// # Errors
    /// When it did.
    pub fn check(&self) -> Result<()> {
        match self
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
        {
            Some(why) => Err(Error::Rollout(refused_message(why))),
            None => Ok(()),
        }
    }

    /// Every node the store holds.
    ///
    /// # Errors
    /// When the nodes' watch was refused ([`Watches::check`]).
    pub fn nodes(&self) -> Result<Vec<Arc<Node>>> {
        self.check()?;
        Ok(self.nodes.state())
    }

    /// Resolves at the next change (or at once if one came since the last call).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// Whether a change since the last call turned a phase (a maintenance admitted, drained or
    /// completed; a node Ready again, rebooted, cordoned or uncordoned): looked at at once,
    /// where a drain's progress is looked at at most once a second.
    pub fn take_turn(&self) -> bool {
        self.urgent.swap(false, Ordering::AcqRel)
    }
}

/// The last turn key seen per object ([`maintenance_turn`], [`node_turn`]).
#[derive(Default)]
struct Turns(HashMap<String, String>);

impl Turns {
    /// Records `key` for `name`; whether it differs from the one seen before (or is the first).
    fn turned(&mut self, name: String, key: String) -> bool {
        self.0.insert(name, key.clone()).as_ref() != Some(&key)
    }
}

/// Asks kube-apiserver whether this user may watch nodes, before the rollout writes anything:
/// a denial stops it with the authorizer's reason. When the question itself cannot be asked,
/// the watch will tell.
async fn may_watch_nodes(client: &Client) -> Result<()> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("watch".into()),
                resource: Some("nodes".into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await;
    match answer.ok().and_then(|a| a.status) {
        Some(s) if !s.allowed => {
            let why = match s.reason.as_deref() {
                Some(r) if !r.is_empty() => format!("not allowed: {r}"),
                _ => "not allowed".to_string(),
            };
            Err(Error::Rollout(refused_message(&why)))
        }
        _ => Ok(()),
    }
}

/// What a rollout refused its watch of the nodes says: the refusal, and the permission it needs.
fn refused_message(why: &str) -> String {
    format!(
        "kube-apiserver refuses this user the watch of the nodes ({why}); a rollout lists and watches every \
         node (kubectl auth can-i watch nodes)"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refusal_names_the_permission() {
        let m = super::refused_message("403 Forbidden");
        assert!(m.contains("403 Forbidden"), "{m}");
        assert!(m.contains("kubectl auth can-i watch nodes"), "{m}");
    }
}
