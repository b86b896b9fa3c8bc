//! PodDisruptionBudgets as the controllers read them: [`Budgets`], a watch cache of every budget
//! in `policy/v1` where served, else `policy/v1beta1` (Kubernetes before 1.21), chosen from
//! discovery as kubectl chooses. The pure decisions ([`Budget`], [`allowance`],
//! [`blocking_budgets`]) live in [`crate::disruption`], shared with the shipped interceptors.
//!
//! The eviction request controller reads it to retry a refused eviction as soon as the budgets
//! allow one instead of waiting out its exponential backoff, and to be woken when they do.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use kube::api::DynamicObject;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::{broadcast, watch};
use tracing::{debug, info, warn};

use super::CachedPod;
use super::cache::subscribed;
pub use crate::disruption::{
    Allowance, Budget, DisruptedPod, HeldName, allowance, blocking_budgets, budget_resource,
    budget_version_in, held_names, held_names_note,
};

impl DisruptedPod for CachedPod {
    fn pod_namespace(&self) -> &str {
        self.namespace()
    }

    fn pod_label(&self, key: &str) -> Option<&str> {
        self.labels().get(key)
    }
}

type Key = (String, String);

/// A watch cache of every PodDisruptionBudget, and a stream of those that change.
pub struct Budgets {
    budgets: RwLock<HashMap<Key, Budget>>,
    changes: broadcast::Sender<Budget>,
    synced: watch::Sender<bool>,
}

impl Budgets {
    /// Starts the watch (spawned on the current runtime: discovery first, then the watch, retried
    /// with backoff) and returns the cache; it fills asynchronously.
    pub fn start(client: &Client) -> Arc<Self> {
        let budgets = Arc::new(Self {
            budgets: RwLock::new(HashMap::new()),
            changes: broadcast::channel(1024).0,
            synced: watch::channel(false).0,
        });
        let (client, cache) = (client.clone(), budgets.clone());
        tokio::spawn(async move {
            let version = match client.list_api_groups().await {
                Ok(groups) => budget_version_in(&groups),
                Err(e) => {
                    warn!(error = %e, "API discovery failed; reading PodDisruptionBudgets in policy/v1");
                    Some("v1")
                }
            };
            let Some(version) = version else {
                info!("the server serves no PodDisruptionBudgets");
                cache.synced.send_replace(true);
                return;
            };
            cache.watch(client, version).await;
        });
        budgets
    }

    async fn watch(&self, client: Client, version: &'static str) {
        let api: Api<DynamicObject> = Api::all_with(client, &budget_resource(version));
        let stream = watcher(api, watcher::Config::default().any_semantic()).default_backoff();
        futures::pin_mut!(stream);
        let mut relisted: HashMap<Key, Budget> = HashMap::new();
        let read = |o: &DynamicObject| {
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            let b = Budget::from_json(&ns, version, &serde_json::to_value(o).unwrap_or_default());
            ((b.namespace.clone(), b.name.clone()), b)
        };
        while let Some(event) = stream.next().await {
            let mut changed = Vec::new();
            match event {
                Ok(watcher::Event::Init) => relisted.clear(),
                Ok(watcher::Event::InitApply(o)) => {
                    let (k, b) = read(&o);
                    relisted.insert(k, b);
                }
                Ok(watcher::Event::InitDone) => {
                    let mut all = self.budgets.write().unwrap_or_else(|e| e.into_inner());
                    *all = std::mem::take(&mut relisted);
                    changed.extend(all.values().cloned());
                    drop(all);
                    debug!(version, "PodDisruptionBudget cache synced");
                    self.synced.send_replace(true);
                }
                Ok(watcher::Event::Apply(o)) => {
                    let (k, b) = read(&o);
                    let mut all = self.budgets.write().unwrap_or_else(|e| e.into_inner());
                    all.insert(k, b.clone());
                    changed.push(b);
                }
                Ok(watcher::Event::Delete(o)) => {
                    let (k, b) = read(&o);
                    let mut all = self.budgets.write().unwrap_or_else(|e| e.into_inner());
                    all.remove(&k);
                    changed.push(b);
                }
                Err(e) => {
                    warn!(error = %e, "PodDisruptionBudget watch error; retrying with backoff")
                }
            }
            for b in changed {
                // No receivers (no controller running here) is fine.
                drop(self.changes.send(b));
            }
        }
    }

    /// The budgets of namespace `ns`; `None` until the cache has its first list.
    pub fn in_namespace(&self, ns: &str) -> Option<Vec<Budget>> {
        if !*self.synced.borrow() {
            return None;
        }
        let all = self.budgets.read().unwrap_or_else(|e| e.into_inner());
        Some(
            all.values()
                .filter(|b| b.namespace == ns)
                .cloned()
                .collect(),
        )
    }

    /// What the budgets selecting `pod` say now.
    pub fn allowance(&self, pod: &CachedPod) -> Allowance {
        match self.in_namespace(pod.namespace()) {
            Some(budgets) => allowance(pod, &budgets),
            None => Allowance::Unknown,
        }
    }

    /// The names the budgets refusing `pod` hold back at `now` ([`held_names`]); `back(name)`
    /// says whether a pod of that name in the pod's namespace exists and is not being deleted.
    /// Empty until the cache has its first list.
    pub fn held_names(
        &self,
        pod: &CachedPod,
        back: impl Fn(&str) -> bool,
        now: jiff::Timestamp,
    ) -> Vec<HeldName> {
        self.in_namespace(pod.namespace())
            .map(|budgets| held_names(pod, &budgets, back, now))
            .unwrap_or_default()
    }

    /// The budgets that change from now on (created, modified, deleted: as last seen; after
    /// each full list, every budget).
    pub fn changes(&self) -> impl Stream<Item = Budget> + Send + use<> {
        subscribed(&self.changes, "PodDisruptionBudget".into())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A cached pod is read as the budgets read any pod, before and after trimming.
    #[test]
    fn a_cached_pod_is_a_disrupted_pod() {
        let p: CachedPod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
        }))
        .unwrap();
        let v = json!({"metadata": {"name": "b"}, "spec": {"selector": {"matchLabels": {"app": "web"}}},
                       "status": {"disruptionsAllowed": 0}});
        let budgets = [Budget::from_json("ns", "v1", &v)];
        for pod in [p.clone(), p.trim()] {
            assert_eq!(pod.pod_namespace(), "ns");
            assert_eq!(allowance(&pod, &budgets), Allowance::Refuses);
            assert_eq!(blocking_budgets(&pod, &budgets).len(), 1);
        }
    }
}
