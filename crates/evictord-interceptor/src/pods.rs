//! The runner's watch cache of the pods its requests target, so that a look at a request does
//! not GET the pod each time.
//!
//! What it holds, for memory on a big cluster: not every pod (a cluster of 100 000 pods would
//! cost the process gigabytes, whole pods being what [`Interceptor::progress`](crate::Interceptor)
//! is given), and not every pod of the requests' namespaces (one namespace can hold most of a
//! cluster), but the pods of the **nodes** the targeted pods run on: one watch per node, with the
//! field selector `spec.nodeName=<node>`, started the first time a pod of that node is read and
//! stopped once no read has used it for [`IDLE`]. A drain evicts a node's pods, so the cache
//! holds about the pods of the nodes being drained (a kubelet's limit is 110), and costs one LIST
//! and one WATCH per node instead of a GET per look.
//!
//! A cache can only be behind the cluster. A pod it holds with the request's UID is served from
//! it; a pod it does not hold (a node not watched yet or not listed yet, a pod not scheduled, a
//! pod the cache lost: deleted, or recreated under the same name) is read live, and that read
//! starts the watch of its node — once the watches still listing have listed (at most
//! [`LISTING_WAIT`]), so that the other pods of a node drained at once come from its list. A
//! reader that must not act on a stale absence confirms it live the same way: the cache never
//! says "gone" without kube-apiserver saying so. It remembers the
//! UIDs kube-apiserver said are gone (a UID never comes back) — a live read's 404, or a node
//! watch's delete event — so that asking again for a pod known to be gone (a settler does, until
//! the last pod of its surge leaves) costs nothing.
//!
//! A service account that may not list and watch pods gets a 403 for the watch: the cache stops
//! that watch and drops what it held (a store whose watch ended would only get staler), says so
//! in the log, and every read is live, as before the cache. The refusal is asked again after
//! [`REFUSAL_RECHECK`] ([`watches_allowed`]): a kube-apiserver that has just restarted refuses
//! an account bound by RBAC until its authorization caches are in, and that passing refusal must
//! not turn the cache off for the life of the process.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// How long a node's watch lives without a read using it.
pub const IDLE: Duration = Duration::from_secs(120);
/// How long a read of a pod the cache lacks waits for the watches still listing before it reads
/// the pod live.
pub const LISTING_WAIT: Duration = Duration::from_secs(2);
/// How many gone UIDs are remembered before those older than [`IDLE`] are forgotten.
const GONE_KEPT: usize = 4096;
/// How long after kube-apiserver refused (403) a list or watch the watch is tried again: a
/// refusal can pass (a kube-apiserver that has just restarted refuses until its authorization
/// caches are in; an administrator grants the permission), and one refused request a minute is
/// what asking again costs an account that truly may not watch.
pub const REFUSAL_RECHECK: Duration = Duration::from_secs(60);

/// How often [`listed_within`] looks whether a store has listed.
const LISTED_POLL: Duration = Duration::from_millis(20);

/// Whether `store` has listed, waiting at most `within`. It looks every [`LISTED_POLL`] rather
/// than awaiting [`Store::wait_until_ready`]: that future's wake-up is a one-waiter slot (a
/// oneshot receiver in kube-runtime's `DelayedInit`), so any other look at the same store while
/// it lists — a second waiter, or a `now_or_never` check with its no-op waker — takes the
/// wake-up, and the first waiter sleeps until its timeout (a drain's first look at a node's pod
/// waited the whole [`LISTING_WAIT`] for a watch listed in milliseconds).
pub async fn listed_within<K>(store: &Store<K>, within: Duration) -> bool
where
    K: 'static + Clone + Lookup,
    K::DynamicType: Eq + Hash + Clone,
{
    let until = tokio::time::Instant::now() + within;
    loop {
        match store.wait_until_ready().now_or_never() {
            Some(listed) => return listed.is_ok(),
            None if tokio::time::Instant::now() >= until => return false,
            None => tokio::time::sleep(LISTED_POLL).await,
        }
    }
}

/// Whether a watch may be started at `now`: never for a cache that reads live only, and not
/// within [`REFUSAL_RECHECK`] (`recheck`) of the last refusal (`refused_at`).
pub fn watches_allowed(
    live_only: bool,
    refused_at: Option<Instant>,
    recheck: Duration,
    now: Instant,
) -> bool {
    !live_only && refused_at.is_none_or(|at| now.saturating_duration_since(at) >= recheck)
}

/// The pods of the nodes the reads touch (cheap to clone: clones share the watches; a runner
/// makes its own unless given one with [`Runner::pods`](crate::Runner::pods), and several
/// runners and settlers of one process can share one).
#[derive(Clone)]
pub struct PodCache {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    namespace: Option<String>,
    nodes: Mutex<HashMap<String, NodeWatch>>,
    /// The UIDs kube-apiserver said are gone (a UID is never reused), with when: a pod
    /// confirmed gone is not read again, however often a reader asks (a settler asks for every
    /// covered pod until the last one leaves).
    /// Also filled by the watches' delete events: a watch's `DELETED` is kube-apiserver saying
    /// so too.
    gone: Arc<Mutex<HashMap<String, Instant>>>,
    /// Every read is live, for good ([`PodCache::live_only`]).
    live_only: bool,
    /// When kube-apiserver last refused (403) a watch: no watch starts before
    /// [`REFUSAL_RECHECK`] has passed.
    refused_at: Arc<Mutex<Option<Instant>>>,
    /// How long after a refusal watches are tried again.
    recheck: Duration,
    /// Stops every watch when the last clone goes.
    stop: CancellationToken,
    /// Where a pod runs, when the process knows ([`PodCache::set_node_hint`]).
    node_hint: std::sync::OnceLock<NodeHint>,
}

/// Where pod `(namespace, name)` runs, from another cache of the process (`None`: not known).
pub type NodeHint = Arc<dyn Fn(&str, &str) -> Option<String> + Send + Sync>;

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct NodeWatch {
    store: Store<Pod>,
    stop: CancellationToken,
    used: Instant,
}

/// Where a read was served from (for the tests and the logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The watch cache held the pod with the UID asked for.
    Cache,
    /// kube-apiserver answered (the cache lacked the pod).
    Live,
}

impl PodCache {
    /// A cache of the pods of every namespace, read and watched with `client`.
    pub fn new(client: Client) -> Self {
        Self::with_namespace(client, None)
    }

    /// A cache of the pods of `namespace` only (`None`: every namespace).
    pub fn with_namespace(client: Client, namespace: Option<String>) -> Self {
        Self::build(client, namespace, false, REFUSAL_RECHECK)
    }

    /// [`PodCache::with_namespace`], asking a refused watch again after `recheck` instead of
    /// [`REFUSAL_RECHECK`] (the tests' short wait).
    pub fn with_recheck(client: Client, namespace: Option<String>, recheck: Duration) -> Self {
        Self::build(client, namespace, false, recheck)
    }

    /// A "cache" that reads every pod live and never watches: for an account that may only
    /// `get` pods (evictord's node agent), where a refused watch would cost a refused LIST.
    pub fn live_only(client: Client) -> Self {
        Self::build(client, None, true, REFUSAL_RECHECK)
    }

    fn build(
        client: Client,
        namespace: Option<String>,
        live_only: bool,
        recheck: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                namespace,
                nodes: Mutex::default(),
                gone: Arc::default(),
                live_only,
                refused_at: Arc::default(),
                recheck,
                stop: CancellationToken::new(),
                node_hint: std::sync::OnceLock::new(),
            }),
        }
    }

    fn watches_allowed(&self, now: Instant) -> bool {
        let refused_at = *self
            .inner
            .refused_at
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        watches_allowed(self.inner.live_only, refused_at, self.inner.recheck, now)
    }

    fn gone(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.inner.gone.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn nodes(&self) -> MutexGuard<'_, HashMap<String, NodeWatch>> {
        // Every change is one call: the map is consistent whatever a panicking holder did.
        self.inner.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pod `name` of namespace `ns` if it exists with UID `uid` (`None`: gone, or another pod
    /// under that name): from the cache when it holds that pod, else read live.
    ///
    /// # Errors
    /// The live read failed.
    pub async fn get(&self, ns: &str, name: &str, uid: &str) -> Result<Option<Pod>, kube::Error> {
        Ok(self.get_from(ns, name, uid).await?.0)
    }

    /// [`PodCache::get`], and where the answer came from.
    ///
    /// # Errors
    /// The live read failed.
    pub async fn get_from(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
    ) -> Result<(Option<Pod>, Source), kube::Error> {
        if let Some(pod) = self.cached(ns, name, uid) {
            return Ok((Some(pod), Source::Cache));
        }
        if self.gone().contains_key(uid) {
            return Ok((None, Source::Cache));
        }
        // Where the process's other cache says the pod runs: watch that node and read the pod
        // from its list (a drain's first look at each of a node's pods costs no GET).
        let hinted = self
            .inner
            .node_hint
            .get()
            .and_then(|hint| hint(ns, name))
            .filter(|_| self.watches_allowed(Instant::now()));
        if let Some(node) = hinted {
            self.watch_node(&node);
            self.await_listing_of(Some(&node)).await;
            if let Some(pod) = self.cached(ns, name, uid) {
                return Ok((Some(pod), Source::Cache));
            }
        }
        // A watch still listing its node may be about to hold the pod: a drain asks for the
        // pods of a node all at once, and the first read's GET starts the node's watch, whose
        // list is usually in within a fraction of a second — the other pods of that node wait
        // for it instead of a GET each.
        if self.await_listing_of(None).await
            && let Some(pod) = self.cached(ns, name, uid)
        {
            return Ok((Some(pod), Source::Cache));
        }
        let pod = Api::<Pod>::namespaced(self.inner.client.clone(), ns)
            .get_opt(name)
            .await?;
        if let Some(node) = pod
            .as_ref()
            .and_then(|p| p.spec.as_ref()?.node_name.as_deref())
        {
            self.watch_node(node);
        }
        let pod = pod.filter(|p| p.metadata.uid.as_deref() == Some(uid));
        if pod.is_none() {
            remember_gone(&self.inner.gone, uid);
        }
        Ok((pod, Source::Live))
    }

    /// The cached pod `ns/name` with UID `uid`, if a synced watch holds it; stops the watches
    /// idle for [`IDLE`] and drops those that ended (refused: their store would only get
    /// staler).
    fn cached(&self, ns: &str, name: &str, uid: &str) -> Option<Pod> {
        let key = ObjectRef::<Pod>::new(name).within(ns);
        let now = Instant::now();
        let mut nodes = self.nodes();
        nodes.retain(|node, w| {
            if w.stop.is_cancelled() {
                debug!(node, "pod watch of node ended; its pods are read live");
                return false;
            }
            let keep = now.duration_since(w.used) < IDLE;
            if !keep {
                debug!(node, "pod watch of node idle; stopped");
                w.stop.cancel();
            }
            keep
        });
        nodes.values_mut().find_map(|w| {
            // Not listed yet: read live.
            if !matches!(w.store.wait_until_ready().now_or_never(), Some(Ok(()))) {
                return None;
            }
            let pod = w.store.get(&key)?;
            w.used = now;
            (pod.metadata.uid.as_deref() == Some(uid)).then(|| (*pod).clone())
        })
    }

    /// Tells the cache where a pod runs, from another cache the process keeps: `(namespace,
    /// name) → node`. A read of a pod the cache lacks then starts the watch of that node and
    /// reads the pod from its list instead of reading it live (evictord gives its own cluster
    /// cache of pods). A hint can be wrong (a pod recreated elsewhere under the name): the read
    /// is live then, as without one. The first hint set stays.
    pub fn set_node_hint(&self, hint: NodeHint) {
        let _ = self.inner.node_hint.set(hint);
    }

    /// Waits, at most [`LISTING_WAIT`], until the watches still listing (of `node` only, or of
    /// every node) have listed; whether there was one.
    async fn await_listing_of(&self, node: Option<&str>) -> bool {
        let listing: Vec<Store<Pod>> = self
            .nodes()
            .iter()
            .filter(|(n, _)| node.is_none_or(|node| node == n.as_str()))
            .map(|(_, w)| w)
            .filter(|w| !w.stop.is_cancelled())
            .filter(|w| !matches!(w.store.wait_until_ready().now_or_never(), Some(Ok(()))))
            .map(|w| w.store.clone())
            .collect();
        if listing.is_empty() {
            return false;
        }
        futures::future::join_all(listing.iter().map(|s| listed_within(s, LISTING_WAIT))).await;
        true
    }

    /// How many nodes' pods are watched.
    pub fn watched_nodes(&self) -> usize {
        self.nodes().len()
    }

    /// Starts the watch of `node`'s pods unless it runs (or pods may not be watched).
    fn watch_node(&self, node: &str) {
        let now = Instant::now();
        if !self.watches_allowed(now) {
            return;
        }
        let mut nodes = self.nodes();
        if let Some(w) = nodes.get_mut(node).filter(|w| !w.stop.is_cancelled()) {
            w.used = now;
            return;
        }
        let api: Api<Pod> = match &self.inner.namespace {
            Some(ns) => Api::namespaced(self.inner.client.clone(), ns),
            None => Api::all(self.inner.client.clone()),
        };
        let config = watcher::Config::default()
            .fields(&format!("spec.nodeName={node}"))
            .any_semantic();
        let (store, writer) = reflector::store();
        let stream = watcher(api, config)
            .default_backoff()
            .modify(|p: &mut Pod| p.managed_fields_mut().clear())
            .reflect(writer);
        let stop = self.inner.stop.child_token();
        tokio::spawn(drive(
            stream,
            node.to_string(),
            stop.clone(),
            self.inner.refused_at.clone(),
            self.inner.recheck,
            self.inner.gone.clone(),
        ));
        debug!(node, "watching the pods of node");
        nodes.insert(
            node.to_string(),
            NodeWatch {
                store,
                stop,
                used: Instant::now(),
            },
        );
    }
}

/// Remembers that kube-apiserver said pod `uid` is gone (a live read's 404, or a watch's delete
/// event), forgetting those older than [`IDLE`] once [`GONE_KEPT`] are held.
fn remember_gone(gone: &Mutex<HashMap<String, Instant>>, uid: &str) {
    let mut gone = gone.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    if gone.len() >= GONE_KEPT {
        gone.retain(|_, at| now.duration_since(*at) < IDLE);
    }
    gone.insert(uid.to_string(), now);
}

/// Polls one node's watch until `stop`; a 403 ends it (its store is dropped at the next read)
/// and turns the cache to live reads until [`REFUSAL_RECHECK`] has passed.
async fn drive(
    stream: impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    node: String,
    stop: CancellationToken,
    refused_at: Arc<Mutex<Option<Instant>>>,
    recheck: Duration,
    gone: Arc<Mutex<HashMap<String, Instant>>>,
) {
    futures::pin_mut!(stream);
    loop {
        let item = tokio::select! {
            () = stop.cancelled() => break,
            item = stream.next() => item,
        };
        match item {
            Some(Ok(watcher::Event::InitDone)) => debug!(node, "pod watch synced"),
            // The pod is gone: a reader that must not act on a mere absence from the store
            // (a settler giving a surge back) need not ask kube-apiserver again.
            Some(Ok(watcher::Event::Delete(pod))) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    remember_gone(&gone, uid);
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) if is_forbidden(&e) => {
                // Once per refusal, not once per node's watch.
                if record_refusal(&refused_at, recheck) {
                    info!(
                        error = %e,
                        "kube-apiserver refused the watch of pods: the interceptor reads each pod \
                         with a GET instead of a watch cache, and asks again in {recheck:?}"
                    );
                }
                break;
            }
            Some(Err(e)) => warn!(node, error = %e, "pod watch error; retrying with backoff"),
            None => break,
        }
    }
    // The store is not fed any more: the next read drops it.
    stop.cancel();
}

/// Records a refusal (403) of a watch in `refused_at`, now; true when it is the first within
/// `recheck` of the last one recorded (the one to log: the watches of several nodes or workloads
/// share the record and are refused together).
pub fn record_refusal(refused_at: &Mutex<Option<Instant>>, recheck: Duration) -> bool {
    let now = Instant::now();
    let previous = refused_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .replace(now);
    previous.is_none_or(|at| now.saturating_duration_since(at) >= recheck)
}

/// Whether a watcher error is kube-apiserver refusing the list or the watch (403): the account
/// may not list or watch the resource, which retrying will not change.
pub fn is_forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    /// Two readers waiting for a store to list and a third checking it meanwhile with
    /// `now_or_never` all see it listed (awaiting `wait_until_ready` with a timeout, the first
    /// waiter lost its wake-up to the others and timed out).
    #[tokio::test(start_paused = true)]
    async fn every_reader_waiting_for_a_list_sees_it() {
        let (store, mut writer) = reflector::store::<Pod>();
        // Each in a task of its own, as the runner's looks are.
        let waiter = |store: Store<Pod>| {
            tokio::spawn(async move { listed_within(&store, Duration::from_secs(5)).await })
        };
        let (a, b) = (waiter(store.clone()), waiter(store.clone()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A check in between, as a look at another pod makes.
        assert!(store.wait_until_ready().now_or_never().is_none());
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let listed = tokio::time::Instant::now();
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert!(a && b, "listed: {a}, {b}");
        // On the paused clock: both within a poll of the list, not at their timeout.
        assert!(listed.elapsed() <= LISTED_POLL, "{:?}", listed.elapsed());
        assert!(!listed_within(&reflector::store::<Pod>().0, Duration::from_millis(30)).await);
    }

    /// (live only, seconds since the last refusal) → may a watch start (recheck 60 s).
    #[rstest]
    #[case::never_refused(false, None, true)]
    #[case::just_refused(false, Some(0), false)]
    #[case::refused_within_the_recheck(false, Some(59), false)]
    #[case::refusal_asked_again(false, Some(60), true)]
    #[case::live_only(true, None, false)]
    #[case::live_only_long_after(true, Some(3600), false)]
    fn watches_allowed_rows(
        #[case] live_only: bool,
        #[case] refused_secs_ago: Option<u64>,
        #[case] allowed: bool,
    ) {
        let now = Instant::now() + Duration::from_secs(7200);
        let refused_at = refused_secs_ago.map(|s| now - Duration::from_secs(s));
        assert_eq!(
            watches_allowed(live_only, refused_at, REFUSAL_RECHECK, now),
            allowed
        );
    }
}
