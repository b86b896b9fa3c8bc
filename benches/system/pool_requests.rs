//! The mode's EvictionRequests as they were last seen (issue 41): a watch of the pool's
//! namespace from before the drain keeps each request's last state, deleted ones included — a
//! maintenance's Complete deletes the requests it alone made, so a rollout, which completes each
//! node's maintenance as it goes, leaves none to list at the end — and [`figures`] sums them up,
//! and [`PodClasses`] sorts their pods for issue 44's bill per pod.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evictord::api::{CONDITION_EVICTED, EvictionRequest};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::loadgen::median;
use crate::pool_attribution::{PodClasses, is_intercepted};
use crate::pool_results::{InterceptorFigures, RequestFigures};

/// The requests seen, by UID.
type Seen = Arc<Mutex<HashMap<String, EvictionRequest>>>;

/// A running watch of a namespace's EvictionRequests (stopped when dropped).
pub struct RequestWatch {
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl RequestWatch {
    /// Starts the watch and waits (at most 10 s) for its first list.
    pub async fn start(client: &Client, ns: &str) -> RequestWatch {
        let seen: Seen = Arc::default();
        let (listed, first_list) = tokio::sync::oneshot::channel::<()>();
        let stream = watcher(
            Api::<EvictionRequest>::namespaced(client.clone(), ns),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff();
        let keep = seen.clone();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut listed = Some(listed);
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let object = match event {
                    watcher::Event::Apply(r)
                    | watcher::Event::InitApply(r)
                    | watcher::Event::Delete(r) => r,
                    watcher::Event::InitDone => {
                        if let Some(l) = listed.take() {
                            let _ = l.send(());
                        }
                        continue;
                    }
                    watcher::Event::Init => continue,
                };
                let uid = object.metadata.uid.clone().unwrap_or_default();
                if let Ok(mut s) = keep.lock() {
                    s.insert(uid, object);
                }
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(10), first_list).await;
        RequestWatch { seen, task }
    }

    /// Stops the watch; what the requests said, and their pods by class.
    pub async fn stop(self) -> (RequestFigures, PodClasses) {
        // The last changes reach the watch within a moment of the drain's end.
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.task.abort();
        let items: Vec<EvictionRequest> = self
            .seen
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        (figures(&items), PodClasses::of(&items))
    }
}

impl Drop for RequestWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the EvictionRequests say: how long each took, each interceptor's active time, the
/// Eviction API calls a PDB refused.
pub fn figures(items: &[EvictionRequest]) -> RequestFigures {
    let mut out = RequestFigures {
        requests: items.len(),
        ..Default::default()
    };
    let mut lifetimes = Vec::new();
    let mut active: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut intercepted = std::collections::BTreeSet::new();
    for r in items {
        if is_intercepted(r) {
            intercepted.insert(r.spec.target.pod.uid.clone());
        }
        let Some(s) = &r.status else { continue };
        let evicted = s
            .condition(CONDITION_EVICTED)
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.0);
        if let (Some(e), Some(created)) = (evicted, &r.metadata.creation_timestamp) {
            out.evicted += 1;
            lifetimes.push(e.duration_since(created.0).as_secs_f64());
        }
        let counter = s
            .pod_eviction_status
            .as_ref()
            .map_or(0, |p| p.failed_api_eviction_counter);
        if counter > 0 {
            out.with_refused_evictions += 1;
            out.refused_evictions += i64::from(counter);
        }
        for i in &s.interceptors {
            let Some(from) = &i.activation_time else {
                continue;
            };
            let to = i.completion_time.as_ref().map(|t| t.0).or(evicted);
            if let Some(to) = to {
                active
                    .entry(i.name.clone())
                    .or_default()
                    .push(to.duration_since(from.0).as_secs_f64());
            }
        }
    }
    out.intercepted_pods = intercepted.len();
    out.median_seconds = median(lifetimes.iter().copied());
    out.max_seconds = lifetimes.iter().copied().fold(0.0, f64::max);
    out.interceptors = active
        .into_iter()
        .map(|(name, v)| InterceptorFigures {
            name,
            activations: v.len(),
            median_active_seconds: median(v.iter().copied()),
            max_active_seconds: v.iter().copied().fold(0.0, f64::max),
        })
        .collect();
    out
}
