//! The names of pods the pod cache saw deleted, so that a lookup of such a name can be answered
//! "missing" without asking kube-apiserver again.
//!
//! `kubectl drain` retries its Eviction API call every 5 s while the bridge answers 429; the
//! last retry comes after evictord has evicted the pod, and its admission review looks the pod
//! up by name. The cache no longer has it, and a cache miss is normally confirmed with a live
//! GET (the cache may simply be behind a pod just created) — answered 404 once per pod kubectl
//! drained, 0.45 requests per pod of the pool benchmark's bridge mode.
//!
//! A miss is taken as final only when the cache saw a pod of that name deleted and its name was
//! generated from its `generateName` (a ReplicaSet's, a DaemonSet's or a Job's pod): no
//! successor takes that name again but by a random collision. A pod whose name is chosen (a
//! StatefulSet's, a bare pod) can come back under the same name at any moment — before the cache
//! shows it, a call by name would reach the successor — so its miss is still confirmed live.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::watcher;

use super::CachedPod;

/// How long a deleted pod's name is remembered: well past `kubectl drain`'s 5 s retries.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(300);

/// Names remembered at most (a mass deletion beyond it forgets the oldest ones first; a
/// forgotten name is confirmed live, as before).
const MAX_TOMBSTONES: usize = 50_000;

/// What the cache last saw of a deleted pod's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tombstone {
    /// The pod's name was generated from its `generateName`.
    pub generated_name: bool,
    /// When the cache saw it deleted.
    pub at: Instant,
}

/// Whether a cache miss of a name may be answered "missing" without a live read: the cache saw
/// a pod of that name deleted (and none since) within [`TOMBSTONE_TTL`], and its name was
/// generated.
pub fn miss_is_final(tombstone: Option<&Tombstone>, now: Instant) -> bool {
    tombstone.is_some_and(|t| t.generated_name && now.duration_since(t.at) < TOMBSTONE_TTL)
}

/// The deleted pods' names, by namespace and name.
#[derive(Debug, Default)]
pub struct Tombstones {
    by_name: Mutex<HashMap<(String, String), Tombstone>>,
}

impl Tombstones {
    /// The cache saw `pod` deleted.
    pub fn buried(&self, pod: &CachedPod, now: Instant) {
        let mut map = self.lock();
        if map.len() >= MAX_TOMBSTONES {
            map.retain(|_, t| now.duration_since(t.at) < TOMBSTONE_TTL);
        }
        if map.len() >= MAX_TOMBSTONES {
            let mut ages: Vec<Instant> = map.values().map(|t| t.at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            map.retain(|_, t| t.at > cut);
        }
        map.insert(
            key(pod.namespace(), pod.name()),
            Tombstone {
                generated_name: pod.name_generated,
                at: now,
            },
        );
    }

    /// The cache saw a pod of that name (created, or listed again): its name is taken.
    pub fn revived(&self, pod: &CachedPod) {
        let mut map = self.lock();
        if !map.is_empty() {
            map.remove(&key(pod.namespace(), pod.name()));
        }
    }

    /// Follows the pod watch: a deleted pod's name is buried, a pod seen (created, changed or
    /// listed again) takes its name back.
    pub fn saw(&self, event: &watcher::Event<CachedPod>) {
        match event {
            watcher::Event::Delete(pod) => self.buried(pod, Instant::now()),
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => self.revived(pod),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    /// Whether a cache miss of `namespace/name` is final ([`miss_is_final`]).
    pub fn miss_is_final(&self, namespace: &str, name: &str, now: Instant) -> bool {
        miss_is_final(self.lock().get(&key(namespace, name)), now)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Tombstone>> {
        self.by_name.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_string(), name.to_string())
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    // seen deleted (generated name?, seconds ago), final
    #[case::never_seen_deleted_is_confirmed_live(None, false)]
    #[case::generated_name_seen_deleted_is_final(Some((true, 5)), true)]
    #[case::chosen_name_may_come_back_and_is_confirmed_live(Some((false, 5)), false)]
    #[case::generated_name_seen_deleted_long_ago_is_confirmed_live(Some((true, 301)), false)]
    fn a_miss_is_final_only_for_a_generated_name_seen_deleted(
        #[case] seen: Option<(bool, u64)>,
        #[case] last: bool,
    ) {
        let now = Instant::now() + Duration::from_secs(1000);
        let tombstone = seen.map(|(generated_name, ago)| Tombstone {
            generated_name,
            at: now - Duration::from_secs(ago),
        });
        assert_eq!(miss_is_final(tombstone.as_ref(), now), last);
    }

    fn pod(name: &str, generate_name: Option<&str>) -> CachedPod {
        let mut p = CachedPod::default();
        p.metadata.namespace = Some("ns".into());
        p.metadata.name = Some(name.into());
        p.metadata.generate_name = generate_name.map(Into::into);
        p.trim()
    }

    #[test]
    fn a_name_seen_again_is_taken_and_another_namespace_is_another_name() {
        let t = Tombstones::default();
        let now = Instant::now();
        let web = pod("web-7d9f-x2k4p", Some("web-7d9f-"));
        t.buried(&web, now);
        assert!(t.miss_is_final("ns", "web-7d9f-x2k4p", now));
        assert!(!t.miss_is_final("other", "web-7d9f-x2k4p", now));
        t.revived(&web);
        assert!(!t.miss_is_final("ns", "web-7d9f-x2k4p", now));
        t.buried(&pod("db-0", None), now);
        assert!(!t.miss_is_final("ns", "db-0", now));
    }

    #[test]
    fn past_the_limit_the_oldest_names_are_forgotten_first() {
        let t = Tombstones::default();
        let start = Instant::now();
        for i in 0..MAX_TOMBSTONES {
            let at = start + Duration::from_millis(i as u64);
            t.buried(&pod(&format!("web-{i}"), Some("web-")), at);
        }
        let now = start + Duration::from_millis(MAX_TOMBSTONES as u64);
        t.buried(&pod("web-last", Some("web-")), now);
        assert!(t.lock().len() <= MAX_TOMBSTONES / 2 + 1);
        assert!(t.miss_is_final("ns", "web-last", now));
        assert!(t.miss_is_final("ns", &format!("web-{}", MAX_TOMBSTONES - 1), now));
        assert!(!t.miss_is_final("ns", "web-0", now));
    }
}
