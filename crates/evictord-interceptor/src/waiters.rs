//! Waking a request as soon as what it waits for changes, instead of at its next poll.
//!
//! An interceptor that waits on another object (a Deployment's available replicas, say) names
//! that object with [`Waiters::wait`] when it reports progress; whoever watches those objects
//! feeds their changes to [`Waiters::woken_by`], and [`Runner::run_woken`](crate::Runner::run_woken)
//! looks at every request waiting on a changed object at once. A wake is one-shot: the look it
//! causes registers the request again if it still waits. A wake costs one look at the request; a
//! missed one (a change between the read and the registration, a lagging watch) costs what it
//! cost before, the poll interval. Nothing here is state the interceptor depends on: after a
//! restart every request is looked at anyway.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;

use evictord_api::EvictionRequest;

/// The requests waiting on objects named by keys of type `K` (cheap to clone: clones share).
pub struct Waiters<K> {
    waiting: Arc<Mutex<HashMap<K, HashSet<ObjectRef<EvictionRequest>>>>>,
}

impl<K> Clone for Waiters<K> {
    fn clone(&self) -> Self {
        Self {
            waiting: self.waiting.clone(),
        }
    }
}

impl<K> Default for Waiters<K> {
    fn default() -> Self {
        Self {
            waiting: Arc::default(),
        }
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> Waiters<K> {
    fn lock(&self) -> MutexGuard<'_, HashMap<K, HashSet<ObjectRef<EvictionRequest>>>> {
        // The map stays consistent whatever a panicking holder did: every change is one call.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `request` waits on the object named `key` until that object's next change.
    pub fn wait(&self, key: K, request: &EvictionRequest) {
        self.lock()
            .entry(key)
            .or_default()
            .insert(ObjectRef::from_obj(request));
    }

    /// `request` no longer waits on anything (it completed, or gave up).
    pub fn forget(&self, request: &EvictionRequest) {
        let r = ObjectRef::from_obj(request);
        self.lock().retain(|_, requests| {
            requests.remove(&r);
            !requests.is_empty()
        });
    }

    /// The requests waiting on `key`, which wait no more.
    pub fn take(&self, key: &K) -> Vec<ObjectRef<EvictionRequest>> {
        let mut woken: Vec<_> = self
            .lock()
            .remove(key)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        woken.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        woken
    }

    /// How many requests wait, on any key.
    pub fn len(&self) -> usize {
        self.lock().values().map(HashSet::len).sum()
    }

    /// True when no request waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The requests to look at again: those waiting on each key `changes` yields, when it
    /// yields it.
    pub fn woken_by<S>(
        &self,
        changes: S,
    ) -> impl Stream<Item = ObjectRef<EvictionRequest>> + Send + 'static + use<K, S>
    where
        S: Stream<Item = K> + Send + 'static,
    {
        let waiters = self.clone();
        changes.flat_map(move |key| futures::stream::iter(waiters.take(&key)))
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use evictord_api::EvictionRequestSpec;

    fn request(ns: &str, name: &str) -> EvictionRequest {
        let mut r = EvictionRequest::new(name, EvictionRequestSpec::default());
        r.metadata.namespace = Some(ns.into());
        r
    }

    /// (key, namespace, request) registrations, then the key taken: what is woken, what waits.
    #[rstest]
    #[case::none(&[], "d", &[], 0)]
    #[case::one(&[("d", "ns", "a")], "d", &["ns/a"], 0)]
    #[case::other_key_stays(&[("d", "ns", "a"), ("e", "ns", "b")], "d", &["ns/a"], 1)]
    #[case::several_sorted(&[("d", "ns", "b"), ("d", "ns", "a")], "d", &["ns/a", "ns/b"], 0)]
    #[case::twice_once(&[("d", "ns", "a"), ("d", "ns", "a")], "d", &["ns/a"], 0)]
    #[case::namespaces_apart(&[("d", "x", "a"), ("d", "y", "a")], "d", &["x/a", "y/a"], 0)]
    #[case::unknown_key(&[("d", "ns", "a")], "z", &[], 1)]
    fn take_rows(
        #[case] waits: &[(&str, &str, &str)],
        #[case] key: &str,
        #[case] woken: &[&str],
        #[case] left: usize,
    ) {
        let w = Waiters::<String>::default();
        for (k, ns, name) in waits {
            w.wait(k.to_string(), &request(ns, name));
        }
        let got: Vec<String> = w
            .take(&key.to_string())
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        assert_eq!(got, woken);
        assert_eq!(w.len(), left);
        assert!(w.take(&key.to_string()).is_empty(), "a wake is one-shot");
    }

    #[test]
    fn forget_removes_the_request_from_every_key() {
        let w = Waiters::<&str>::default();
        w.wait("d", &request("ns", "a"));
        w.wait("e", &request("ns", "a"));
        w.wait("e", &request("ns", "b"));
        w.forget(&request("ns", "a"));
        assert_eq!(w.len(), 1);
        assert!(w.take(&"d").is_empty());
        assert_eq!(w.take(&"e").len(), 1);
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn changes_wake_the_waiting_requests_once() {
        let w = Waiters::<&str>::default();
        w.wait("d", &request("ns", "a"));
        w.wait("e", &request("ns", "b"));
        let woken: Vec<_> = w
            .woken_by(futures::stream::iter(["d", "d", "x", "e"]))
            .map(|r| r.name)
            .collect()
            .await;
        assert_eq!(woken, ["a", "b"]);
        assert!(w.is_empty());
    }
}
