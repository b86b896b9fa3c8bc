//! The pods of the workloads being surged, for the readiness a surge waits for: one watch per
//! workload (by its label selector, in its namespace), started the first time a look needs it
//! and stopped once no look has used it for [`IDLE`], instead of a LIST of the workload's pods at
//! every look. A drain surges a few workloads at a time, so the cache holds about their pods, and
//! costs one LIST and one WATCH per surged workload.
//!
//! Each watch reports its workload's key when the readiness of its pods changes (a pod becomes
//! ready or unready, starts terminating, appears or goes; [`changed`]), so a request waiting for
//! the pods themselves is looked at again then, not at its next poll.
//!
//! A cache can only lag: until a watch has listed, a read waits for it a moment ([`LIST_WAIT`])
//! and then LISTs live, as before the cache; a service account that may not list and watch pods
//! LISTs live, and the watch is asked again after
//! [`REFUSAL_RECHECK`](evictord_interceptor::pods::REFUSAL_RECHECK) (a kube-apiserver that has
//! just restarted refuses for a moment: that must not turn the watches off for good).

use std::collections::HashMap;
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

/// How long a workload's watch lives without a read using it.
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
    watches: Mutex<HashMap<WorkloadKey, PodsWatch>>,
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

struct PodsWatch {
    selector: LabelSelector,
    store: Store<Pod>,
    stop: CancellationToken,
    used: Instant,
}

/// What a watch remembers of a pod to tell a change of readiness: ready, terminating.
type Seen = HashMap<String, (bool, bool)>;

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

    fn watches(&self) -> MutexGuard<'_, HashMap<WorkloadKey, PodsWatch>> {
        // Every change is one call: the map is consistent whatever a panicking holder did.
        self.inner.watches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether watches may run at `now` (none for a while after a refusal).
    fn watches_allowed(&self, now: Instant) -> bool {
        let refused_at = *self
            .inner
            .refused_at
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        watches_allowed(false, refused_at, REFUSAL_RECHECK, now)
    }

    /// Starts watching the pods of workload `key` (its pods: `selector`) unless that runs;
    /// stops the watches idle for [`IDLE`]. A changed selector starts the watch again.
    pub fn watch(&self, key: &WorkloadKey, selector: &LabelSelector) {
        let now = Instant::now();
        if !self.watches_allowed(now) {
            return;
        }
        let mut watches = self.watches();
        watches.retain(|(ns, name), w| {
            let keep = now.duration_since(w.used) < IDLE && !w.stop.is_cancelled();
            if !keep {
                debug!(
                    namespace = ns,
                    workload = name,
                    "pod watch of workload idle; stopped"
                );
                w.stop.cancel();
            }
            keep
        });
        if let Some(w) = watches.get_mut(key).filter(|w| w.selector == *selector) {
            w.used = now;
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), &key.0);
        let mut config = watcher::Config::default().any_semantic();
        if let Some(labels) = match_labels(selector) {
            config = config.labels(&labels);
        }
        let (store, writer) = reflector::store();
        let stream = watcher(api, config)
            .default_backoff()
            .modify(trim)
            .reflect(writer);
        let stop = self.inner.stop.child_token();
        tokio::spawn(drive(
            stream,
            key.clone(),
            selector.clone(),
            self.inner.changes.clone(),
            stop.clone(),
            self.inner.refused_at.clone(),
        ));
        debug!(
            namespace = key.0,
            workload = key.1,
            "watching the pods of workload"
        );
        if let Some(old) = watches.insert(
            key.clone(),
            PodsWatch {
                selector: selector.clone(),
                store,
                stop,
                used: now,
            },
        ) {
            old.stop.cancel();
        }
    }

    /// The pods of workload `key` (`selector`), trimmed to what readiness reads (metadata,
    /// the `Ready` condition): from its watch once listed (started here if it does not run),
    /// else a LIST.
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
            .get(key)
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

    /// How many workloads' pods are watched.
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

/// Whether `pod` (`None`: deleted, with UID `uid`) changes the readiness `seen` remembers (and
/// remembers it).
pub fn changed(seen: &mut Seen, uid: &str, pod: Option<&Pod>) -> bool {
    match pod {
        None => seen.remove(uid).is_some(),
        Some(pod) => {
            let now = (is_ready(pod), pod.metadata.deletion_timestamp.is_some());
            seen.insert(uid.to_string(), now) != Some(now)
        }
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Polls one workload's watch until `stop`, and sends `key` on `changes` when its pods'
/// readiness changes (and once its first list is in); a 403 stops it and turns every read into
/// a LIST until [`REFUSAL_RECHECK`] has passed.
async fn drive(
    stream: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    key: WorkloadKey,
    selector: LabelSelector,
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
        let wake = match item {
            Some(Ok(watcher::Event::Init)) => {
                listing.clear();
                false
            }
            Some(Ok(watcher::Event::InitApply(pod))) => {
                if label_selector_matches(&selector, pod.labels()) {
                    changed(&mut listing, &pod.uid().unwrap_or_default(), Some(&pod));
                }
                false
            }
            Some(Ok(watcher::Event::InitDone)) => {
                let wake = listing != seen;
                seen = std::mem::take(&mut listing);
                debug!(
                    namespace = key.0,
                    workload = key.1,
                    "pod watch of workload synced"
                );
                wake
            }
            Some(Ok(watcher::Event::Apply(pod))) => {
                let selected = label_selector_matches(&selector, pod.labels());
                let uid = pod.uid().unwrap_or_default();
                changed(&mut seen, &uid, selected.then_some(&pod))
            }
            Some(Ok(watcher::Event::Delete(pod))) => {
                changed(&mut seen, &pod.uid().unwrap_or_default(), None)
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
                warn!(namespace = key.0, workload = key.1, error = %e, "pod watch error; retrying with backoff");
                false
            }
            None => break,
        };
        if wake && changes.send(key.clone()).is_err() {
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

    fn pod(ready: bool, terminating: bool) -> Pod {
        let mut p = json!({"metadata": {"uid": "u", "labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {"containers": []},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if terminating {
            p["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z".into();
        }
        serde_json::from_value(p).unwrap()
    }

    /// (what was seen of pod "u": ready, terminating), the pod now (`None`: deleted), a change?
    #[rstest]
    #[case::new_pod(None, Some((false, false)), true)]
    #[case::same(Some((false, false)), Some((false, false)), false)]
    #[case::became_ready(Some((false, false)), Some((true, false)), true)]
    #[case::started_terminating(Some((true, false)), Some((true, true)), true)]
    #[case::deleted(Some((true, true)), None, true)]
    #[case::deleted_unseen(None, None, false)]
    fn changed_rows(
        #[case] before: Option<(bool, bool)>,
        #[case] now: Option<(bool, bool)>,
        #[case] expected: bool,
    ) {
        let mut seen = Seen::new();
        if let Some(b) = before {
            seen.insert("u".into(), b);
        }
        let now = now.map(|(r, t)| pod(r, t));
        assert_eq!(changed(&mut seen, "u", now.as_ref()), expected);
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
