//! [`ClusterView`]: the read-only, synchronous view of the cluster that pure rules consult, and
//! [`StaticView`], a view over fixed object lists (offline review, tests).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::Node;

use super::CachedPod;
use crate::api::{
    EvictionInterceptor, EvictionRequest, MaintenanceBudget, NodeMaintenance, Registration,
};

/// The answer of a lookup.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup<T> {
    /// The object exists (confirmed).
    Found(T),
    /// The object does not exist (confirmed).
    Missing,
    /// Nothing can be said (offline, or no cache for it). Rules that need it are skipped with a
    /// warning; they never deny on their own.
    Unknown,
}

impl<T> Lookup<T> {
    /// The found value, if any.
    pub fn found(&self) -> Option<&T> {
        match self {
            Lookup::Found(t) => Some(t),
            _ => None,
        }
    }
}

/// An access check: may `user` perform `verb` on `resource` (`namespace`/`name`)?
///
/// A review borrows the user and names from the request it reviews (`AccessCheck<'a>`): building,
/// announcing, preparing and asking a check copies nothing. Only the verdict cache keeps an owned
/// copy ([`AccessCheck::into_owned`]), once per verdict it stores.
#[derive(Clone, Debug, PartialEq)]
pub struct AccessCheck<'a> {
    /// The requesting user, as kube-apiserver passed it in the AdmissionReview.
    pub user: Cow<'a, UserInfo>,
    /// Verb, e.g. `delete`.
    pub verb: &'static str,
    /// API group of the resource (`""` for core).
    pub group: &'static str,
    /// Resource, e.g. `pods` or `nodes`.
    pub resource: &'static str,
    /// Namespace for namespaced resources.
    pub namespace: Option<Cow<'a, str>>,
    /// Object name; `None` asks about every object of the resource.
    pub name: Option<Cow<'a, str>>,
}

impl AccessCheck<'_> {
    /// The same check, owning what it borrowed.
    pub fn into_owned(self) -> AccessCheck<'static> {
        AccessCheck {
            user: Cow::Owned(self.user.into_owned()),
            verb: self.verb,
            group: self.group,
            resource: self.resource,
            namespace: self.namespace.map(|n| Cow::Owned(n.into_owned())),
            name: self.name.map(|n| Cow::Owned(n.into_owned())),
        }
    }
}

/// The verdict of an access check.
#[derive(Clone, Debug, PartialEq)]
pub enum Authorization {
    /// The user may.
    Allowed,
    /// The user may not; the reason the authorizer gave.
    Denied(String),
    /// Not checked (offline); the text says why.
    Skipped(String),
}

/// The lookups a review will make that the server must prepare before calling it (live
/// confirmation of cache misses, access reviews). Offline, nothing is prepared and the view
/// answers `Unknown` / `Skipped`. Names are borrowed from the request under review.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lookups<'a> {
    /// Pods by (namespace, name, expected UID): a cache miss or a UID mismatch is confirmed by a
    /// live GET, so that no denial rests on a stale cache.
    pub pods: Vec<PodLookup<'a>>,
    /// Access checks the review will ask.
    pub checks: Vec<AccessCheck<'a>>,
    /// Access checks asked only when one of `checks` is denied (per-node checks after a refused
    /// cluster-wide one).
    pub fallback_checks: Vec<AccessCheck<'a>>,
}

/// A pod a review will look up: namespace, name and, when known, the UID it must have.
#[derive(Clone, Debug, PartialEq)]
pub struct PodLookup<'a> {
    /// Namespace.
    pub namespace: Cow<'a, str>,
    /// Name.
    pub name: Cow<'a, str>,
    /// The UID the review expects; another UID in the cache is confirmed live.
    pub uid: Option<Cow<'a, str>>,
}

/// What rules may read of the cluster. Implementations answer from memory, without I/O: the
/// server's implementation answers from the watch caches plus the live lookups and access
/// reviews it made before calling the rules.
pub trait ClusterView: Send + Sync {
    /// The pod of that namespace and name.
    fn pod(&self, namespace: &str, name: &str) -> Lookup<Arc<CachedPod>>;
    /// Every node, or `Unknown`.
    fn nodes(&self) -> Lookup<Vec<Arc<Node>>>;
    /// Every NodeMaintenance, or `Unknown`.
    fn node_maintenances(&self) -> Lookup<Vec<Arc<NodeMaintenance>>>;
    /// The EvictionRequest of that namespace and name.
    fn eviction_request(&self, namespace: &str, name: &str) -> Lookup<Arc<EvictionRequest>>;
    /// The verdict of an access check.
    fn authorize(&self, check: &AccessCheck<'_>) -> Authorization;
    /// The EvictionInterceptor registering the interceptor of that name (SPEC 5.5). A view
    /// that does not watch them answers `Unknown`.
    fn eviction_interceptor(&self, name: &str) -> Lookup<Arc<EvictionInterceptor>> {
        let _ = name;
        Lookup::Unknown
    }
    /// Every MaintenanceBudget (SPEC 6.1). A view that does not watch them answers `Unknown`.
    fn maintenance_budgets(&self) -> Lookup<Vec<Arc<MaintenanceBudget>>> {
        Lookup::Unknown
    }
}

/// What `view` knows of the registration of the interceptor `name` (evictord's own
/// `imperative-eviction.k8s.io` is always registered).
pub fn registration(view: &dyn ClusterView, name: &str) -> Registration {
    Registration::of(
        name,
        match view.eviction_interceptor(name) {
            Lookup::Found(_) => Some(true),
            Lookup::Missing => Some(false),
            Lookup::Unknown => None,
        },
    )
}

/// A view over fixed lists of objects. With `complete = false` every lookup answers `Unknown`
/// (offline without `--objects`).
#[derive(Clone, Debug, Default)]
pub struct StaticView {
    /// Whether the lists are the whole cluster (lookups of absent objects answer `Missing`).
    pub complete: bool,
    /// Pods by (namespace, name).
    pub pods: BTreeMap<(String, String), Arc<CachedPod>>,
    /// Nodes.
    pub nodes: Vec<Arc<Node>>,
    /// NodeMaintenances.
    pub node_maintenances: Vec<Arc<NodeMaintenance>>,
    /// EvictionRequests by (namespace, name).
    pub eviction_requests: BTreeMap<(String, String), Arc<EvictionRequest>>,
    /// Access checks answer this (default: skipped offline).
    pub authorization: Option<Authorization>,
    /// EvictionInterceptors by name; `None`: unknown (not part of the view), so that a view of
    /// pods alone does not report every interceptor as unregistered.
    pub eviction_interceptors: Option<BTreeMap<String, Arc<EvictionInterceptor>>>,
    /// MaintenanceBudgets; `None`: unknown (not part of the view).
    pub maintenance_budgets: Option<Vec<Arc<MaintenanceBudget>>>,
}

impl StaticView {
    /// A view that knows nothing (offline without objects).
    pub fn unknown() -> Self {
        Self::default()
    }

    /// A complete view holding these objects.
    pub fn with_objects(
        pods: impl IntoIterator<Item = CachedPod>,
        nodes: impl IntoIterator<Item = Node>,
        node_maintenances: impl IntoIterator<Item = NodeMaintenance>,
        eviction_requests: impl IntoIterator<Item = EvictionRequest>,
    ) -> Self {
        Self {
            complete: true,
            pods: pods
                .into_iter()
                .map(|p| {
                    (
                        (p.namespace().to_string(), p.name().to_string()),
                        Arc::new(p.trim()),
                    )
                })
                .collect(),
            nodes: nodes.into_iter().map(Arc::new).collect(),
            node_maintenances: node_maintenances.into_iter().map(Arc::new).collect(),
            eviction_requests: eviction_requests
                .into_iter()
                .map(|e| {
                    let key = (
                        e.metadata.namespace.clone().unwrap_or_default(),
                        e.metadata.name.clone().unwrap_or_default(),
                    );
                    (key, Arc::new(e))
                })
                .collect(),
            authorization: None,
            eviction_interceptors: None,
            maintenance_budgets: None,
        }
    }

    /// The same view, knowing every EvictionInterceptor: those given (an interceptor not among
    /// them is not registered).
    pub fn with_interceptors(
        mut self,
        interceptors: impl IntoIterator<Item = EvictionInterceptor>,
    ) -> Self {
        self.eviction_interceptors = Some(
            interceptors
                .into_iter()
                .map(|i| (i.metadata.name.clone().unwrap_or_default(), Arc::new(i)))
                .collect(),
        );
        self
    }

    fn lookup<T: Clone>(&self, found: Option<&T>) -> Lookup<T> {
        match (found, self.complete) {
            (Some(t), _) => Lookup::Found(t.clone()),
            (None, true) => Lookup::Missing,
            (None, false) => Lookup::Unknown,
        }
    }
}

impl ClusterView for StaticView {
    fn pod(&self, namespace: &str, name: &str) -> Lookup<Arc<CachedPod>> {
        self.lookup(self.pods.get(&(namespace.to_string(), name.to_string())))
    }

    fn nodes(&self) -> Lookup<Vec<Arc<Node>>> {
        if self.complete {
            Lookup::Found(self.nodes.clone())
        } else {
            Lookup::Unknown
        }
    }

    fn node_maintenances(&self) -> Lookup<Vec<Arc<NodeMaintenance>>> {
        if self.complete {
            Lookup::Found(self.node_maintenances.clone())
        } else {
            Lookup::Unknown
        }
    }

    fn eviction_request(&self, namespace: &str, name: &str) -> Lookup<Arc<EvictionRequest>> {
        self.lookup(
            self.eviction_requests
                .get(&(namespace.to_string(), name.to_string())),
        )
    }

    fn authorize(&self, _check: &AccessCheck<'_>) -> Authorization {
        self.authorization.clone().unwrap_or_else(|| {
            Authorization::Skipped("authorization is not checked offline".into())
        })
    }

    fn eviction_interceptor(&self, name: &str) -> Lookup<Arc<EvictionInterceptor>> {
        match &self.eviction_interceptors {
            Some(known) => match known.get(name) {
                Some(i) => Lookup::Found(i.clone()),
                None => Lookup::Missing,
            },
            None => Lookup::Unknown,
        }
    }

    fn maintenance_budgets(&self) -> Lookup<Vec<Arc<MaintenanceBudget>>> {
        match &self.maintenance_budgets {
            Some(all) => Lookup::Found(all.clone()),
            None => Lookup::Unknown,
        }
    }
}
