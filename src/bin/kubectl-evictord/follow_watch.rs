//! What following a maintenance reads: watches kept in reflector stores instead of reading the
//! cluster once a second (issue 44: a 20-node maintenance cost kube-apiserver 30 and more
//! requests a second for minutes).
//!
//! Watched from the start: every NodeMaintenance, every node, every EvictionRequest. Started when
//! needed: the pods of each node the maintenance selects (one watch per node, by field selector,
//! as the LIST per node was), stopped when it no longer selects the node; the
//! PodDisruptionBudgets of each namespace with pods there, in the `policy` version chosen once
//! from discovery. The namespaces' labels are listed only when a rule of the maintenances reads
//! them (`reads_namespaces`), again only when the maintenances' specs change.
//!
//! Every change wakes the follower at once. A watch that fails retries with the watcher's backoff,
//! except a refusal (403), which no retry mends and which would leave the display showing the
//! cluster as it was: following stops with the error a refused read gave before, naming the
//! permission. A first list that does not complete within a minute stops it too, with the last
//! failure seen.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use evictord::api::{EvictionRequest, NodeMaintenance};
use evictord::cluster::CachedPod;
use evictord::cluster::budget::budget_resource;
use evictord::controller::node_maintenance::gather::selected_nodes;
use evictord::disruption::budget_version_in;
use evictord::plugin::blockers::Budget;
use evictord::plugin::drain_rules::{NamespaceLabels, reads_namespaces};
use evictord::plugin::errors::{Access, api_error};
use evictord::plugin::{Error, Result};

use crate::read;

/// How long a watch's first list may take.
const SYNC_WITHIN: Duration = Duration::from_secs(60);

/// What a frame is computed from: the cluster as the watches last saw it, each list in the order
/// a LIST returns it (by namespace, then name).
pub struct Snapshot {
    /// The followed maintenance.
    pub maintenance: NodeMaintenance,
    /// Every maintenance.
    pub maintenances: Vec<NodeMaintenance>,
    /// Every node.
    pub nodes: Vec<Arc<Node>>,
    /// The pods of the selected nodes, node after node in the selection's order.
    pub pods: Vec<CachedPod>,
    /// Every EvictionRequest.
    pub requests: Vec<EvictionRequest>,
    /// The PodDisruptionBudgets of the pods' namespaces.
    pub budgets: Vec<Budget>,
    /// The namespaces' labels, when a rule reads them.
    pub namespaces: NamespaceLabels,
}

/// The watches of a follower; dropped, they stop.
pub struct Watches {
    client: Client,
    /// Notified on each change a frame may show, and on a watch's failure.
    wake: Arc<Notify>,
    /// The nodes the maintenance selected at the last read: only their changes wake.
    selected: Arc<Mutex<BTreeSet<String>>>,
    maintenances: Watch<NodeMaintenance>,
    nodes: Watch<Node>,
    requests: Watch<EvictionRequest>,
    /// Per selected node.
    pods: BTreeMap<String, Watch<CachedPod>>,
    /// The `policy` version of the PodDisruptionBudgets, once chosen (`None` inside: neither is
    /// served).
    budget_version: Option<Option<&'static str>>,
    /// Per namespace with pods on the selected nodes.
    budgets: BTreeMap<String, Watch<DynamicObject>>,
    /// The namespaces' labels and the maintenances' specs they were listed for.
    namespaces: Option<(SpecsSeen, NamespaceLabels)>,
}

impl Watches {
    /// Starts the watches of the maintenances, the nodes and the EvictionRequests and waits for
    /// their first lists.
    ///
    /// # Errors
    /// When one is refused or does not list within a minute: the error its LIST gave before.
    pub async fn start(client: &Client) -> Result<Self> {
        let wake = Arc::new(Notify::new());
        let selected: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let (store, writer) = reflector::store();
        let maintenances = Watch::start(
            Api::all(client.clone()),
            watcher::Config::default(),
            (store, writer),
            Scope::new("nodemaintenances.evictord.dev"),
            &wake,
            |_: &NodeMaintenance| true,
            |_| {},
        );
        let (store, writer) = reflector::store();
        let chosen = selected.clone();
        let nodes = Watch::start(
            Api::all(client.clone()),
            watcher::Config::default(),
            (store, writer),
            Scope::new("nodes"),
            &wake,
            move |n: &Node| lock(&chosen).contains(n.name_any().as_str()),
            |_| {},
        );
        let (store, writer) = reflector::store();
        let requests = Watch::start(
            Api::all(client.clone()),
            watcher::Config::default(),
            (store, writer),
            Scope::new("evictionrequests.evictord.dev"),
            &wake,
            |_: &EvictionRequest| true,
            |_| {},
        );
        maintenances.synced().await?;
        nodes.synced().await?;
        requests.synced().await?;
        Ok(Self {
            client: client.clone(),
            wake,
            selected,
            maintenances,
            nodes,
            requests,
            pods: BTreeMap::new(),
            budget_version: None,
            budgets: BTreeMap::new(),
            namespaces: None,
        })
    }

    /// Resolves at the next change (or at once if one came since the last call).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// The cluster as the watches see it, for the maintenance `name`. Starts the watches of
    /// newly selected nodes' pods and of their namespaces' budgets, and waits for their first
    /// lists.
    ///
    /// # Errors
    /// When a watch was refused, a new one does not list within a minute, the maintenance is
    /// gone (its GET says so) or the namespaces cannot be listed.
    pub async fn read(&mut self, name: &str) -> Result<Snapshot> {
        self.maintenances.check()?;
        self.nodes.check()?;
        self.requests.check()?;
        let maintenances: Vec<NodeMaintenance> = sorted(self.maintenances.store.state());
        let maintenance = match maintenances.iter().find(|m| m.name_any() == name) {
            Some(m) => m.clone(),
            // Not (yet) in the store: the GET says whether it is gone.
            None => read::maintenance(&self.client, name).await?,
        };
        let mut nodes = self.nodes.store.state();
        nodes.sort_by_key(|n| n.name_any());
        let selected = selected_nodes(&maintenance, &nodes);
        let pods = self.pods_on(&selected).await?;
        let requests = sorted(self.requests.store.state());
        let budgets = self.budgets_of(&pods).await?;
        let namespaces = self.namespace_labels(&maintenances).await?;
        Ok(Snapshot {
            maintenance,
            maintenances,
            nodes,
            pods,
            requests,
            budgets,
            namespaces,
        })
    }

    /// The pods of the selected nodes, watched from the first time a node is selected.
    async fn pods_on(&mut self, selected: &[String]) -> Result<Vec<CachedPod>> {
        *lock(&self.selected) = selected.iter().cloned().collect();
        self.pods.retain(|n, _| selected.contains(n));
        let mut new = Vec::new();
        for n in selected {
            if !self.pods.contains_key(n) {
                let config = watcher::Config::default().fields(&format!("spec.nodeName={n}"));
                let watch = Watch::start(
                    Api::all(self.client.clone()),
                    config,
                    reflector::store(),
                    Scope::new("pods"),
                    &self.wake,
                    |_: &CachedPod| true,
                    CachedPod::trim_in_place,
                );
                self.pods.insert(n.clone(), watch);
                new.push(n);
            }
        }
        for n in new {
            if let Some(w) = self.pods.get(n) {
                w.synced().await?;
            }
        }
        let mut pods = Vec::new();
        for n in selected {
            if let Some(w) = self.pods.get(n) {
                w.check()?;
                pods.extend(sorted(w.store.state()));
            }
        }
        Ok(pods)
    }

    /// The PodDisruptionBudgets of the pods' namespaces, each namespace watched from the first
    /// time it has pods on a selected node.
    async fn budgets_of(&mut self, pods: &[CachedPod]) -> Result<Vec<Budget>> {
        let namespaces: BTreeSet<&str> = pods.iter().map(|p| p.namespace()).collect();
        if namespaces.is_empty() {
            return Ok(Vec::new());
        }
        let version = match self.budget_version {
            Some(v) => v,
            None => {
                // As the controller's cache chooses. A discovery that fails is asked again at
                // the next frame (this one shows no budgets): guessing v1 would leave a server
                // that serves only v1beta1 (before 1.21) without budgets for good.
                let Ok(groups) = self.client.list_api_groups().await else {
                    return Ok(Vec::new());
                };
                let v = budget_version_in(&groups);
                self.budget_version = Some(v);
                v
            }
        };
        let Some(version) = version else {
            return Ok(Vec::new());
        };
        let resource = budget_resource(version);
        let mut new = Vec::new();
        for ns in &namespaces {
            if !self.budgets.contains_key(*ns) {
                let writer = Writer::new(resource.clone());
                let store = writer.as_reader();
                let watch = Watch::start(
                    Api::namespaced_with(self.client.clone(), ns, &resource),
                    watcher::Config::default(),
                    (store, writer),
                    Scope::new("poddisruptionbudgets.policy").in_namespace(ns),
                    &self.wake,
                    |_: &DynamicObject| true,
                    |_| {},
                );
                self.budgets.insert((*ns).to_string(), watch);
                new.push(*ns);
            }
        }
        for ns in new {
            if let Some(w) = self.budgets.get(ns) {
                w.synced().await?;
            }
        }
        let mut out = Vec::new();
        for ns in namespaces {
            if let Some(w) = self.budgets.get(ns) {
                w.check()?;
                for pdb in sorted(w.store.state()) {
                    let v = serde_json::to_value(&pdb).unwrap_or_default();
                    out.push(Budget::from_json(ns, version, &v));
                }
            }
        }
        Ok(out)
    }

    /// The namespaces' labels when a rule reads them, listed again only when the maintenances'
    /// specs changed (a new generation, a maintenance more or less).
    async fn namespace_labels(
        &mut self,
        maintenances: &[NodeMaintenance],
    ) -> Result<NamespaceLabels> {
        if !reads_namespaces(maintenances) {
            self.namespaces = None;
            return Ok(NamespaceLabels::new());
        }
        let specs: SpecsSeen = maintenances
            .iter()
            .map(|m| (m.name_any(), m.metadata.generation))
            .collect();
        match &self.namespaces {
            Some((listed_for, labels)) if *listed_for == specs => Ok(labels.clone()),
            _ => {
                let labels = read::namespace_labels(&self.client, maintenances).await?;
                self.namespaces = Some((specs, labels.clone()));
                Ok(labels)
            }
        }
    }
}

/// Each maintenance's name and generation (which changes with its spec only).
type SpecsSeen = Vec<(String, Option<i64>)>;

/// The objects of a store in a LIST's order: by namespace, then name.
fn sorted<K: Resource + Clone>(state: Vec<Arc<K>>) -> Vec<K> {
    let mut objects: Vec<K> = state.iter().map(|o| (**o).clone()).collect();
    objects.sort_by(|a, b| {
        (a.meta().namespace.as_deref(), a.meta().name.as_deref())
            .cmp(&(b.meta().namespace.as_deref(), b.meta().name.as_deref()))
    });
    objects
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a watch reads, as the plugin's errors name it.
#[derive(Clone)]
struct Scope {
    resource: &'static str,
    namespace: Option<String>,
}

impl Scope {
    fn new(resource: &'static str) -> Self {
        Scope {
            resource,
            namespace: None,
        }
    }

    fn in_namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_string());
        self
    }

    fn access(&self, verb: &'static str) -> Access {
        let a = Access::new(verb, self.resource);
        match &self.namespace {
            Some(ns) => a.in_namespace(ns),
            None => a,
        }
    }
}

/// A watch's failures, kept by its task for the follower.
#[derive(Default)]
struct Failures {
    /// A refusal (403), with the verb refused.
    refused: Option<(&'static str, kube::Error)>,
    /// The last other failure, told when the first list does not complete in time.
    last: Option<(&'static str, kube::Error)>,
}

/// The verb that failed and kube's error, from a watcher's error.
fn failed(e: watcher::Error) -> (&'static str, kube::Error) {
    match e {
        watcher::Error::InitialListFailed(e) => ("list", e),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => ("watch", e),
        watcher::Error::WatchError(s) => ("watch", kube::Error::Api(s)),
        watcher::Error::NoResourceVersion => (
            "watch",
            kube::Error::Service("no metadata.resourceVersion in the list".into()),
        ),
    }
}

/// One watch kept in a store; dropped, it stops.
struct Watch<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    scope: Scope,
    failures: Arc<Mutex<Failures>>,
    task: JoinHandle<()>,
}

impl<K: Resource + 'static> Drop for Watch<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    /// Starts the watch; `modify` changes each object before it enters the store, `wakes` says
    /// which objects' changes wake the follower.
    fn start(
        api: Api<K>,
        config: watcher::Config,
        (store, writer): (Store<K>, Writer<K>),
        scope: Scope,
        wake: &Arc<Notify>,
        wakes: impl Fn(&K) -> bool + Send + 'static,
        modify: fn(&mut K),
    ) -> Self {
        let failures: Arc<Mutex<Failures>> = Arc::default();
        let kept = failures.clone();
        let wake = wake.clone();
        let stream = watcher(api, config)
            .modify(modify)
            .default_backoff()
            .reflect(writer);
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                        if wakes(&o) {
                            wake.notify_one();
                        }
                    }
                    Ok(watcher::Event::InitDone) => wake.notify_one(),
                    Ok(_) => {}
                    Err(e) => {
                        let (verb, e) = failed(e);
                        let mut f = lock(&kept);
                        if matches!(&e, kube::Error::Api(s) if s.code == 403) {
                            if f.refused.is_none() {
                                f.refused = Some((verb, e));
                                wake.notify_one();
                            }
                        } else {
                            f.last = Some((verb, e));
                        }
                    }
                }
            }
        });
        Watch {
            store,
            scope,
            failures,
            task,
        }
    }

    /// The error a refusal of this watch stops following with.
    fn check(&self) -> Result<()> {
        match lock(&self.failures).refused.take() {
            Some((verb, e)) => Err(api_error(self.scope.access(verb), e)),
            None => Ok(()),
        }
    }

    /// Waits for the first list, a refusal or a minute.
    async fn synced(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + SYNC_WITHIN;
        loop {
            self.check()?;
            match tokio::time::timeout(Duration::from_millis(100), self.store.wait_until_ready())
                .await
            {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(_)) => {
                    return Err(self.unlisted("the watch ended before its first list"));
                }
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(
                        self.unlisted(&format!("no first list within {} s", SYNC_WITHIN.as_secs()))
                    );
                }
                Err(_) => {}
            }
        }
    }

    /// The error of a first list that did not complete: the last failure seen, else `why`.
    fn unlisted(&self, why: &str) -> Error {
        let (verb, e) = lock(&self.failures)
            .last
            .take()
            .unwrap_or(("list", kube::Error::Service(why.to_string().into())));
        api_error(self.scope.access(verb), e)
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn refused() -> kube::Error {
        kube::Error::Api(Box::new(
            Status::failure("nodes is forbidden", "Forbidden").with_code(403),
        ))
    }

    /// A watcher's failure → the verb the permission error names.
    #[test]
    fn a_failure_names_the_verb_refused() {
        let cases = [
            (watcher::Error::InitialListFailed(refused()), "list"),
            (watcher::Error::WatchStartFailed(refused()), "watch"),
            (watcher::Error::WatchFailed(refused()), "watch"),
        ];
        for (e, verb) in cases {
            let (v, e) = failed(e);
            assert_eq!(v, verb);
            let text = api_error(Scope::new("nodes").access(v), e).to_string();
            assert!(
                text.starts_with(&format!("forbidden: you need permission to {verb} nodes")),
                "{text}"
            );
        }
    }

    /// A store's objects come out in a LIST's order.
    #[test]
    fn objects_in_the_order_of_a_list() {
        let pod = |ns: &str, name: &str| {
            let mut p = CachedPod::default();
            p.metadata.namespace = Some(ns.into());
            p.metadata.name = Some(name.into());
            Arc::new(p)
        };
        let names: Vec<String> = sorted(vec![pod("b", "a"), pod("a", "z"), pod("a", "b")])
            .iter()
            .map(|p| format!("{}/{}", p.namespace(), p.name_any()))
            .collect();
        assert_eq!(names, ["a/b", "a/z", "b/a"]);
    }
}
