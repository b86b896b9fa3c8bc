//! The DaemonSet interceptor's watch caches, as any SDK user would keep them: every
//! NodeMaintenance, every node (its taints only) and every DaemonSet (its pod template's
//! tolerations only). A look at a request reads them instead of listing every maintenance and
//! getting the DaemonSet and the node each time.
//!
//! A cache can only lag behind the cluster, and what it lags on is what the node maintenance
//! controller writes just before it creates a request (the drain targets in a maintenance's
//! status, the taint on the node): the interceptor reads live what the cached facts miss (a
//! maintenance targeting the pod, the DaemonSet, the taint), and everything while a cache has not
//! listed yet. A service account that may not list and watch DaemonSets (a chart granting only
//! `get`) is told so before the watch starts and reads each DaemonSet live, as before, with one
//! line in the log and no refused request; it is asked again every
//! [`REFUSAL_RECHECK`](evictord_interceptor::pods::REFUSAL_RECHECK), as a watch refused later is,
//! since a refusal can pass (a kube-apiserver that has just restarted refuses for a moment).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::FutureExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Node, NodeSpec, PodSpec};
use kube::api::PostParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::api::NodeMaintenance;
use crate::interceptor::watch::{drive, drive_unless_forbidden};
use evictord_interceptor::pods::REFUSAL_RECHECK;

/// The three caches.
#[derive(Clone)]
pub struct Caches {
    maintenances: Store<NodeMaintenance>,
    nodes: Store<Node>,
    daemonsets: Store<DaemonSet>,
    /// The DaemonSet watch gave up: the service account may not list or watch DaemonSets.
    daemonsets_denied: Arc<AtomicBool>,
}

impl Caches {
    /// Starts the three watches with `client` (spawned on the current runtime, until `shutdown`).
    pub fn start(client: &Client, shutdown: &CancellationToken) -> Self {
        let (maintenances, writer) = reflector::store();
        let stream = watcher(
            Api::<NodeMaintenance>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .modify(|m: &mut NodeMaintenance| m.managed_fields_mut().clear())
        .reflect(writer);
        tokio::spawn(drive(stream, "NodeMaintenance", shutdown.clone(), || {}));

        let (nodes, writer) = reflector::store();
        let stream = watcher(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .modify(trim_node)
        .reflect(writer);
        tokio::spawn(drive(stream, "Node", shutdown.clone(), || {}));

        let (daemonsets, writer) = reflector::store();
        let daemonsets_denied = Arc::new(AtomicBool::new(false));
        let stream = watcher(
            Api::<DaemonSet>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .modify(trim_daemonset)
        .reflect(writer);
        let (client, shutdown, denied) =
            (client.clone(), shutdown.clone(), daemonsets_denied.clone());
        let allowed = denied.clone();
        let deny = move || {
            denied.store(true, Ordering::Release);
            info!(
                "the service account may not list and watch DaemonSets: the daemonset.apps.k8s.io \
                 interceptor reads each DaemonSet with a GET instead of a watch cache, and asks \
                 again in {REFUSAL_RECHECK:?}"
            );
        };
        let allow = move || {
            allowed.store(false, Ordering::Release);
            info!("the watch of DaemonSets runs: DaemonSets are read from its cache");
        };
        tokio::spawn(async move {
            // Asked again after a refusal (a kube-apiserver that has just restarted refuses until
            // its authorization caches are in), with a review, not a refused LIST.
            let mut refused = false;
            while !may_watch_daemonsets(&client).await {
                if !refused {
                    deny();
                    refused = true;
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(REFUSAL_RECHECK) => {}
                }
            }
            if refused {
                // The store has not listed yet: it is read once it has.
                allow();
            }
            drive_unless_forbidden(stream, "DaemonSet", shutdown, deny, allow).await;
        });
        Self {
            maintenances,
            nodes,
            daemonsets,
            daemonsets_denied,
        }
    }

    /// Every cached NodeMaintenance; `None` until the first list is in.
    pub fn maintenances(&self) -> Option<Vec<Arc<NodeMaintenance>>> {
        ready(&self.maintenances).then(|| self.maintenances.state())
    }

    /// The cached node (taints only): `Some(None)` when the cache has no such node, `None`
    /// until the first list is in.
    pub fn node(&self, name: &str) -> Option<Option<Arc<Node>>> {
        ready(&self.nodes).then(|| self.nodes.get(&ObjectRef::new(name)))
    }

    /// The cached DaemonSet (tolerations only): `Some(None)` when the cache has no such
    /// DaemonSet, `None` until the first list is in or when DaemonSets cannot be watched.
    pub fn daemonset(&self, namespace: &str, name: &str) -> Option<Option<Arc<DaemonSet>>> {
        let usable = ready(&self.daemonsets) && !self.daemonsets_denied.load(Ordering::Acquire);
        usable.then(|| self.daemonsets.get(&ObjectRef::new(name).within(namespace)))
    }
}

/// The store has listed once.
fn ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    store.wait_until_ready().now_or_never().is_some()
}

/// What a node's decision reads: its name and taints.
fn trim_node(n: &mut Node) {
    n.metadata = kube::api::ObjectMeta {
        name: n.metadata.name.take(),
        resource_version: n.metadata.resource_version.take(),
        ..Default::default()
    };
    n.spec = Some(NodeSpec {
        taints: n.spec.take().and_then(|s| s.taints),
        ..Default::default()
    });
    n.status = None;
}

/// What a DaemonSet's decision and its events read: its identity and its pod template's
/// tolerations.
fn trim_daemonset(d: &mut DaemonSet) {
    d.metadata = kube::api::ObjectMeta {
        name: d.metadata.name.take(),
        namespace: d.metadata.namespace.take(),
        uid: d.metadata.uid.take(),
        resource_version: d.metadata.resource_version.take(),
        ..Default::default()
    };
    let tolerations = d.spec.template.spec.take().and_then(|s| s.tolerations);
    d.spec = Default::default();
    d.spec.template.spec = Some(PodSpec {
        tolerations,
        ..Default::default()
    });
    d.status = None;
}

/// Whether the service account may list and watch DaemonSets in every namespace (asked with a
/// SelfSubjectAccessReview, which every authenticated user may create, so that a chart granting
/// only `get` costs no refused request; an unanswered question reads as yes).
async fn may_watch_daemonsets(client: &Client) -> bool {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for verb in ["list", "watch"] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some("apps".into()),
                    resource: Some("daemonsets".into()),
                    verb: Some(verb.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &review).await {
            Ok(r) if !r.status.as_ref().is_some_and(|s| s.allowed) => return false,
            Ok(_) => {}
            Err(e) => debug!(error = %e, verb, "could not ask whether DaemonSets may be watched"),
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Taint, Toleration};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_trimmed_node_keeps_its_name_and_taints() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"a": "b"}, "resourceVersion": "7"},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"images": [{"names": ["x"]}]}
        }))
        .unwrap();
        trim_node(&mut n);
        assert_eq!(n.name_any(), "n1");
        assert_eq!(n.metadata.labels, None);
        assert_eq!(n.status, None);
        let taints = n.spec.unwrap().taints.unwrap();
        assert_eq!(
            taints,
            [Taint {
                key: "k".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]
        );
    }

    #[test]
    fn a_trimmed_daemonset_keeps_its_identity_and_tolerations() {
        let mut d: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "logs", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                         "annotations": {"a": "b"}},
            "spec": {
                "selector": {"matchLabels": {"app": "logs"}},
                "template": {
                    "metadata": {"labels": {"app": "logs"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}],
                             "tolerations": [{"operator": "Exists"}]}
                }
            },
            "status": {"currentNumberScheduled": 1, "desiredNumberScheduled": 1,
                       "numberMisscheduled": 0, "numberReady": 1}
        }))
        .unwrap();
        trim_daemonset(&mut d);
        let r = d.object_ref(&());
        assert_eq!(
            (r.name.as_deref(), r.namespace.as_deref(), r.uid.as_deref()),
            (Some("logs"), Some("ns"), Some("u"))
        );
        assert_eq!(d.metadata.annotations, None);
        assert_eq!(d.status, None);
        let template = d.spec.template.spec.unwrap();
        assert!(template.containers.is_empty());
        assert_eq!(
            template.tolerations.unwrap(),
            [Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]
        );
    }
}
