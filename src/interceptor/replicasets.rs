//! A watch cache of the owners of every ReplicaSet, for the Deployment and HPA interceptors' walk
//! from a pod to its Deployment (pod → ReplicaSet → Deployment) without a GET of the ReplicaSet at
//! each look: one for the process ([`ReplicaSets::shared`]), whichever interceptor starts first.
//! It watches metadata only (`PartialObjectMeta`) and keeps of each ReplicaSet its owner
//! references: a ReplicaSet's spec and status, its labels and annotations are never read.
//!
//! A cache can only lag behind the cluster: a ReplicaSet it does not hold (not listed yet, or
//! created a moment ago) is read live by the caller, and so is every ReplicaSet while the cache
//! has not listed, or when kube-apiserver refuses to list and watch ReplicaSets (one line in the
//! log, as the DaemonSet cache does; the watch is asked again after
//! [`REFUSAL_RECHECK`](evictord_interceptor::pods::REFUSAL_RECHECK), since a refusal can pass).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::interceptor::watch::drive_unless_forbidden;
use evictord_interceptor::pods::REFUSAL_RECHECK;

/// The cached ReplicaSets (owner references only; cheap to clone: clones share the cache).
#[derive(Clone)]
pub struct ReplicaSets {
    store: Store<PartialObjectMeta<ReplicaSet>>,
    denied: Arc<AtomicBool>,
}

impl ReplicaSets {
    /// Starts the watch with `client` (spawned on the current runtime, until `shutdown`).
    pub fn start(client: &Client, shutdown: &CancellationToken) -> Self {
        let (store, writer) = reflector::store();
        // `Api<PartialObjectMeta<_>>` lists and watches metadata only.
        let stream = watcher(
            Api::<PartialObjectMeta<ReplicaSet>>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .modify(trim)
        .reflect(writer);
        let denied = Arc::new(AtomicBool::new(false));
        let (flag, unflag) = (denied.clone(), denied.clone());
        tokio::spawn(drive_unless_forbidden(
            stream,
            "ReplicaSet",
            shutdown.clone(),
            move || {
                flag.store(true, Ordering::Release);
                info!(
                    "kube-apiserver refused the watch of ReplicaSets: the interceptors read each \
                     ReplicaSet with a GET instead of a watch cache, and ask again in \
                     {REFUSAL_RECHECK:?}"
                );
            },
            move || {
                unflag.store(false, Ordering::Release);
                info!("the watch of ReplicaSets runs again: ReplicaSets are read from its cache");
            },
        ));
        Self { store, denied }
    }

    /// The process's one watch, started with `client` until `shutdown` by the first caller (the
    /// interceptors share one client); a caller after that watch's shutdown starts another.
    pub fn shared(client: &Client, shutdown: &CancellationToken) -> Self {
        /// The running watch and its shutdown.
        static SHARED: Mutex<Option<(ReplicaSets, CancellationToken)>> = Mutex::new(None);
        // Every change is one assignment: the value is whole whatever a panicking holder did.
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((cache, _)) = shared.as_ref().filter(|(_, stop)| !stop.is_cancelled()) {
            return cache.clone();
        }
        let cache = Self::start(client, shutdown);
        *shared = Some((cache.clone(), shutdown.clone()));
        cache
    }

    /// The cached ReplicaSet `namespace/name` (owner references only): `Some(None)` when the
    /// cache does not hold it, `None` until the first list is in or when ReplicaSets cannot be
    /// watched.
    pub fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Option<Arc<PartialObjectMeta<ReplicaSet>>>> {
        let listed = matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())));
        let usable = listed && !self.denied.load(Ordering::Acquire);
        usable.then(|| self.store.get(&ObjectRef::new(name).within(namespace)))
    }
}

/// The owner references of ReplicaSet `namespace/name`: from `cache` when it holds it, else
/// read live with `client` (the cache absent, not listed yet, refused, or without it); `None`
/// when the ReplicaSet is gone.
pub async fn owners_of(
    cache: Option<&ReplicaSets>,
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Vec<OwnerReference>>, kube::Error> {
    if let Some(rs) = cache.and_then(|c| c.get(namespace, name)).flatten() {
        return Ok(Some(
            rs.metadata.owner_references.clone().unwrap_or_default(),
        ));
    }
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    Ok(sets
        .get_opt(name)
        .await?
        .map(|rs| rs.metadata.owner_references.unwrap_or_default()))
}

/// What the cache keeps of a ReplicaSet: its name, namespace and owner references.
fn trim(rs: &mut PartialObjectMeta<ReplicaSet>) {
    rs.managed_fields_mut().clear();
    rs.annotations_mut().clear();
    rs.labels_mut().clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    #[test]
    fn trim_keeps_the_owners_only() {
        let mut rs = PartialObjectMeta::<ReplicaSet> {
            types: None,
            metadata: ObjectMeta {
                name: Some("web-1".into()),
                namespace: Some("ns".into()),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                annotations: Some([("a".to_string(), "b".repeat(100))].into()),
                owner_references: Some(vec![OwnerReference {
                    kind: "Deployment".into(),
                    name: "web".into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            _phantom: std::marker::PhantomData,
        };
        trim(&mut rs);
        assert!(rs.labels().is_empty() && rs.annotations().is_empty());
        assert_eq!(rs.owner_references()[0].name, "web");
        assert_eq!(rs.name_any(), "web-1");
    }
}
