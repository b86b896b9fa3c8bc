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

    /// The requests of `waiters` to look at again, as their Deployments change.
    pub fn wakes(
        &self,
        waiters: &Waiters<DeploymentKey>,
    ) -> impl Stream<Item = kube::runtime::reflector::ObjectRef<crate::api::EvictionRequest>>
    + Send
    + 'static
    + use<> {
        waiters.woken_by(self.subscribe().map(|d| key_of(&d)))
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

/// The key of Deployment `d`.
pub fn key_of(d: &Deployment) -> DeploymentKey {
    (d.namespace().unwrap_or_default(), d.name_any())
}
