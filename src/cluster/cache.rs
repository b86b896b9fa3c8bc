//! The shared watch caches: one reflector per resource (pods trimmed to [`CachedPod`], nodes
//! trimmed to name/labels/unschedulable/taints/annotations/Ready, namespaces trimmed to their
//! labels, NodeMaintenances,
//! EvictionRequests, EvictionInterceptors, MaintenanceBudgets). The webhook reads the stores; the
//! controllers subscribe to the change streams. `/readyz` waits for [`Caches::synced`].
//!
//! The MaintenanceBudget cache is not part of [`Caches::synced`] either: an evictord upgraded
//! without its new CRD (Helm does not upgrade CRDs) must still serve. Until it has synced, the
//! webhook's budget warnings are skipped, and the admission of maintenances confirms every decision
//! with a consistent read of the budgets (a missing CRD means no budget).
//!
//! The EvictionInterceptor cache is not part of [`Caches::synced`]: until it has synced (or
//! when its CRD is missing, e.g. after a chart upgrade that did not apply the new CRD), every
//! registration is unknown, which never denies, passes over or warns on its own (SPEC 4), and
//! the rest of evictord works as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};
use tracing::{debug, warn};

use super::CachedPod;
use super::budget::Budgets;
use super::tombstones::Tombstones;
use crate::api::{
    EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION, EvictionInterceptor, EvictionRequest,
    MAINTENANCE_TAINT_BEFORE_ANNOTATION, MaintenanceBudget, NODE_AGENT_ANNOTATION, NodeMaintenance,
    Registration, UNSCHEDULABLE_BEFORE_ANNOTATION,
};

/// Capacity of each change channel; a controller that lags further behind skips to the latest
/// changes (and its periodic resync catches up: the eviction request controller reconciles every
/// request every [`RESYNC`]).
const CHANGE_BUFFER: usize = 4096;

/// How often the controllers reconcile every object regardless of changes, as client-go's
/// informers resync: whatever a lagging change stream or a lost watch skipped is caught then.
pub const RESYNC: std::time::Duration = std::time::Duration::from_secs(300);

/// One watched resource: its store and the stream of its changes.
pub struct Watched<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    changes: broadcast::Sender<Arc<K>>,
    /// The last moment its watch failed for want of kube-apiserver ([`unreachable`]; unix
    /// seconds; 0: never).
    last_error: Arc<AtomicI64>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Watched<K> {
    /// The read handle of the store.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The last moment its watch failed for want of kube-apiserver (unreachable, restarting,
    /// overloaded: [`unreachable`]); `None` if it never did since evictord started.
    pub fn last_error(&self) -> Option<jiff::Timestamp> {
        match self.last_error.load(Ordering::Relaxed) {
            0 => None,
            s => jiff::Timestamp::from_second(s).ok(),
        }
    }

    /// Every cached object.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// The cached object of that namespace and name.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        let mut r = ObjectRef::new(name);
        if let Some(ns) = namespace {
            r = r.within(ns);
        }
        self.store.get(&r)
    }

    /// A stream of the objects that change from now on (created, modified or deleted — a
    /// deleted object is sent as last seen).
    pub fn changes(&self) -> impl Stream<Item = Arc<K>> + Send + 'static
    where
        K: Send + Sync + 'static,
    {
        subscribed(&self.changes, K::kind(&()).to_string())
    }
}

/// The values sent on `changes` from now on, as a stream; a receiver that lags skips to the
/// latest (logged with `kind`).
pub(super) fn subscribed<T: Clone + Send + 'static>(
    changes: &broadcast::Sender<T>,
    kind: String,
) -> impl Stream<Item = T> + Send + 'static + use<T> {
    futures::stream::unfold((changes.subscribe(), kind), |(mut rx, kind)| async move {
        loop {
            match rx.recv().await {
                Ok(value) => return Some((value, (rx, kind))),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    warn!(kind, skipped = n, "change stream lagged")
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// The shared caches.
pub struct Caches {
    /// Pods, trimmed.
    pub pods: Watched<CachedPod>,
    /// The names of the pods `pods` saw deleted (a miss of such a name can be final).
    pub pod_tombstones: Arc<Tombstones>,
    /// Nodes, trimmed.
    pub nodes: Watched<Node>,
    /// Namespaces, trimmed to name and labels (the `namespaceSelector` of pod drain rules, SPEC
    /// 6.2).
    pub namespaces: Watched<Namespace>,
    /// NodeMaintenances.
    pub node_maintenances: Watched<NodeMaintenance>,
    /// EvictionRequests.
    pub eviction_requests: Watched<EvictionRequest>,
    /// EvictionInterceptors (SPEC 5.5); `None` when registration is off.
    pub eviction_interceptors: Option<Watched<EvictionInterceptor>>,
    /// PodDisruptionBudgets (not part of [`Caches::synced`]: until they are, a refused eviction
    /// waits out its backoff).
    pub budgets: Arc<Budgets>,
    /// MaintenanceBudgets (SPEC 6.1; not part of [`Caches::synced`], see the module docs).
    pub maintenance_budgets: Watched<MaintenanceBudget>,
    synced: watch::Sender<bool>,
    interceptors_synced: watch::Sender<bool>,
    maintenance_budgets_synced: watch::Sender<bool>,
}

impl Caches {
    /// Starts the watches on `client` (spawned on the current runtime) and returns the caches.
    /// They fill asynchronously; [`Caches::wait_synced`] waits for the initial lists.
    pub fn start(client: &Client) -> Arc<Self> {
        Self::start_with(client, true)
    }

    /// [`Caches::start`], watching EvictionInterceptors only when `interceptors` (registration
    /// is not off).
    pub fn start_with(client: &Client, interceptors: bool) -> Arc<Self> {
        let tombstones = Arc::new(Tombstones::default());
        let caches = Arc::new(Self {
            pods: spawn_watch(Api::all(client.clone()), CachedPod::trim_in_place, {
                let tombstones = tombstones.clone();
                move |event| tombstones.saw(event)
            }),
            pod_tombstones: tombstones,
            nodes: spawn_watch(Api::all(client.clone()), trim_node, |_| {}),
            namespaces: spawn_watch(Api::all(client.clone()), trim_namespace, |_| {}),
            node_maintenances: spawn_watch(Api::all(client.clone()), trim_meta, |_| {}),
            eviction_requests: spawn_watch(Api::all(client.clone()), trim_meta, |_| {}),
            eviction_interceptors: interceptors
                .then(|| spawn_watch(Api::all(client.clone()), trim_meta, |_| {})),
            budgets: Budgets::start(client),
            maintenance_budgets: spawn_watch(Api::all(client.clone()), trim_meta, |_| {}),
            synced: watch::channel(false).0,
            interceptors_synced: watch::channel(false).0,
            maintenance_budgets_synced: watch::channel(false).0,
        });
        {
            let (store, c) = (caches.maintenance_budgets.store.clone(), caches.clone());
            tokio::spawn(async move {
                let ok = store.wait_until_ready().await.is_ok();
                debug!(ok, "MaintenanceBudget cache synced");
                c.maintenance_budgets_synced.send_replace(ok);
            });
        }
        if let Some(w) = &caches.eviction_interceptors {
            let (store, c) = (w.store.clone(), caches.clone());
            tokio::spawn(async move {
                let ok = store.wait_until_ready().await.is_ok();
                debug!(ok, "EvictionInterceptor cache synced");
                c.interceptors_synced.send_replace(ok);
            });
        }
        // kube-runtime's readiness future wakes only its latest waiter, so exactly one task
        // waits on the stores and everyone else waits on this flag.
        let c = caches.clone();
        tokio::spawn(async move {
            let ok = c.pods.store.wait_until_ready().await.is_ok()
                && c.nodes.store.wait_until_ready().await.is_ok()
                && c.namespaces.store.wait_until_ready().await.is_ok()
                && c.node_maintenances.store.wait_until_ready().await.is_ok()
                && c.eviction_requests.store.wait_until_ready().await.is_ok();
            debug!(ok, "watch caches synced");
            c.synced.send_replace(ok);
        });
        caches
    }

    /// True once every store has received its initial list.
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until every store has received its initial list.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Every MaintenanceBudget, once the cache has synced (`None` before, or while the CRD is
    /// missing).
    pub fn maintenance_budgets(&self) -> Option<Vec<Arc<MaintenanceBudget>>> {
        (*self.maintenance_budgets_synced.borrow()).then(|| self.maintenance_budgets.all())
    }

    /// The cached EvictionInterceptor of that name: `None` while unknown (registration off, or
    /// the cache not synced), `Some(None)` when there is none.
    pub fn eviction_interceptor(&self, name: &str) -> Option<Option<Arc<EvictionInterceptor>>> {
        let watched = self.eviction_interceptors.as_ref()?;
        (*self.interceptors_synced.borrow()).then(|| watched.get(None, name))
    }

    /// What the cache knows of the registration of the interceptor `name`.
    pub fn registration(&self, name: &str) -> Registration {
        Registration::of(
            name,
            self.eviction_interceptor(name).map(|found| found.is_some()),
        )
    }
}

/// Watches `api` into a store (objects trimmed by `trim`), showing every watch event to `seen`
/// once the store holds it, and announcing the changes.
fn spawn_watch<K>(
    api: Api<K>,
    trim: fn(&mut K),
    seen: impl Fn(&watcher::Event<K>) + Send + 'static,
) -> Watched<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let (tx, _) = broadcast::channel(CHANGE_BUFFER);
    let changes = tx.clone();
    let kind = K::kind(&()).to_string();
    let stored = reader.clone();
    let last_error = Arc::new(AtomicI64::new(0));
    let failed = last_error.clone();
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .modify(trim)
            .reflect(writer);
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    seen(&event);
                    for obj in announced(&event, &stored) {
                        // No receivers (no controller running here) is fine.
                        drop(tx.send(obj));
                    }
                }
                Err(e) => {
                    if unreachable(&e) {
                        failed.store(jiff::Timestamp::now().as_second(), Ordering::Relaxed);
                    }
                    warn!(kind, error = %e, "watch error; retrying with backoff");
                }
            }
        }
    });
    Watched {
        store: reader,
        changes,
        last_error,
    }
}

/// Whether a watch failed for want of kube-apiserver: no connection, no answer, or an answer
/// that it cannot serve now (5xx, 429). Not a refusal (403) or an expired resource version (410,
/// which a watch meets in normal operation and relists from): kube-apiserver answered those.
pub fn unreachable(e: &watcher::Error) -> bool {
    let unavailable = |code: u16| code >= 500 || code == 429;
    match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => match k {
            kube::Error::Api(s) => unavailable(s.code),
            _ => true,
        },
        watcher::Error::WatchError(s) => unavailable(s.code),
        _ => false,
    }
}

/// The objects a watch event announces to the controllers, taken from the store so that a
/// controller finds each one there when it reconciles it (and the change buffer shares the store's
/// copy instead of holding a second one):
/// - an added or modified object, as stored; a deleted one, as last seen;
/// - during a (re)list nothing: the store keeps the listed objects aside until the list is
///   complete, and a controller handed one of them before would find nothing in the store and
///   drop it (seen after a kube-apiserver restart: requests created meanwhile were never
///   reconciled);
/// - at the end of a list, every object the store now holds.
pub fn announced<K>(event: &watcher::Event<K>, store: &Store<K>) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    match event {
        watcher::Event::Apply(obj) => vec![
            store
                .get(&ObjectRef::from_obj(obj))
                .filter(|s| s.meta().resource_version == obj.meta().resource_version)
                .unwrap_or_else(|| Arc::new(obj.clone())),
        ],
        watcher::Event::Delete(obj) => vec![Arc::new(obj.clone())],
        watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
        watcher::Event::InitDone => store.state(),
    }
}

fn trim_meta<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Namespaces keep their name and labels.
fn trim_namespace(ns: &mut Namespace) {
    let m = &mut ns.metadata;
    m.managed_fields = None;
    m.annotations = None;
    ns.spec = None;
    ns.status = None;
}

impl Caches {
    /// The labels of the namespace of that name (empty when it is not cached).
    pub fn namespace_labels(&self, name: &str) -> std::collections::BTreeMap<String, String> {
        self.namespaces
            .get(None, name)
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default()
    }
}

/// Nodes keep name, labels, the unschedulable flag, the taints (the maintenance taint is written
/// as part of the whole list), evictord's own annotations and the status of the `Ready`
/// condition (maintenance budgets count NotReady nodes, SPEC 6.1).
fn trim_node(node: &mut Node) {
    let m = &mut node.metadata;
    m.managed_fields = None;
    if let Some(a) = m.annotations.as_mut() {
        a.retain(|k, _| {
            k == UNSCHEDULABLE_BEFORE_ANNOTATION
                || k == MAINTENANCE_TAINT_BEFORE_ANNOTATION
                || k == NODE_AGENT_ANNOTATION
                || k == EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION
        });
    }
    let spec = node.spec.take().unwrap_or_default();
    node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: spec.unschedulable,
        taints: spec.taints,
        ..Default::default()
    });
    let ready = node
        .status
        .take()
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        .map(|c| k8s_openapi::api::core::v1::NodeCondition {
            type_: c.type_,
            status: c.status,
            ..Default::default()
        });
    node.status = ready.map(|c| k8s_openapi::api::core::v1::NodeStatus {
        conditions: Some(vec![c]),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;

    use super::*;
    use crate::cluster::CachedPod;

    fn pod(name: &str, rv: &str) -> CachedPod {
        let mut p = CachedPod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.resource_version = Some(rv.into());
        p
    }

    fn status(code: u16) -> kube::core::Status {
        kube::core::Status {
            code,
            ..kube::core::Status::default()
        }
    }

    /// One row per kind of watch failure: kube-apiserver unreachable or not, as [`unreachable`]
    /// tells it.
    #[rstest::rstest]
    #[case::no_connection(watcher::Error::WatchStartFailed(kube::Error::Service("connection refused".into())), true)]
    #[case::starting(
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(status(503)))),
        true
    )]
    #[case::list_timed_out(
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(504)))),
        true
    )]
    #[case::too_many_requests(
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(429)))),
        true
    )]
    #[case::stream_cut(watcher::Error::WatchFailed(kube::Error::Service("eof".into())), true)]
    #[case::expired(watcher::Error::WatchError(Box::new(status(410))), false)]
    #[case::refused(
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(403)))),
        false
    )]
    #[case::no_resource_version(watcher::Error::NoResourceVersion, false)]
    fn unreachable_rows(#[case] e: watcher::Error, #[case] expected: bool) {
        assert_eq!(unreachable(&e), expected, "{e}");
    }

    fn names(objs: &[Arc<CachedPod>]) -> Vec<String> {
        let mut n: Vec<String> = objs.iter().map(|o| o.name().to_string()).collect();
        n.sort();
        n
    }

    /// Applies `event` to the store, as `reflect` does before it yields the event.
    fn step(
        w: &mut reflector::store::Writer<CachedPod>,
        r: &Store<CachedPod>,
        event: watcher::Event<CachedPod>,
    ) -> Vec<Arc<CachedPod>> {
        w.apply_watcher_event(&event);
        let out = announced(&event, r);
        for o in &out {
            if !matches!(event, watcher::Event::Delete(_)) {
                assert!(
                    r.get(&ObjectRef::from_obj(o.as_ref())).is_some(),
                    "announced before stored"
                );
            }
        }
        out
    }

    #[test]
    fn listed_objects_are_announced_once_the_store_holds_them() {
        let (r, mut w) = reflector::store::<CachedPod>();
        assert!(step(&mut w, &r, watcher::Event::Init).is_empty());
        assert!(step(&mut w, &r, watcher::Event::InitApply(pod("a", "1"))).is_empty());
        assert!(step(&mut w, &r, watcher::Event::InitApply(pod("b", "1"))).is_empty());
        assert_eq!(
            names(&step(&mut w, &r, watcher::Event::InitDone)),
            ["a", "b"]
        );
        // A change: the store's own copy.
        let changed = step(&mut w, &r, watcher::Event::Apply(pod("a", "2")));
        assert_eq!(changed[0].metadata.resource_version.as_deref(), Some("2"));
        assert!(Arc::ptr_eq(
            &changed[0],
            &r.get(&ObjectRef::new("a").within("ns")).unwrap()
        ));
        // A relist (after a lost watch) that brings a new object and drops a deleted one.
        assert!(step(&mut w, &r, watcher::Event::Init).is_empty());
        assert!(step(&mut w, &r, watcher::Event::InitApply(pod("a", "3"))).is_empty());
        assert!(step(&mut w, &r, watcher::Event::InitApply(pod("c", "3"))).is_empty());
        assert_eq!(
            names(&step(&mut w, &r, watcher::Event::InitDone)),
            ["a", "c"]
        );
        let gone = step(&mut w, &r, watcher::Event::Delete(pod("a", "4")));
        assert_eq!(names(&gone), ["a"]);
    }
}
