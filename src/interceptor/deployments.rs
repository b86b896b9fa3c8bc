//! One watch of Deployments, shared by the Deployment interceptor's settler (its controller's
//! trigger and store) and by the Deployment and HPA interceptors' wakes: a request that waits for
//! a surge to become available is looked at again when its Deployment changes (the controller
//! writes the new pod's readiness into the Deployment's status), not at the interceptor's next
//! poll. The pool benchmark measured that poll in every drain through `kubectl drain`, which
//! waits for the slowest pod of a node before it moves on.
//!
//! Every subscriber must be polled: the watch waits for the slowest one ([`BUFFER`] changes
//! behind at most). Subscribe before [`DeploymentWatch::start`]; a subscriber sees the changes
//! from the start on, and every Deployment once when the first list is in.

use std::collections::HashMap;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::reflector::{ReflectHandle, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::interceptor::Waiters;
use crate::interceptor::watch::drive;

/// How many changes a subscriber may be behind before the watch waits for it.
pub const BUFFER: usize = 1024;

/// The key a request waiting on a Deployment is registered under: its namespace and name.
pub type DeploymentKey = (String, String);

/// The watch, before it starts.
pub struct DeploymentWatch {
    writer: Writer<Deployment>,
}

impl Default for DeploymentWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl DeploymentWatch {
    /// A watch with no subscriber yet.
    pub fn new() -> Self {
        Self {
            writer: Writer::new_shared(BUFFER, ()),
        }
    }

    /// The cached Deployments.
    pub fn store(&self) -> Store<Deployment> {
        self.writer.as_reader()
    }

    /// A stream of the Deployments that change (created or modified); it must be polled.
    pub fn subscribe(&self) -> ReflectHandle<Deployment> {
        self.writer
            .subscribe()
            .expect("a shared writer always has subscribers")
    }

    /// The requests of `waiters` to look at again, as their Deployments change what
    /// `fingerprint` reads: the fields of a Deployment the waiters' decisions read, so that a
    /// change of anything else (its resourceVersion, managed fields, a condition's timestamps)
    /// wakes nobody.
    pub fn wakes<F, P>(
        &self,
        waiters: &Waiters<DeploymentKey>,
        fingerprint: P,
    ) -> impl Stream<Item = kube::runtime::reflector::ObjectRef<crate::api::EvictionRequest>>
    + Send
    + 'static
    + use<F, P>
    where
        F: PartialEq + Send + 'static,
        P: Fn(&Deployment) -> F + Send + 'static,
    {
        let mut seen = Fingerprints::default();
        let changed = self.subscribe().filter_map(move |d| {
            let key = key_of(&d);
            let changed = seen.changed(&key, fingerprint(&d));
            std::future::ready(changed.then_some(key))
        });
        waiters.woken_by(changed)
    }

    /// Starts watching every Deployment with `client` (spawned on the current runtime, until
    /// `shutdown`).
    pub fn start(self, client: &Client, shutdown: CancellationToken) {
        let api: Api<Deployment> = Api::all(client.clone());
        let stream = watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .modify(|d: &mut Deployment| d.managed_fields_mut().clear())
            .reflect_shared(self.writer);
        tokio::spawn(drive(stream, "Deployment", shutdown, || {}));
    }
}

/// How many Deployments' fingerprints are remembered before all are forgotten (a deleted
/// Deployment's is never removed: the subscription sees no deletion). Forgetting costs one wake
/// of the requests waiting on each Deployment at its next change, no more.
const FINGERPRINTS_KEPT: usize = 65_536;

/// The last fingerprint seen of each Deployment.
struct Fingerprints<F> {
    seen: HashMap<DeploymentKey, F>,
}

impl<F> Default for Fingerprints<F> {
    fn default() -> Self {
        Self {
            seen: HashMap::new(),
        }
    }
}

impl<F: PartialEq> Fingerprints<F> {
    /// Whether Deployment `key` changed to `now` since it was last seen (a first sight is a
    /// change); remembers `now`.
    fn changed(&mut self, key: &DeploymentKey, now: F) -> bool {
        match self.seen.get_mut(key) {
            Some(last) if *last == now => false,
            Some(last) => {
                *last = now;
                true
            }
            None => {
                if self.seen.len() >= FINGERPRINTS_KEPT {
                    self.seen.clear();
                }
                self.seen.insert(key.clone(), now);
                true
            }
        }
    }
}

/// The key of Deployment `d`.
pub fn key_of(d: &Deployment) -> DeploymentKey {
    (d.namespace().unwrap_or_default(), d.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> DeploymentKey {
        ("ns".into(), name.into())
    }

    /// (Deployment, fingerprint) in order, and whether each is a change.
    #[test]
    fn only_a_changed_fingerprint_is_a_change() {
        let mut f = Fingerprints::default();
        let seen: Vec<bool> = [("d", 1), ("d", 1), ("e", 1), ("d", 2), ("d", 2), ("d", 1)]
            .into_iter()
            .map(|(name, print)| f.changed(&key(name), print))
            .collect();
        assert_eq!(seen, [true, false, true, true, false, true]);
    }
}
