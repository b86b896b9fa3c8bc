//! A controller's own writes that its watch cache has not shown yet.
//!
//! A reconcile reads the object from the shared cache, which follows the API server through a
//! watch. Right after the controller writes an object, another trigger (a pod event, a requeue)
//! can start a reconcile before the watch has delivered that write: deciding on the older copy
//! would compute a write the server refuses (the guarded patch's `resourceVersion` test fails),
//! or, worse for a drain of thousands of pods, a chain of refused writes retried until the watch
//! catches up. The controller remembers, per object, the versions its own writes replaced; a
//! cached copy at one of those versions is known to be behind, and the reconcile waits for the
//! watch event of the write instead (it triggers a reconcile of its own).

use std::collections::HashMap;
use std::sync::Mutex;

/// The version a creation replaced: no object at all (an object absent from the cache is at it).
const ABSENT: &str = "";

/// Whether a cached copy at `cached` is older than a write of this controller: its version is
/// one that this controller's writes replaced. A copy at any other version (the write itself,
/// or someone else's later write) is current enough to decide on. An object absent from the
/// cache (`None`) is behind only a creation of ours ([`OwnWrites::record_created`]).
pub fn cache_behind(cached: Option<&str>, superseded: &[String]) -> bool {
    let cached = cached.unwrap_or(ABSENT);
    superseded.iter().any(|s| s == cached)
}

/// Per object key (`namespace/name`), the versions this controller's writes replaced since the
/// cache last caught up.
#[derive(Debug, Default)]
pub struct OwnWrites {
    superseded: Mutex<HashMap<String, Vec<String>>>,
}

impl OwnWrites {
    /// Records that a write of this controller replaced version `from` of `key`.
    pub fn record(&self, key: &str, from: Option<&str>) {
        let Some(from) = from else {
            return;
        };
        let mut map = self.superseded.lock().unwrap_or_else(|e| e.into_inner());
        let versions = map.entry(key.to_string()).or_default();
        if !versions.iter().any(|v| v == from) {
            versions.push(from.to_string());
        }
    }

    /// Forgets that a write replaced version `from` of `key`: recorded before the write was sent
    /// (so that a copy at `from` is behind while the write is in flight), the write then failed.
    pub fn forget(&self, key: &str, from: Option<&str>) {
        let Some(from) = from else {
            return;
        };
        let mut map = self.superseded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(versions) = map.get_mut(key) {
            versions.retain(|v| v != from);
            if versions.is_empty() {
                map.remove(key);
            }
        }
    }

    /// Records that this controller created `key`: until the cache shows it, its absence is
    /// behind.
    pub fn record_created(&self, key: &str) {
        let mut map = self.superseded.lock().unwrap_or_else(|e| e.into_inner());
        let versions = map.entry(key.to_string()).or_default();
        if !versions.iter().any(|v| v == ABSENT) {
            versions.push(ABSENT.to_string());
        }
    }

    /// Whether the cached copy of `key` at `cached` (`None`: absent from the cache) predates one
    /// of this controller's writes.
    /// When it does not, the record of `key` is dropped: the cache has caught up.
    pub fn behind(&self, key: &str, cached: Option<&str>) -> bool {
        let mut map = self.superseded.lock().unwrap_or_else(|e| e.into_inner());
        let behind = map
            .get(key)
            .is_some_and(|versions| cache_behind(cached, versions));
        if !behind {
            map.remove(key);
        }
        behind
    }

    /// Drops the records of objects `exists` says are gone.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        let mut map = self.superseded.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|key, _| exists(key));
    }

    /// Objects with a write the cache has not shown yet.
    pub fn len(&self) -> usize {
        self.superseded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// True when the cache has shown every write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How long an object this controller created counts as created while its cache does not show
/// it. The watch shows a creation within a second or so; past this the object is taken as gone
/// (deleted before the watch showed it) and may be created again. The ReplicaSet controller's
/// "expectations" of the pods it created expire the same way (after 5 minutes).
pub const CREATION_SHOWN_WITHIN: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// Whether an object this controller created at `created` (if it did), absent from its cache,
/// still counts as created at `now`: a creation less than [`CREATION_SHOWN_WITHIN`] old.
pub fn creation_pending(created: Option<jiff::Timestamp>, now: jiff::Timestamp) -> bool {
    created.is_some_and(|at| now.duration_since(at) < CREATION_SHOWN_WITHIN)
}

/// Keys a controller remembers for a while, each with the moment it first did (the requests whose
/// eviction it told; the requests whose pod it saw gone; the requests it created).
#[derive(Debug, Default)]
pub struct Remembered {
    keys: Mutex<HashMap<String, jiff::Timestamp>>,
}

impl Remembered {
    /// Remembers `key` from `at`, unless it is remembered already (from earlier).
    pub fn insert(&self, key: &str, at: jiff::Timestamp) {
        if key.is_empty() {
            return;
        }
        self.lock().entry(key.to_string()).or_insert(at);
    }

    /// Whether `key` is remembered.
    pub fn contains(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    /// Since when `key` is remembered.
    pub fn since(&self, key: &str) -> Option<jiff::Timestamp> {
        self.lock().get(key).copied()
    }

    /// Forgets the keys `keep` says are gone.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    /// Forgets the keys `keep` says are done with, knowing since when each is remembered.
    pub fn retain_since(&self, keep: impl Fn(&str, jiff::Timestamp) -> bool) {
        self.lock().retain(|k, at| keep(k, *at));
    }

    /// Forgets `key`.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, jiff::Timestamp>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::no_write_of_ours(Some("7"), &[], false)]
    #[case::cache_at_the_version_we_replaced(Some("7"), &["7"], true)]
    #[case::cache_at_an_intermediate_version_we_replaced(Some("8"), &["7", "8"], true)]
    #[case::cache_shows_our_write(Some("9"), &["7", "8"], false)]
    #[case::cache_shows_a_later_write_of_someone_else(Some("12"), &["7"], false)]
    #[case::cached_copy_without_version(None, &["7"], false)]
    #[case::absent_after_our_creation(None, &[""], true)]
    #[case::shown_after_our_creation(Some("1"), &[""], false)]
    #[case::absent_after_our_deletion(None, &["7"], false)]
    #[case::still_there_after_our_deletion(Some("7"), &["7"], true)]
    fn cache_behind_rows(
        #[case] cached: Option<&str>,
        #[case] superseded: &[&str],
        #[case] expected: bool,
    ) {
        let superseded: Vec<String> = superseded.iter().map(|s| s.to_string()).collect();
        assert_eq!(cache_behind(cached, &superseded), expected);
    }

    #[rstest]
    #[case::not_created_here(None, 100, false)]
    #[case::just_created(Some(100), 100, true)]
    #[case::created_a_moment_ago(Some(100), 129, true)]
    #[case::watch_never_showed_it(Some(100), 130, false)]
    #[case::long_ago(Some(100), 1000, false)]
    fn creation_pending_rows(
        #[case] created: Option<i64>,
        #[case] now: i64,
        #[case] expected: bool,
    ) {
        let at = |s: i64| jiff::Timestamp::from_second(s).unwrap();
        assert_eq!(creation_pending(created.map(at), at(now)), expected);
    }

    #[test]
    fn a_remembered_key_is_forgotten_when_done_with() {
        let r = Remembered::default();
        let at = |s: i64| jiff::Timestamp::from_second(s).unwrap();
        r.insert("ns/a", at(100));
        r.insert("ns/b", at(110));
        r.insert("ns/c", at(120));
        r.retain_since(|_, since| creation_pending(Some(since), at(135)));
        assert!(!r.contains("ns/a") && r.contains("ns/b") && r.contains("ns/c"));
        r.forget("ns/b");
        assert!(!r.contains("ns/b") && r.contains("ns/c"));
    }

    #[test]
    fn a_record_lasts_until_the_cache_catches_up() {
        let w = OwnWrites::default();
        w.record("ns/a", Some("7"));
        w.record("ns/a", Some("8"));
        assert!(w.behind("ns/a", Some("7")));
        assert!(w.behind("ns/a", Some("8")));
        assert_eq!(w.len(), 1);
        assert!(!w.behind("ns/a", Some("9")));
        assert!(w.is_empty());
        // Caught up: the old versions are no longer remembered.
        assert!(!w.behind("ns/a", Some("7")));
    }

    #[test]
    fn a_failed_write_is_forgotten() {
        let w = OwnWrites::default();
        w.record("nm-a", Some("7"));
        w.record("nm-a", Some("8"));
        w.forget("nm-a", Some("8"));
        assert!(!w.behind("nm-a", Some("8")));
        // The other write is still remembered until then.
        w.record("nm-a", Some("7"));
        assert!(w.behind("nm-a", Some("7")));
        w.forget("nm-a", Some("7"));
        assert!(w.is_empty());
    }

    #[test]
    fn a_creation_is_behind_until_the_cache_shows_the_object() {
        let w = OwnWrites::default();
        w.record_created("nm-a");
        assert!(w.behind("nm-a", None));
        assert!(!w.behind("nm-a", Some("5")));
        assert!(w.is_empty());
    }

    #[test]
    fn records_of_deleted_objects_are_dropped() {
        let w = OwnWrites::default();
        w.record("ns/a", Some("7"));
        w.record("ns/b", Some("3"));
        w.record("ns/c", None);
        w.retain(|k| k == "ns/b");
        assert!(!w.behind("ns/a", Some("7")));
        assert!(w.behind("ns/b", Some("3")));
    }
}
