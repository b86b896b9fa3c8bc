//! [`LiveView`]: the server's [`ClusterView`] — the watch caches plus the live pod lookups and
//! access reviews prepared for one admission request ([`prepare`]) — and [`RegistrationView`],
//! the view of reviews that read nothing of the cluster but the interceptor registrations.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

use super::{
    AccessCheck, Authorization, Authorizer, CachedPod, Caches, ClusterView, Lookup, Lookups,
    PodLookup,
};
use crate::api::{EvictionInterceptor, EvictionRequest, MaintenanceBudget, NodeMaintenance};

/// What the server needs to prepare lookups.
pub struct LiveContext {
    /// The API client.
    pub client: Client,
    /// The shared caches.
    pub caches: Arc<Caches>,
    /// Access reviews.
    pub authorizer: Authorizer,
}

/// A pod lookup prepared for one request, by (namespace, name).
type PreparedPod<'a> = ((Cow<'a, str>, Cow<'a, str>), Lookup<Arc<CachedPod>>);

/// The caches plus the lookups prepared for one request (names borrowed from the request).
pub struct LiveView<'a> {
    caches: &'a Caches,
    pods: Vec<PreparedPod<'a>>,
    checks: Vec<(AccessCheck<'a>, Authorization)>,
}

/// Prepares the lookups of one review: confirms pod cache misses (unless final: a generated name
/// the cache saw deleted, [`super::miss_is_final`]) or UID mismatches with a live GET and runs the access reviews (the fallback ones only when a first one is denied).
///
/// # Errors
/// When the API cannot be reached; the request then fails with 5xx and the webhook's
/// `failurePolicy` decides.
pub async fn prepare<'a>(
    ctx: &'a LiveContext,
    lookups: &Lookups<'a>,
) -> Result<LiveView<'a>, kube::Error> {
    let mut view = LiveView {
        caches: &ctx.caches,
        pods: Vec::new(),
        checks: Vec::new(),
    };
    for PodLookup {
        namespace,
        name,
        uid,
    } in &lookups.pods
    {
        let cached = ctx.caches.pods.get(Some(namespace), name);
        let confirmed = match cached {
            Some(pod) if uid.as_deref().is_none_or(|u| pod.uid() == u) => Lookup::Found(pod),
            // Seen deleted, and no successor takes a generated name (`kubectl drain`'s last
            // retry after evictord evicted the pod).
            None if ctx.caches.pod_tombstones.miss_is_final(
                namespace,
                name,
                std::time::Instant::now(),
            ) =>
            {
                Lookup::Missing
            }
            _ => {
                let api: Api<CachedPod> = Api::namespaced(ctx.client.clone(), namespace);
                match api.get_opt(name).await? {
                    Some(pod) => Lookup::Found(Arc::new(pod.trim())),
                    None => Lookup::Missing,
                }
            }
        };
        view.pods
            .push(((namespace.clone(), name.clone()), confirmed));
    }
    let mut any_denied = false;
    for check in &lookups.checks {
        let verdict = ctx.authorizer.check(check).await?;
        any_denied |= matches!(verdict, Authorization::Denied(_));
        view.checks.push((check.clone(), verdict));
    }
    if any_denied {
        for check in &lookups.fallback_checks {
            let verdict = ctx.authorizer.check(check).await?;
            view.checks.push((check.clone(), verdict));
        }
    }
    Ok(view)
}

impl ClusterView for LiveView<'_> {
    fn pod(&self, namespace: &str, name: &str) -> Lookup<Arc<CachedPod>> {
        if let Some((_, l)) = self
            .pods
            .iter()
            .find(|((ns, n), _)| ns == namespace && n == name)
        {
            return l.clone();
        }
        match self.caches.pods.get(Some(namespace), name) {
            Some(p) => Lookup::Found(p),
            None => Lookup::Missing,
        }
    }

    fn nodes(&self) -> Lookup<Vec<Arc<Node>>> {
        Lookup::Found(self.caches.nodes.all())
    }

    fn node_maintenances(&self) -> Lookup<Vec<Arc<NodeMaintenance>>> {
        Lookup::Found(self.caches.node_maintenances.all())
    }

    fn eviction_request(&self, namespace: &str, name: &str) -> Lookup<Arc<EvictionRequest>> {
        match self.caches.eviction_requests.get(Some(namespace), name) {
            Some(e) => Lookup::Found(e),
            None => Lookup::Missing,
        }
    }

    fn authorize(&self, check: &AccessCheck<'_>) -> Authorization {
        self.checks
            .iter()
            .find(|(c, _)| c == check)
            .map(|(_, v)| v.clone())
            // A check the review did not announce was not prepared: refuse rather than allow.
            .unwrap_or_else(|| {
                Authorization::Denied("internal: access check was not prepared".into())
            })
    }

    fn eviction_interceptor(&self, name: &str) -> Lookup<Arc<EvictionInterceptor>> {
        interceptor_lookup(self.caches, name)
    }

    fn maintenance_budgets(&self) -> Lookup<Vec<Arc<MaintenanceBudget>>> {
        self.caches
            .maintenance_budgets()
            .map_or(Lookup::Unknown, Lookup::Found)
    }
}

fn interceptor_lookup(caches: &Caches, name: &str) -> Lookup<Arc<EvictionInterceptor>> {
    match caches.eviction_interceptor(name) {
        Some(Some(i)) => Lookup::Found(i),
        Some(None) => Lookup::Missing,
        None => Lookup::Unknown,
    }
}

/// The view of a review that needs nothing of the cluster but the interceptor registrations
/// (pod annotations, EvictionRequest status writes): those come from the cache (unknown until
/// it synced), everything else is unknown. It needs no preparation and never waits for the
/// other caches, so these reviews are answered before the caches sync.
pub struct RegistrationView<'a> {
    caches: &'a Caches,
}

impl<'a> RegistrationView<'a> {
    /// The registrations of `caches`.
    pub fn new(caches: &'a Caches) -> Self {
        Self { caches }
    }
}

impl ClusterView for RegistrationView<'_> {
    fn pod(&self, _namespace: &str, _name: &str) -> Lookup<Arc<CachedPod>> {
        Lookup::Unknown
    }

    fn nodes(&self) -> Lookup<Vec<Arc<Node>>> {
        Lookup::Unknown
    }

    fn node_maintenances(&self) -> Lookup<Vec<Arc<NodeMaintenance>>> {
        Lookup::Unknown
    }

    fn eviction_request(&self, _namespace: &str, _name: &str) -> Lookup<Arc<EvictionRequest>> {
        Lookup::Unknown
    }

    fn authorize(&self, _check: &AccessCheck<'_>) -> Authorization {
        Authorization::Skipped("no access check is prepared for this review".into())
    }

    fn eviction_interceptor(&self, name: &str) -> Lookup<Arc<EvictionInterceptor>> {
        interceptor_lookup(self.caches, name)
    }
}
