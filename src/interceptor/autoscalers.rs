//! One watch cache of HorizontalPodAutoscalers, shared by the Deployment and HPA interceptors:
//! which autoscaler scales a workload is read from it instead of a LIST of the namespace's
//! autoscalers on every poll of every active request (the pool benchmark counted 5602 such LISTs
//! in one drain, kube-apiserver's costliest call in it). Until the cache has its first list (or
//! when it cannot have one, e.g. a role without `watch`), [`Autoscalers::in_namespace`] says so
//! and the interceptors LIST as before. A cached autoscaler can be a moment old: every write
//! built on one tests its resourceVersion, and a conflict is retried on a fresh read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::hpa::discovery::autoscaler_resource;
use super::watch::drive;

/// The shared cache (cheap to clone).
#[derive(Clone)]
pub struct Autoscalers {
    cache: Option<Cache>,
}

#[derive(Clone)]
struct Cache {
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
    resource: ApiResource,
}

impl Autoscalers {
    /// No cache: every question is answered by a LIST.
    pub fn none() -> Self {
        Self { cache: None }
    }

    /// Starts watching every HorizontalPodAutoscaler of `autoscaling/{version}` (spawned on the
    /// current runtime, until `shutdown`); `None`: the server serves no autoscaling API.
    pub fn start(client: &Client, version: Option<&str>, shutdown: CancellationToken) -> Self {
        let Some(version) = version else {
            return Self::none();
        };
        let resource = autoscaler_resource(version);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let synced = Arc::new(AtomicBool::new(false));
        let flag = synced.clone();
        let stream = watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .modify(|h: &mut DynamicObject| h.managed_fields_mut().clear())
            .reflect(writer);
        tokio::spawn(drive(
            stream,
            "HorizontalPodAutoscaler",
            shutdown,
            move || flag.store(true, Ordering::Release),
        ));
        Self {
            cache: Some(Cache {
                store,
                synced,
                resource,
            }),
        }
    }

    /// The cached autoscalers of namespace `ns`; `None` while the cache has not had its first
    /// list (or there is none): read them from the API instead.
    pub fn in_namespace(&self, ns: &str) -> Option<Vec<Arc<DynamicObject>>> {
        let cache = self.cache.as_ref()?;
        if !cache.synced.load(Ordering::Acquire) {
            return None;
        }
        Some(
            cache
                .store
                .state()
                .into_iter()
                .filter(|h| h.namespace().as_deref() == Some(ns))
                .collect(),
        )
    }

    /// The resource the cache holds, if any.
    pub fn resource(&self) -> Option<&ApiResource> {
        self.cache.as_ref().map(|c| &c.resource)
    }
}

/// The name of the autoscaler among `autoscalers` whose `spec.scaleTargetRef` is the `kind`
/// named `name` (the first, by name, when several are: the HPA interceptor tells that case
/// apart; here any one says a surge would fight an autoscaler).
pub fn scaling<'a>(
    autoscalers: impl IntoIterator<Item = &'a DynamicObject>,
    kind: &str,
    name: &str,
) -> Option<String> {
    let mut found: Vec<String> = autoscalers
        .into_iter()
        .filter(|h| {
            let target = &h.data["spec"]["scaleTargetRef"];
            target["kind"].as_str() == Some(kind) && target["name"].as_str() == Some(name)
        })
        .map(|h| h.name_any())
        .collect();
    found.sort();
    found.into_iter().next()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hpa(name: &str, kind: &str, target: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
                     "minReplicas": 1, "maxReplicas": 3},
        }))
        .unwrap()
    }

    #[rstest::rstest]
    #[case::none(&[], None)]
    #[case::other_workload(&[("h", "Deployment", "other")], None)]
    #[case::other_kind(&[("h", "StatefulSet", "web")], None)]
    #[case::one(&[("h", "Deployment", "web")], Some("h"))]
    #[case::several_first_by_name(&[("z", "Deployment", "web"), ("b", "Deployment", "web")], Some("b"))]
    fn scaling_rows(#[case] hpas: &[(&str, &str, &str)], #[case] expected: Option<&str>) {
        let objects: Vec<DynamicObject> = hpas.iter().map(|(n, k, t)| hpa(n, k, t)).collect();
        assert_eq!(scaling(&objects, "Deployment", "web").as_deref(), expected);
    }

    #[test]
    fn no_cache_asks_for_a_list() {
        assert!(Autoscalers::none().in_namespace("ns").is_none());
        assert!(Autoscalers::none().resource().is_none());
    }
}
