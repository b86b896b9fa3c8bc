//! The pods of the workloads being surged, for the readiness a surge waits for: one watch per
//! namespace holding such workloads, started the first time a look needs it and stopped once no
//! look has used it for [`IDLE`], instead of a LIST of the workload's pods at every look. Each
//! surged workload is registered with its namespace's watch (its label selector), and reads
//! filter the namespace's pods by it. A drain surges a few workloads at a time; one watch serves
//! every workload of a namespace, so the cost is one LIST and one WATCH per namespace with surged
//! workloads, not per workload (issue 44: a pool of 350 workloads in one namespace listed and
//! watched pods about once per intercepted pod).
//!
//! Each watch reports the keys of the registered workloads whose pods' readiness changes (a pod
//! becomes ready or unready, starts terminating, appears, goes, or changes labels; [`changed`]),
//! so a request waiting for the pods themselves is looked at again then, not at its next poll.
//!
//! A cache can only lag: until a watch has listed, a read waits for it a moment ([`LIST_WAIT`])
//! and then LISTs live, as before the cache; a service account that may not list and watch pods
//! LISTs live, and the watch is asked again after
//! [`REFUSAL_RECHECK`](evictord_interceptor::pods::REFUSAL_RECHECK) (a kube-apiserver that has
//! just restarted refuses for a moment: that must not turn the watches off for good).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::selector::label_selector_matches;
use evictord_interceptor::pods::{REFUSAL_RECHECK, listed_within, watches_allowed};

/// How long a namespace's watch lives, and a workload stays registered with it, without a read
/// using it.
pub const IDLE: Duration = Duration::from_secs(120);
/// How long a read waits for a watch's first list before it LISTs live.
pub const LIST_WAIT: Duration = Duration::from_secs(5);

/// A workload: its namespace and name.
pub type WorkloadKey = (String, String);

/// The watches (cheap to clone: clones share them).
#[derive(Clone)]
pub struct WorkloadPods {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// By namespace.
    watches: Mutex<HashMap<String, PodsWatch>>,
    changes: mpsc::UnboundedSender<WorkloadKey>,
    /// When kube-apiserver last refused (403) a watch: none starts for
    /// [`REFUSAL_RECHECK`] after.
    refused_at: Arc<Mutex<Option<Instant>>>,
    stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The workloads registered with a namespace's watch: name → (selector, last used).
type Workloads = Arc<Mutex<HashMap<String, (LabelSelector, Instant)>>>;

struct PodsWatch {
    store: Store<Pod>,
    stop: CancellationToken,
    used: Instant,
    workloads: Workloads,
}

/// What a watch remembers of a pod to tell a change of readiness: ready, terminating, and its
/// labels (which workloads it belongs to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSeen {
    ready: bool,
    terminating: bool,
    labels: BTreeMap<String, String>,
}

impl PodSeen {
    fn of(pod: &Pod) -> Self {
        Self {
            ready: is_ready(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            labels: pod.labels().clone(),
        }
    }
}

/// What a watch remembers of each pod of its namespace, by UID.
type Seen = HashMap<String, PodSeen>;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change is one call: the data is consistent whatever a panicking holder did.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl WorkloadPods {
    /// No watch yet, and the stream of the keys of the workloads whose pods' readiness changes
    /// (it must be polled, or the changes pile up in memory).
    pub fn new(client: Client) -> (Self, impl Stream<Item = WorkloadKey> + Send + 'static) {
        let (tx, rx) = mpsc::unbounded_channel();
        let pods = Self {
            inner: Arc::new(Inner {
                client,
                watches: Mutex::default(),
                changes: tx,
                refused_at: Arc::default(),
                stop: CancellationToken::new(),
            }),
        };
        (
            pods,
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|k| (k, rx)) }),
        )
    }

    fn watches(&self) -> MutexGuard<'_, HashMap<String, PodsWatch>> {
        locked(&self.inner.watches)
    }

    /// Whether watches may run at `now` (none for a while after a refusal).
    fn watches_allowed(&self, now: Instant) -> bool {
        let refused_at = *locked(&self.inner.refused_at);
        watches_allowed(false, refused_at, REFUSAL_RECHECK, now)
    }

    /// Registers workload `key` (its pods: `selector`) with the watch of its namespace, started
    /// unless it runs; stops the watches idle for [`IDLE`] and forgets the workloads idle as long.
    pub fn watch(&self, key: &WorkloadKey, selector: &LabelSelector) {
        let now = Instant::now();
        if !self.watches_allowed(now) {
            return;
        }
        let mut watches = self.watches();
        watches.retain(|ns, w| {
            let keep = now.duration_since(w.used) < IDLE && !w.stop.is_cancelled();
            if keep {
                locked(&w.workloads).retain(|_, (_, used)| now.duration_since(*used) < IDLE);
            } else {
                debug!(namespace = ns, "pod watch of namespace idle; stopped");
                w.stop.cancel();
            }
            keep
        });
        let (ns, name) = key;
        if let Some(w) = watches.get_mut(ns) {
            w.used = now;
            locked(&w.workloads).insert(name.clone(), (selector.clone(), now));
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), ns);
        let (store, writer) = reflector::store();
        let stream = watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .modify(trim)
            .reflect(writer);
        let stop = self.inner.stop.child_token();
        let workloads: Workloads = Arc::new(Mutex::new(HashMap::from([(
            name.clone(),
            (selector.clone(), now),
        )])));
        tokio::spawn(drive(
            stream,
            ns.clone(),
            workloads.clone(),
            self.inner.changes.clone(),
            stop.clone(),
            self.inner.refused_at.clone(),
        ));
        debug!(
            namespace = ns,
            workload = name,
            "watching the pods of the namespace"
        );
        watches.insert(
            ns.clone(),
            PodsWatch {
                store,
                stop,
                used: now,
                workloads,
            },
        );
    }

    /// The pods of workload `key` (`selector`), trimmed to what readiness reads (metadata,
    /// the `Ready` condition): from its namespace's watch once listed (started here if it does
    /// not run), else a LIST.
    ///
    /// # Errors
    /// The LIST failed.
    pub async fn pods(
        &self,
        key: &WorkloadKey,
        selector: &LabelSelector,
    ) -> Result<Vec<Arc<Pod>>, kube::Error> {
        self.watch(key, selector);
        // A refused watch ended: its store is not fed any more.
        let store = self
            .watches()
            .get(&key.0)
            .filter(|w| !w.stop.is_cancelled())
            .map(|w| w.store.clone());
        if let Some(store) = store
            && listed_within(&store, LIST_WAIT).await
        {
            return Ok(store
                .state()
                .into_iter()
                .filter(|p| label_selector_matches(selector, p.labels()))
                .collect());
        }
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), &key.0);
        let params = match match_labels(selector) {
            Some(labels) => ListParams::default().labels(&labels),
            None => ListParams::default(),
        };
        Ok(api
            .list(&params)
            .await?
            .items
            .into_iter()
            .filter(|p| label_selector_matches(selector, p.labels()))
            .map(Arc::new)
            .collect())
    }

    /// How many namespaces' pods are watched.
    pub fn watched(&self) -> usize {
        self.watches().len()
    }
}

/// The server-side part of `selector`: its `matchLabels` (`None` when it has none; its
/// `matchExpressions` are applied by the reader).
pub fn match_labels(selector: &LabelSelector) -> Option<String> {
    let labels = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    (!labels.is_empty()).then_some(labels)
}

/// What the watch keeps of a pod: its metadata (without managed fields and annotations) and its
/// `Ready` condition.
fn trim(pod: &mut Pod) {
    pod.managed_fields_mut().clear();
    pod.annotations_mut().clear();
    pod.spec = None;
    let ready: Option<Vec<PodCondition>> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().filter(|c| c.type_ == "Ready").cloned().collect());
    pod.status = Some(PodStatus {
        conditions: ready,
        ..PodStatus::default()
    });
}

/// The workloads among `workloads` whose pods' readiness the pod of UID `uid` moves (`None`:
/// deleted): those it belonged to before or belongs to now, when its readiness, termination or
/// labels changed since `seen`, which remembers it.
pub fn changed<'w>(
    seen: &mut Seen,
    uid: &str,
    pod: Option<&Pod>,
    workloads: impl IntoIterator<Item = (&'w String, &'w LabelSelector)>,
) -> Vec<String> {
    let now = pod.map(PodSeen::of);
    let before = match &now {
        Some(n) => seen.insert(uid.to_string(), n.clone()),
        None => seen.remove(uid),
    };
    if before == now {
        return Vec::new();
    }
    let belongs = |s: &LabelSelector, p: &Option<PodSeen>| {
        p.as_ref()
            .is_some_and(|p| label_selector_matches(s, &p.labels))
    };
    workloads
        .into_iter()
        .filter(|(_, s)| belongs(s, &before) || belongs(s, &now))
        .map(|(name, _)| name.clone())
        .collect()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Polls one namespace's watch until `stop`, and sends the keys of the registered workloads on
/// `changes` when their pods' readiness changes (and each of them once the first list is in);
/// a 403 stops it and turns every read into a LIST until [`REFUSAL_RECHECK`] has passed.
async fn drive(
    stream: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    namespace: String,
    workloads: Workloads,
    changes: mpsc::UnboundedSender<WorkloadKey>,
    stop: CancellationToken,
    refused_at: Arc<Mutex<Option<Instant>>>,
) {
    futures::pin_mut!(stream);
    let mut seen = Seen::new();
    let mut listing = Seen::new();
    loop {
        let item = tokio::select! {
            () = stop.cancelled() => break,
            item = stream.next() => item,
        };
        let registered = || {
            locked(&workloads)
                .iter()
                .map(|(name, (selector, _))| (name.clone(), selector.clone()))
                .collect::<Vec<_>>()
        };
        let wake: Vec<String> = match item {
            Some(Ok(watcher::Event::Init)) => {
                listing.clear();
                Vec::new()
            }
            Some(Ok(watcher::Event::InitApply(pod))) => {
                listing.insert(pod.uid().unwrap_or_default(), PodSeen::of(&pod));
                Vec::new()
            }
            Some(Ok(watcher::Event::InitDone)) => {
                let moved = listing != seen;
                seen = std::mem::take(&mut listing);
                debug!(namespace, "pod watch of namespace synced");
                if moved {
                    registered().into_iter().map(|(n, _)| n).collect()
                } else {
                    Vec::new()
                }
            }
            Some(Ok(watcher::Event::Apply(pod))) => {
                let r = registered();
                let uid = pod.uid().unwrap_or_default();
                changed(&mut seen, &uid, Some(&pod), r.iter().map(|(n, s)| (n, s)))
            }
            Some(Ok(watcher::Event::Delete(pod))) => {
                let r = registered();
                let uid = pod.uid().unwrap_or_default();
                changed(&mut seen, &uid, None, r.iter().map(|(n, s)| (n, s)))
            }
            Some(Err(e)) if evictord_interceptor::pods::is_forbidden(&e) => {
                if evictord_interceptor::pods::record_refusal(&refused_at, REFUSAL_RECHECK) {
                    info!(
                        error = %e,
                        "kube-apiserver refused the watch of pods: the interceptors LIST a surged \
                         workload's pods instead of watching them, and ask again in \
                         {REFUSAL_RECHECK:?}"
                    );
                }
                break;
            }
            Some(Err(e)) => {
                warn!(namespace, error = %e, "pod watch error; retrying with backoff");
                Vec::new()
            }
            None => break,
        };
        if wake
            .into_iter()
            .any(|name| changes.send((namespace.clone(), name)).is_err())
        {
            break;
        }
    }
    stop.cancel();
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::json;

    use super::*;

    fn pod_of(app: &str, ready: bool, terminating: bool) -> Pod {
        let mut p = json!({"metadata": {"uid": "u", "labels": {"app": app}, "annotations": {"a": "b"}},
            "spec": {"containers": []},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if terminating {
            p["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z".into();
        }
        serde_json::from_value(p).unwrap()
    }

    fn pod(ready: bool, terminating: bool) -> Pod {
        pod_of("web", ready, terminating)
    }

    /// A pod "u" as it was seen (app label, ready, terminating) and is now (`None`: deleted):
    /// the registered workloads (`web`: app=web, `api`: app=api) woken.
    #[rstest]
    #[case::new_pod(None, Some(("web", false, false)), &["web"])]
    #[case::same(Some(("web", false, false)), Some(("web", false, false)), &[])]
    #[case::became_ready(Some(("web", false, false)), Some(("web", true, false)), &["web"])]
    #[case::started_terminating(Some(("web", true, false)), Some(("web", true, true)), &["web"])]
    #[case::deleted(Some(("web", true, true)), None, &["web"])]
    #[case::deleted_unseen(None, None, &[])]
    #[case::another_workloads_pod(None, Some(("batch", true, false)), &[])]
    #[case::moved_to_another_workload(Some(("web", true, false)), Some(("api", true, false)), &["api", "web"])]
    fn changed_rows(
        #[case] before: Option<(&str, bool, bool)>,
        #[case] now: Option<(&str, bool, bool)>,
        #[case] woken: &[&str],
    ) {
        let selector = |app: &str| -> LabelSelector {
            serde_json::from_value(json!({"matchLabels": {"app": app}})).unwrap()
        };
        let workloads: Vec<(String, LabelSelector)> = ["api", "web"]
            .iter()
            .map(|a| (a.to_string(), selector(a)))
            .collect();
        let mut seen = Seen::new();
        if let Some((app, r, t)) = before {
            seen.insert("u".into(), PodSeen::of(&pod_of(app, r, t)));
        }
        let now = now.map(|(app, r, t)| pod_of(app, r, t));
        let mut got = changed(
            &mut seen,
            "u",
            now.as_ref(),
            workloads.iter().map(|(n, s)| (n, s)),
        );
        got.sort();
        assert_eq!(got, woken);
        // Remembered: the same again wakes nobody.
        assert!(
            changed(
                &mut seen,
                "u",
                now.as_ref(),
                workloads.iter().map(|(n, s)| (n, s))
            )
            .is_empty()
        );
    }

    #[test]
    fn trim_keeps_what_readiness_reads() {
        let mut p = pod(true, true);
        trim(&mut p);
        assert!(p.spec.is_none() && p.annotations().is_empty());
        assert_eq!(p.labels().get("app").map(String::as_str), Some("web"));
        let conditions = p.status.unwrap().conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "Ready");
        assert!(p.metadata.deletion_timestamp.is_some());
    }

    #[rstest]
    #[case::labels(json!({"matchLabels": {"app": "web"}}), Some("app=web"))]
    #[case::expressions_only(json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}), None)]
    fn match_labels_rows(#[case] selector: serde_json::Value, #[case] expected: Option<&str>) {
        let s: LabelSelector = serde_json::from_value(selector).unwrap();
        assert_eq!(match_labels(&s).as_deref(), expected);
    }
}
