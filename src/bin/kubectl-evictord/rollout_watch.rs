//! What wakes a rollout, and what it reads: a watch of the rollout's maintenances, one of its
//! budget and one of the nodes, each kept in a reflector's store. A change of a maintenance or of
//! a rolled node wakes the driver at once instead of at its next tick, and each look reads the
//! stores instead of listing the maintenances and nodes and getting the budget again.
//!
//! The rollout writes its maintenances, and it must see its own writes before it acts again: each
//! write is recorded ([`OwnWrites`]), and a look waits (briefly) for the watch to bring the
//! rollout's writes back, else lists the maintenances as before. A watch that fails retries with
//! the watcher's backoff while the driver's slow tick goes on — except a refusal (403) of the
//! nodes' watch, which no retry mends and which would leave the rollout acting on nodes as they
//! were: asked before anything is written (a SelfSubjectAccessReview, as `kubectl auth can-i`
//! asks), and watched for after, the rollout stops and names the permission.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use evictord::api::{MaintenanceBudget, NodeMaintenance};
use evictord::controller::own_writes::OwnWrites;
use evictord::plugin::rollout::naming::{label_selector, maintenance_name};
use evictord::plugin::rollout::turn::{maintenance_turn, node_turn};
use evictord::plugin::{Error, Result};
use evictord_interceptor::pods::is_forbidden;

/// How long the first list of the nodes may take.
const SYNC_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a look waits for the maintenances' watch to bring the rollout's own writes back
/// before it lists them instead, and how often it looks at the store meanwhile.
const CATCH_UP_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
const CATCH_UP_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The rollout's watches; dropped, they stop.
pub struct Watches {
    /// Every node, as the last watch event left it.
    nodes: Store<Node>,
    /// The rollout's maintenances, likewise.
    maintenances: Store<NodeMaintenance>,
    /// The rollout's budget, likewise.
    budget: Store<MaintenanceBudget>,
    /// The rollout's writes of its maintenances that the store may not show yet.
    pub written: OwnWrites,
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
        let (maintenances, nm_writer) = reflector::store();
        let config = watcher::Config::default().labels(&label_selector(rollout));
        let nm_stream = watcher(Api::<NodeMaintenance>::all(client.clone()), config)
            .default_backoff()
            .reflect(nm_writer);
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
        let (budget, budget_writer) = reflector::store();
        let config = watcher::Config::default().fields(&format!("metadata.name={rollout}"));
        let budget_stream = watcher(Api::<MaintenanceBudget>::all(client.clone()), config)
            .default_backoff()
            .reflect(budget_writer);
        let budget_task = tokio::spawn(async move {
            futures::pin_mut!(budget_stream);
            while budget_stream.next().await.is_some() {}
        });
        let watches = Self {
            nodes,
            maintenances,
            budget,
            written: OwnWrites::default(),
            wake,
            urgent,
            refused,
            tasks: vec![node_task, nm_task, budget_task],
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

    /// The rollout's maintenances of `nodes` from the store, once it shows every write of the
    /// rollout's; `None` when it does not within [`CATCH_UP_WITHIN`] or has not listed yet (the
    /// first looks; a refused watch): then the caller lists them.
    pub async fn maintenances(
        &self,
        rollout: &str,
        nodes: &[String],
    ) -> Option<Vec<NodeMaintenance>> {
        let listed = self.maintenances.wait_until_ready().now_or_never();
        if !matches!(listed, Some(Ok(()))) {
            return None;
        }
        let deadline = tokio::time::Instant::now() + CATCH_UP_WITHIN;
        loop {
            let behind = nodes.iter().any(|n| {
                let name = maintenance_name(rollout, n);
                let cached = self.maintenances.get(&ObjectRef::new(&name));
                let version = cached
                    .as_ref()
                    .and_then(|m| m.metadata.resource_version.as_deref());
                self.written.behind(&name, version)
            });
            if !behind {
                return Some(
                    self.maintenances
                        .state()
                        .iter()
                        .map(|m| (**m).clone())
                        .collect(),
                );
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(CATCH_UP_POLL).await;
        }
    }

    /// The maintenance `name` as the store holds it, when the store shows every write of the
    /// rollout's to it; else `None` (the caller reads it live).
    pub fn maintenance(&self, name: &str) -> Option<NodeMaintenance> {
        let cached = self.maintenances.get(&ObjectRef::new(name))?;
        let version = cached.metadata.resource_version.as_deref();
        (!self.written.behind(name, version)).then(|| (*cached).clone())
    }

    /// The rollout's budget as the store holds it (what the view shows); `None` until the
    /// store has listed (then the caller gets it).
    pub fn budget(&self) -> Option<Option<MaintenanceBudget>> {
        let listed = self.budget.wait_until_ready().now_or_never();
        matches!(listed, Some(Ok(()))).then(|| self.budget.state().first().map(|b| (**b).clone()))
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
