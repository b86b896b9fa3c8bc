//! The Deployment interceptor's own writes of a Deployment, for the looks that read it from the
//! watch cache: one look at a time per Deployment decides and writes ([`Writes::lock`]), and a
//! look that comes before the cache has caught up with the previous look's write decides on that
//! write's answer instead ([`Writes::fresher`]). Without them, the requests of one Deployment's
//! pods, looked at together (a drain creates them together, a settled surge wakes them
//! together), all decide on the same cached version, all join the surge, and all but one patch
//! fail their resourceVersion test and read the Deployment live.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use tokio::sync::OwnedMutexGuard;

use crate::interceptor::deployments::DeploymentKey;

/// How many Deployments are remembered before those no look holds are forgotten.
const KEPT: usize = 1024;

/// The writes, by Deployment.
#[derive(Default)]
pub struct Writes {
    by_key: Mutex<HashMap<DeploymentKey, Slot>>,
}

#[derive(Default)]
struct Slot {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// The resourceVersion the last write replaced, and the Deployment it wrote.
    last: Option<(String, Arc<Deployment>)>,
}

impl Writes {
    fn slots(&self) -> MutexGuard<'_, HashMap<DeploymentKey, Slot>> {
        // Every change is one call: the map is consistent whatever a panicking holder did.
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no other look decides on Deployment `key`; the guard lets the next one in.
    pub async fn lock(&self, key: &DeploymentKey) -> OwnedMutexGuard<()> {
        let lock = {
            let mut slots = self.slots();
            if slots.len() >= KEPT {
                slots.retain(|_, s| Arc::strong_count(&s.lock) > 1);
            }
            slots.entry(key.clone()).or_default().lock.clone()
        };
        lock.lock_owned().await
    }

    /// The version of Deployment `key` to decide on, given the cached one: the interceptor's own
    /// last write of it while the cache still holds the version that write replaced, else the
    /// cached one (the cache has caught up, or someone else wrote since; the write is forgotten).
    pub fn fresher(&self, key: &DeploymentKey, cached: Arc<Deployment>) -> Arc<Deployment> {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(key) else {
            return cached;
        };
        match &slot.last {
            Some((replaced, written)) if cached.resource_version().as_ref() == Some(replaced) => {
                written.clone()
            }
            _ => {
                slot.last = None;
                cached
            }
        }
    }

    /// Forgets the interceptor's last write of Deployment `key` (a patch made against it
    /// conflicted), and says which version that write replaced, if it was remembered.
    pub fn forget(&self, key: &DeploymentKey) -> Option<String> {
        let mut slots = self.slots();
        let (replaced, _) = slots.get_mut(key)?.last.take()?;
        Some(replaced)
    }

    /// The interceptor wrote Deployment `key`, replacing `replaced` with `written`.
    pub fn wrote(&self, key: &DeploymentKey, replaced: &Deployment, written: Deployment) {
        let Some(version) = replaced.resource_version() else {
            return;
        };
        self.slots().entry(key.clone()).or_default().last = Some((version, Arc::new(written)));
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn version(rv: &str) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.resource_version = Some(rv.into());
        d
    }

    fn key() -> DeploymentKey {
        ("ns".into(), "web".into())
    }

    /// (the write: replaced → written, if any), the cached version, the version decided on.
    #[rstest]
    #[case::no_write(None, "1", "1")]
    #[case::cache_behind(Some(("1", "2")), "1", "2")]
    #[case::cache_caught_up(Some(("1", "2")), "2", "2")]
    #[case::someone_else_wrote_since(Some(("1", "2")), "3", "3")]
    fn fresher_rows(
        #[case] write: Option<(&str, &str)>,
        #[case] cached: &str,
        #[case] decided: &str,
    ) {
        let w = Writes::default();
        if let Some((replaced, written)) = write {
            w.wrote(&key(), &version(replaced), version(written));
        }
        let d = w.fresher(&key(), Arc::new(version(cached)));
        assert_eq!(d.resource_version().as_deref(), Some(decided));
    }

    #[test]
    fn a_write_is_forgotten_once_the_cache_moved_on() {
        let w = Writes::default();
        w.wrote(&key(), &version("1"), version("2"));
        w.fresher(&key(), Arc::new(version("2")));
        // Forgotten: a version older still is decided on (its patch's resourceVersion test fails).
        let d = w.fresher(&key(), Arc::new(version("1")));
        assert_eq!(d.resource_version().as_deref(), Some("1"));
    }

    #[test]
    fn a_forgotten_write_says_what_it_replaced() {
        let w = Writes::default();
        assert_eq!(w.forget(&key()), None);
        w.wrote(&key(), &version("1"), version("2"));
        assert_eq!(w.forget(&key()).as_deref(), Some("1"));
        let d = w.fresher(&key(), Arc::new(version("1")));
        assert_eq!(d.resource_version().as_deref(), Some("1"), "forgotten");
    }

    #[tokio::test]
    async fn one_look_at_a_time_per_deployment() {
        let w = Writes::default();
        let held = w.lock(&key()).await;
        let other: DeploymentKey = ("ns".into(), "other".into());
        let _free = w.lock(&other).await;
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), w.lock(&key()))
                .await
                .is_err()
        );
        drop(held);
        let _next = w.lock(&key()).await;
    }
}
