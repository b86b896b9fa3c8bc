//! The HPA interceptor's reads of a pod's controllers and of an autoscaler's target, from the
//! shared watch caches when it is given them ([`Reads::with_caches`]): the pod's ReplicaSet from
//! the cache of ReplicaSet owners, an `apps` Deployment target from the shared watch of
//! Deployments (its scale subresource is its `spec.replicas` and the selector of its
//! `spec.selector`), the readiness of a Deployment's pods from their watch ([`WorkloadPods`]).
//! Other kinds of target (a StatefulSet, a custom resource with a scale subresource) are read
//! live, through their scale subresource and object, and their pods LISTed by the scale's
//! selector.
//!
//! A cache can only be behind: a ReplicaSet or Deployment it does not hold, or any while it has
//! not listed, is read live, and so is a Deployment after conflicting writes of the autoscaler
//! (`live`: from the third attempt of a look on). A Deployment a moment behind delays a look, never a wrong surge more than the live
//! read of the same moment would: the look is woken again by the Deployment's next change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::core::gvk::GroupVersion;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use super::Error;
use super::target::{Workload, controller_chain, controller_of};
use super::workload::WorkloadFacts;
use crate::interceptor::deployment::decide::PodReadiness;
use crate::interceptor::deployments::DeploymentKey;
use crate::interceptor::replicasets::{ReplicaSets, owners_of};
use crate::interceptor::workload_pods::{WorkloadPods, match_labels};
use crate::selector::label_selector_matches;

/// The watch caches the reads use.
pub(super) struct Caches {
    /// The owners of every ReplicaSet (shared with the Deployment interceptor).
    pub replicasets: ReplicaSets,
    /// The shared watch of Deployments.
    pub deployments: Store<Deployment>,
    /// The watches of the pods of surged Deployments.
    pub pods: WorkloadPods,
}

/// Whose pods' readiness a surge waits for.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum PodsOf {
    /// A Deployment's (its key and `spec.selector`): from their watch.
    Deployment(DeploymentKey, LabelSelector),
    /// The pods of a scale subresource's `status.selector`: a LIST.
    Selector(String),
}

/// The reads.
pub(super) struct Reads {
    client: Client,
    /// The resources of scale targets found by discovery (`apiVersion/kind` → resource).
    targets: Mutex<HashMap<String, ApiResource>>,
    caches: Option<Caches>,
}

/// Why the object cannot be read at all, when the API error says so (missing, not served, no
/// scale subresource, not allowed); `None` when the server is only unavailable for now.
fn unreadable(e: &kube::Error) -> Option<String> {
    match e {
        // 403 Forbidden, 404 Not Found, 405 Method Not Allowed (no such subresource).
        kube::Error::Api(s) if (403..=405).contains(&s.code) => Some(s.message.clone()),
        kube::Error::Discovery(d) => Some(d.to_string()),
        _ => None,
    }
}

impl Reads {
    /// Live reads with `client` only.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            targets: Mutex::new(HashMap::new()),
            caches: None,
        }
    }

    /// Reads from `caches` first.
    pub fn with_caches(mut self, caches: Caches) -> Self {
        self.caches = Some(caches);
        self
    }

    /// The pod's controllers (its own, and a ReplicaSet's): the ReplicaSet from its cache, read
    /// live when the cache does not hold it.
    pub async fn chain(&self, ns: &str, pod: &Pod) -> Result<Vec<Workload>, Error> {
        let owner = controller_of(pod.metadata.owner_references.as_ref());
        let above = match owner.map(Workload::owner) {
            Some(w) if w.is_replicaset() => {
                let owners = owners_of(
                    self.caches.as_ref().map(|c| &c.replicasets),
                    &self.client,
                    ns,
                    &w.name,
                )
                .await
                .map_err(|e| Error::Read(format!("ReplicaSet {}", w.name), e))?;
                controller_of(owners.as_ref()).cloned()
            }
            _ => None,
        };
        Ok(controller_chain(owner, above.as_ref()))
    }

    /// The resource of a scale target, from discovery (remembered); `Err` says why there is none.
    pub(super) async fn resource_of(
        &self,
        target: &Workload,
    ) -> Result<Result<ApiResource, String>, Error> {
        let Some(api_version) = target.api_version.as_deref() else {
            return Ok(Err("its scaleTargetRef has no apiVersion".into()));
        };
        let key = format!("{api_version}/{}", target.kind);
        if let Some(r) = self.targets.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(Ok(r));
        }
        let gvk = match api_version.parse::<GroupVersion>() {
            Ok(gv) => GroupVersionKind::gvk(&gv.group, &gv.version, &target.kind),
            Err(e) => return Ok(Err(format!("apiVersion {api_version:?}: {e}"))),
        };
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, _)) => {
                if let Ok(mut m) = self.targets.lock() {
                    m.insert(key, resource.clone());
                }
                Ok(Ok(resource))
            }
            Err(e) => match unreadable(&e) {
                Some(why) => Ok(Err(format!(
                    "{api_version} {} is not served ({why})",
                    target.kind
                ))),
                None => Err(Error::Read(format!("the {api_version} API"), e)),
            },
        }
    }

    /// True when a look at a request whose autoscaler scales `target` reads it from the watch
    /// of Deployments (whose changes wake the request).
    pub fn watches(&self, target: &Workload) -> bool {
        self.caches.is_some() && target.is_deployment()
    }

    /// The facts of an autoscaler's target, and whose pods' readiness its surge waits for (when
    /// known); `Err` says why they cannot be read. `live`: not from a cache (after a conflict).
    pub async fn workload(
        &self,
        ns: &str,
        target: &Workload,
        live: bool,
    ) -> Result<Result<(WorkloadFacts, Option<PodsOf>), String>, Error> {
        if self.watches(target) {
            return self.deployment(ns, target, live).await;
        }
        let resource = match self.resource_of(target).await? {
            Ok(r) => r,
            Err(why) => return Ok(Err(why)),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &resource);
        let scale = match api.get_scale(&target.name).await {
            Ok(s) => s,
            Err(e) => {
                return match unreadable(&e) {
                    Some(why) => Ok(Err(format!("its scale subresource cannot be read ({why})"))),
                    None => Err(Error::Read(format!("the scale of {target}"), e)),
                };
            }
        };
        let object = match api.get_opt(&target.name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(Err("it is gone".into())),
            Err(e) => {
                return match unreadable(&e) {
                    Some(why) => Ok(Err(format!("it cannot be read ({why})"))),
                    None => Err(Error::Read(target.to_string(), e)),
                };
            }
        };
        let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
        let selector = scale
            .status
            .and_then(|s| s.selector)
            .filter(|s| !s.is_empty())
            .map(PodsOf::Selector);
        let value = serde_json::to_value(&object).unwrap_or(Value::Null);
        Ok(WorkloadFacts::read(target, replicas, &value).map(|w| (w, selector)))
    }

    /// A Deployment target: from the watch of Deployments once it has listed and holds it
    /// (and not `live`), else one GET.
    async fn deployment(
        &self,
        ns: &str,
        target: &Workload,
        live: bool,
    ) -> Result<Result<(WorkloadFacts, Option<PodsOf>), String>, Error> {
        let cached = self
            .caches
            .as_ref()
            .filter(|_| !live)
            .filter(|c| {
                matches!(
                    c.deployments.wait_until_ready().now_or_never(),
                    Some(Ok(()))
                )
            })
            .and_then(|c| c.deployments.get(&ObjectRef::new(&target.name).within(ns)));
        let d = match cached {
            Some(d) => d,
            None => {
                let api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
                match api.get_opt(&target.name).await {
                    Ok(Some(d)) => Arc::new(d),
                    Ok(None) => return Ok(Err("it is gone".into())),
                    Err(e) => {
                        return match unreadable(&e) {
                            Some(why) => Ok(Err(format!("it cannot be read ({why})"))),
                            None => Err(Error::Read(target.to_string(), e)),
                        };
                    }
                }
            }
        };
        let pods = PodsOf::Deployment((ns.into(), target.name.clone()), d.spec.selector.clone());
        Ok(Ok((WorkloadFacts::of_deployment(target, &d), Some(pods))))
    }

    /// Starts the watch of the pods `pods` names, when they are a Deployment's (a look that
    /// surges or waits for a surge will want their readiness: the watch lists meanwhile).
    pub fn watch(&self, pods: &PodsOf) {
        if let (Some(c), PodsOf::Deployment(key, selector)) = (&self.caches, pods) {
            c.pods.watch(key, selector);
        }
    }

    /// The readiness of the pods `pods` names: a Deployment's from their watch, else a LIST.
    pub async fn readiness(&self, ns: &str, pods: &PodsOf) -> Result<Vec<PodReadiness>, Error> {
        let list = |selector: String, what: String| async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            api.list(&ListParams::default().labels(&selector))
                .await
                .map(|l| l.items)
                .map_err(|e| Error::Read(what, e))
        };
        let pods: Vec<Pod> = match pods {
            PodsOf::Deployment(key, selector) => {
                let what = format!("pods of Deployment {}", key.1);
                let Some(c) = &self.caches else {
                    // Not without caches ([`Reads::watches`]); a LIST all the same.
                    let labels = match_labels(selector).unwrap_or_default();
                    let items = list(labels, what).await?;
                    return Ok(items
                        .iter()
                        .filter(|p| label_selector_matches(selector, p.labels()))
                        .map(PodReadiness::of)
                        .collect());
                };
                let watched = c
                    .pods
                    .pods(key, selector)
                    .await
                    .map_err(|e| Error::Read(what, e))?;
                return Ok(watched.iter().map(|p| PodReadiness::of(p)).collect());
            }
            PodsOf::Selector(selector) => {
                list(selector.clone(), format!("pods of selector {selector}")).await?
            }
        };
        Ok(pods.iter().map(PodReadiness::of).collect())
    }
}
