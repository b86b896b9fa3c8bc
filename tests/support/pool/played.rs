//! The played scheduler and kubelet of a pool, for thousands of pods: watch-driven (two
//! kube-runtime reflectors, the pods of one namespace and the pool's nodes), the decisions of
//! [`super::schedule`] taken on the cached objects at every change (and every 100 ms, for the
//! timers), and the API calls made with at most [`IN_FLIGHT`] at once:
//! - a pending pod is bound (the `binding` subresource) to the least-loaded node it fits;
//! - a bound pod is marked Running and Ready ([`super::schedule::Timing::start_delay`] after the
//!   kubelet first saw it bound);
//! - a pod with a deletionTimestamp is removed after its grace period, as a kubelet does once the
//!   containers stopped: delete with grace 0 and the pod's UID as precondition.
//!
//! Nothing is listed but by the reflectors: a call is made only when a cached object asks for it.
//! A call that fails is made again at the next change or tick; one that succeeded is not repeated
//! for [`RETRY`] while the watch catches up.
//!
//! Each names itself to kube-apiserver ([`SCHEDULER_USER_AGENT`], [`KUBELET_USER_AGENT`]), so
//! that the pool benchmark can split kube-apiserver's requests by client: the bindings are the
//! scheduler's; the pods' status, their removal and the two watches (which both share) the
//! kubelet's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

use super::schedule::{self, Seen, Step, Timing};

/// The played scheduler's `User-Agent`.
pub const SCHEDULER_USER_AGENT: &str = "pool-scheduler";
/// The played kubelet's `User-Agent`.
pub const KUBELET_USER_AGENT: &str = "pool-kubelet";

/// API calls in flight at most.
pub const IN_FLIGHT: usize = 16;
/// How long a call that succeeded is not repeated while the watch catches up with it.
pub const RETRY: Duration = Duration::from_secs(5);
/// The timer tick (start delays and grace periods end within one tick).
const TICK: Duration = Duration::from_millis(100);
/// The least time between two passes: the changes of a burst are taken together.
const BATCH: Duration = Duration::from_millis(20);

/// What the played scheduler and kubelet did.
#[derive(Debug, Default)]
pub struct Stats {
    pub bindings: AtomicU64,
    pub readies: AtomicU64,
    pub removals: AtomicU64,
    /// Calls that failed (made again later).
    pub failures: AtomicU64,
    /// Pending pods that fit no node at the last tick.
    pub unschedulable: AtomicUsize,
    /// Nodes known at the last tick.
    pub nodes: AtomicUsize,
    /// The last failed call's error.
    pub last_failure: Mutex<String>,
}

impl Stats {
    /// One line for logs and errors.
    pub fn summary(&self) -> String {
        format!(
            "{} bindings, {} pods made Ready, {} removed, {} calls failed (last: {}), {} pending pods fit none of the {} nodes",
            self.bindings.load(Ordering::Relaxed),
            self.readies.load(Ordering::Relaxed),
            self.removals.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
            self.last_failure
                .lock()
                .map(|f| f.clone())
                .unwrap_or_default(),
            self.unschedulable.load(Ordering::Relaxed),
            self.nodes.load(Ordering::Relaxed),
        )
    }
}

/// A running played scheduler and kubelet; stops when dropped.
pub struct Played {
    pods: Store<Pod>,
    nodes: Store<Node>,
    pub stats: Arc<Stats>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Played {
    /// Starts on the pods of namespace `ns` and the nodes labelled `node_selector` (`key=value`):
    /// `scheduler` binds, `kubelet` watches and writes the pods' status and removes them (clients
    /// named [`SCHEDULER_USER_AGENT`] and [`KUBELET_USER_AGENT`] in the pool).
    pub fn start(
        scheduler: Client,
        kubelet: Client,
        ns: &str,
        node_selector: &str,
        timing: Timing,
    ) -> Played {
        let wake = Arc::new(Notify::new());
        let (pods, pod_writer) = reflector::store();
        let (nodes, node_writer) = reflector::store();
        let pod_watch = watcher(
            Api::<Pod>::namespaced(kubelet.clone(), ns),
            watcher::Config::default().any_semantic(),
        );
        let node_watch = watcher(
            Api::<Node>::all(kubelet.clone()),
            watcher::Config::default()
                .labels(node_selector)
                .any_semantic(),
        );
        let stats = Arc::new(Stats::default());
        let tasks = vec![
            tokio::spawn(reflect(pod_watch, pod_writer, wake.clone())),
            tokio::spawn(reflect(node_watch, node_writer, wake.clone())),
            tokio::spawn(run(
                Api::namespaced(scheduler, ns),
                Api::namespaced(kubelet, ns),
                pods.clone(),
                nodes.clone(),
                wake,
                timing,
                stats.clone(),
            )),
        ];
        Played {
            pods,
            nodes,
            stats,
            tasks,
        }
    }

    /// The pods of the namespace, as the played kubelet sees them.
    pub fn pods(&self) -> Store<Pod> {
        self.pods.clone()
    }

    /// The pool's nodes, as the played scheduler sees them.
    pub fn nodes(&self) -> Store<Node> {
        self.nodes.clone()
    }

    /// Waits until both caches hold their first list.
    pub async fn synced(&self) {
        let _ = self.pods.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
    }
}

impl Drop for Played {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Feeds a store from a watch and wakes the decisions at every event.
async fn reflect<K, S>(stream: S, writer: reflector::store::Writer<K>, wake: Arc<Notify>)
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let stream = stream
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
        .reflect(writer);
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        if event.is_ok() {
            wake.notify_one();
        }
    }
}

/// The calls made recently, by pod UID and step, with when (a failed call is forgotten at once).
type Issued = Arc<Mutex<HashMap<(String, &'static str), Instant>>>;

async fn run(
    binder: Api<Pod>,
    api: Api<Pod>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    wake: Arc<Notify>,
    timing: Timing,
    stats: Arc<Stats>,
) {
    let _ = pods.wait_until_ready().await;
    let _ = nodes.wait_until_ready().await;
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let issued: Issued = Arc::default();
    let mut seen: HashMap<String, Seen> = HashMap::new();
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
        }
        tokio::time::sleep(BATCH).await;
        let now = Instant::now();
        let all = pods.state();
        let mut node_list: Vec<Node> = nodes.state().iter().map(|n| (**n).clone()).collect();
        node_list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, at| now.duration_since(*at) < RETRY);
        let present: HashSet<&str> = all
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        seen.retain(|uid, _| present.contains(uid.as_str()));
        let mut load = schedule::load(&all);
        let mut pending: Vec<&Arc<Pod>> = all
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.spec.as_ref().is_some_and(|s| s.node_name.is_none())
            })
            .collect();
        pending.sort_by(|a, b| {
            (&a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
        });
        let mut unschedulable = 0;
        for p in pending {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            if is_issued(&issued, &uid, "bind") {
                continue;
            }
            let Some(node) = schedule::choose_node(p, &node_list, &load) else {
                unschedulable += 1;
                continue;
            };
            *load.entry(node.to_string()).or_insert(0) += 1;
            let (api, node, name) = (binder.clone(), node.to_string(), p.name_any());
            issue(&issued, &permits, &stats, uid, "bind", async move {
                bind(&api, &name, &node).await
            });
        }
        stats.unschedulable.store(unschedulable, Ordering::Relaxed);
        stats.nodes.store(node_list.len(), Ordering::Relaxed);
        for p in all
            .iter()
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let s = seen.entry(uid.clone()).or_default();
            s.bound.get_or_insert(now);
            if p.metadata.deletion_timestamp.is_some() {
                s.deleting.get_or_insert(now);
            }
            let (api, name) = (api.clone(), p.name_any());
            match schedule::kubelet_step(p, s, now, &timing) {
                Step::Wait => {}
                Step::Ready if !is_issued(&issued, &uid, "ready") => {
                    let pass = schedule::gates_pass(p);
                    issue(&issued, &permits, &stats, uid, "ready", async move {
                        ready(&api, &name, pass).await
                    });
                }
                Step::Gate(want) => {
                    let (step, other) = if want {
                        ("gate-ready", "gate-unready")
                    } else {
                        ("gate-unready", "gate-ready")
                    };
                    if !is_issued(&issued, &uid, step) {
                        forget(&issued, &uid, other);
                        issue(&issued, &permits, &stats, uid, step, async move {
                            set_ready(&api, &name, want).await
                        });
                    }
                }
                Step::Remove if !is_issued(&issued, &uid, "remove") => {
                    let u = uid.clone();
                    issue(&issued, &permits, &stats, uid, "remove", async move {
                        remove(&api, &name, &u).await
                    });
                }
                Step::Ready | Step::Remove => {}
            }
        }
    }
}

/// Forgets that `step` was issued for pod `uid` (its opposite is being issued).
fn forget(issued: &Issued, uid: &str, step: &'static str) {
    issued
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(uid.to_string(), step));
}

fn is_issued(issued: &Issued, uid: &str, step: &'static str) -> bool {
    issued
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(&(uid.to_string(), step))
}

/// Makes a call in the background (waiting for a permit); forgets it when it fails.
fn issue<F>(
    issued: &Issued,
    permits: &Arc<Semaphore>,
    stats: &Arc<Stats>,
    uid: String,
    step: &'static str,
    call: F,
) where
    F: std::future::Future<Output = Result<(), kube::Error>> + Send + 'static,
{
    let key = (uid, step);
    issued
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.clone(), Instant::now());
    let (issued, permits, stats) = (issued.clone(), permits.clone(), stats.clone());
    tokio::spawn(async move {
        let Ok(_permit) = permits.acquire().await else {
            return;
        };
        let counter = match step {
            "bind" => &stats.bindings,
            "ready" | "gate-ready" | "gate-unready" => &stats.readies,
            _ => &stats.removals,
        };
        match call.await {
            Ok(()) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            // Gone already: nothing left to do for it.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = stats.last_failure.lock() {
                    *last = format!("{step}: {e}");
                }
                issued
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key);
            }
        }
    });
}

async fn bind(api: &Api<Pod>, name: &str, node: &str) -> Result<(), kube::Error> {
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    api.create_subresource::<_, serde_json::Value>(
        "binding",
        name,
        &PostParams::default(),
        &binding,
    )
    .await
    .map(|_| ())
}

/// Starts the pod: Running, an IP (the endpoint controllers list only pods with one), its
/// containers ready, and `Ready` as `gates_pass` says. A strategic merge patch: conditions merge
/// by type, so a readiness gate's condition written by someone else stays.
async fn ready(api: &Api<Pod>, name: &str, gates_pass: bool) -> Result<(), kube::Error> {
    let now = jiff::Timestamp::now().to_string();
    let condition = |t: &str, status: bool| json!({"type": t, "status": if status { "True" } else { "False" }, "lastTransitionTime": now});
    let ip = super::super::kubelet::next_pod_ip();
    let status = json!({"status": {
        "phase": "Running",
        "startTime": now,
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [
            condition("Initialized", true), condition("Ready", gates_pass),
            condition("ContainersReady", true), condition("PodScheduled", true),
        ],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .map(|_| ())
}

/// Sets the started pod's `Ready` condition alone (a strategic merge patch of that condition).
async fn set_ready(api: &Api<Pod>, name: &str, ready: bool) -> Result<(), kube::Error> {
    let now = jiff::Timestamp::now().to_string();
    let reason = if ready { "" } else { "ReadinessGatesNotReady" };
    let status = json!({"status": {"conditions": [{
        "type": "Ready", "status": if ready { "True" } else { "False" },
        "reason": reason, "lastTransitionTime": now,
    }]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .map(|_| ())
}

async fn remove(api: &Api<Pod>, name: &str, uid: &str) -> Result<(), kube::Error> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    api.delete(name, &params).await.map(|_| ())
}
